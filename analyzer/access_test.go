package analyzer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/retry"
)

// deadLetterValue produces a dead letter of id whose source record had
// key and value, with a user header.
func (e *env) deadLetterValue(id string, key, value []byte) {
	e.t.Helper()
	src := &kgo.Record{Topic: e.main, Partition: 0, Offset: 1, Key: key, Value: value}
	m := retry.Meta{ID: id, Attempt: 3, HasOrigin: true, OriginTopic: e.main, OriginOffset: 1, OriginTimestamp: time.Now(),
		ErrorClass: retry.ClassPermanent, ErrorCode: "http_422", Error: "handler refused " + id, Reason: string(dlq.ReasonPermanent)}
	r := dlq.Build(src, m, []kgo.RecordHeader{{Key: "trace", Value: []byte("t-" + id)}}, dlq.BuildOptions{Topic: e.dlqName, Group: "redrive.x", Instance: "i"})
	if err := e.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// With analyzer.token and analyzer.read_token set, every GET /api/ route
// answers 401 without a bearer token or with a wrong one (and shows no
// dead letter), 200 with either token; replay takes only the full token;
// the dashboard's files and /metrics stay open, /metrics with no record
// value in it.
func TestAccessTokensGuardEveryRead(t *testing.T) {
	e := newEnv(t)
	e.deadLetterValue("d0", []byte("key-private-d0"), []byte(`{"email":"ayse@example.com"}`))
	o := obs.New() // as redrive analyze serves it: /metrics beside the API
	a, _ := e.launch(analyzer.Options{Registerer: o.Registry})
	o.Mux.Handle("/", a.HandlerAccess(analyzer.Access{Token: "full-tok", ReadToken: "read-tok"}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := o.Serve(ctx, "127.0.0.1:0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	waitStatsAs(t, base, "Bearer read-tok", 1)

	var list analyzer.DeadLettersResponse
	if resp, body := do(t, "GET", base+"/api/deadletters", "", "Bearer read-tok", ""); resp.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.DeadLetters) != 1 {
		t.Fatalf("GET /api/deadletters with the read token: %d %s", resp.StatusCode, body)
	}
	d := list.DeadLetters[0]
	routes := []string{
		"/api/stats", "/api/stats?pipeline=" + e.main,
		"/api/deadletters", "/api/deadletters?limit=5&code=http_422",
		fmt.Sprintf("/api/deadletters/%d/%d?pipeline=%s", d.Partition, d.Offset, e.main),
		"/api/pipelines",
		"/api/control",
		"/api/deadletters?limit=x", // a bad request is refused for its token first
	}
	for _, route := range routes {
		for _, auth := range []string{"", "Bearer wrong", "Bearer ", "Basic read-tok", "read-tok", "Bearer read-tok-", "Bearer full-to"} {
			resp, body := do(t, "GET", base+route, "", auth, "")
			var e struct{ Error string }
			if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "analyzer.token or analyzer.read_token") {
				t.Errorf("GET %s with Authorization %q: %d %s, want 401 with a JSON error naming the tokens", route, auth, resp.StatusCode, body)
			}
			if resp.Header.Get("WWW-Authenticate") == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("GET %s with Authorization %q: headers %v, want WWW-Authenticate and JSON", route, auth, resp.Header)
			}
			if strings.Contains(body, "ayse") || strings.Contains(body, "key-private") || strings.Contains(body, "handler refused") {
				t.Errorf("GET %s with Authorization %q showed dead letter data: %s", route, auth, body)
			}
		}
		want := 200
		if strings.Contains(route, "limit=x") {
			want = 400
		}
		for _, auth := range []string{"Bearer read-tok", "Bearer full-tok", "bearer read-tok", "BEARER  full-tok"} {
			if resp, body := do(t, "GET", base+route, "", auth, ""); resp.StatusCode != want {
				t.Errorf("GET %s with Authorization %q: %d %s, want %d", route, auth, resp.StatusCode, body, want)
			}
		}
	}

	// Replay: the full token only.
	dry := `{"dry_run":true}`
	for _, c := range []struct {
		auth string
		code int
		says string
	}{
		{"", 401, "bearer token"},
		{"Bearer wrong", 401, "bearer token"},
		{"Bearer read-tok", 403, "read-only token"},
		{"Bearer full-tok", 200, `"scanned": 1`},
	} {
		if resp, body := do(t, "POST", base+"/api/replay", "", c.auth, dry); resp.StatusCode != c.code || !strings.Contains(body, c.says) {
			t.Errorf("POST /api/replay with Authorization %q: %d %s, want %d saying %q", c.auth, resp.StatusCode, body, c.code, c.says)
		}
	}

	// The page (no data) loads without a token, to ask for it; so do
	// /metrics and the probes, for Prometheus and the kubelet.
	for _, p := range []string{"/", "/app.js", "/style.css", "/metrics", "/healthz"} {
		resp, body := do(t, "GET", base+p, "", "", "")
		if resp.StatusCode != 200 {
			t.Errorf("GET %s without a token: %d, want 200", p, resp.StatusCode)
		}
		if strings.Contains(body, "ayse") || strings.Contains(body, "key-private") {
			t.Errorf("GET %s shows a dead letter's key or value", p)
		}
		if p == "/metrics" && !strings.Contains(body, "redrive_analyzer_") {
			t.Errorf("GET /metrics has no analyzer metric: %.300s", body)
		}
	}
	// An unknown /api/ path is a 404, not a file or data.
	if resp, _ := do(t, "GET", base+"/api/nope", "", "", ""); resp.StatusCode != 404 {
		t.Errorf("GET /api/nope: %d, want 404", resp.StatusCode)
	}
}

// With only analyzer.read_token, the reads need it and replay is off.
func TestReadTokenAlone(t *testing.T) {
	e := newEnv(t)
	e.deadLetterValue("d0", []byte("k"), []byte("v"))
	a, _ := e.launch(analyzer.Options{})
	base := serveLikeAnalyze(t, a.HandlerAccess(analyzer.Access{ReadToken: "read-tok"}), obs.Limits{})
	waitStatsAs(t, base, "Bearer read-tok", 1)
	if resp, _ := do(t, "GET", base+"/api/deadletters", "", "", ""); resp.StatusCode != 401 {
		t.Errorf("GET /api/deadletters without the read token: %d, want 401", resp.StatusCode)
	}
	for auth, want := range map[string]int{"": 401, "Bearer nope": 401, "Bearer read-tok": 403} {
		if resp, body := do(t, "POST", base+"/api/replay", "", auth, `{"dry_run":true}`); resp.StatusCode != want {
			t.Errorf("POST /api/replay with Authorization %q and no analyzer.token: %d %s, want %d", auth, resp.StatusCode, body, want)
		}
	}
}

// analyzer.hide_values: the list, one dead letter by offset and the replay
// sample show the value's size and SHA-256, never a byte of it (a value
// longer than the recent prefix is hashed whole); the key, headers and
// error stay; replay still republishes the value itself.
func TestHideValues(t *testing.T) {
	e := newEnv(t)
	short := []byte(`{"tckn":"12345678901","name":"Ayşe"}`)
	long := bytes.Repeat([]byte("PRIVATE-LONG-"), 300) // 3900 bytes, beyond the 1KiB prefix kept
	e.deadLetterValue("short", []byte("k-short"), short)
	e.deadLetterValue("long", []byte("k-long"), long)
	e.deadLetterValue("tombstone", []byte("k-null"), nil)
	a, _ := e.launch(analyzer.Options{HideValues: true, Limits: analyzer.Limits{RecentValueBytes: 1024}})
	base := serveLikeAnalyze(t, a.Handler("tok"), obs.Limits{})
	waitStatsAs(t, base, "Bearer tok", 3)

	want := map[string][]byte{"k-short": short, "k-long": long, "k-null": nil}
	secret := func(where, body string) {
		t.Helper()
		for _, s := range []string{"12345678901", "Ayşe", "PRIVATE-LONG", "eyJ0Y2tu" /* base64 of {"tckn */} {
			if strings.Contains(body, s) {
				t.Errorf("%s shows %q of a hidden value", where, s)
			}
		}
	}
	check := func(where string, v analyzer.DeadLetterView) {
		t.Helper()
		if v.Key == nil {
			t.Fatalf("%s: a dead letter without its key: %+v", where, v)
		}
		val, ok := want[*v.Key]
		if !ok {
			t.Fatalf("%s: unknown key %q", where, *v.Key)
		}
		if v.Value != nil || v.ValueCut || v.ValueSize != len(val) {
			t.Errorf("%s %s: value %v cut %t size %d, want null, not cut, size %d", where, *v.Key, v.Value, v.ValueCut, v.ValueSize, len(val))
		}
		switch {
		case val == nil && (v.ValueSHA256 != "" || v.ValueEncoding == analyzer.EncodingHidden):
			t.Errorf("%s %s: a null value shown as %q %q, want null", where, *v.Key, v.ValueEncoding, v.ValueSHA256)
		case val != nil && (v.ValueSHA256 != analyzer.ValueHash(val) || v.ValueEncoding != analyzer.EncodingHidden):
			t.Errorf("%s %s: %q %q, want hidden %s", where, *v.Key, v.ValueEncoding, v.ValueSHA256, analyzer.ValueHash(val))
		}
		if len(v.Headers) != 1 || v.Headers[0].Value != "t-"+v.ID || !strings.HasPrefix(v.Error, "handler refused") {
			t.Errorf("%s %s: headers %v error %q, want them shown", where, *v.Key, v.Headers, v.Error)
		}
	}

	resp, body := do(t, "GET", base+"/api/deadletters", "", "Bearer tok", "")
	var list analyzer.DeadLettersResponse
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.DeadLetters) != 3 {
		t.Fatalf("GET /api/deadletters: %d %s", resp.StatusCode, body)
	}
	secret("GET /api/deadletters", body)
	for _, v := range list.DeadLetters {
		check("GET /api/deadletters", v)
		one := fmt.Sprintf("/api/deadletters/%d/%d?pipeline=%s", v.Partition, v.Offset, e.main)
		resp, body := do(t, "GET", base+one, "", "Bearer tok", "")
		var r analyzer.DeadLetterResponse
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &r) != nil {
			t.Fatalf("GET %s: %d %s", one, resp.StatusCode, body)
		}
		secret("GET "+one, body)
		check("GET "+one, r.DeadLetter)
	}
	if h := analyzer.ValueHash([]byte("abc")); h != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("ValueHash(abc) = %s", h)
	}

	// Replay: the sample hides the values; the topic gets them whole.
	resp, body = do(t, "POST", base+"/api/replay", "", "Bearer tok", fmt.Sprintf(`{"all":true,"to":%q}`, e.other))
	var rr analyzer.ReplayResponse
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &rr) != nil || rr.Republished != 3 || len(rr.DeadLetters) != 3 {
		t.Fatalf("POST /api/replay: %d %s", resp.StatusCode, body)
	}
	secret("POST /api/replay", body)
	for _, v := range rr.DeadLetters {
		check("the replay sample", v)
	}
	got := collect(t, e.c, e.other, 3, 20*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d records republished, want 3", len(got))
	}
	for _, r := range got {
		if w, ok := want[string(r.Key)]; !ok || !bytes.Equal(r.Value, w) {
			t.Errorf("republished %q with a value of %d bytes, want the original %d", r.Key, len(r.Value), len(w))
		}
	}
}

// Options.OpenReads (`redrive dev` with the token it picked): the reads
// need no token, replay still does.
func TestOpenReads(t *testing.T) {
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, // never run: nothing connects
		Pipelines:  []analyzer.Pipeline{{Name: "solve", Topic: "solve.requests", DLQ: "solve.requests.dlq"}},
		Logger:     slog.New(slog.DiscardHandler),
		OpenReads:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		open bool
		want int
	}{{true, 200}, {false, 401}} {
		h := a.Handler("dev")
		if !tt.open {
			b, err := analyzer.New(analyzer.Options{ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")},
				Pipelines: []analyzer.Pipeline{{Name: "solve", Topic: "solve.requests", DLQ: "solve.requests.dlq"}}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			h = b.Handler("dev")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:9091/api/pipelines", nil))
		if w.Code != tt.want {
			t.Errorf("OpenReads %t: GET /api/pipelines without a token: %d, want %d", tt.open, w.Code, tt.want)
		}
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "http://127.0.0.1:9091/api/replay", strings.NewReader(`{"dry_run":true}`)))
		if w.Code != 401 {
			t.Errorf("OpenReads %t: POST /api/replay without a token: %d, want 401", tt.open, w.Code)
		}
	}
}
