package analyzer_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/processor"
)

// devAnalyzer is an analyzer that is never run (nothing connects): its
// handler answers the API.
func devAnalyzer(t *testing.T, outage func(context.Context, time.Duration) error) http.Handler {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")},
		Pipelines:  []analyzer.Pipeline{{Name: "solve", Topic: "solve.requests", DLQ: "solve.requests.dlq"}},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        func() time.Time { return now },
		DemoOutage: outage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a.Handler("tok")
}

type outageCalls struct {
	mu  sync.Mutex
	got []time.Duration
	err error
}

func (c *outageCalls) fn(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("no deadline")
	}
	c.got = append(c.got, d)
	return c.err
}

func (c *outageCalls) calls() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.got...)
}

// devPost sends POST target to h as a client at 127.0.0.1:9091 with the
// given headers ("Origin", "Authorization", ...).
func devPost(h http.Handler, target string, headers map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:9091"+target, nil)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const devOrigin = "http://127.0.0.1:9091"

// devGet is GET target at 127.0.0.1:9091 with the Authorization auth: the
// analyzer has a token, so its reads need it.
func devGet(target, auth string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9091"+target, nil)
	r.Header.Set("Authorization", auth)
	return r
}

// POST /api/dev/outage calls Options.DemoOutage for the dashboard's page
// (same origin) and for a client with the token; it refuses other
// origins, clients without the token, bad durations; and it is a 404
// outside redrive dev.
func TestDevOutageEndpoint(t *testing.T) {
	calls := &outageCalls{}
	h := devAnalyzer(t, calls.fn)

	w := devPost(h, "/api/dev/outage?for=30s", map[string]string{"Origin": devOrigin, "Sec-Fetch-Site": "same-origin"})
	var resp analyzer.DevOutageResponse
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &resp) != nil || resp.For != "30s" || resp.Until != "2026-01-02T03:04:35Z" {
		t.Fatalf("same-origin POST: %d %s", w.Code, w.Body.String())
	}
	if got := calls.calls(); len(got) != 1 || got[0] != 30*time.Second {
		t.Fatalf("DemoOutage called with %v, want [30s]", got)
	}
	if w := devPost(h, "/api/dev/outage?for=0", map[string]string{"Authorization": "Bearer tok"}); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"for": "0s"`) || strings.Contains(w.Body.String(), "until") {
		t.Errorf("POST with the token, for=0: %d %s", w.Code, w.Body.String())
	}
	if got := calls.calls(); len(got) != 2 || got[1] != 0 {
		t.Fatalf("DemoOutage called with %v, want [30s 0s]", got)
	}

	for _, c := range []struct {
		name    string
		target  string
		headers map[string]string
		code    int
		says    string
	}{
		{"another site", "/api/dev/outage?for=30s", map[string]string{"Origin": "http://evil.example"}, 403, "cross-origin"},
		{"another site with the token", "/api/dev/outage?for=30s", map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer tok"}, 403, "cross-origin"},
		{"another port", "/api/dev/outage?for=30s", map[string]string{"Origin": "http://127.0.0.1:9090"}, 403, "cross-origin"},
		{"a sandboxed frame", "/api/dev/outage?for=30s", map[string]string{"Origin": "null"}, 403, "cross-origin"},
		{"cross-site fetch", "/api/dev/outage?for=30s", map[string]string{"Origin": devOrigin, "Sec-Fetch-Site": "cross-site"}, 403, "cross-origin"},
		{"no origin, no token", "/api/dev/outage?for=30s", nil, 401, "bearer token"},
		{"no origin, wrong token", "/api/dev/outage?for=30s", map[string]string{"Authorization": "Bearer nope"}, 401, "bearer token"},
		{"missing for", "/api/dev/outage", map[string]string{"Origin": devOrigin}, 400, "from 0 (ends the outage) to 10m, e.g. ?for=30s"},
		{"for twice", "/api/dev/outage?for=1s&for=2s", map[string]string{"Origin": devOrigin}, 400, "given 2 times"},
		{"for not a duration", "/api/dev/outage?for=soon", map[string]string{"Origin": devOrigin}, 400, "not a duration"},
		{"for above the cap", "/api/dev/outage?for=11m", map[string]string{"Origin": devOrigin}, 400, "out of range"},
		{"for below zero", "/api/dev/outage?for=-1s", map[string]string{"Origin": devOrigin}, 400, "out of range"},
		{"a bad query", "/api/dev/outage?for=%zz", map[string]string{"Origin": devOrigin}, 400, "query string"},
	} {
		w := devPost(h, c.target, c.headers)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, w.Code, w.Body.String(), c.code, c.says)
		}
		if c.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
	if got := calls.calls(); len(got) != 2 {
		t.Errorf("a refused request called DemoOutage: %v", got)
	}
	// The guard still stands before it: another Host is a 421.
	r := httptest.NewRequest(http.MethodPost, "http://rebound.example:9091/api/dev/outage?for=30s", nil)
	r.Header.Set("Origin", "http://rebound.example:9091")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMisdirectedRequest || w.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("POST from a rebound name: %d, want 421 with the security headers", w.Code)
	}
	if w := devPost(h, "/api/dev/outage?for=10m", map[string]string{"Origin": devOrigin}); w.Code != http.StatusOK {
		t.Errorf("for=10m (the cap): %d %s", w.Code, w.Body.String())
	}

	// The solver failing is a 502 saying so.
	calls.err = errors.New("solver says no")
	if w := devPost(h, "/api/dev/outage?for=30s", map[string]string{"Origin": devOrigin}); w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "solver says no") {
		t.Errorf("DemoOutage failing: %d %s", w.Code, w.Body.String())
	}

	// GET /api/pipelines says the endpoint exists.
	var fr map[string]any
	g := httptest.NewRecorder()
	h.ServeHTTP(g, devGet("/api/pipelines", "Bearer tok"))
	if json.Unmarshal(g.Body.Bytes(), &fr) != nil || fr["dev_outage"] != true {
		t.Errorf("GET /api/pipelines in dev: %s, want dev_outage true", g.Body.String())
	}
}

func TestDevOutageNotInDev(t *testing.T) {
	h := devAnalyzer(t, nil)
	for _, headers := range []map[string]string{{"Origin": devOrigin}, {"Authorization": "Bearer tok"}, nil} {
		if w := devPost(h, "/api/dev/outage?for=30s", headers); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "redrive dev") {
			t.Errorf("POST /api/dev/outage outside dev (%v): %d %s, want 404", headers, w.Code, w.Body.String())
		}
	}
	g := httptest.NewRecorder()
	h.ServeHTTP(g, devGet("/api/pipelines", "Bearer tok"))
	if g.Code != http.StatusOK || strings.Contains(g.Body.String(), "dev_outage") {
		t.Errorf("GET /api/pipelines outside dev: %d %s, want no dev_outage", g.Code, g.Body.String())
	}
}

// The analyzer reads the line the processor writes: every field of
// processor.LineStatus survives the trip through analyzer.ProcessorLine.
func TestProcessorLineMatchesTheProcessors(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ls := processor.LineStatus{State: "stopped", Breaker: "open", BreakerSince: since, OpenFor: "1m0s", Guard: true, RateLimit: 2.5, FailoverTo: "b",
		Reasons: []processor.StopReason{{Reason: "breaker", Since: since, Until: since.Add(time.Minute), Detail: "10 failures in a row"}, {Reason: "manual", Since: since, Detail: "by me"}}}
	want, _ := json.Marshal(ls)
	var pl analyzer.ProcessorLine
	if err := json.Unmarshal(want, &pl); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(pl)
	if string(got) != string(want) {
		t.Errorf("the processor writes\n%s\nthe analyzer passes on\n%s", want, got)
	}
}
