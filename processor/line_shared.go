package processor

import (
	"math"
	"time"

	"github.com/redrive/redrive/processor/control"
)

// The line of a pipeline run by several processes (scope pipeline) is
// one line: what stops one process's calls stops them all. Each process
// publishes its own stops to the control topic (controlplane.go) and
// applies the others':
//
//   - The breaker: the process whose breaker opens publishes open until
//     when; the others open until then too, plus followGrace, and do not
//     probe. The writer of the latest breaker record in the topic is the
//     prober (every process reads the topic in one order, so they agree):
//     it goes half-open when its time is up and publishes that, then
//     closed (all resume) or open again (all wait again). A prober that
//     is gone leaves the others open until their own time is up; the
//     first of them to go half-open probes and publishes it.
//   - A pause code's stop and the guard's: published with their end, and
//     applied by the others as their own.
//   - An operator's pause and resume (`redrive pause`, POST
//     /api/pipelines/{name}/pause): published, and obeyed by every process
//     of the pipeline whatever its scope.
//
// Budgets (RateLimit, MaxCallsInFlight) are split by share (share.go).
// The breaker's failures in a row are counted over all the processes:
// each reports its own while it has two or more, and the pipeline opens
// after about as many failed calls as one process alone would make,
// while a few bad requests spread over the processes stay a few.

// followGrace is how much longer a process waits for the prober's
// verdict than the prober's own open time: the prober's half-open record
// arrives within it, and extends the wait.
const followGrace = 5 * time.Second

// sharedLine is what a line shared through the control topic needs.
type sharedLine struct {
	// writer names this process in the records it writes: its instance
	// and a random suffix, new at every start (a record of an earlier run
	// of the same instance is another process's).
	writer  string
	publish func(control.Record)
	// applying is set while a record of another process is applied: the
	// transitions it makes are not published again.
	applying bool
	// others are the other processes' counted failures in a row, as they
	// reported them (by writer), each holding until its until; told is
	// the run this process last reported.
	others map[string]failingRun
	told   int
}

type failingRun struct {
	run   int
	until time.Time
}

// runHolds is how long a process's reported failures in a row count
// without word from it: it reports every change while it has two or more.
const runHolds = 2 * time.Second

// othersLocked gives the breaker the other processes' failures in a row
// that still hold at now.
func (l *line) othersLocked(now time.Time) {
	sh := l.shared
	if sh == nil || l.br == nil {
		return
	}
	n := 0
	for w, f := range sh.others {
		if !now.Before(f.until) {
			delete(sh.others, w)
			continue
		}
		n += f.run
	}
	l.br.setOthers(n)
}

// tellRunLocked reports this process's counted failures in a row to the
// others when it is two or more, or back to none: the pipeline's breaker
// opens on the failures in a row of all its processes together, not N
// times as many.
func (l *line) tellRunLocked(now time.Time) {
	sh := l.shared
	if sh == nil || l.br == nil {
		return
	}
	run := l.br.run
	if l.br.state != breakerClosed {
		run = 0
	}
	if run == sh.told || (run < 2 && sh.told == 0) {
		return
	}
	sh.told = run
	ln := control.Line{State: control.StateOn, Run: run, Until: now.Add(runHolds)}
	if run < 2 {
		ln = control.Line{State: control.StateOff}
	}
	sh.publish(control.Record{Kind: control.KindFailing, Pipeline: l.name, Instance: sh.writer, At: now, Line: &ln})
}

// setShare sets the line's part of the pipeline's budgets: share of
// RateLimit (burst too, at least 1), of MaxCallsInFlight (rounded down,
// at least 1 while share is above 0).
func (l *line) setShare(share float64) {
	c := l.cfg
	l.rate.set(c.RateLimit*share, int(math.Ceil(float64(c.RateBurst)*share)))
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.MaxCallsInFlight > 0 {
		n := int(math.Floor(float64(c.MaxCallsInFlight)*share + 1e-9))
		if n == 0 && share > 0 {
			n = 1
		}
		if n == 0 {
			n = -1 // owns nothing: no call (a cap of 0 would be none)
		}
		l.calls.cap = n
	}
	l.kickLocked()
}

// callsCap is this process's bound on calls in flight (0: none).
func (l *line) callsCap() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.calls.cap, 0), l.calls.n
}

// awaitCalls waits until the calls in flight are within the bound (after
// a share shrank), at most d.
func (l *line) awaitCalls(d time.Duration) {
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		l.mu.Lock()
		ok := l.calls.cap == 0 || l.calls.n <= max(l.calls.cap, 0)
		l.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publishLocked writes a stop of the line to the control topic (scope
// pipeline), unless it came from there.
func (l *line) publishLocked(kind control.Kind, ln control.Line, now time.Time) {
	sh := l.shared
	if sh == nil || sh.applying {
		return
	}
	sh.publish(control.Record{Kind: kind, Pipeline: l.name, Instance: sh.writer, At: now, Line: &ln})
}

// publishBreakerLocked publishes a transition of this process's breaker;
// it is now the prober.
func (l *line) publishBreakerLocked(tr *transition, now time.Time) {
	sh := l.shared
	if sh == nil || sh.applying || l.br == nil {
		return
	}
	b := l.br
	switch tr.to {
	case breakerOpen:
		l.publishLocked(control.KindBreaker, control.Line{State: control.StateOpen, Until: b.openUntil, Why: b.why}, now)
	case breakerHalfOpen:
		l.publishLocked(control.KindBreaker, control.Line{State: control.StateHalfOpen, Until: now.Add(max(b.cfg.OpenFor, followGrace)), Why: "probing"}, now)
	case breakerClosed:
		l.publishLocked(control.KindBreaker, control.Line{State: control.StateClosed}, now)
	}
}

// applyControl applies a record of the control topic to the line at now.
// self: this process wrote it. live: it was read as it came (not in the
// catch-up at start, where only the state it leaves counts).
func (l *line) applyControl(r control.Record, self bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Kind == control.KindPause {
		// An operator's: obeyed whatever the scope.
		if self || r.Pause == nil {
			return
		}
		if r.Pause.Paused {
			l.manual.pause(pauseDetail(r), r.At)
			l.log.Warn("line paused by an operator (control topic)", "by", r.Instance, "reason", r.Pause.Reason)
		} else if l.manual.on || l.guard.on || l.pauseCode.blocked(now) || (l.br != nil && l.br.state != breakerClosed) {
			l.resumeLocked(now, "resumed by "+r.Instance+" (control topic)")
		}
		l.kickLocked()
		return
	}
	sh := l.shared
	if sh == nil || r.Line == nil {
		return
	}
	sh.applying = true
	defer func() { sh.applying = false }()
	ln := r.Line
	switch r.Kind {
	case control.KindBreaker:
		l.applyBreakerLocked(r, self, now)
	case control.KindPauseCode:
		if self || ln.State != control.StateOn || !ln.Until.After(now) {
			return
		}
		if until, ext := l.pauseCode.extend(Outcome{Kind: Paused, Code: ln.Code, MinDelay: ln.Until.Sub(now)}, now); ext {
			l.log.Warn("pause code of another process: handler calls stopped", "code", ln.Code, "by", r.Instance, "until", until.Format(time.RFC3339Nano))
		}
	case control.KindFailing:
		if self {
			return
		}
		if sh.others == nil {
			sh.others = map[string]failingRun{}
		}
		if ln.State == control.StateOn && ln.Until.After(now) {
			sh.others[r.Instance] = failingRun{run: ln.Run, until: ln.Until}
		} else {
			delete(sh.others, r.Instance)
		}
		l.othersLocked(now)
		return
	case control.KindGuard:
		if self || ln.State != control.StateOn || l.guard.on || (!ln.Until.IsZero() && !ln.Until.After(now)) {
			return
		}
		l.guard.on, l.guard.since = true, now
		l.guard.detail = "another process's guard (" + r.Instance + "): " + ln.Why
		l.log.Error("guard: line stopped by another process's guard; fix the cause, then `redrive resume "+l.name+"`", "why", ln.Why, "by", r.Instance)
	}
	l.kickLocked()
}

func pauseDetail(r control.Record) string {
	d := "paused by " + r.Instance
	if r.Pause.Reason != "" {
		d += ": " + r.Pause.Reason
	}
	return d
}

// applyBreakerLocked follows another process's breaker, or takes the
// prober's part back when this process's own record is the latest.
func (l *line) applyBreakerLocked(r control.Record, self bool, now time.Time) {
	b, ln := l.br, r.Line
	if b == nil {
		return
	}
	if self {
		// The latest breaker record is this process's: it probes.
		if b.state == breakerOpen && ln.State == control.StateOpen {
			b.openUntil = ln.Until
		}
		return
	}
	switch ln.State {
	case control.StateOpen, control.StateHalfOpen:
		if !ln.Until.After(now) {
			return // stale: its time is over, its writer did not say more
		}
		until := ln.Until.Add(followGrace)
		if tr := b.follow(until, ln.Why, now); tr != nil {
			l.log.Warn("breaker open on another process: handler calls stopped, fetching paused, it probes", "by", r.Instance, "why", ln.Why, "until", until.Format(time.RFC3339Nano))
			l.onBreakerLocked(tr)
		}
	case control.StateClosed:
		if b.state != breakerClosed {
			l.log.Info("breaker closed by another process's probes", "by", r.Instance)
			l.onBreakerLocked(b.to(breakerClosed, now))
		}
	}
}
