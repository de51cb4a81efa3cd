package processor

import (
	"fmt"
	"time"

	"github.com/redrive/redrive/processor/control"
)

// guard stops the line when permanent failures reach PermanentRatio of
// the last MinCalls calls with an answer, all within Window: a revoked API
// key or a closed account fails every request permanently, and each call
// would spend a record on the dead-letter topic. Only an operator's resume
// starts the line again, or AutoResumeAfter when set.
type guard struct {
	cfg    Guard
	on     bool
	since  time.Time
	detail string // what tripped it, for the log and the status
	calls  lastCalls
}

func newGuard(cfg Guard) guard {
	g := guard{cfg: cfg}
	if !cfg.Disabled {
		g.calls = newLastCalls(cfg.MinCalls)
	}
	return g
}

// count adds an outcome at now to the window; tripped: it stopped the line
// just now. Only answers of a working service count: a transient failure
// is the service's, for the breaker to judge, and a pause code stops the
// line by itself.
func (g *guard) count(out Outcome, now time.Time) (tripped bool) {
	c := g.cfg
	if c.Disabled || out.Kind == Transient || out.Kind == Paused {
		return false
	}
	g.calls.add(now, out.Kind == Permanent)
	// Only a permanent failure can trip it: the window is summed then,
	// not at every call.
	if g.on || out.Kind != Permanent {
		return false
	}
	calls, perm := g.calls.sum(now, c.Window)
	if calls < c.MinCalls || float64(perm) < c.PermanentRatio*float64(calls) {
		return false
	}
	g.on, g.since = true, now
	g.detail = fmt.Sprintf("%d of %d calls failed permanently in %s (last code %s)", perm, calls, c.Window, out.Code)
	return true
}

// blocked reports whether the guard stops the line at now, and until when
// (zero: until resumed). Once AutoResumeAfter is over it resumes by itself
// (resumed), its window starting empty.
func (g *guard) blocked(now time.Time) (on, resumed bool, until time.Time) {
	if !g.on {
		return false, false, time.Time{}
	}
	a := g.cfg.AutoResumeAfter
	if a <= 0 {
		return true, false, time.Time{}
	}
	if until = g.since.Add(a); now.Before(until) {
		return true, false, until
	}
	g.clear()
	return false, true, time.Time{}
}

// clear resumes the line and empties the window: the calls before the
// cause was fixed say nothing of the calls after.
func (g *guard) clear() {
	g.on = false
	g.calls.reset()
}

func (g *guard) stopReason() StopReason {
	sr := StopReason{Reason: stopGuard, Since: g.since, Detail: g.detail}
	if a := g.cfg.AutoResumeAfter; a > 0 {
		sr.Until = g.since.Add(a)
	}
	return sr
}

// countGuardLocked has the guard count out, and says how to resume when it
// trips. l.mu held.
func (l *line) countGuardLocked(out Outcome, now time.Time) {
	if !l.guard.count(out, now) {
		return
	}
	how := "`redrive resume " + l.name + "` or POST /api/pipelines/" + l.name + "/resume"
	if a := l.guard.cfg.AutoResumeAfter; a > 0 {
		how += fmt.Sprintf(" (or automatically after %s)", a)
	}
	l.log.Error("guard: line stopped; fix the cause (API key, account), then resume: "+how, "why", l.guard.detail)
	var until time.Time
	if a := l.guard.cfg.AutoResumeAfter; a > 0 {
		until = now.Add(a)
	}
	l.publishLocked(control.KindGuard, control.Line{State: control.StateOn, Until: until, Why: l.guard.detail}, now)
	l.kickLocked()
}

// lastCalls is the guard's window: the last n calls with an answer, and
// which failed permanently. A count, not a time span: a key rotated after
// an hour of successes is caught within n calls, not once the successes
// of the last minute have aged out.
type lastCalls struct {
	at   []time.Time
	perm []bool
	next int // where the next call goes
	full bool
}

func newLastCalls(n int) lastCalls {
	return lastCalls{at: make([]time.Time, max(n, 1)), perm: make([]bool, max(n, 1))}
}

// add records a call at now.
func (c *lastCalls) add(now time.Time, perm bool) {
	c.at[c.next], c.perm[c.next] = now, perm
	c.next++
	if c.next == len(c.at) {
		c.next, c.full = 0, true
	}
}

// sum is how many of the last n calls came within span of now, and how
// many of those failed permanently.
func (c *lastCalls) sum(now time.Time, span time.Duration) (calls, perms int) {
	n := c.next
	if c.full {
		n = len(c.at)
	}
	for i := range n {
		if now.Sub(c.at[i]) < span {
			calls++
			if c.perm[i] {
				perms++
			}
		}
	}
	return calls, perms
}

func (c *lastCalls) reset() {
	clear(c.at)
	clear(c.perm)
	c.next, c.full = 0, false
}
