package processor

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A request that fails for its own reasons fails again and again: its
// retries, dispatched in runs, must not open the breaker.
func TestBreakerRepeatedFailuresAreTheRequests(t *testing.T) {
	b := newBreaker(Breaker{}.WithDefaults(), time.Now())
	now := time.Now()
	repeat := Retry("http_500", errDown)
	// No success seen yet (a replica starting in an outage): a repeated
	// failure counts.
	if v := b.judge(repeat, "http_500", false); v != countFailure {
		t.Fatalf("a repeat with no success seen: %v, want counted", v)
	}
	b.record(b.gen, false, now, countSuccess, now, false) // the service answers
	for i := range 500 {
		if tr := b.record(b.gen, false, now, b.judge(repeat, "http_500", false), now, false); tr != nil {
			t.Fatalf("retry %d failing with its earlier code opened the breaker: %v", i, b.why)
		}
	}
	if c := b.counts(now); c.Calls != 1 || c.NotCounted != 500 {
		t.Fatalf("counts %+v, want 1 counted, 500 not counted", c)
	}
	// A retry failing with another code than before counts: something changed.
	if v := b.judge(Retry("connect", errDown), "http_500", false); v != countFailure {
		t.Fatalf("a new code on a retry: %v, want counted as a failure", v)
	}
	// A request-fault code never counts, fresh or not, probe or not.
	for _, probe := range []bool{false, true} {
		if v := b.judge(RetryRequestFault("ERROR_CAPTCHA_UNSOLVABLE", errDown), "", probe); v != skipRequest {
			t.Fatalf("request fault (probe %v): %v, want not counted", probe, v)
		}
	}
	// A 429 is the service asking to slow down: never counted.
	if v := b.judge(Throttled("http_429", errDown, time.Second), "", false); v != skipThrottled {
		t.Fatalf("a 429: %v, want not counted", v)
	}
	// A probe's failure counts even with its earlier code: a probe asks
	// whether the service is back.
	if v := b.judge(repeat, "http_500", true); v != countFailure {
		t.Fatalf("a probe failing with its earlier code: %v, want counted", v)
	}
}

// The defaults open on 20 fresh failures in a row (an outage), not on 19,
// and a success in between starts the run again. Calls that started
// before the last success came back (timeouts ending together) are not in
// the run.
func TestBreakerConsecutiveDefault(t *testing.T) {
	cfg := Breaker{}.WithDefaults()
	b := newBreaker(cfg, time.Now())
	now := time.Now()
	tick := func() time.Time { now = now.Add(time.Millisecond); return now }
	fail := func() *transition { s := tick(); return b.record(b.gen, false, s, countFailure, tick(), false) }
	for range cfg.Consecutive - 1 {
		if fail() != nil {
			t.Fatal("opened before consecutive")
		}
	}
	early := tick() // a call that will time out, started before the success
	b.record(b.gen, false, tick(), countSuccess, tick(), false)
	for range cfg.Consecutive - 1 {
		if fail() != nil {
			t.Fatal("a success did not start the run again")
		}
	}
	for range 50 {
		if tr := b.record(b.gen, false, early, countFailure, tick(), false); tr != nil {
			t.Fatalf("failures of calls started before the last success opened it: %s", b.why)
		}
	}
	if tr := fail(); tr == nil || tr.to != breakerOpen {
		t.Fatalf("%d failures in a row did not open it", cfg.Consecutive)
	}
}

// Half-open closes on a ratio over its probes: with the default 5 probes
// and ratio 0.5, two failed probes are tolerated, a third reopens it for
// twice as long.
func TestBreakerHalfOpenRatio(t *testing.T) {
	cfg := Breaker{Consecutive: 1, OpenFor: time.Second, MaxOpen: time.Minute}.WithDefaults()
	if cfg.Probes != 5 {
		t.Fatalf("default probes %d, want 5", cfg.Probes)
	}
	now := time.Now()
	b := newBreaker(cfg, now)
	open := func() {
		now = now.Add(time.Millisecond)
		b.record(b.gen, false, now, countFailure, now, false)
		if b.state != breakerOpen {
			t.Fatal("not open")
		}
		now = b.openUntil
	}
	probe := func(v verdict) *transition {
		allow, isProbe, _ := b.admit(now, true, waiters{})
		if !allow || !isProbe {
			t.Fatalf("no probe slot (state %v, granted %d)", b.state, b.granted)
		}
		return b.record(b.gen, true, now, v, now, false)
	}
	open()
	probe(countFailure)
	probe(countFailure)
	probe(countSuccess)
	probe(countSuccess)
	if tr := probe(countSuccess); tr == nil || tr.to != breakerClosed {
		t.Fatalf("3 of 5 probes succeeded: state %v, want closed", b.state)
	}
	// Open again; three failed probes reopen it, doubled.
	open()
	probe(countSuccess)
	probe(countFailure)
	probe(countFailure)
	if tr := probe(countFailure); tr == nil || tr.to != breakerOpen || b.openFor != 2*time.Second {
		t.Fatalf("3 of 5 probes failed: state %v open_for %v, want open for 2s", b.state, b.openFor)
	}
	// Probes not counted give their slot back.
	now = b.openUntil
	for range 20 {
		allow, isProbe, _ := b.admit(now, true, waiters{})
		if !allow || !isProbe {
			t.Fatal("an uncounted probe kept its slot")
		}
		b.record(b.gen, true, now, skipRequest, now, false)
	}
}

// Half-open probes go to fresh work first: a caller whose record failed
// before waits while a fresh one does, and gives its record back to the
// run queue (enterYield) while fresh records wait there for a worker and
// a slot is free. When the fresh probes fail, the records that failed
// before are asked before the breaker opens again.
func TestHalfOpenProbesFreshWorkFirst(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{Consecutive: 1, OpenFor: 200 * time.Millisecond, MaxOpen: time.Minute, Probes: 1}})
	var queued bool
	tl.freshQueued = func() bool { tl.mu.Lock(); defer tl.mu.Unlock(); return queued }
	tl.call(t, Retry("http_503", errDown))
	if !tl.notClosed.Load() {
		t.Fatal("open breaker: the run queue is not told to hand out fresh work first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A retry and a fresh record wait for the open breaker; the fresh
	// one gets the only probe, though the retry asked first.
	type got struct {
		tk ticket
		e  admission
	}
	retry, freshc := make(chan got, 1), make(chan got, 1)
	go func() { tk, e := tl.enter(ctx, time.Now(), failedBefore("http_500")); retry <- got{tk, e} }()
	time.Sleep(20 * time.Millisecond)
	go func() { tk, e := tl.enter(ctx, time.Now(), newCaller); freshc <- got{tk, e} }()
	f := <-freshc
	if f.e != enterCall || !f.tk.probe {
		t.Fatalf("fresh record: %v probe %v, want the probe", f.e, f.tk.probe)
	}
	select {
	case r := <-retry:
		t.Fatalf("the retry was let through (%v) while the fresh probe was out", r.e)
	case <-time.After(100 * time.Millisecond):
	}
	// The fresh probe fails while the retry waits: a second round asks
	// the retry, which succeeds: the service is up, it closes.
	tl.leave(f.tk, Retry("http_503", errDown), "", time.Now())
	r := <-retry
	if r.e != enterCall || !r.tk.probe {
		t.Fatalf("retry after the fresh probe failed: %v probe %v, want the second round's probe", r.e, r.tk.probe)
	}
	if st := tl.status(time.Now()); st.Breaker != "half-open" || st.Why == "" {
		t.Fatalf("during the second round: %+v", st)
	}
	tl.leave(r.tk, Succeed(nil), "http_500", time.Now())
	if st := tl.status(time.Now()); st.Breaker != "closed" {
		t.Fatalf("after the second round's good probe: %+v, want closed", st)
	}
	if tl.notClosed.Load() {
		t.Fatal("closed breaker: the run queue still hands out fresh work first")
	}

	// It learned that new requests failing with http_503 fail for their
	// own reasons: such a failure no longer counts; a retry failing with
	// it again does.
	if tl.call(t, Retry("http_503", errDown)) || tl.status(time.Now()).Breaker != "closed" {
		t.Fatal("a new request failing with the learned code opened the breaker")
	}
	if got := testutil.ToFloat64(tl.m.breakerCalls.WithLabelValues("solve", "no", "learned")); got != 1 {
		t.Fatalf("redrive_breaker_calls_total{counted=no,outcome=learned} = %v, want 1", got)
	}
	if tk, _ := tl.try(ctx, failedBefore("http_503")); !tl.leave(tk, Retry("http_503", errDown), "http_503", time.Now()) {
		t.Fatal("a retry failing again with the learned code did not count (and open it)")
	}
	// Open again: what it learned is forgotten. At half-open, fresh work
	// waits in the run queue and no fresh caller is in the line: the
	// retry gives its worker to it.
	tl.mu.Lock()
	queued = true
	tl.mu.Unlock()
	if _, e := tl.enter(ctx, time.Now(), failedBefore("http_500")); e != enterYield {
		t.Fatalf("retry at half-open with fresh work queued: %v, want yield", e)
	}
	// No fresh work anywhere: the retry is the probe; it fails, and no
	// one else waits: open again, for twice as long.
	tl.mu.Lock()
	queued = false
	tl.mu.Unlock()
	tk, ok := tl.try(ctx, failedBefore("http_500"))
	if !ok || !tk.probe {
		t.Fatal("with no fresh work the retry did not get the probe")
	}
	tl.leave(tk, Retry("http_500", errDown), "http_500", time.Now())
	if st := tl.status(time.Now()); st.Breaker != "open" || st.OpenFor != "400ms" {
		t.Fatalf("after the failed probe: %+v, want open for 400ms", st)
	}
	if got := testutil.ToFloat64(tl.m.breakerCalls.WithLabelValues("solve", "yes", "failure")); got != 4 {
		t.Fatalf("redrive_breaker_calls_total{counted=yes,outcome=failure} = %v, want 4", got)
	}
	if tl.br.learned != nil {
		t.Fatalf("learned codes %v kept after opening again", tl.br.learned)
	}
}

// A retry failing with its earlier code while the breaker is closed spends
// its attempt (not held); one failing while it is open is held.
func TestRepeatedFailureHeldOnlyWhileOpen(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{Consecutive: 3, OpenFor: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tl.call(t, Succeed(nil)) // the service answers
	for range 50 {
		tk, ok := tl.try(ctx, failedBefore("http_500"))
		if !ok {
			t.Fatal("the line stopped on repeated failures")
		}
		if tl.leave(tk, Retry("http_500", errDown), "http_500", time.Now()) {
			t.Fatal("a repeated failure was held with the breaker closed")
		}
	}
	// Three fresh failures: an outage. In-flight calls' failures are held.
	var inflight []ticket
	for range 3 {
		tk, _ := tl.try(ctx, failedBefore("http_500"))
		inflight = append(inflight, tk)
	}
	for range 3 {
		tl.call(t, Retry("http_503", errDown))
	}
	for _, tk := range inflight {
		if !tl.leave(tk, Retry("http_500", errDown), "http_500", time.Now()) {
			t.Fatal("a failure while the breaker was open spent its attempt")
		}
	}
	st := tl.status(time.Now())
	if st.Breaker != "open" || st.Why != "3 counted failures in a row" {
		t.Fatalf("status %+v, want open on 3 counted failures in a row", st)
	}
}
