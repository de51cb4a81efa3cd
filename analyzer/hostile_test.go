package analyzer_test

// Tests of hostile input: the replay body, query parse errors,
// the HTTP server's guards, bounded metric labels, future timestamps and
// undecodable dead letters.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/obs"
)

// endOffset is the sum of topic's end offsets: how many records it holds.
func (e *env) endOffset(topic string) int64 {
	e.t.Helper()
	ends, err := e.c.Admin(e.t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// postReplay posts body to POST /api/replay with the bearer token (none
// when "").
func postReplay(t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/replay", strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// Point 5: `null` republished every dead letter, `limit: -1` meant
// 100,000, trailing garbage was accepted. Now the body is one JSON object,
// a negative limit is a 400, and no filter needs "all": true.
func TestReplayBodyStrict(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	for i := range 3 {
		e.deadLetter(fmt.Sprintf("d%d", i), "exhausted", "http_503", 0, now)
	}
	base, _ := e.start(nil, nil, "secret")
	waitStats(t, base, 3)
	for _, tc := range []struct{ body, want string }{
		{`null`, "want one JSON object"},
		{``, "empty"},
		{`[]`, "want one JSON object"},
		{`{}`, `set \"all\": true`},
		{`{"to":"` + e.other + `"}`, `set \"all\": true`},
		{`{"limit":-1}`, "limit -1"},
		{`{"codes":["http_503"],"limit":-1}`, "limit -1"},
		{`{"codes":["http_503"]} trailing`, "something follows"},
		{`{"codes":["http_503"]}{"all":true}`, "something follows"},
		{`{"all":true,"codes":["http_503"]}`, "one or the other"},
	} {
		code, body := postReplay(t, base, "secret", tc.body)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("body %q: %d %s, want 400 saying %q", tc.body, code, body, tc.want)
		}
	}
	if n := e.endOffset(e.main); n != 0 {
		t.Fatalf("%d records republished to %s by refused requests", n, e.main)
	}
	// A dry run with no filter needs no "all".
	code, body := postReplay(t, base, "secret", `{"dry_run":true}`)
	var rr analyzer.ReplayResponse
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Matched != 3 || rr.Republished != 0 {
		t.Errorf("dry run without a filter: %d %s", code, body)
	}
	// Explicitly all: every one, limit 0 meaning the default.
	rr = analyzer.ReplayResponse{}
	code, body = postReplay(t, base, "secret", `{"all":true,"limit":0}`)
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Republished != 3 {
		t.Errorf(`{"all":true}: %d %s`, code, body)
	}
	if n := e.endOffset(e.main); n != 3 {
		t.Errorf("%s holds %d after an explicit all, want 3", e.main, n)
	}
}

// Point 9: a query string that does not parse (a bad escape, more
// parameters than Go allows) lost its filters and limit silently and
// answered 200, unfiltered. Now it is a 400 on every endpoint.
func TestQueryParseErrorIs400(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	for i := range 3 {
		e.deadLetter(fmt.Sprintf("d%d", i), "exhausted", "http_503", 0, now)
	}
	base, _ := e.start(nil, nil, "secret")
	waitStats(t, base, 3)
	many := strings.Repeat("code=x&", 10001) + "limit=1"
	for _, path := range []string{"/api/deadletters", "/api/stats", "/api/pipelines", "/"} {
		for name, q := range map[string]string{"bad escape": "code=nomatch&limit=1&x=%zz", "too many": many} {
			var body map[string]any
			resp, err := http.Get(base + path + "?" + q)
			if err != nil {
				t.Fatal(err)
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(fmt.Sprint(body["error"]), "query string") {
				t.Errorf("GET %s with %s: %d %v, want 400 naming the query string", path, name, resp.StatusCode, body)
			}
		}
	}
	code, body := postReplay(t, base, "secret", `{"dry_run":true}`)
	if code != 200 {
		t.Fatalf("replay without a query: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", base+"/api/replay?%zz", strings.NewReader(`{"dry_run":true}`))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("POST /api/replay?%%zz: %d, want 400", resp.StatusCode)
	}
}

// serveLikeAnalyze serves a's handler as `redrive analyze` does (behind
// obs's server, next to /metrics), with limits; it returns the base URL.
func serveLikeAnalyze(t *testing.T, a http.Handler, limits obs.Limits) string {
	t.Helper()
	o := obs.New()
	o.Limits = limits
	o.Mux.Handle("/", a)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := o.Serve(ctx, "127.0.0.1:0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func (e *env) newAnalyzer(allowed ...string) *analyzer.Analyzer {
	e.t.Helper()
	a, _ := e.launch(analyzer.Options{AllowedHosts: allowed})
	return a
}

func do(t *testing.T, method, url, host, auth, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Point 11: no Host check (DNS rebinding could read dead letters), no
// security headers, /vendor/ listed, a lowercase bearer scheme refused.
func TestHTTPGuards(t *testing.T) {
	e := newEnv(t)
	e.deadLetter("d0", "exhausted", "http_503", 0, time.Now())
	base := serveLikeAnalyze(t, e.newAnalyzer("dash.example.com").Handler("secret"), obs.Limits{})
	waitStatsAs(t, base, "Bearer secret", 1)

	for _, p := range []string{"/", "/api/stats", "/api/deadletters", "/app.js"} {
		for _, host := range []string{"evil.example", "evil.example:9091", "127.0.0.1.evil.example", "dash.example.com.evil"} {
			if resp, body := do(t, "GET", base+p, host, "", ""); resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "d0") {
				t.Errorf("GET %s with Host %s: %d, want 421 and no dead letter", p, host, resp.StatusCode)
			}
		}
		for _, host := range []string{"", "localhost:9091", "LOCALHOST", "[::1]:9091", "dash.example.com", "Dash.Example.Com:443"} {
			if resp, _ := do(t, "GET", base+p, host, "Bearer secret", ""); resp.StatusCode != 200 {
				t.Errorf("GET %s with Host %q: %d, want 200", p, host, resp.StatusCode)
			}
		}
	}
	if resp, _ := do(t, "POST", base+"/api/replay", "evil.example", "Bearer secret", `{"all":true}`); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("POST /api/replay with Host evil.example: %d, want 421", resp.StatusCode)
	}

	for _, p := range []string{"/", "/api/stats", "/api/deadletters?limit=x", "/nope", "/metrics", "/healthz"} {
		resp, _ := do(t, "GET", base+p, "", "", "")
		h := resp.Header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s (%d): security headers missing: %v", p, resp.StatusCode, h)
		}
	}
	// The dashboard's own policy still lets it load its scripts and styles.
	if resp, _ := do(t, "GET", base+"/", "", "", ""); !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("dashboard CSP %q", resp.Header.Get("Content-Security-Policy"))
	}

	for _, p := range []string{"/vendor/", "/vendor", "/vendor/uplot/", "/vendor/uplot"} {
		if resp, body := do(t, "GET", base+p, "", "", ""); resp.StatusCode != 404 || strings.Contains(body, "uPlot") {
			t.Errorf("GET %s: %d, want 404 without a listing: %.200s", p, resp.StatusCode, body)
		}
	}
	if resp, _ := do(t, "GET", base+"/vendor/uplot/uPlot.iife.min.js", "", "", ""); resp.StatusCode != 200 {
		t.Errorf("a vendored file: %d, want 200", resp.StatusCode)
	}

	for auth, want := range map[string]int{
		"bearer secret": 200, "BEARER secret": 200, "Bearer  secret": 200, "Bearer secret": 200,
		"bearer wrong": 401, "Basic secret": 401, "secret": 401, "Bearersecret": 401, "": 401,
	} {
		if resp, body := do(t, "POST", base+"/api/replay", "", auth, `{"dry_run":true}`); resp.StatusCode != want {
			t.Errorf("Authorization %q: %d %s, want %d", auth, resp.StatusCode, body, want)
		}
	}
}

// Point 11: a replay body trickled byte by byte held the server for as
// long as the client liked. The server's read timeout cuts it.
func TestTricklingBodyIsCut(t *testing.T) {
	e := newEnv(t)
	base := serveLikeAnalyze(t, e.newAnalyzer().Handler("secret"), obs.Limits{ReadTimeout: time.Second})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 400
	fmt.Fprintf(conn, "POST /api/replay HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer secret\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", size)
	stop := make(chan struct{})
	trickled := make(chan int, 1)
	go func() { // 400 bytes, one every 50 ms: 20 s if nothing cuts it
		n := 1
		defer func() { trickled <- n }()
		for ; n < size; n++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second)) // a failsafe, not the assertion
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	close(stop)
	n := <-trickled
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("the trickled body was read to the end: %d %s", resp.StatusCode, b)
		}
		t.Logf("answered %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server held the trickling request: %v", err)
	}
	if n >= size {
		t.Errorf("the client sent the whole body (%d bytes) before the server cut it", n)
	}
}

// Point 6: the reason label was copied from the record (1,000 distinct
// reasons made 1,012 series; 500 KB values made /metrics 2.6 MB). Every
// label value from a record is bounded in length and cardinality.
func TestRecordLabelsBounded(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	long := strings.Repeat("x", 2000)
	for i := range 500 {
		code := fmt.Sprintf("code-%d-%s", i, long)
		if i%2 == 0 {
			code = fmt.Sprintf("short-%d", i) // 250 distinct short codes: the count bound
		}
		e.deadLetter(fmt.Sprintf("c%d", i), "exhausted", code, 0, now)
		e.deadLetter(fmt.Sprintf("r%d", i), fmt.Sprintf("reason-%d-%s", i, long), "http_503", 0, now)
	}
	e.deadLetter("bad-utf8", "exhausted", "\xff\xfe", 0, now)
	_, reg := e.start(nil, nil, "")
	counted := func() (series int, sum float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "redrive_analyzer_dead_letters_total":
				series = len(mf.GetMetric())
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			case "redrive_analyzer_undecodable_total":
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return series, sum
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { _, n := counted(); return n >= 1001 }) {
		_, n := counted()
		t.Fatalf("counted %v of 1001 DLQ records", n)
	}
	series, _ := counted()
	// 4 reasons + "other" (at most 10) × codes (at most 50 + "other").
	if series > 10*51 || series > 60 {
		t.Errorf("%d series of redrive_analyzer_dead_letters_total, want a bounded few", series)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(body) > 64<<10 {
		t.Errorf("/metrics is %d bytes, want under 64 KiB", len(body))
	}
	if strings.Contains(string(body), long[:100]) || strings.Contains(string(body), "\\xff") {
		t.Errorf("/metrics holds a long or invalid label value")
	}
	t.Logf("%d series, /metrics %d bytes", series, len(body))
}

// Point 4: a dead letter dated a year ahead that matched an `after` rule
// was held for a year, with the rule worker's commit point behind it, and
// oldest_unhandled_seconds went to -2.3e9. Record times are clamped to
// the analyzer's clock, and reported.
func TestFutureTimestampIsClamped(t *testing.T) {
	c := kafkatest.New(t)
	base := kafkatest.Topic(t, "fut")
	e := &env{t: t, c: c, main: base, dlqName: base + ".dlq", other: base + ".failover"}
	// Kafka 4 refuses timestamps over an hour ahead unless the topic allows them.
	maxAfter := "9223372036854775807"
	c.CreateTopic(t, e.dlqName, 1, map[string]*string{"message.timestamp.after.max.ms": &maxAfter})
	c.CreateTopic(t, e.main, 1, nil)
	e.cl = c.Client(t)
	now := time.Now()
	e.deadLetter("future", "exhausted", "http_503", 0, now.AddDate(1, 0, 0))
	e.deadLetter("behind", "exhausted", "http_503", 0, now)
	rules := []dlq.Rule{{Name: "later", Match: dlq.Filter{Codes: []string{"http_503"}}, Action: dlq.ActionRepublish, After: time.Second, MaxRedrives: 3}}
	api, reg := e.start(rules, nil, "")

	neverNegative := func() {
		var s analyzer.StatsResponse
		getJSON(t, api+"/api/stats", &s)
		for _, p := range s.Pipelines {
			if p.OldestUnhandledSeconds < 0 {
				t.Errorf("oldest_unhandled_seconds %v", p.OldestUnhandledSeconds)
			}
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "redrive_analyzer_oldest_unhandled_seconds" && mf.GetMetric()[0].GetGauge().GetValue() < 0 {
				t.Errorf("redrive_analyzer_oldest_unhandled_seconds %v", mf.GetMetric()[0].GetGauge().GetValue())
			}
		}
	}
	neverNegative()
	got := collect(t, c, e.main, 2, 30*time.Second) // 1 s after it was read, not a year
	neverNegative()
	if len(got) != 2 {
		t.Fatalf("%d of 2 republished: the future-dated dead letter was held", len(got))
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { return c.Lag(t, analyzer.Pipeline{Name: e.main}.GroupID(), e.dlqName) == 0 }) {
		t.Errorf("the rule worker did not commit past the future-dated dead letter")
	}
	mfs, _ := reg.Gather()
	var future float64
	for _, mf := range mfs {
		if mf.GetName() == "redrive_analyzer_future_timestamps_total" {
			future = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if future != 1 {
		t.Errorf("redrive_analyzer_future_timestamps_total %v, want 1", future)
	}
	neverNegative()
}
