package processor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// When the guard trips, with the shipped defaults (0.9 of the last 50
// calls within a minute) unless a case says otherwise.
func TestGuardCount(t *testing.T) {
	// calls is a run of outcomes a millisecond apart: S success, P
	// permanent, I invalid, T transient, X pause code; a space is a gap of
	// two minutes.
	for _, c := range []struct {
		name  string
		cfg   Guard
		calls string
		trip  int // the call (from 1) that trips it; 0: none
	}{
		{name: "49 permanent: below min_calls", calls: strings.Repeat("P", 49)},
		{name: "50 permanent trip at the 50th", calls: strings.Repeat("P", 50), trip: 50},
		{name: "45 of 50 trip (the ratio)", calls: strings.Repeat("S", 5) + strings.Repeat("P", 45), trip: 50},
		{name: "44 of 50 do not; the next makes it 45 of the last 50",
			calls: strings.Repeat("S", 6) + strings.Repeat("P", 45), trip: 51},
		{name: "an invalid record is an answer, not a permanent failure",
			calls: strings.Repeat("I", 6) + strings.Repeat("P", 45), trip: 51},
		{name: "transient failures and pause codes are not counted",
			calls: strings.Repeat("PT", 25) + strings.Repeat("PX", 25), trip: 99},
		{name: "a success does not trip it", calls: strings.Repeat("P", 49) + "S"},
		{name: "calls older than the window are out", calls: strings.Repeat("P", 25) + " " + strings.Repeat("P", 25)},
		{name: "a rotated key after many successes", calls: strings.Repeat("S", 2000) + strings.Repeat("P", 45), trip: 2045},
		// enabled: false is a user's choice; this is what it gives.
		{name: "disabled", cfg: Guard{Disabled: true}, calls: strings.Repeat("P", 500)},
	} {
		t.Run(c.name, func(t *testing.T) {
			outs := map[rune]Outcome{'S': Succeed(nil), 'P': Fail("ERROR_WRONG_USER_KEY", nil), 'I': Reject("bad", nil),
				'T': Retry("http_503", errDown), 'X': Pause("ERROR_ZERO_BALANCE", nil, 0)}
			g := newGuard(c.cfg.WithDefaults())
			now, n, tripped := time.Now(), 0, 0
			for _, k := range c.calls {
				now = now.Add(time.Millisecond)
				out := outs[k]
				if k == ' ' {
					now = now.Add(2 * time.Minute)
					continue
				}
				n++
				if g.count(out, now) {
					if tripped != 0 {
						t.Fatalf("tripped again at call %d", n)
					}
					tripped = n
				}
			}
			if tripped != c.trip {
				t.Fatalf("tripped at call %d, want %d", tripped, c.trip)
			}
			if on, _, _ := g.blocked(now); on != (c.trip > 0) {
				t.Errorf("blocked %v after the calls", on)
			}
			if c.trip > 0 && !strings.Contains(g.detail, "ERROR_WRONG_USER_KEY") {
				t.Errorf("detail %q does not name the code", g.detail)
			}
		})
	}
}

// A tripped guard holds the line until resumed, or until auto_resume_after
// when set; then its window starts empty.
func TestGuardBlocked(t *testing.T) {
	for _, c := range []struct {
		name       string
		autoResume time.Duration
		at         time.Duration // after it tripped
		on         bool
		resumed    bool
		until      time.Duration // 0: until resumed
	}{
		{name: "the default: until resumed", at: 24 * time.Hour, on: true},
		{name: "before auto_resume_after", autoResume: 5 * time.Minute, at: 4 * time.Minute, on: true, until: 5 * time.Minute},
		{name: "at auto_resume_after", autoResume: 5 * time.Minute, at: 5 * time.Minute, resumed: true},
		{name: "after auto_resume_after", autoResume: 5 * time.Minute, at: time.Hour, resumed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGuard(Guard{MinCalls: 2, AutoResumeAfter: c.autoResume}.WithDefaults()) // 2: trips in two calls
			t0 := time.Now()
			g.count(Fail("bad", nil), t0)
			if !g.count(Fail("bad", nil), t0) {
				t.Fatal("did not trip")
			}
			at := func(d time.Duration) time.Time { // 0: the zero time
				if d == 0 {
					return time.Time{}
				}
				return t0.Add(d)
			}
			if sr := g.stopReason(); sr.Reason != stopGuard || !sr.Since.Equal(t0) || !sr.Until.Equal(at(c.autoResume)) {
				t.Errorf("stop reason %+v", sr)
			}
			on, resumed, until := g.blocked(t0.Add(c.at))
			if on != c.on || resumed != c.resumed || !until.Equal(at(c.until)) {
				t.Fatalf("blocked: %v resumed %v until %v; want %v %v %v", on, resumed, until.Sub(t0), c.on, c.resumed, c.until)
			}
			if !c.resumed {
				g.clear() // resume
			}
			if g.count(Fail("bad", nil), t0.Add(c.at)) {
				t.Error("one permanent failure tripped it again: the window was not emptied")
			}
		})
	}
}

// The guard's window is the last n calls within the span.
func TestLastCalls(t *testing.T) {
	type call struct {
		at           time.Duration
		perm         bool
		calls, perms int // the sums just after the add
	}
	for _, c := range []struct {
		name  string
		n     int
		span  time.Duration
		calls []call
	}{
		{name: "counts up to n", n: 3, span: time.Minute,
			calls: []call{{0, true, 1, 1}, {1, false, 2, 1}, {2, true, 3, 2}}},
		{name: "the oldest leaves at n", n: 3, span: time.Minute,
			calls: []call{{0, true, 1, 1}, {1, false, 2, 1}, {2, false, 3, 1}, {3, false, 3, 0}, {4, true, 3, 1}}},
		{name: "calls older than the span are out", n: 3, span: time.Minute,
			calls: []call{{0, true, 1, 1}, {time.Minute, true, 1, 1}, {time.Minute + 1, false, 2, 1}}},
		{name: "n of 0 is 1", n: 0, span: time.Minute,
			calls: []call{{0, true, 1, 1}, {1, false, 1, 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			w := newLastCalls(c.n)
			for i, a := range c.calls {
				w.add(t0.Add(a.at), a.perm)
				if calls, perms := w.sum(t0.Add(a.at), c.span); calls != a.calls || perms != a.perms {
					t.Fatalf("call %d: %d calls, %d permanent; want %d, %d", i+1, calls, perms, a.calls, a.perms)
				}
			}
			w.reset()
			w.add(t0, false)
			if calls, _ := w.sum(t0, c.span); calls != 1 {
				t.Errorf("after reset: %d calls, want 1", calls)
			}
		})
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
