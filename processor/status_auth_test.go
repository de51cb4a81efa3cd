package processor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// The processor's /api/pipelines: GET is open (no record data in it);
// pause and resume need processor.token (any case of the scheme, 401 with
// a JSON error and a challenge otherwise), and are off (403) without one.
func TestPipelinesHandlerTokenRule(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	pr, err := processor.New(processor.Config{Brokers: e.Cluster.Brokers, Pipelines: []processor.Pipeline{e.P}, Instance: "auth-test"},
		processor.HandlerFunc(func(_ context.Context, _ *processor.Request) processor.Outcome {
			return processor.Outcome{Kind: processor.Success}
		}))
	if err != nil {
		t.Fatal(err)
	}
	do := func(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://127.0.0.1:9090"+path, nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const token = "p-tok-0123456789abcdef" // passes bearer.Check, as a configured one must
	pause := "/api/pipelines/" + e.P.Name + "/pause"
	resume := "/api/pipelines/" + e.P.Name + "/resume"

	h := pr.PipelinesHandler(token)
	if w := do(h, "GET", "/api/pipelines", ""); w.Code != 200 || !strings.Contains(w.Body.String(), e.P.Name) {
		t.Errorf("GET /api/pipelines without a token: %d %s, want 200", w.Code, w.Body.String())
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, token, "Bearer" + token, "Bearer " + token[:len(token)-1], "Bearer " + token + "2"} {
		for _, path := range []string{pause, resume} {
			w := do(h, "POST", path, auth)
			var body struct{ Error string }
			if w.Code != 401 || json.Unmarshal(w.Body.Bytes(), &body) != nil || !strings.Contains(body.Error, "processor.token") || w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("POST %s with Authorization %q: %d %s, want 401 with a JSON error and a challenge", path, auth, w.Code, w.Body.String())
			}
		}
	}
	if st := pr.Status().Pipelines[0].Line.State; st == "stopped" {
		t.Fatalf("a refused pause stopped the line")
	}
	if w := do(h, "POST", pause+"?reason=test", "bearer "+token); w.Code != 200 {
		t.Fatalf("pause with the token (lowercase scheme): %d %s", w.Code, w.Body.String())
	}
	if st := pr.Status().Pipelines[0].Line.State; st != "stopped" {
		t.Errorf("line %q after the pause, want stopped", st)
	}
	if w := do(h, "POST", resume, "Bearer  "+token); w.Code != 200 {
		t.Fatalf("resume with the token: %d %s", w.Code, w.Body.String())
	}
	if w := do(h, "POST", "/api/pipelines/nope/pause", "Bearer "+token); w.Code != 404 || !strings.Contains(w.Body.String(), `"error"`) {
		t.Errorf("pause of an unknown pipeline: %d %s, want a JSON 404", w.Code, w.Body.String())
	}

	off := pr.PipelinesHandler("")
	for _, auth := range []string{"", "Bearer "} {
		if w := do(off, "POST", pause, auth); w.Code != 403 || !strings.Contains(w.Body.String(), "REDRIVE_PROCESSOR_TOKEN") {
			t.Errorf("pause with no processor.token configured (Authorization %q): %d %s, want 403", auth, w.Code, w.Body.String())
		}
	}
	if w := do(off, "GET", "/api/pipelines", ""); w.Code != 200 {
		t.Errorf("GET /api/pipelines with no token configured: %d", w.Code)
	}
}

// TestPipelinesManualPauseDetail: anyone may see that a line is paused by
// hand and since when, but who paused it (their address) and why (the
// reason they gave) only with processor.token; the pause's own answer,
// authorised, has them.
func TestPipelinesManualPauseDetail(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	pr, err := processor.New(processor.Config{Brokers: e.Cluster.Brokers, Pipelines: []processor.Pipeline{e.P}, Instance: "detail-test"},
		processor.HandlerFunc(func(_ context.Context, _ *processor.Request) processor.Outcome {
			return processor.Outcome{Kind: processor.Success}
		}))
	if err != nil {
		t.Fatal(err)
	}
	const token, reason, pauser = "detail-token-0123456789", "rotating the API key", "198.51.100.7:40000"
	do := func(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://127.0.0.1:9090"+path, nil)
		r.RemoteAddr = pauser
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	h := pr.PipelinesHandler(token)
	w := do(h, "POST", "/api/pipelines/"+e.P.Name+"/pause?reason="+url.QueryEscape(reason), "Bearer "+token)
	if w.Code != 200 || !strings.Contains(w.Body.String(), pauser) || !strings.Contains(w.Body.String(), reason) {
		t.Fatalf("pause: %d %s, want 200 with who and why", w.Code, w.Body.String())
	}
	manual := func(body []byte) (processor.StopReason, bool) {
		var s processor.Status
		if err := json.Unmarshal(body, &s); err != nil || len(s.Pipelines) != 1 {
			t.Fatalf("GET /api/pipelines: %v %s", err, body)
		}
		l := s.Pipelines[0].Line
		for _, r := range l.Reasons {
			if r.Reason == "manual" {
				return r, l.State == "stopped"
			}
		}
		return processor.StopReason{}, false
	}

	// Without a token (the analyzer's view, or anyone's): paused by hand,
	// since when; not who or why.
	for name, h := range map[string]http.Handler{"PipelinesHandler": h, "PipelinesHandler without a token configured": pr.PipelinesHandler(""), "StatusHandler": pr.StatusHandler()} {
		w := do(h, "GET", "/api/pipelines", "")
		if w.Code != 200 {
			t.Fatalf("%s: GET without a token: %d %s", name, w.Code, w.Body.String())
		}
		r, stopped := manual(w.Body.Bytes())
		if !stopped || r.Since.IsZero() || r.Detail != processor.ManualDetailHidden {
			t.Errorf("%s: GET without a token: manual reason %+v (stopped %t), want stopped by hand with since and the hidden detail", name, r, stopped)
		}
		if b := w.Body.String(); strings.Contains(b, "198.51.100.7") || strings.Contains(b, reason) {
			t.Errorf("%s: GET without a token shows who paused or why: %s", name, b)
		}
	}
	// Status (in-process) and a GET with the token (any case of the
	// scheme): the full detail.
	if r, _ := manual(mustJSON(t, pr.Status())); r.Detail != "by "+pauser+": "+reason {
		t.Errorf("Status(): manual reason %+v, want the full detail", r)
	}
	w = do(h, "GET", "/api/pipelines", "bearer "+token)
	if r, stopped := manual(w.Body.Bytes()); w.Code != 200 || !stopped || r.Detail != "by "+pauser+": "+reason {
		t.Errorf("GET with the token: %d, manual reason %+v, want the full detail", w.Code, r)
	}
	// A wrong token is refused, not answered with the public view: the
	// caller would take it for the whole state.
	w = do(h, "GET", "/api/pipelines", "Bearer "+token+"x")
	if w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" || strings.Contains(w.Body.String(), reason) {
		t.Errorf("GET with a wrong token: %d %s, want 401 with a challenge", w.Code, w.Body.String())
	}
	if v := w.Header().Get("Cache-Control"); v != "no-store" {
		t.Errorf("GET with a wrong token: Cache-Control %q", v)
	}
	if w := do(h, "GET", "/api/pipelines", ""); w.Header().Get("Cache-Control") != "no-store" || !strings.Contains(w.Header().Get("Vary"), "Authorization") {
		t.Errorf("GET: Cache-Control %q, Vary %q: a cache could hand the full view to anyone", w.Header().Get("Cache-Control"), w.Header().Get("Vary"))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzValidBearer: only "<bearer in any case> <spaces><token>" passes,
// never with an empty token.
func FuzzValidBearer(f *testing.F) {
	for _, s := range [][2]string{{"Bearer tok", "tok"}, {"bearer  tok", "tok"}, {"Bearer", ""}, {"Bearer ", ""}, {"Basic tok", "tok"}, {"Bearer tok ", "tok"}, {"BEARER \x00", "\x00"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, auth, token string) {
		got := processor.ValidBearer(auth, token)
		scheme, rest, found := strings.Cut(auth, " ")
		want := token != "" && found && strings.EqualFold(scheme, "bearer") && strings.TrimLeft(rest, " ") == token
		if got != want {
			t.Errorf("ValidBearer(%q, %q) = %t, want %t", auth, token, got, want)
		}
		if token != "" && token[0] != ' ' && !processor.ValidBearer("Bearer "+token, token) {
			t.Errorf("ValidBearer refuses Bearer %q", token)
		}
	})
}
