package processor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/retry"
)

// Several processes run one pipeline (scope pipeline, the default): its
// budgets, breaker, pause codes and an operator's pause are the whole
// pipeline's. Each replica here is a Processor of its own (its own
// clients, consumer group member and control-topic writer) in this test
// process; "the service" is the handler, which records every call.

// service is what the replicas call: it records when each call started,
// from which replica, and the calls running at once.
type service struct {
	mu      sync.Mutex
	calls   []svcCall
	running atomic.Int64
	peak    atomic.Int64
	answer  atomic.Pointer[func(replica string, req *processor.Request) processor.Outcome]
	delay   atomic.Int64 // ns each call takes
}

type svcCall struct {
	at      time.Time
	replica string
}

func newService() *service {
	s := &service{}
	s.setAnswer(func(string, *processor.Request) processor.Outcome { return processor.Succeed(nil) })
	return s
}

func (s *service) setAnswer(f func(replica string, req *processor.Request) processor.Outcome) {
	s.answer.Store(&f)
}

// handler is replica's handler.
func (s *service) handler(replica string) processor.Handler {
	return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		n := s.running.Add(1)
		defer s.running.Add(-1)
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
		s.mu.Lock()
		s.calls = append(s.calls, svcCall{at: time.Now(), replica: replica})
		s.mu.Unlock()
		if d := time.Duration(s.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		return (*s.answer.Load())(replica, req)
	})
}

// between counts the calls started in [from, to), by replica ("" all).
func (s *service) between(from, to time.Time, replica string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if !c.at.Before(from) && c.at.Before(to) && (replica == "" || c.replica == replica) {
			n++
		}
	}
	return n
}

// lastCall is when the last call before to started (zero: none).
func (s *service) lastCall(from, to time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	for _, c := range s.calls {
		if !c.at.Before(from) && c.at.Before(to) && c.at.After(last) {
			last = c.at
		}
	}
	return last
}

// firstCall is when the first call at or after from started.
func (s *service) firstCall(from time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, c := range s.calls {
		if !c.at.Before(from) && (first.IsZero() || c.at.Before(first)) {
			first = c.at
		}
	}
	return first
}

// maxWindow is the most calls started in any window of w within [from, to).
func (s *service) maxWindow(from, to time.Time, w time.Duration) int {
	s.mu.Lock()
	var at []time.Time
	for _, c := range s.calls {
		if !c.at.Before(from) && c.at.Before(to) {
			at = append(at, c.at)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// replicas runs processes of one pipeline.
type replicas struct {
	t    *testing.T
	e    *pipetest.Env
	svc  *service
	cfg  func(*processor.Config)
	mu   sync.Mutex
	stop map[string]func() error
	pr   map[string]*processor.Processor
}

func newReplicas(t *testing.T, e *pipetest.Env, svc *service, tweak func(*processor.Config)) *replicas {
	return &replicas{t: t, e: e, svc: svc, cfg: tweak, stop: map[string]func() error{}, pr: map[string]*processor.Processor{}}
}

// start runs replica name.
func (r *replicas) start(name string) {
	r.t.Helper()
	cfg := r.e.Config()
	cfg.Instance = name
	cfg.Control.StatusInterval = time.Second
	if r.cfg != nil {
		r.cfg(&cfg)
	}
	pr, stop := pipetest.RunProcessor(r.t, cfg, r.svc.handler(name))
	r.mu.Lock()
	r.stop[name], r.pr[name] = stop, pr
	r.mu.Unlock()
}

// halt stops replica name (a clean exit: it leaves the group at once).
func (r *replicas) halt(name string) {
	r.t.Helper()
	r.mu.Lock()
	stop := r.stop[name]
	delete(r.stop, name)
	delete(r.pr, name)
	r.mu.Unlock()
	if err := stop(); err != nil {
		r.t.Errorf("replica %s: %v", name, err)
	}
}

// settled waits until every running replica owns partitions and their
// shares add up to the whole (the group's rebalance is over).
func (r *replicas) settled(timeout time.Duration) bool {
	return kafkatest.Eventually(timeout, func() bool {
		st, _, err := control.Read(context.Background(), r.e.Client, control.DefaultTopic)
		if err != nil {
			return false
		}
		r.mu.Lock()
		want := len(r.pr)
		r.mu.Unlock()
		sum, n := 0.0, 0
		for _, rep := range st.Replicas(time.Now()) {
			if rep.Pipeline != r.e.P.Name || rep.Stale || time.Since(rep.Seen) > 1500*time.Millisecond {
				continue
			}
			if rep.Partitions == 0 {
				return false // not assigned yet
			}
			n++
			sum += rep.Share
		}
		return n == want && math.Abs(sum-1) < 0.01
	})
}

// startThree writes a backlog of n records, runs replicas a, b and c of
// e's pipeline calling svc, and waits until the group has settled.
func startThree(t *testing.T, e *pipetest.Env, svc *service, n int) (*replicas, []string) {
	t.Helper()
	rs := newReplicas(t, e, svc, nil)
	if n > 0 {
		e.Produce(backlog(e.P.Topic, n)...)
	}
	names := []string{"a", "b", "c"}
	for _, name := range names {
		rs.start(name)
	}
	if !rs.settled(30 * time.Second) {
		t.Fatal("the replicas' shares did not settle")
	}
	return rs, names
}

// allCalling fails t unless every one of names calls the service in the
// next 2s (before what: what the test does then).
func allCalling(t *testing.T, svc *service, names []string, what string) {
	t.Helper()
	time.Sleep(2 * time.Second)
	for _, n := range names {
		if svc.between(time.Now().Add(-2*time.Second), time.Now(), n) == 0 {
			t.Fatalf("replica %s made no call in the 2s before %s", n, what)
		}
	}
}

func backlog(topic string, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
	}
	return recs
}

// TestReplicasShareTheRateLimit: three replicas with rate_limit 100/s and
// a backlog: the service sees at most 105 calls/s over any 5s, about 100
// on average; after one replica leaves and after a fourth joins, about
// 100/s again once the group has rebalanced.
func TestReplicasShareTheRateLimit(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "sharerate", 6, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	e.P.RateLimit = 100
	svc := newService()
	rs := newReplicas(t, e, svc, nil)
	// Far more than a minute at 100/s in every partition: a replica whose
	// partitions ran dry would leave its share unused.
	e.Produce(backlog(e.P.Topic, 30000)...)
	for _, n := range []string{"a", "b", "c"} {
		rs.start(n)
	}
	phase := func(what string, d time.Duration) {
		t.Helper()
		if !rs.settled(30 * time.Second) {
			t.Fatalf("%s: the replicas' shares did not settle", what)
		}
		if st, _, err := control.Read(context.Background(), e.Client, control.DefaultTopic); err == nil {
			for _, rep := range st.Replicas(time.Now()) {
				if rep.Pipeline == e.P.Name {
					t.Logf("%s: replica %s owns %d of %d partitions (%d of the main topic's): share %.3f, %.1f calls/s", what, rep.Instance, rep.Partitions, rep.TotalPartitions, rep.MainPartitions, rep.Share, rep.RateLimit)
				}
			}
		}
		from := time.Now()
		time.Sleep(d)
		to := time.Now()
		n := svc.between(from, to, "")
		avg := float64(n) / to.Sub(from).Seconds()
		peak := float64(svc.maxWindow(from, to, 5*time.Second)) / 5
		t.Logf("%s: %.1f calls/s on average over %v, at most %.1f/s over 5s", what, avg, to.Sub(from).Round(time.Millisecond), peak)
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			rs.mu.Lock()
			pr := rs.pr[n]
			rs.mu.Unlock()
			if pr != nil {
				t.Logf("%s: replica %s: %.1f calls/s, %d records in flight", what, n, float64(svc.between(from, to, n))/to.Sub(from).Seconds(), pr.Status().Pipelines[0].Inflight)
			}
		}
		if peak > 105 {
			t.Errorf("%s: %.1f calls/s over 5s, want at most 105", what, peak)
		}
		if avg < 90 || avg > 110 {
			t.Errorf("%s: %.1f calls/s on average, want 100 ±10%%", what, avg)
		}
	}
	phase("three replicas", 12*time.Second)
	rs.halt("c")
	phase("one replica left", 10*time.Second)
	rs.start("d")
	phase("a third joined again", 10*time.Second)
	rs.start("e")
	phase("a fourth joined", 10*time.Second)
}

// TestReplicasCapCallsInFlight: three replicas with max_calls_in_flight 30
// against a slow service: it never sees more than 30 calls at once, and
// does see close to 30 (the bound is the pipeline's, not each process's
// divided down to nothing).
func TestReplicasCapCallsInFlight(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "capcalls", 6, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	e.P.MaxCallsInFlight = 30
	svc := newService()
	svc.delay.Store(int64(300 * time.Millisecond))
	rs := newReplicas(t, e, svc, nil)
	e.Produce(backlog(e.P.Topic, 1500)...)
	for _, n := range []string{"a", "b", "c"} {
		rs.start(n) // one after another: every join is a rebalance
	}
	if !rs.settled(30 * time.Second) {
		t.Fatal("the replicas' shares did not settle")
	}
	time.Sleep(5 * time.Second)
	settledPeak := svc.running.Load()
	svc.peak.Store(0)
	time.Sleep(5 * time.Second)
	t.Logf("at most %d calls at once (30 allowed); %d running at one look", svc.peak.Load(), settledPeak)
	if p := svc.peak.Load(); p > 30 {
		t.Errorf("the service saw %d calls at once, want at most 30", p)
	}
	if p := svc.peak.Load(); p < 24 {
		t.Errorf("the service saw at most %d calls at once: the replicas' shares of 30 add up to far less", p)
	}
}

// TestReplicasObeyPause: `redrive pause` (control.SetPause) stops every
// replica's calls within 1s; replicas restarted keep it; a resume starts
// calls again within 1s.
func TestReplicasObeyPause(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "pauseall", 6, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	e.P.RateLimit = 60 // a steady stream of calls for 60s of backlog
	svc := newService()
	rs, names := startThree(t, e, svc, 3600)
	allCalling(t, svc, names, "the pause")
	ctx := context.Background()
	if err := control.SetPause(ctx, e.Client, control.DefaultTopic, e.P.Name, "test", true, "provider maintenance"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(3 * time.Second)
	last := svc.lastCall(paused, time.Now())
	if last.IsZero() {
		t.Logf("no call after the pause was written")
	} else {
		t.Logf("last call %v after the pause was written", last.Sub(paused).Round(time.Millisecond))
	}
	if !last.IsZero() && last.Sub(paused) > time.Second {
		t.Errorf("a call started %v after the pause was written, want none after 1s", last.Sub(paused))
	}
	for _, n := range names {
		rs.halt(n)
	}
	restart := time.Now()
	for _, n := range names {
		rs.start(n)
	}
	time.Sleep(8 * time.Second)
	if n := svc.between(restart, time.Now(), ""); n > 0 {
		t.Errorf("%d calls after every replica restarted, want none: the pause is the pipeline's until resumed", n)
	}
	if err := control.SetPause(ctx, e.Client, control.DefaultTopic, e.P.Name, "test", false, ""); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if !kafkatest.Eventually(5*time.Second, func() bool { return !svc.firstCall(resumed).IsZero() }) {
		t.Fatal("no call within 5s of the resume")
	}
	first := svc.firstCall(resumed)
	t.Logf("first call %v after the resume was written", first.Sub(resumed).Round(time.Millisecond))
	if first.Sub(resumed) > time.Second {
		t.Errorf("the first call came %v after the resume, want within 1s", first.Sub(resumed))
	}
	for _, n := range names {
		if svc.between(resumed, time.Now().Add(time.Second), n) == 0 {
			kafkatest.Eventually(3*time.Second, func() bool { return svc.between(resumed, time.Now(), n) > 0 })
		}
		if svc.between(resumed, time.Now(), n) == 0 {
			t.Errorf("replica %s made no call after the resume", n)
		}
	}
}

// TestReplicasStopOnOnePauseCode: one replica gets ERROR_ZERO_BALANCE
// (the account's, not the request's): all three stop within 1s.
func TestReplicasStopOnOnePauseCode(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "zerobal", 6, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	e.P.RateLimit = 90
	svc := newService()
	_, names := startThree(t, e, svc, 5000)
	allCalling(t, svc, names, "the pause code")
	var told atomic.Int64 // when a was told, unix ns
	svc.setAnswer(func(replica string, _ *processor.Request) processor.Outcome {
		if replica == "a" && told.CompareAndSwap(0, time.Now().UnixNano()) {
			return processor.Pause("ERROR_ZERO_BALANCE", nil, 30*time.Second)
		}
		return processor.Succeed(nil)
	})
	if !kafkatest.Eventually(10*time.Second, func() bool { return told.Load() != 0 }) {
		t.Fatal("replica a made no call")
	}
	at := time.Unix(0, told.Load())
	time.Sleep(4 * time.Second)
	for _, n := range names {
		last := svc.lastCall(at, time.Now())
		if c := svc.between(at.Add(time.Second), time.Now(), n); c > 0 {
			t.Errorf("replica %s made %d calls more than 1s after replica a saw ERROR_ZERO_BALANCE (last %v after)", n, c, last.Sub(at))
		}
	}
	t.Logf("calls within 1s after the pause code: %d; after: %d", svc.between(at, at.Add(time.Second), ""), svc.between(at.Add(time.Second), time.Now(), ""))
}

// TestReplicasOutageProbedOnce: a 20s outage at the defaults: three
// replicas make at most as many calls during it as one replica alone does
// in the same outage, plus 10 (one breaker opens them all, one probes),
// and no record is dead-lettered.
func TestReplicasOutageProbedOnce(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, names []string) int {
		e := pipetest.New(t, "outage", 6, retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second}, MaxAttempts: 3})
		svc := newService()
		rs := newReplicas(t, e, svc, nil)
		for _, n := range names {
			rs.start(n)
		}
		if !rs.settled(30 * time.Second) {
			t.Fatal("the replicas' shares did not settle")
		}
		stop := make(chan struct{})
		produced := make(chan struct{})
		go func() { // 60 requests a second until the end
			defer close(produced)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = e.Client.ProduceSync(ctx, backlog(e.P.Topic, 6)...).FirstErr()
				cancel()
			}
		}()
		time.Sleep(3 * time.Second)
		down := func(string, *processor.Request) processor.Outcome {
			return processor.Retry("ERROR_NO_SLOT_AVAILABLE", nil)
		}
		svc.setAnswer(down)
		from := time.Now()
		time.Sleep(20 * time.Second)
		svc.setAnswer(func(string, *processor.Request) processor.Outcome { return processor.Succeed(nil) })
		to := time.Now()
		time.Sleep(15 * time.Second) // the breaker's probes find the service back
		close(stop)
		<-produced
		calls := svc.between(from, to, "")
		dead := e.CollectN(e.P.DLQ, 0, 3*time.Second, time.Second)
		t.Logf("%d replicas: %d calls during the 20s outage; %d dead letters", len(names), calls, len(dead))
		if len(dead) > 0 {
			t.Errorf("%d dead letters, want none: an outage spends no attempt", len(dead))
		}
		if svc.between(to.Add(12*time.Second), time.Now(), "") == 0 {
			t.Errorf("no call in the last 3s: the line did not resume after the outage")
		}
		return calls
	}
	var one, three int
	t.Run("one", func(t *testing.T) { t.Parallel(); one = run(t, []string{"solo"}) })
	t.Run("three", func(t *testing.T) { t.Parallel(); three = run(t, []string{"a", "b", "c"}) })
	t.Cleanup(func() {
		t.Logf("outage calls: one replica %d, three replicas %d", one, three)
		if one > 0 && three > one+10 {
			t.Errorf("three replicas made %d calls during the outage, one alone %d: want at most %d", three, one, one+10)
		}
	})
}

// TestReplicasInStatus: every replica publishes its status; together the
// shares make the whole pipeline.
func TestReplicasInStatus(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "status", 6, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	e.P.RateLimit = 100
	rs := newReplicas(t, e, newService(), nil)
	for _, n := range []string{"a", "b", "c"} {
		rs.start(n)
	}
	if !rs.settled(30 * time.Second) {
		t.Fatal("the replicas' shares did not settle")
	}
	st, _, err := control.Read(context.Background(), e.Client, control.DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	rate := 0.0
	for _, rep := range st.Replicas(time.Now()) {
		if rep.Pipeline != e.P.Name {
			continue
		}
		t.Logf("%s: %+v", rep.Instance, rep.Status)
		rate += rep.RateLimit
		if rep.Partitions == 0 || rep.TotalPartitions != 12 || rep.Scope != "pipeline" || rep.Line != "running" {
			t.Errorf("replica %s: %+v, want partitions of 12, scope pipeline, running", rep.Instance, rep.Status)
		}
	}
	if math.Abs(rate-100) > 0.5 {
		t.Errorf("the replicas' rate shares add up to %.2f, want 100", rate)
	}
	rs.halt("c")
	if !kafkatest.Eventually(10*time.Second, func() bool {
		st, _, err := control.Read(context.Background(), e.Client, control.DefaultTopic)
		if err != nil {
			return false
		}
		for _, rep := range st.Replicas(time.Now()) {
			if rep.Pipeline == e.P.Name && rep.Instance == "c" {
				return false
			}
		}
		return true
	}) {
		t.Error("replica c left cleanly and is still listed")
	}
}

// TestControlTopicMissing: a control topic that does not exist (or is
// denied) stops nothing: the pipeline handles its records, says so once
// in the log and in /readyz's detail (Config.Degraded), not unready.
func TestControlTopicMissing(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "nocontrol", 2, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	var mu sync.Mutex
	var detail string
	var logged strings.Builder
	svc := newService()
	cfg := e.Config()
	cfg.Control.Topic = e.P.Topic + ".no-such-control"
	cfg.Degraded = func(name, d string) {
		mu.Lock()
		defer mu.Unlock()
		if name == "control topic" {
			detail = d
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logged, mu: &mu}, nil))
	start := time.Now()
	pipetest.Run(t, cfg, svc.handler("solo"))
	e.Produce(backlog(e.P.Topic, 20)...)
	got := e.CollectN(e.P.Results, 20, 30*time.Second, 0)
	t.Logf("%d results %v after start", len(got), time.Since(start).Round(time.Millisecond))
	if len(got) < 20 {
		t.Fatalf("%d of 20 results with the control topic missing", len(got))
	}
	if time.Since(start) > 9*time.Second {
		t.Errorf("the results took %v: a missing control topic must not hold the start for its 10s wait", time.Since(start))
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(detail, "read") {
		t.Errorf("readyz detail %q, want what is wrong reading the control topic", detail)
	}
	if n := strings.Count(logged.String(), "control topic: cannot read it"); n != 1 {
		t.Errorf("the missing control topic was logged %d times, want once:\n%s", n, logged.String())
	}
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestScopeProcessKeepsItsOwnBudget: with scope process each replica has
// the whole rate_limit (the way to run replicas that each hold an account
// of their own).
func TestScopeProcessKeepsItsOwnBudget(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "scopeproc", 4, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	e.P.RateLimit = 40
	e.P.Scope = processor.ScopeProcess
	svc := newService()
	rs := newReplicas(t, e, svc, nil)
	e.Produce(backlog(e.P.Topic, 4000)...)
	rs.start("a")
	rs.start("b")
	if !kafkatest.Eventually(30*time.Second, func() bool {
		return svc.between(time.Now().Add(-time.Second), time.Now(), "a") > 0 && svc.between(time.Now().Add(-time.Second), time.Now(), "b") > 0
	}) {
		t.Fatal("both replicas did not call")
	}
	time.Sleep(2 * time.Second)
	from := time.Now()
	time.Sleep(6 * time.Second)
	avg := float64(svc.between(from, time.Now(), "")) / time.Since(from).Seconds()
	t.Logf("two replicas with scope process, rate_limit 40/s: %.1f calls/s", avg)
	if avg < 72 || avg > 88 {
		t.Errorf("%.1f calls/s, want about 80: each process its own 40/s", avg)
	}
}

// TestReplicasTenPercentFailing: three replicas at the defaults, a tenth
// of the requests failing for their own reasons every time: the shared
// breaker never opens (the failures in a row it counts over the replicas
// stay a few), every other request ends in results, and the failing ones
// in the DLQ after their attempts.
func TestReplicasTenPercentFailing(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "tenpctrep", 6, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	svc := newService()
	bad := func(key []byte) bool { return key[len(key)-1] == '7' } // k7, k17, ...: a tenth
	svc.setAnswer(func(_ string, req *processor.Request) processor.Outcome {
		if bad(req.Record.Key) {
			return processor.Retry("ERROR_BAD_PARAMETERS", nil)
		}
		return processor.Succeed(nil)
	})
	rs, names := startThree(t, e, svc, 0)
	var opened atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			rs.mu.Lock()
			for _, pr := range rs.pr {
				if pr.Status().Pipelines[0].Line.Breaker != "closed" {
					opened.Add(1)
				}
			}
			rs.mu.Unlock()
		}
	}()
	const n = 3000
	recs := backlog(e.P.Topic, n)
	for i := 0; i < n; i += 100 { // 1,000 requests a second
		e.Produce(recs[i : i+100]...)
		time.Sleep(100 * time.Millisecond)
	}
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n
	}, 60*time.Second, time.Second)
	close(stop)
	<-watched
	t.Logf("%d results, %d dead letters; the breaker seen not closed %d times across %v", len(got[e.P.Results]), len(got[e.P.DLQ]), opened.Load(), names)
	if o := opened.Load(); o > 0 {
		t.Errorf("a replica's breaker was seen not closed %d times: a tenth of requests failing for their own reasons opened the pipeline", o)
	}
	if len(got[e.P.Results]) != n-n/10 || len(got[e.P.DLQ]) != n/10 {
		t.Errorf("%d results and %d dead letters, want %d and %d", len(got[e.P.Results]), len(got[e.P.DLQ]), n-n/10, n/10)
	}
}
