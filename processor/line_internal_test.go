package processor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testLine is a line for pipeline cfg (defaults filled) whose fetch pauses
// are recorded.
type testLine struct {
	*line
	mu      sync.Mutex
	fetches [][2]bool
}

func newTestLine(t *testing.T, cfg Pipeline) *testLine {
	t.Helper()
	cfg.Name = "solve"
	cfg = cfg.WithDefaults()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tl := &testLine{}
	tl.line = newLine(cfg, slog.New(slog.DiscardHandler), m, func(main, tiers bool) {
		tl.mu.Lock()
		tl.fetches = append(tl.fetches, [2]bool{main, tiers})
		tl.mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tl.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return tl
}

func never() bool { return false }

// call enters the line (failing the test if it does not let the call
// through within 5s) and leaves it with out; it reports hold.
func (tl *testLine) call(t *testing.T, out Outcome) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tk, e := tl.enter(ctx, time.Now(), newCaller)
	if e != enterCall {
		t.Fatalf("enter: %v, want a call", e)
	}
	return tl.leave(tk, out, "", time.Now())
}

// newCaller is a caller with no failure history; failedBefore(code) one whose
// record failed with code before.
var newCaller = caller{fresh: true, abandoned: never}

func failedBefore(code string) caller { return caller{prevCode: code, abandoned: never} }

// try enters the line as c within ctx; ok: a call was let through.
func (tl *testLine) try(ctx context.Context, c caller) (tk ticket, ok bool) {
	tk, e := tl.enter(ctx, time.Now(), c)
	return tk, e == enterCall
}

// blocked reports whether a call would wait (enter does not return within d).
func (tl *testLine) blocked(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tk, ok := tl.try(ctx, newCaller)
	if ok {
		tk.abandon(tl.line)
	}
	return !ok
}

func (tl *testLine) lastFetch() [2]bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.fetches) == 0 {
		return [2]bool{}
	}
	return tl.fetches[len(tl.fetches)-1]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errDown = errors.New("503")

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

func TestPauseCodeStopsTheLineAndHolds(t *testing.T) {
	tl := newTestLine(t, Pipeline{})
	start := time.Now()
	if !tl.call(t, Pause("ERROR_ZERO_BALANCE", errors.New("no money"), time.Second)) {
		t.Fatal("a pause code was not held")
	}
	st := tl.status(time.Now())
	if st.State != "stopped" || st.Reasons[0].Reason != stopPauseCode || st.Reasons[0].Until.Sub(start) < time.Second-10*time.Millisecond {
		t.Fatalf("%+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tk, ok := tl.try(ctx, newCaller)
	if !ok {
		t.Fatal("no call after the pause")
	}
	if w := time.Since(start); w < time.Second || w > 2*time.Second {
		t.Fatalf("next call after %v, want 1s (the pause)", w)
	}
	tl.leave(tk, Succeed(nil), "", time.Now())
	// A pause code counts neither for nor against the breaker.
	if c := tl.status(time.Now()).Counts; c.Failures != 0 || c.Calls != 1 {
		t.Fatalf("breaker counts %+v, want the one success only (a pause is not counted)", c)
	}
}

func TestGuardStopsUntilResumed(t *testing.T) {
	tl := newTestLine(t, Pipeline{Guard: Guard{PermanentRatio: 0.9, MinCalls: 5, Window: time.Minute}})
	held := 0
	for range 4 {
		if tl.call(t, Fail("ERROR_WRONG_USER_KEY", errors.New("400"))) {
			held++
		}
	}
	if held != 0 {
		t.Fatalf("%d permanent failures held below min_calls", held)
	}
	if !tl.call(t, Fail("ERROR_WRONG_USER_KEY", errors.New("400"))) {
		t.Fatal("the 5th permanent failure of 5 calls (min_calls 5) did not stop the line")
	}
	if !tl.blocked(200 * time.Millisecond) {
		t.Fatal("a call started with the guard tripped")
	}
	st := tl.status(time.Now())
	if st.State != "stopped" || st.Reasons[0].Reason != stopGuard || !st.Reasons[0].Until.IsZero() {
		t.Fatalf("%+v, want stopped by the guard until resumed", st)
	}
	tl.resume("test")
	if tl.blocked(time.Second) {
		t.Fatal("resume did not restart the line")
	}
	// The window starts over: 4 more failures do not stop it again.
	for range 4 {
		if tl.call(t, Fail("ERROR_WRONG_USER_KEY", errors.New("400"))) {
			t.Fatal("held right after resume: the guard's window was not cleared")
		}
	}
}

func TestGuardAutoResume(t *testing.T) {
	tl := newTestLine(t, Pipeline{Guard: Guard{MinCalls: 2, AutoResumeAfter: 300 * time.Millisecond}})
	tl.call(t, Fail("bad", nil))
	tl.call(t, Fail("bad", nil))
	start := time.Now()
	if tl.blocked(100*time.Millisecond) == false {
		t.Fatal("guard did not stop the line")
	}
	if tl.blocked(2 * time.Second) {
		t.Fatal("guard did not resume after auto_resume_after")
	}
	if w := time.Since(start); w < 250*time.Millisecond {
		t.Fatalf("resumed after %v, want 300ms", w)
	}
}

func TestManualPauseAndFailover(t *testing.T) {
	tl := newTestLine(t, Pipeline{Topic: "a", Breaker: Breaker{FailoverTo: "b", Consecutive: 1, OpenFor: time.Minute}})
	tl.pauseByHand("test")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, e := tl.enter(ctx, time.Now(), caller{fresh: true, canForward: true, abandoned: never}); e != enterAbandon {
		t.Fatalf("manual pause: %v; want wait (no failover for a manual pause)", e)
	}
	waitFor(t, "fetching paused", func() bool { return tl.lastFetch() == [2]bool{true, true} })
	tl.resume("test")
	// Open the breaker: a record that may be forwarded is, at once; the
	// main topic keeps being fetched, the tiers are not.
	tl.call(t, Retry("http_503", errDown))
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, e := tl.enter(ctx2, time.Now(), caller{fresh: true, canForward: true, abandoned: never}); e != enterForward {
		t.Fatalf("open breaker with failover_to: %v, want forward", e)
	}
	waitFor(t, "tiers paused, main fetched", func() bool { return tl.lastFetch() == [2]bool{false, true} })
}

func TestEnterLeavesOnRevokeAndStop(t *testing.T) {
	tl := newTestLine(t, Pipeline{})
	tl.pauseByHand("test")
	var leaving sync.WaitGroup
	var revoked bool
	var mu sync.Mutex
	leaving.Add(2)
	go func() {
		defer leaving.Done()
		_, e := tl.enter(context.Background(), time.Now(), caller{fresh: true, abandoned: func() bool { mu.Lock(); defer mu.Unlock(); return revoked }})
		if e == enterCall {
			t.Error("a revoked record's wait ended in a call")
		}
	}()
	go func() {
		defer leaving.Done()
		_, e := tl.enter(context.Background(), time.Now(), newCaller)
		if e == enterCall {
			t.Error("a wait ended in a call at shutdown")
		}
	}()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	revoked = true
	mu.Unlock()
	tl.kick()
	time.Sleep(50 * time.Millisecond)
	tl.stop()
	done := make(chan struct{})
	go func() { leaving.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("waiters did not leave on revoke and stop")
	}
}

func TestRateLimitSpacesCalls(t *testing.T) {
	tl := newTestLine(t, Pipeline{RateLimit: 20})
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); tl.call(t, Succeed(nil)) }()
	}
	wg.Wait()
	// 8 calls at 20/s, burst 1: the 8th starts 350ms after the first.
	if took := time.Since(start); took < 330*time.Millisecond {
		t.Fatalf("8 calls at 20/s took %v, want at least 350ms", took)
	}
	if got := testutil.ToFloat64(tl.m.rateLimited.WithLabelValues("solve")); got <= 0 {
		t.Fatalf("redrive_rate_limited_seconds_total = %v, want > 0", got)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"50/s": 50, "3000/m": 50, "7200/h": 2, "2.5": 2.5, "": 0, "0": 0, " 10 / s ": 10} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "50/d", "-1/s", "NaN", "Inf/s", "1/", "/s", "0.000001/h"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, got)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"50/s", "3000/m", "1e9/h", "", "x/y", "-0/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err != nil {
			return
		}
		if v < 0 || v != v || v > 1e308 {
			t.Fatalf("ParseRate(%q) = %v", s, v)
		}
	})
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

// A key rotated after many successes: the guard looks at the last
// min_calls calls, so it stops the line within them, whatever came before.
func TestGuardStopsARotatedKey(t *testing.T) {
	tl := newTestLine(t, Pipeline{})
	for range 2000 {
		tl.call(t, Succeed(nil))
	}
	min := DefaultGuardMinCalls
	for i := range min {
		held := tl.call(t, Fail("ERROR_WRONG_USER_KEY", errors.New("401")))
		if stop := i+1 >= int(DefaultGuardPermanentRatio*float64(min)+0.999); held != stop {
			t.Fatalf("permanent failure %d after 2,000 successes: held %v, want %v", i+1, held, stop)
		}
		if held {
			break
		}
	}
	if st := tl.status(time.Now()); st.State != "stopped" || st.Reasons[0].Reason != stopGuard {
		t.Fatalf("status %+v, want stopped by the guard", st)
	}
}

// A callback's answer is heard as a call's: a pause code pauses the line,
// permanent failures trip the guard, service failures count for the
// breaker, and hold is what a call with that answer would get.
func TestCallbackAnswersReachTheLine(t *testing.T) {
	tl := newTestLine(t, Pipeline{Guard: Guard{PermanentRatio: 0.9, MinCalls: 3, Window: time.Minute}})
	if !tl.heard(Pause("ERROR_ZERO_BALANCE", nil, time.Second), "", time.Now()) {
		t.Error("a pause code by callback was not held")
	}
	if st := tl.status(time.Now()); st.State != "stopped" || st.Reasons[0].Reason != stopPauseCode {
		t.Fatalf("after a pause code by callback: %+v, want stopped by the pause code", st)
	}
	tl.resume("test")

	for i := range 3 {
		hold := tl.heard(Fail("ERROR_WRONG_USER_KEY", nil), "", time.Now())
		if hold != (i == 2) {
			t.Errorf("permanent callback %d: hold %v", i+1, hold)
		}
	}
	if st := tl.status(time.Now()); st.State != "stopped" || st.Reasons[0].Reason != stopGuard {
		t.Fatalf("after 3 permanent callbacks: %+v, want stopped by the guard", st)
	}
	tl.resume("test")

	for range 25 {
		tl.heard(Retry("ERROR_INTERNAL", nil), "", time.Now())
	}
	if st := tl.status(time.Now()); st.Counts.Failures == 0 || st.State != "stopped" {
		t.Fatalf("after 25 failed callbacks in a row: %+v, want the breaker open", st)
	}
	if !tl.heard(Retry("ERROR_INTERNAL", nil), "", time.Now()) {
		t.Error("a failed callback while the breaker is open was not held")
	}
	// A request's own fault is never the service's.
	tl.resume("test")
	for range 25 {
		if tl.heard(RetryRequestFault("ERROR_CAPTCHA_UNSOLVABLE", nil), "", time.Now()) {
			t.Fatal("a request fault by callback was held")
		}
	}
}
