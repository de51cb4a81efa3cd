package analyzer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor/control"
)

// controlTopic creates a control topic of this test's own, as `redrive
// topics ensure` creates redrive.control: compacted, one partition.
func (e *env) controlTopic() string {
	e.t.Helper()
	name := kafkatest.Topic(e.t, "control")
	compact := "compact"
	e.c.CreateTopic(e.t, name, 1, map[string]*string{"cleanup.policy": &compact})
	return name
}

// publish writes control records as the processors do.
func (e *env) publish(topic string, rs ...control.Record) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rs {
		if err := control.Publish(ctx, e.cl, topic, r); err != nil {
			e.t.Fatalf("publish %s: %v", r.Key(), err)
		}
	}
}

// status is a replica's status record of pipeline, written at at.
func status(pipeline, instance string, at time.Time, partitions int, share float64) control.Record {
	return control.Record{Kind: control.KindStatus, Pipeline: pipeline, Instance: instance, At: at,
		Status: &control.Status{Line: "running", Breaker: control.StateClosed, Scope: "pipeline",
			Partitions: partitions, MainPartitions: partitions, TotalPartitions: 4, Share: share,
			Inflight: 7, CallsInFlight: 3, CallsPerSecond: 12.5, Every: "5s"}}
}

// getControl is GET /api/control with auth.
func getControl(t *testing.T, base, auth string) analyzer.ControlResponse {
	t.Helper()
	resp, body := do(t, "GET", base+"/api/control", "", auth, "")
	var c analyzer.ControlResponse
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &c) != nil {
		t.Fatalf("GET /api/control: %d %s", resp.StatusCode, body)
	}
	return c
}

// waitControl polls GET /api/control until ok says so (30 s at most).
func waitControl(t *testing.T, base, auth string, ok func(analyzer.ControlResponse) bool) analyzer.ControlResponse {
	t.Helper()
	var c analyzer.ControlResponse
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c = getControl(t, base, auth); ok(c) {
			return c
		}
	}
	t.Fatalf("GET /api/control not as wanted within 30s: %+v", c)
	return c
}

// readControl is the control topic as every replica reads it.
func (e *env) readControl(topic string) *control.State {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, skipped, err := control.Read(ctx, e.cl, topic)
	if err != nil || len(skipped) > 0 {
		e.t.Fatalf("control.Read: %v, skipped %v", err, skipped)
	}
	return s
}

// The replicas view: every status the processors publish shows up under
// its configured pipeline (another pipeline's do not), stale ones marked;
// the operator's pause and the line's stops in force are shown; a replica
// that left (its tombstone) is gone; a record that is not a control record
// is skipped and counted, and the rest read on.
func TestControlShowsReplicas(t *testing.T) {
	e := newEnv(t)
	ctl := e.controlTopic()
	now := time.Now()
	pipe := e.main
	e.publish(ctl,
		status(pipe, "proc-a", now, 3, 0.75),
		status(pipe, "proc-b", now.Add(-time.Minute), 1, 0.25), // three intervals of 5s passed: stale
		status("someone-else", "proc-c", now, 2, 1),
		control.Record{Kind: control.KindPause, Pipeline: pipe, Instance: "ops-host", At: now, Pause: &control.Pause{Paused: true, Reason: "provider maintenance"}},
		control.Record{Kind: control.KindBreaker, Pipeline: pipe, Instance: "proc-a", At: now, Line: &control.Line{State: control.StateOpen, Until: now.Add(time.Hour), Why: "5 of 5 calls failed"}},
		control.Record{Kind: control.KindGuard, Pipeline: pipe, Instance: "proc-b", At: now, Line: &control.Line{State: control.StateOff}},
	)
	if err := e.cl.ProduceSync(context.Background(), &kgo.Record{Topic: ctl, Key: []byte("status/nope"), Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.publish(ctl, status(pipe, "proc-d", now, 0, 0))
	a, _ := e.launch(analyzer.Options{ControlTopic: ctl, Instance: "an-1"})
	base := serveLikeAnalyze(t, a.HandlerAccess(analyzer.Access{Token: "full-tok", ReadToken: "read-tok"}), obs.Limits{})

	// Read access, as every GET /api/ route.
	if resp, _ := do(t, "GET", base+"/api/control", "", "", ""); resp.StatusCode != 401 {
		t.Errorf("GET /api/control without a token: %d, want 401", resp.StatusCode)
	}
	c := waitControl(t, base, "Bearer read-tok", func(c analyzer.ControlResponse) bool {
		return c.Ready && len(c.Pipelines) == 1 && len(c.Pipelines[0].Replicas) == 3
	})
	if c.Topic != ctl || c.Control != "" || c.Skipped != 1 {
		t.Errorf("topic %q control %q skipped %d, want %s, no problem, the one malformed record skipped", c.Topic, c.Control, c.Skipped, ctl)
	}
	p := c.Pipelines[0]
	if p.Name != pipe || !p.Paused || p.Reason != "provider maintenance" || p.By != "ops-host" || !p.Since.Equal(now) {
		t.Errorf("pause: %+v, want paused by ops-host for provider maintenance", p)
	}
	if b := p.Line.Breaker; b == nil || b.State != control.StateOpen || b.Why != "5 of 5 calls failed" || b.By != "proc-a" {
		t.Errorf("line.breaker %+v, want open by proc-a", b)
	}
	if p.Line.Guard != nil || p.Line.PauseCode != nil {
		t.Errorf("line.guard %+v, line.pause_code %+v: want none in force (guard off, no pause code)", p.Line.Guard, p.Line.PauseCode)
	}
	want := map[string]struct {
		stale      bool
		partitions int
		share      float64
	}{"proc-a": {false, 3, 0.75}, "proc-b": {true, 1, 0.25}, "proc-d": {false, 0, 0}}
	for _, r := range p.Replicas {
		w, ok := want[r.Instance]
		if !ok || r.Pipeline != pipe || r.Stale != w.stale || r.Partitions != w.partitions || r.Share != w.share ||
			r.CallsPerSecond != 12.5 || r.Inflight != 7 || r.CallsInFlight != 3 || r.TotalPartitions != 4 || r.Line != "running" || r.Seen.IsZero() {
			t.Errorf("replica %+v, want %+v of %s", r, w, pipe)
		}
	}

	// A replica that leaves cleanly writes a tombstone: it is gone.
	e.publish(ctl, control.Record{Kind: control.KindStatus, Pipeline: pipe, Instance: "proc-d", Tombstone: true})
	waitControl(t, base, "Bearer read-tok", func(c analyzer.ControlResponse) bool { return len(c.Pipelines[0].Replicas) == 2 })
}

// Pause and resume from the API: behind analyzer.token only (no token, a
// wrong one or the read-only one is refused and nothing is written); a
// pipeline the analyzer does not run is a 404; the 200 comes once the
// record is in the control topic, where every replica reads it; a resume
// clears the line's stops written before it.
func TestControlPauseResume(t *testing.T) {
	e := newEnv(t)
	ctl := e.controlTopic()
	a, _ := e.launch(analyzer.Options{ControlTopic: ctl, Instance: "an-1"})
	base := serveLikeAnalyze(t, a.HandlerAccess(analyzer.Access{Token: "full-tok", ReadToken: "read-tok"}), obs.Limits{})
	waitControl(t, base, "Bearer read-tok", func(c analyzer.ControlResponse) bool { return c.Ready })
	pause := base + "/api/control/" + e.main + "/pause"
	resume := base + "/api/control/" + e.main + "/resume"

	for _, c := range []struct {
		url, auth, body string
		code            int
		says            string
	}{
		{pause, "", "", 401, "bearer token"},
		{pause, "Bearer wrong", "", 401, "bearer token"},
		{resume, "", "", 401, "bearer token"},
		{pause, "Bearer read-tok", "", 403, "read-only token"},
		{resume, "Bearer read-tok", "", 403, "read-only token"},
		{base + "/api/control/not-mine/pause", "Bearer full-tok", "", 404, "not configured"},
		{pause, "Bearer full-tok", `{"reason": 1}`, 400, "body"},
		{pause, "Bearer full-tok", `{"why": "x"}`, 400, "unknown field"},
		{pause, "Bearer full-tok", `{"reason": "a"} {}`, 400, "exactly one"},
		{pause, "Bearer full-tok", `["a"]`, 400, "JSON object"},
		{pause, "Bearer full-tok", `{"reason": "` + strings.Repeat("x", analyzer.MaxPauseReason+1) + `"}`, 400, "reason of"},
	} {
		if resp, body := do(t, "POST", c.url, "", c.auth, c.body); resp.StatusCode != c.code || !strings.Contains(body, c.says) {
			t.Errorf("POST %s with Authorization %q body %.40q: %d %s, want %d saying %q", strings.TrimPrefix(c.url, base), c.auth, c.body, resp.StatusCode, body, c.code, c.says)
		}
	}
	if n := e.endOffset(ctl); n != 0 {
		t.Fatalf("the refused requests wrote %d records to the control topic", n)
	}

	// A breaker one replica opened, before the operator steps in.
	e.publish(ctl, control.Record{Kind: control.KindBreaker, Pipeline: e.main, Instance: "proc-a", At: time.Now(),
		Line: &control.Line{State: control.StateOpen, Until: time.Now().Add(time.Hour)}})

	resp, body := do(t, "POST", pause, "", "Bearer full-tok", `{"reason": "provider down"}`)
	var pr analyzer.PauseResponse
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &pr) != nil || !pr.Paused || pr.By != "analyzer:an-1" || pr.Reason != "provider down" || !pr.Seen {
		t.Fatalf("POST pause: %d %s", resp.StatusCode, body)
	}
	s := e.readControl(ctl)
	if r, ok := s.Paused(e.main); !ok || r.Pause.Reason != "provider down" || r.Instance != "analyzer:an-1" {
		t.Fatalf("the control topic holds %+v (paused %v), want the pause by analyzer:an-1", r, ok)
	}
	// Seen: the view shows it at once.
	if p := getControl(t, base, "Bearer read-tok").Pipelines[0]; !p.Paused || p.By != "analyzer:an-1" || p.Reason != "provider down" || p.Line.Breaker == nil {
		t.Errorf("GET /api/control right after the pause: %+v", p)
	}

	// Resume: no body is fine.
	resp, body = do(t, "POST", resume, "", "Bearer full-tok", "")
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &pr) != nil || pr.Paused || !pr.Seen {
		t.Fatalf("POST resume: %d %s", resp.StatusCode, body)
	}
	if r, ok := e.readControl(ctl).Get(control.KindPause, e.main); !ok || r.Pause == nil || r.Pause.Paused || r.Instance != "analyzer:an-1" {
		t.Fatalf("the control topic's latest pause record is %+v, want the resume by analyzer:an-1", r)
	}
	if p := getControl(t, base, "Bearer read-tok").Pipelines[0]; p.Paused || p.Line.Breaker != nil {
		t.Errorf("GET /api/control after the resume: paused %v, breaker %+v: want neither (a resume clears the stops before it)", p.Paused, p.Line.Breaker)
	}
	if n := e.endOffset(ctl); n != 3 {
		t.Errorf("the control topic has %d records, want 3: the breaker, the pause, the resume", n)
	}
}

// Without analyzer.token the pause and resume are off, as replay is.
func TestControlWritesOffWithoutToken(t *testing.T) {
	e := newEnv(t)
	ctl := e.controlTopic()
	a, _ := e.launch(analyzer.Options{ControlTopic: ctl})
	for _, ac := range []analyzer.Access{{}, {ReadToken: "read-tok"}} {
		h := a.HandlerAccess(ac)
		for _, auth := range []string{"", "Bearer read-tok"} {
			w := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "http://127.0.0.1:9091/api/control/"+e.main+"/pause", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			h.ServeHTTP(w, req)
			want := 403
			if ac.ReadToken != "" && auth == "" {
				want = 401
			}
			if w.Code != want {
				t.Errorf("access %+v, Authorization %q: %d %s, want %d", ac, auth, w.Code, w.Body, want)
			}
		}
	}
	if n := e.endOffset(ctl); n != 0 {
		t.Errorf("the refused pauses wrote %d records", n)
	}
}

// A control topic that is missing does not stop the analyzer: its
// statistics go on, GET /api/control says what is wrong (logged once,
// however often it is tried again), and once the topic is there its
// records show up.
func TestControlTopicMissing(t *testing.T) {
	e := newEnv(t)
	e.deadLetter("d0", "exhausted", "http_503", 0, time.Now())
	ctl := kafkatest.Topic(t, "control.missing")
	logs := &syncBuffer{}
	a, _ := e.launch(analyzer.Options{ControlTopic: ctl, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	base := serveLikeAnalyze(t, a.Handler(""), obs.Limits{})
	waitStatsAs(t, base, "", 1)
	c := waitControl(t, base, "", func(c analyzer.ControlResponse) bool { return c.Control != "" })
	if !strings.Contains(c.Control, "does not exist") || c.Ready || len(c.Pipelines) != 1 || len(c.Pipelines[0].Replicas) != 0 {
		t.Errorf("GET /api/control: %+v, want the missing topic said, the pipeline with no replica", c)
	}
	time.Sleep(5 * time.Second) // tried again twice meanwhile
	if n := strings.Count(logs.String(), "cannot read the control topic"); n != 1 {
		t.Errorf("the missing control topic was logged %d times, want once:\n%s", n, logs)
	}

	compact := "compact"
	e.c.CreateTopic(t, ctl, 1, map[string]*string{"cleanup.policy": &compact})
	e.publish(ctl, status(e.main, "proc-a", time.Now(), 2, 1))
	c = waitControl(t, base, "", func(c analyzer.ControlResponse) bool { return len(c.Pipelines[0].Replicas) == 1 })
	if c.Control != "" {
		t.Errorf("control %q once the topic is there, want none", c.Control)
	}
	if !strings.Contains(logs.String(), "control topic readable again") {
		t.Errorf("the recovery is not logged:\n%s", logs)
	}
}

// syncBuffer is a log destination the analyzer's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
