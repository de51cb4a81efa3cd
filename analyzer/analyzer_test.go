package analyzer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

type env struct {
	t       *testing.T
	c       *kafkatest.Cluster
	cl      *kgo.Client
	main    string
	dlqName string
	other   string
}

func newEnv(t *testing.T) *env {
	c := kafkatest.New(t)
	base := kafkatest.Topic(t, "an")
	e := &env{t: t, c: c, cl: c.Client(t), main: base, dlqName: base + ".dlq", other: base + ".failover"}
	for _, n := range []string{e.main, e.dlqName, e.other} {
		c.CreateTopic(t, n, 2, nil)
	}
	return e
}

// deadLetter produces a dead letter of id with the given reason and code,
// dead-lettered at ts.
func (e *env) deadLetter(id, reason, code string, redrives int, ts time.Time) {
	e.t.Helper()
	src := &kgo.Record{Topic: e.main, Partition: 0, Offset: 1, Key: []byte("key-" + id), Value: []byte("value-" + id)}
	m := retry.Meta{ID: id, Attempt: 3, HasOrigin: true, OriginTopic: e.main, OriginOffset: 1, OriginTimestamp: ts,
		ErrorClass: retry.ClassTransient, ErrorCode: code, Error: "failed: " + code, Reason: reason, Redrives: redrives}
	r := dlq.Build(src, m, []kgo.RecordHeader{{Key: "trace", Value: []byte("t-" + id)}}, dlq.BuildOptions{Topic: e.dlqName, Group: "redrive.x", Instance: "i"})
	r.Timestamp = ts
	if err := e.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// launch runs an analyzer with o (the test broker, e's pipeline with no
// rules and a registry of its own unless o says otherwise) until the test
// ends or stop is called (idempotent; it waits up to 30 s for Run).
func (e *env) launch(o analyzer.Options) (a *analyzer.Analyzer, stop func()) {
	e.t.Helper()
	o.ClientOpts = append([]kgo.Opt{kgo.SeedBrokers(e.c.Brokers...)}, o.ClientOpts...)
	if o.Pipelines == nil {
		o.Pipelines = e.pipelines(nil)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	a, err := analyzer.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				e.t.Errorf("analyzer did not stop within 30s")
			}
		})
	}
	e.t.Cleanup(stop)
	return a, stop
}

// serve is launch with the analyzer's Handler(token) served; stop closes
// the server too.
func (e *env) serve(o analyzer.Options, token string) (base string, stop func()) {
	e.t.Helper()
	a, stopRun := e.launch(o)
	srv := httptest.NewServer(readsWith(token, a.Handler(token)))
	var once sync.Once
	stop = func() { once.Do(func() { srv.Close(); stopRun() }) }
	e.t.Cleanup(stop)
	return srv.URL, stop
}

// readsWith adds "Authorization: Bearer <token>" to every GET that has
// none, as the dashboard does once given the token: the tests of other
// things read as before; access_test.go tests the tokens themselves.
func readsWith(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		h.ServeHTTP(w, r)
	})
}

// pipelines is e's one pipeline with rules.
func (e *env) pipelines(rules []dlq.Rule) []analyzer.Pipeline {
	return []analyzer.Pipeline{{Name: e.main, Topic: e.main, DLQ: e.dlqName, Rules: rules}}
}

func (e *env) start(rules []dlq.Rule, alerts []analyzer.Alert, token string) (base string, reg *prometheus.Registry) {
	e.t.Helper()
	reg = prometheus.NewRegistry()
	base, _ = e.serve(analyzer.Options{Pipelines: e.pipelines(rules), Alerts: alerts, AlertEvery: 200 * time.Millisecond, Registerer: reg}, token)
	return base, reg
}

// startStoppable runs an analyzer named name (its rule worker's group is
// redrive.<name>.analyzer) with rules; stop ends it (idempotent).
func (e *env) startStoppable(name string, rules []dlq.Rule) (base string, stop func()) {
	e.t.Helper()
	return e.serve(analyzer.Options{Pipelines: []analyzer.Pipeline{{Name: name, Topic: e.main, DLQ: e.dlqName, Rules: rules}}}, "")
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// waitStats polls /api/stats until ready with total dead letters.
func waitStats(t *testing.T, base string, total int64) analyzer.PipelineStats {
	t.Helper()
	return waitStatsAs(t, base, "", total)
}

// waitStatsAs is waitStats with the Authorization header auth ("": none).
func waitStatsAs(t *testing.T, base, auth string, total int64) analyzer.PipelineStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var s analyzer.StatsResponse
	for time.Now().Before(deadline) {
		s = analyzer.StatsResponse{}
		if resp, body := do(t, "GET", base+"/api/stats", "", auth, ""); resp.StatusCode == 200 {
			if err := json.Unmarshal([]byte(body), &s); err != nil {
				t.Fatalf("/api/stats: %v: %s", err, body)
			}
		}
		if len(s.Pipelines) == 1 && s.Pipelines[0].Ready && s.Pipelines[0].Stats.Total >= total {
			return s.Pipelines[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("stats not ready with %d dead letters within 30s: %+v", total, s)
	return analyzer.PipelineStats{}
}

// collect reads topic from the start until n records or timeout.
func collect(t *testing.T, c *kafkatest.Cluster, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return c.Collect(t, topic, n, timeout)
}

func TestRulesRepublishWaitParkDropKeep(t *testing.T) {
	e := newEnv(t)
	now := time.Now().Truncate(time.Millisecond) // record timestamps are milliseconds
	rules := []dlq.Rule{
		{Name: "failover", Match: dlq.Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}}, Action: dlq.ActionRepublish, To: e.other},
		{Name: "later", Match: dlq.Filter{Reasons: []string{"expired"}}, Action: dlq.ActionRepublish, After: 3 * time.Second, MaxRedrives: 2},
		{Name: "junk", Match: dlq.Filter{Codes: []string{"bad_header"}}, Action: dlq.ActionDrop},
	}
	// "wait" is first in its partition: the records behind it must not wait for it.
	e.deadLetter("wait", "expired", "timeout", 0, now)
	e.deadLetter("slot", "exhausted", "ERROR_NO_SLOT_AVAILABLE", 0, now)
	e.deadLetter("parked", "expired", "timeout", 2, now)
	e.deadLetter("junk", "invalid", "bad_header", 0, now)
	e.deadLetter("kept", "permanent", "ERROR_WRONG_USER_KEY", 0, now)
	base, _ := e.start(rules, nil, "")

	failover := collect(t, e.c, e.other, 1, 20*time.Second)
	slotAt := time.Now()
	if len(failover) != 1 {
		t.Fatalf("%d records on the failover topic, want 1", len(failover))
	}
	if slotAt.Sub(now) >= 3*time.Second {
		t.Errorf("the no-slot dead letter was republished %v after the start: it waited behind the 'after 3s' one", slotAt.Sub(now))
	}
	m, user, err := retry.Decode(failover[0].Headers)
	if err != nil || m.ID != "slot" || m.Redrives != 1 || m.Attempt != 0 || m.Reason != "" {
		t.Errorf("republished headers: %+v (err %v), want id slot, redrives 1, no attempt or reason", m, err)
	}
	if string(failover[0].Key) != "key-slot" || string(failover[0].Value) != "value-slot" || len(user) != 1 || string(user[0].Value) != "t-slot" {
		t.Errorf("republished key/value/user headers changed: %q %q %v", failover[0].Key, failover[0].Value, user)
	}

	main := collect(t, e.c, e.main, 1, 20*time.Second)
	if len(main) != 1 {
		t.Fatalf("%d records republished to the main topic, want 1 (wait)", len(main))
	}
	if id, _ := idOf(main[0]); id != "wait" {
		t.Errorf("main topic got %q, want wait", id)
	}
	if main[0].Timestamp.Before(now.Add(3 * time.Second)) {
		t.Errorf("'after 3s' republished at %v, %v after dead-lettering", main[0].Timestamp, main[0].Timestamp.Sub(now))
	}
	if extra := collect(t, e.c, e.main, 2, 2*time.Second); len(extra) != 1 {
		t.Errorf("%d records on the main topic, want only 'wait' (parked, dropped and kept never come back)", len(extra))
	}

	ps := waitStats(t, base, 5)
	r := ps.Stats.Rules
	if r["failover"].Republished != 1 || r["later"].Republished != 1 || r["later"].Parked != 1 || r["junk"].Dropped != 1 {
		t.Errorf("rule counts %+v", r)
	}
	if ps.Stats.ByReason["expired"] != 2 || ps.Stats.ByCode["ERROR_NO_SLOT_AVAILABLE"] != 1 {
		t.Errorf("by reason %v, by code %v", ps.Stats.ByReason, ps.Stats.ByCode)
	}
}

func idOf(r *kgo.Record) (string, error) {
	m, _, err := retry.Decode(r.Headers)
	return m.ID, err
}

func TestAPIFiltersAndErrors(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	for i := range 6 {
		code := "http_503"
		if i%2 == 0 {
			code = "ERROR_WRONG_USER_KEY"
		}
		e.deadLetter(fmt.Sprintf("d%d", i), "exhausted", code, 0, now.Add(-time.Duration(6-i)*time.Minute))
	}
	base, _ := e.start(nil, nil, "secret")
	waitStats(t, base, 6)

	var resp analyzer.DeadLettersResponse
	if code := getJSON(t, base+"/api/deadletters?code=http_503&limit=2", &resp); code != 200 {
		t.Fatalf("status %d", code)
	}
	if len(resp.DeadLetters) != 2 || resp.DeadLetters[0].ID != "d5" || resp.DeadLetters[1].ID != "d3" {
		t.Errorf("code=http_503&limit=2 → %d dead letters, want d5, d3 (newest first): %+v", len(resp.DeadLetters), resp.DeadLetters)
	}
	resp = analyzer.DeadLettersResponse{}
	getJSON(t, base+"/api/deadletters?since=150s", &resp)
	if len(resp.DeadLetters) != 2 {
		t.Errorf("since=150s → %d, want 2 (d4, d5)", len(resp.DeadLetters))
	}
	// Class and origin, as the CLI and the rules have them (dlq.ParseFilter).
	for q, want := range map[string]int{
		"class=transient&origin=" + e.main + "&limit=10": 6, "class=permanent": 0, "origin=" + e.main[:3] + "*&code=http_503": 3,
		"class=&code=":      6, // an empty form field is no filter
		"header.trace=t-d1": 1, "header=trace%3Dt-d2": 1,
	} {
		resp = analyzer.DeadLettersResponse{}
		if code := getJSON(t, base+"/api/deadletters?"+q, &resp); code != 200 || len(resp.DeadLetters) != want {
			t.Errorf("%s → %d, %d dead letters, want %d", q, code, len(resp.DeadLetters), want)
		}
	}
	for _, bad := range []string{"since=yesterday", "limit=0", "limit=x", "reason=sad", "pipeline=nope", "colour=red", "class=sad", "origin=a%20b", "code=,"} {
		if code := getJSON(t, base+"/api/deadletters?"+bad, nil); code != 400 {
			t.Errorf("%s: status %d, want 400", bad, code)
		}
	}

	post := func(token, body string) (int, string) { return postReplay(t, base, token, body) }
	if code, _ := post("", `{"codes":["http_503"]}`); code != 401 {
		t.Errorf("replay without a token: %d, want 401", code)
	}
	if code, _ := post("wrong", `{"codes":["http_503"]}`); code != 401 {
		t.Errorf("replay with a wrong token: %d, want 401", code)
	}
	if code, _ := post("secret", `{"codez":["x"]}`); code != 400 {
		t.Errorf("replay with an unknown field: %d, want 400", code)
	}
	if code, body := post("secret", `{"classes":["fatal"]}`); code != 400 || !strings.Contains(body, `classes: bad dead-letter filter: unknown error class \"fatal\"`) {
		t.Errorf("replay with a bad class: %d %s", code, body)
	}
	code, body := post("secret", `{"codes":["http_503"],"dry_run":true}`)
	var rr analyzer.ReplayResponse
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Matched != 3 || rr.Republished != 0 {
		t.Errorf("dry run: %d %s", code, body)
	}
	rr = analyzer.ReplayResponse{}
	code, body = post("secret", `{"classes":["transient"],"origins":["`+e.main+`"],"headers":{"trace":"t-d3"},"dry_run":true}`)
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Matched != 1 || len(rr.DeadLetters) != 1 || rr.DeadLetters[0].ID != "d3" {
		t.Errorf("dry run by class, origin and header: %d %s", code, body)
	}
	code, body = post("secret", `{"codes":["http_503"],"to":"`+e.other+`"}`)
	rr = analyzer.ReplayResponse{}
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Matched != 3 || rr.Republished != 3 {
		t.Fatalf("replay: %d %s", code, body)
	}
	if got := collect(t, e.c, e.other, 3, 10*time.Second); len(got) != 3 {
		t.Errorf("%d records on %s after replay, want 3", len(got), e.other)
	}
}

func TestMutatingEndpointsOffWithoutToken(t *testing.T) {
	e := newEnv(t)
	base, _ := e.start(nil, nil, "")
	resp, err := http.Post(base+"/api/replay", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("replay with no token configured: %d, want 403", resp.StatusCode)
	}
}

// receiver is a local webhook that records alert messages.
type receiver struct {
	mu   sync.Mutex
	msgs []analyzer.Message
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m analyzer.Message
	_ = json.NewDecoder(r.Body).Decode(&m)
	rc.mu.Lock()
	rc.msgs = append(rc.msgs, m)
	rc.mu.Unlock()
}

func (rc *receiver) get() []analyzer.Message {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]analyzer.Message(nil), rc.msgs...)
}

func TestAlertFiresOnceAndResolves(t *testing.T) {
	e := newEnv(t)
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	now := time.Now()
	for i := range 3 {
		e.deadLetter(fmt.Sprintf("a%d", i), "exhausted", "http_503", 0, now)
	}
	alerts := []analyzer.Alert{{Name: "burst", Kind: analyzer.AlertRate, Threshold: 2, Window: 3 * time.Second, Webhook: hook.URL, Repeat: time.Hour}}
	e.start(nil, alerts, "")
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && len(rc.get()) < 2 {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // no repeats within Repeat
	msgs := rc.get()
	if len(msgs) != 2 {
		t.Fatalf("%d alert messages, want firing then resolved: %+v", len(msgs), msgs)
	}
	if msgs[0].Status != "firing" || msgs[0].Value != 3 || !strings.Contains(msgs[0].Text, "[FIRING]") || !strings.Contains(msgs[0].Text, "burst") {
		t.Errorf("first message %+v", msgs[0])
	}
	if msgs[1].Status != "resolved" || !strings.Contains(msgs[1].Text, "[RESOLVED]") {
		t.Errorf("second message %+v", msgs[1])
	}
}

// TestDepthAndOldestAlerts: a dead letter held for a rule's cool-down is
// unhandled: the depth and oldest alerts fire once each.
func TestDepthAndOldestAlerts(t *testing.T) {
	e := newEnv(t)
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	e.deadLetter("held", "exhausted", "http_503", 0, time.Now().Add(-5*time.Second))
	rules := []dlq.Rule{{Name: "much-later", Action: dlq.ActionRepublish, After: time.Hour}}
	alerts := []analyzer.Alert{
		{Name: "deep", Kind: analyzer.AlertDepth, Threshold: 0, Webhook: hook.URL},
		{Name: "old", Kind: analyzer.AlertOldest, Age: 2 * time.Second, Webhook: hook.URL},
	}
	_, reg := e.start(rules, alerts, "")
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && len(rc.get()) < 2 {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	got := map[string]int{}
	for _, m := range rc.get() {
		if m.Status != "firing" {
			t.Errorf("unexpected %s message %+v", m.Status, m)
		}
		got[m.Alert]++
	}
	if got["deep"] != 1 || got["old"] != 1 {
		t.Errorf("messages per alert %v, want deep and old once each", got)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "redrive_analyzer_dlq_depth" && mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("redrive_analyzer_dlq_depth = %v, want 1", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}
