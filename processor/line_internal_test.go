package processor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The line's stages together; each stage's own tests are in
// line_<stage>_internal_test.go.

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

// newBareLine is a line for pipeline cfg (defaults filled) with no run
// loop and no fetching: its state changes only by the calls of the test,
// at the times the test passes.
func newBareLine(t *testing.T, cfg Pipeline) *line {
	t.Helper()
	cfg.Name = "solve"
	cfg = cfg.WithDefaults()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return newLine(cfg, slog.New(slog.DiscardHandler), m, func(main, tiers bool) {})
}

// The stages stop the line together: the reasons come in the order the
// status lists them, the line wakes at the first stop that ends by
// itself, failover forwards only while the service alone stops it, and
// each stage holds the outcomes it owns. resume clears them all.
func TestLineStagesTogether(t *testing.T) {
	now := time.Now()
	manual := func(l *line) { l.pauseByHand("test") }
	// A second before: the breaker does not count failures of calls that
	// started before a success came back.
	guard := func(l *line) {
		for range DefaultGuardMinCalls {
			l.heard(Fail("ERROR_WRONG_USER_KEY", nil), "", now.Add(-time.Second))
		}
	}
	pause := func(l *line) { l.heard(Pause("ERROR_ZERO_BALANCE", nil, 0), "", now) }
	breaker := func(l *line) {
		for range DefaultBreakerConsecutive {
			l.heard(Retry("http_503", errDown), "", now)
		}
	}
	resume := func(l *line) { l.resume("test") }
	for _, c := range []struct {
		name     string
		stops    []func(*line)
		reasons  []string
		wake     time.Duration // from now; 0: only an event ends the stop
		forward  bool          // with breaker.failover_to set
		holdTr   bool          // a transient failure is held
		holdPerm bool          // a permanent failure is held
	}{
		{name: "running"},
		{name: "manual", stops: []func(*line){manual}, reasons: []string{stopManual}},
		{name: "guard", stops: []func(*line){guard}, reasons: []string{stopGuard}, holdPerm: true},
		{name: "pause code", stops: []func(*line){pause}, reasons: []string{stopPauseCode}, wake: time.Second, forward: true},
		{name: "breaker", stops: []func(*line){breaker}, reasons: []string{stopBreaker}, wake: DefaultBreakerOpenFor, forward: true, holdTr: true},
		{name: "pause code and breaker", stops: []func(*line){breaker, pause}, reasons: []string{stopPauseCode, stopBreaker}, wake: time.Second, forward: true, holdTr: true},
		{name: "guard and breaker: no failover", stops: []func(*line){guard, breaker}, reasons: []string{stopGuard, stopBreaker}, wake: DefaultBreakerOpenFor, holdTr: true, holdPerm: true},
		{name: "all four", stops: []func(*line){guard, breaker, pause, manual},
			reasons: []string{stopManual, stopGuard, stopPauseCode, stopBreaker}, wake: time.Second, holdTr: true, holdPerm: true},
		{name: "resume clears all four", stops: []func(*line){guard, breaker, pause, manual, resume}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newBareLine(t, Pipeline{Topic: "a", Breaker: Breaker{FailoverTo: "b"}})
			for _, stop := range c.stops {
				stop(l)
			}
			l.mu.Lock()
			reasons, wake := l.blockedLocked(now)
			forward := l.failover.forward(reasons)
			l.mu.Unlock()
			if !slices.Equal(reasons, c.reasons) {
				t.Errorf("reasons %v, want %v", reasons, c.reasons)
			}
			if want := now.Add(c.wake); (c.wake == 0 && !wake.IsZero()) || (c.wake != 0 && !wake.Equal(want)) {
				t.Errorf("wakes at %v, want now + %v", wake.Sub(now), c.wake)
			}
			if forward != c.forward {
				t.Errorf("forward %v, want %v", forward, c.forward)
			}
			if st := l.status(now); len(st.Reasons) != len(c.reasons) {
				t.Errorf("status shows %d reasons, want %d", len(st.Reasons), len(c.reasons))
			}
			// A permanent failure first: the transient one must not be the
			// breaker's 20th.
			if hold := l.heard(Fail("bad", nil), "", now); hold != c.holdPerm {
				t.Errorf("permanent failure held %v, want %v", hold, c.holdPerm)
			}
			if hold := l.heard(Retry("http_503", errDown), "", now); hold != c.holdTr {
				t.Errorf("transient failure held %v, want %v", hold, c.holdTr)
			}
			if !l.heard(Pause("ERROR_ZERO_BALANCE", nil, 0), "", now) {
				t.Error("a pause code was not held")
			}
		})
	}
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
