package processor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A pause code's pause: how long, and how a second pause code changes it.
func TestPauseCodeExtend(t *testing.T) {
	type step struct {
		at       time.Duration // from the start
		delay    time.Duration // the outcome's MinDelay
		code     string
		extended bool
	}
	for _, c := range []struct {
		name         string
		steps        []step
		clear        bool          // resume after the steps
		since, until time.Duration // 0 until: not blocked
		code         string
	}{
		{name: "at least a second", steps: []step{{0, 0, "ERROR_ZERO_BALANCE", true}},
			until: time.Second, code: "ERROR_ZERO_BALANCE"},
		{name: "the pause code's delay", steps: []step{{0, time.Minute, "quota", true}},
			until: time.Minute, code: "quota"},
		{name: "a longer one extends it; since stays", steps: []step{{0, 5 * time.Second, "a", true}, {2 * time.Second, 10 * time.Second, "b", true}},
			until: 12 * time.Second, code: "b"},
		{name: "a shorter one changes nothing", steps: []step{{0, 10 * time.Second, "a", true}, {2 * time.Second, time.Second, "b", false}},
			until: 10 * time.Second, code: "a"},
		{name: "one after the pause starts anew", steps: []step{{0, time.Second, "a", true}, {5 * time.Second, time.Second, "b", true}},
			since: 5 * time.Second, until: 6 * time.Second, code: "b"},
		{name: "one as the pause ends starts anew", steps: []step{{0, time.Second, "a", true}, {time.Second, time.Second, "a", true}},
			since: time.Second, until: 2 * time.Second, code: "a"},
		{name: "resume ends it and keeps the code for the log", steps: []step{{0, time.Minute, "a", true}}, clear: true,
			code: "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			var p pauseCode
			for i, s := range c.steps {
				until, extended := p.extend(Pause(s.code, errors.New("no money"), s.delay), t0.Add(s.at))
				if extended != s.extended || !until.Equal(p.until) {
					t.Fatalf("step %d: extended %v until %v; want extended %v, until the pause's end", i+1, extended, until.Sub(t0), s.extended)
				}
			}
			if c.clear {
				p.clear()
			}
			if !p.since.Equal(t0.Add(c.since)) {
				t.Errorf("since %v, want %v", p.since.Sub(t0), c.since)
			}
			if p.code != c.code {
				t.Errorf("code %q, want %q", p.code, c.code)
			}
			end := t0.Add(c.until)
			if c.until > 0 && !p.blocked(end.Add(-time.Nanosecond)) {
				t.Errorf("not blocked just before %v", c.until)
			}
			if p.blocked(end) {
				t.Errorf("blocked at %v, want the pause over", c.until)
			}
			if sr := p.stopReason(); c.until > 0 && (sr.Reason != stopPauseCode || !sr.Until.Equal(end) || sr.Detail != "pause code "+c.code) {
				t.Errorf("stop reason %+v", sr)
			}
		})
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
