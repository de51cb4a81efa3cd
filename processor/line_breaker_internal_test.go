package processor

import (
	"context"
	"sync"
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
	if v := b.judge(repeat, "http_500", false, 0); v != countFailure {
		t.Fatalf("a repeat with no success seen: %v, want counted", v)
	}
	b.record(b.gen, false, now, countSuccess, now, false) // the service answers
	for i := range 500 {
		if tr := b.record(b.gen, false, now, b.judge(repeat, "http_500", false, 0), now, false); tr != nil {
			t.Fatalf("retry %d failing with its earlier code opened the breaker: %v", i, b.why)
		}
	}
	if c := b.counts(now); c.Calls != 1 || c.NotCounted != 500 {
		t.Fatalf("counts %+v, want 1 counted, 500 not counted", c)
	}
	// A retry failing with another code than before counts: something changed.
	if v := b.judge(Retry("connect", errDown), "http_500", false, 0); v != countFailure {
		t.Fatalf("a new code on a retry: %v, want counted as a failure", v)
	}
	// A request-fault code never counts, fresh or not, probe or not.
	for _, probe := range []bool{false, true} {
		if v := b.judge(RetryRequestFault("ERROR_CAPTCHA_UNSOLVABLE", errDown), "", probe, 0); v != skipRequest {
			t.Fatalf("request fault (probe %v): %v, want not counted", probe, v)
		}
	}
	// A 429 is the service asking to slow down: never counted.
	if v := b.judge(Throttled("http_429", errDown, time.Second), "", false, 0); v != skipThrottled {
		t.Fatalf("a 429: %v, want not counted", v)
	}
	// A probe's failure counts even with its earlier code: a probe asks
	// whether the service is back.
	if v := b.judge(repeat, "http_500", true, 0); v != countFailure {
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
		allow, isProbe, _ := b.admit(now, true, false, waiters{})
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
		allow, isProbe, _ := b.admit(now, true, false, waiters{})
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
	setQueued := func(q bool) { tl.mu.Lock(); queued = q; tl.mu.Unlock() }
	tl.call(t, Retry("http_503", errDown))
	if !tl.notClosed.Load() {
		t.Fatal("open breaker: the run queue is not told to hand out fresh work first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	freshProbeThenSecondRound(ctx, t, tl)
	learnedCodesThenYield(ctx, t, tl, setQueued)
}

// freshProbeThenSecondRound: a retry and a fresh record wait for the open
// breaker; the fresh one gets the only probe, though the retry asked
// first. The fresh probe fails while the retry waits: a second round asks
// the retry, which succeeds: the service is up, it closes.
func freshProbeThenSecondRound(ctx context.Context, t *testing.T, tl *testLine) {
	t.Helper()
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
}

// learnedCodesThenYield: after the second round closed the breaker, it
// knows that new requests failing with http_503 fail for their own
// reasons: such a failure no longer counts; a retry failing with it again
// does, and opens it.
func learnedCodesThenYield(ctx context.Context, t *testing.T, tl *testLine, setQueued func(bool)) {
	t.Helper()
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
	setQueued(true)
	if _, e := tl.enter(ctx, time.Now(), failedBefore("http_500")); e != enterYield {
		t.Fatalf("retry at half-open with fresh work queued: %v, want yield", e)
	}
	// No fresh work anywhere: the retry is the probe; it fails, and no
	// one else waits: open again, for twice as long.
	setQueued(false)
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

func TestBreakerOpensHoldsAndCloses(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{Consecutive: 3, MinCalls: 100, OpenFor: 300 * time.Millisecond, MaxOpen: 2 * time.Second, Probes: 2}})
	// Two failures: charged (the breaker is closed), not held.
	for i := range 2 {
		if tl.call(t, Retry("http_503", errDown)) {
			t.Fatalf("failure %d held with the breaker closed: it must spend its attempt", i+1)
		}
	}
	// The third opens it: held, no attempt spent.
	if !tl.call(t, Retry("http_503", errDown)) {
		t.Fatal("the failure that opened the breaker was charged; want it held")
	}
	if st := tl.status(time.Now()); st.State != "stopped" || st.Breaker != "open" || len(st.Reasons) != 1 || st.Reasons[0].Reason != stopBreaker {
		t.Fatalf("status %+v, want stopped by an open breaker", st)
	}
	// The tiers are not fetched; the main topic is (half-open probes are
	// fresh requests).
	waitFor(t, "tiers paused", func() bool { return tl.lastFetch() == [2]bool{false, true} })
	if got := testutil.ToFloat64(tl.m.paused.WithLabelValues("solve", stopBreaker)); got != 1 {
		t.Fatalf("redrive_paused{reason=breaker} = %v, want 1", got)
	}
	if !tl.blocked(100 * time.Millisecond) {
		t.Fatal("a call started while the breaker was open")
	}
	// After open_for: half-open, two probes go through, a third waits.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p1, ok1 := tl.try(ctx, newCaller)
	p2, ok2 := tl.try(ctx, newCaller)
	if !ok1 || !ok2 {
		t.Fatal("probes not let through after open_for")
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("first probe after %v, want about open_for (300ms)", waited)
	}
	if !tl.blocked(100 * time.Millisecond) {
		t.Fatal("a third call went through while two probes were out (probes: 2)")
	}
	if tl.leave(p1, Succeed(nil), "", time.Now()) {
		t.Fatal("a successful probe held")
	}
	// A failing probe reopens it for twice as long, and is held.
	if !tl.leave(p2, Retry("http_503", errDown), "", time.Now()) {
		t.Fatal("a failed probe was charged")
	}
	if st := tl.status(time.Now()); st.Breaker != "open" || st.OpenFor != "600ms" {
		t.Fatalf("after a failed probe: %+v, want open for 600ms", st)
	}
	reopened := time.Now()
	p3, ok3 := tl.try(ctx, newCaller)
	if !ok3 {
		t.Fatal("no probe after the second open period")
	}
	if w := time.Since(reopened); w < 500*time.Millisecond {
		t.Fatalf("probe after %v, want the doubled open_for (600ms)", w)
	}
	p4, _ := tl.try(ctx, newCaller)
	tl.leave(p3, Succeed(nil), "", time.Now())
	tl.leave(p4, Poll(nil, 0), "", time.Now()) // the service answered: a success for the breaker
	if st := tl.status(time.Now()); st.State != "running" || st.Breaker != "closed" {
		t.Fatalf("after two good probes: %+v, want running, closed", st)
	}
	waitFor(t, "fetching resumed", func() bool { return tl.lastFetch() == [2]bool{false, false} })
	if got := testutil.ToFloat64(tl.m.breakerTrans.WithLabelValues("solve", "open")); got != 2 {
		t.Fatalf("transitions to open = %v, want 2", got)
	}
}

func TestBreakerRatioOverWindow(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{FailureRatio: 0.5, MinCalls: 10, Consecutive: 1000, Window: 10 * time.Second, OpenFor: time.Minute}})
	for i := range 9 {
		out := Succeed(nil)
		if i%2 == 0 {
			out = Retry("http_503", errDown)
		}
		if tl.call(t, out) {
			t.Fatalf("call %d held below min_calls", i)
		}
	}
	// 10th call, 5 of 10 failed: at the ratio.
	if !tl.call(t, Retry("http_503", errDown)) {
		t.Fatal("5 of 10 calls failed (ratio 0.5, min_calls 10) and the breaker stayed closed")
	}
}

// enabled: false is a user's choice; this is what it gives: nothing held.
func TestBreakerDisabledNeverHolds(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{Disabled: true}, Guard: Guard{Disabled: true}})
	for i := range 200 {
		if tl.call(t, Retry("http_503", errDown)) {
			t.Fatalf("failure %d held with the breaker disabled", i)
		}
	}
	if st := tl.status(time.Now()); st.Breaker != "disabled" || st.State != "running" {
		t.Fatalf("%+v", st)
	}
}

// TestResumeIgnoresTheOldBreaker: a call let through by the breaker that
// resume replaced reports a failure late; it must not reopen the line.
func TestResumeIgnoresTheOldBreaker(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{Consecutive: 2, OpenFor: 100 * time.Millisecond, Probes: 1}})
	tl.call(t, Retry("x", errDown))
	tl.call(t, Retry("x", errDown)) // open
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	probe, ok := tl.try(ctx, newCaller) // half-open: the probe is out
	if !ok {
		t.Fatal("no probe")
	}
	tl.resume("test")
	tl.leave(probe, Retry("x", errDown), "", time.Now()) // the old breaker's probe fails
	if st := tl.status(time.Now()); st.State != "running" || st.Breaker != "closed" {
		t.Fatalf("after resume and a late failure of the old breaker's probe: %+v, want running and closed", st)
	}
}

// What the breaker counts against the service, by outcome and by what the
// record and the breaker knew before.
func TestBreakerJudge(t *testing.T) {
	for _, c := range []struct {
		name     string
		out      Outcome
		prevCode string // the record's earlier failure
		probe    bool
		answered bool   // the service has answered since the start
		learned  string // a code a second round of probes taught it
		// state is the breaker's state at the outcome; seq the record's
		// number in the order of dispatch (0: unknown), opened the last
		// one dispatched when the breaker last opened.
		state       breakerState
		seq, opened uint64
		want        verdict
	}{
		{name: "success", out: Succeed(nil), want: countSuccess},
		{name: "not ready: the service answers", out: Poll(nil, 0), want: countSuccess},
		{name: "permanent: the service answers", out: Fail("bad", nil), want: countSuccess},
		{name: "invalid: the service answers", out: Reject("bad", nil), want: countSuccess},
		{name: "pause code: not a call", out: Pause("ERROR_ZERO_BALANCE", nil, time.Second), want: skipNone},
		{name: "a fresh failure", out: Retry("http_503", errDown), answered: true, want: countFailure},
		{name: "the record's own failure again", out: Retry("http_500", errDown), prevCode: "http_500", answered: true, want: skipRepeat},
		{name: "again, but no answer since the start: an outage found at start", out: Retry("http_500", errDown), prevCode: "http_500", want: countFailure},
		{name: "another code than before", out: Retry("connect", errDown), prevCode: "http_500", answered: true, want: countFailure},
		{name: "a probe failing again: asked about the service", out: Retry("http_500", errDown), prevCode: "http_500", probe: true, answered: true, want: countFailure},
		{name: "request fault", out: RetryRequestFault("ERROR_CAPTCHA_UNSOLVABLE", errDown), answered: true, want: skipRequest},
		{name: "request fault on a probe", out: RetryRequestFault("ERROR_CAPTCHA_UNSOLVABLE", errDown), probe: true, want: skipRequest},
		{name: "429", out: Throttled("http_429", errDown, time.Second), answered: true, want: skipThrottled},
		{name: "429 with a learned code", out: Throttled("http_429", errDown, time.Second), learned: "http_429", want: skipThrottled},
		{name: "a new request failing with a learned code", out: Retry("http_503", errDown), learned: "http_503", answered: true, want: skipLearned},
		{name: "a retry failing with a learned code", out: Retry("http_503", errDown), prevCode: "http_503", learned: "http_503", answered: true, want: countFailure},
		{name: "a probe failing with a learned code", out: Retry("http_503", errDown), probe: true, learned: "http_503", want: countFailure},
		{name: "in the pipeline when it opened, failing after it closed", out: Retry("http_503", errDown), answered: true, seq: 40, opened: 100, want: skipSuspect},
		{name: "the last record in the pipeline when it opened", out: Retry("http_503", errDown), answered: true, seq: 100, opened: 100, want: skipSuspect},
		{name: "dispatched after it opened: counted", out: Retry("http_503", errDown), answered: true, seq: 101, opened: 100, want: countFailure},
		{name: "never opened: counted", out: Retry("http_503", errDown), answered: true, seq: 40, want: countFailure},
		{name: "dispatched when unknown: counted", out: Retry("http_503", errDown), answered: true, opened: 100, want: countFailure},
		{name: "in the pipeline when it opened, a probe: asked about the service", out: Retry("http_503", errDown), probe: true, state: breakerHalfOpen, answered: true, seq: 40, opened: 100, want: countFailure},
		{name: "in the pipeline when it opened, its own failure again: a repeat", out: Retry("http_503", errDown), prevCode: "http_503", answered: true, seq: 40, opened: 100, want: skipRepeat},
		{name: "in the pipeline when it opened, a new request with a learned code", out: Retry("http_503", errDown), learned: "http_503", answered: true, seq: 40, opened: 100, want: skipLearned},
		{name: "in the pipeline when it opened, succeeding: the service answers", out: Succeed(nil), seq: 40, opened: 100, want: countSuccess},
		{name: "in the pipeline when it opened, failing while it is open (a call in flight)", out: Retry("http_503", errDown), state: breakerOpen, answered: true, seq: 40, opened: 100, want: countFailure},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now()
			b := newBreaker(Breaker{}.WithDefaults(), now)
			if c.answered {
				b.lastOK = now
			}
			if c.learned != "" {
				b.learned = map[string]bool{c.learned: true}
			}
			b.state, b.openedSeq = c.state, c.opened
			if got := b.judge(c.out, c.prevCode, c.probe, c.seq); got != c.want {
				t.Errorf("verdict %v (%s), want %v (%s)", got, verdicts[got].outcome, c.want, verdicts[c.want].outcome)
			}
		})
	}
}

// The closed breaker's window: ten buckets of a tenth of the span each; a
// call leaves the window when its bucket is ten buckets old.
func TestRatioWindow(t *testing.T) {
	type add struct {
		at        time.Duration
		hit       bool
		calls, hs int // the totals just after the add
	}
	for _, c := range []struct {
		name    string
		adds    []add
		sumAt   time.Duration
		sum, hs int // the totals at sumAt
	}{
		{name: "empty", sumAt: 0},
		{name: "calls and hits add up", adds: []add{{0, false, 1, 0}, {time.Second, true, 2, 1}, {9 * time.Second, true, 3, 2}}, sumAt: 9 * time.Second, sum: 3, hs: 2},
		{name: "ten buckets on, a call is out", adds: []add{{0, true, 1, 1}, {10 * time.Second, false, 1, 0}}, sumAt: 10 * time.Second, sum: 1},
		{name: "nine buckets on, still in", adds: []add{{0, true, 1, 1}, {9*time.Second + 999*time.Millisecond, false, 2, 1}}, sumAt: 9 * time.Second, sum: 2, hs: 1},
		{name: "the sum ages out too", adds: []add{{0, true, 1, 1}, {5 * time.Second, true, 2, 2}}, sumAt: 12 * time.Second, sum: 1, hs: 1},
		{name: "a long gap empties it", adds: []add{{0, true, 1, 1}, {time.Hour, false, 1, 0}}, sumAt: time.Hour, sum: 1},
		{name: "the sum before a bucket leaves it out", adds: []add{{0, true, 1, 1}, {5 * time.Second, true, 2, 2}}, sumAt: 4 * time.Second, sum: 1, hs: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Whole seconds from a whole ten seconds: bucket edges fall where
			// the table says.
			t0 := time.Unix(1_700_000_000, 0)
			w := newRatioWindow(DefaultBreakerWindow / 3) // 10s: buckets of 1s
			for i, a := range c.adds {
				w.add(t0.Add(a.at), a.hit)
				if calls, hs := w.sum(t0.Add(a.at)); calls != a.calls || hs != a.hs {
					t.Fatalf("add %d at %v: %d calls, %d hits; want %d, %d", i, a.at, calls, hs, a.calls, a.hs)
				}
			}
			if calls, hs := w.sum(t0.Add(c.sumAt)); calls != c.sum || hs != c.hs {
				t.Errorf("sum at %v: %d calls, %d hits; want %d, %d", c.sumAt, calls, hs, c.sum, c.hs)
			}
			w.reset()
			if calls, _ := w.sum(t0.Add(c.sumAt)); calls != 0 {
				t.Errorf("after reset: %d calls", calls)
			}
		})
	}
}

// After a burst opened the breaker, its half-open probes are records
// dispatched since, newest first: a fresh record that was in the pipeline
// when it opened gives its worker to newer fresh work (enterYield), and
// one dispatched since is the probe. Once closed, the burst's records
// failing are not counted (suspect) and go to their tiers (not held), so
// they do not open it again; records dispatched since still count.
func TestBurstHeldWhenOpenedNeitherProbesNorReopens(t *testing.T) {
	tl := newTestLine(t, Pipeline{Breaker: Breaker{Consecutive: 3, OpenFor: 100 * time.Millisecond, Probes: 1}})
	var mu sync.Mutex
	var dispatched, newest uint64
	set := func(d, n uint64) { mu.Lock(); dispatched, newest = d, n; mu.Unlock() }
	tl.dispatched = func() uint64 { mu.Lock(); defer mu.Unlock(); return dispatched }
	tl.freshNewest = func() uint64 { mu.Lock(); defer mu.Unlock(); return newest }
	tl.freshQueued = func() bool { return tl.freshNewest() > 0 }
	// The burst was produced before the breaker opened; later records after.
	t0 := time.Now().Add(-time.Minute)
	record := func(seq uint64) caller {
		born := t0
		if seq > 100 {
			born = time.Now()
		}
		return caller{fresh: true, seq: seq, born: born, abandoned: never}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fail := func(c caller) (hold bool) {
		t.Helper()
		tk, ok := tl.try(ctx, c)
		if !ok {
			t.Fatalf("record %d: no call", c.seq)
		}
		return tl.leave(tk, Retry("http_503", errDown), "", time.Now())
	}

	// 100 records of a burst dispatched; three fail: it opens.
	set(100, 100)
	for seq := uint64(1); seq <= 3; seq++ {
		fail(record(seq))
	}
	if st := tl.status(time.Now()); st.Breaker != "open" {
		t.Fatalf("after 3 failures in a row: %+v, want open", st)
	}
	// Half-open, newer records queued: the burst's record yields.
	set(150, 150)
	if _, e := tl.enter(ctx, time.Now(), record(4)); e != enterYield {
		t.Fatalf("a record of the burst at half-open, newer work queued: %v, want yield", e)
	}
	// So does one of the burst dispatched after it opened (produced before).
	if _, e := tl.enter(ctx, time.Now(), caller{fresh: true, seq: 120, born: t0, abandoned: never}); e != enterYield {
		t.Fatalf("a record of the burst dispatched after the opening, newer work queued: %v, want yield", e)
	}
	// Nothing newer than it queued (it is the newest): it is the probe.
	set(150, 130)
	if tk, e := tl.enter(ctx, time.Now(), record(140)); e != enterCall || !tk.probe {
		t.Fatalf("a record dispatched after the opening: %v probe %v, want the probe", e, tk.probe)
	} else {
		tl.leave(tk, Succeed(nil), "", time.Now())
	}
	if st := tl.status(time.Now()); st.Breaker != "closed" {
		t.Fatalf("after the good probe: %+v, want closed", st)
	}
	// Closed: the rest of the burst fails, not counted, not held.
	set(150, 0)
	for seq := uint64(5); seq <= 50; seq++ {
		if fail(record(seq)) {
			t.Fatalf("record %d of the burst held after the breaker closed: it goes to its tier", seq)
		}
	}
	if st := tl.status(time.Now()); st.Breaker != "closed" {
		t.Fatalf("after 46 failures of the burst: %+v, want closed", st)
	}
	// The rest of a burst larger than one poll, dispatched after it opened
	// but produced before: as much a suspect.
	late := caller{fresh: true, seq: 120, born: t0, abandoned: never}
	if fail(late) {
		t.Fatal("a record of the burst dispatched after the opening held after the breaker closed")
	}
	if got := testutil.ToFloat64(tl.m.breakerCalls.WithLabelValues("solve", "no", "suspect")); got != 47 {
		t.Fatalf("redrive_breaker_calls_total{counted=no,outcome=suspect} = %v, want 47", got)
	}
	// Records produced and dispatched after the opening failing: an outage again.
	for seq := uint64(101); seq <= 103; seq++ {
		fail(record(seq))
	}
	if st := tl.status(time.Now()); st.Breaker != "open" {
		t.Fatalf("after 3 failures of records dispatched since it opened: %+v, want open", st)
	}
}

// A second round of probes asks the records that failed since the
// breaker opened before those held since it opened: the burst that opened
// it fails again for its own reasons and says nothing of the service.
func TestSecondRoundAsksRecentFailuresFirst(t *testing.T) {
	// Consecutive 1: one failure opens it (the test is about the rounds).
	cfg := Breaker{Consecutive: 1, OpenFor: time.Second, MaxOpen: time.Minute}.WithDefaults()
	now := time.Now()
	b := newBreaker(cfg, now)
	b.record(b.gen, false, now, countFailure, now, false)
	if b.state != breakerOpen {
		t.Fatal("not open")
	}
	now = b.openUntil
	// First round: fresh probes, three fail while failed records wait.
	for i := range 3 {
		allow, _, _ := b.admit(now, true, false, waiters{failed: true, recent: true})
		if !allow {
			t.Fatalf("fresh probe %d refused", i)
		}
		b.record(b.gen, true, now, countFailure, now, true)
	}
	if !b.second {
		t.Fatalf("no second round after three fresh probes failed (state %v)", b.state)
	}
	if allow, _, _ := b.admit(now, false, false, waiters{failed: true, recent: true}); allow {
		t.Fatal("a record held since the breaker opened took a second-round slot while one that failed since waits")
	}
	if allow, _, _ := b.admit(now, false, true, waiters{failed: true, recent: true}); !allow {
		t.Fatal("a record that failed since the breaker opened was refused a second-round slot")
	}
	if allow, _, _ := b.admit(now, false, false, waiters{failed: true}); !allow {
		t.Fatal("with no recent failure waiting, a record held since the opening was refused")
	}
}
