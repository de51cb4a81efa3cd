package processor

import (
	"time"

	"github.com/redrive/redrive/processor/control"
)

// pauseCode is the stop a handler's pause code (Outcome Paused: the
// account has no money, a quota is used up) puts on the line: no call
// starts until the pause is over, for any record, since every call would
// get the same answer.
type pauseCode struct {
	since, until time.Time
	// code is the last pause code; kept after the pause is over for the
	// log line that says so.
	code string
}

func (p *pauseCode) blocked(now time.Time) bool { return now.Before(p.until) }

// extend stops the line for out's pause from now: its MinDelay, at least a
// second. A running pause is extended, never shortened: a shorter pause
// code during a longer pause changes nothing (extended false).
func (p *pauseCode) extend(out Outcome, now time.Time) (until time.Time, extended bool) {
	until = now.Add(max(out.MinDelay, time.Second))
	if !until.After(p.until) {
		return p.until, false
	}
	if !p.blocked(now) {
		p.since = now
	}
	p.until, p.code = until, out.Code
	return until, true
}

// clear ends the pause (an operator's resume).
func (p *pauseCode) clear() { p.until = time.Time{} }

func (p *pauseCode) stopReason() StopReason {
	return StopReason{Reason: stopPauseCode, Since: p.since, Until: p.until, Detail: "pause code " + p.code}
}

// pauseLocked stops the line when out is a pause code; leave calls it for
// every outcome, a callback's too (heard). l.mu held.
func (l *line) pauseLocked(out Outcome, now time.Time) {
	if out.Kind != Paused {
		return
	}
	until, extended := l.pauseCode.extend(out, now)
	if !extended {
		return
	}
	l.log.Warn("pause code: handler calls stopped, the record is retried after the pause without spending an attempt",
		"code", out.Code, "for", until.Sub(now), "until", until.Format(time.RFC3339Nano))
	l.publishLocked(control.KindPauseCode, control.Line{State: control.StateOn, Until: until, Code: out.Code}, now)
	l.kickLocked()
}
