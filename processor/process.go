package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Codes redrive itself writes to redrive-error-code.
const (
	CodeBadHeader        = "bad_header"
	CodeTTL              = "ttl"
	CodeNotReadyDeadline = "not_ready_deadline"
	CodeStateTooLarge    = "state_too_large"
	CodeBadState         = "bad_state"
	CodeRecordTooLarge   = "record_too_large"
	CodeHandlerPanic     = "handler_panic"
	CodeNoKind           = "no_kind"      // the handler's Outcome had no Kind (and no code)
	CodeCrashed          = "crashed"      // delivered more than max_deliveries times with no outcome (consume: share)
	CodeBreakerOpen      = "breaker_open" // a share group's record sent to a tier uncalled while the breaker was open
)

var errParked = errors.New("not called: the breaker was open; sent to a tier (no attempt spent) so that the share group's next poll is not held")

// Dead-letter reasons (redrive-reason).
const (
	reasonExhausted = "exhausted"
	reasonPermanent = "permanent"
	reasonInvalid   = "invalid"
	reasonExpired   = "expired"
	reasonCrashed   = "crashed"
)

// outKind names where an outcome record goes, for metrics and logs.
type outKind string

const (
	toRetry   outKind = "retry"
	toDLQ     outKind = "dlq"
	toResults outKind = "results"
	// toFailover: forwarded to breaker.failover_to while the line is stopped.
	toFailover outKind = "failover"
)

// process handles w and returns the decision on it; ok is false when the
// work was abandoned (partition revoked, shutdown past the grace): the
// record is then redelivered. The decision itself is made by screen and
// decide (decide.go); process calls the handler through the line
// (callThrough) and counts.
//
// req is the worker's Request, filled in for the handler's call: a
// worker reuses one for every record it handles, so that no work item
// carries one while it waits.
func (p *pipeline) process(w *work, req *Request) (d decision, ok bool) {
	ctx := w.ps.ctx
	if ctx.Err() != nil || w.ps.share != nil && w.ps.leaving.Load() {
		// Revoked, past the shutdown grace, or (a share group's record)
		// not started before the shutdown: redelivered.
		return decision{}, false
	}
	meta, tierLabel, now := p.begin(w)
	if w.crashed {
		d := crashed(meta, w.deliveries, p.cfg.MaxDeliveries, now)
		p.countEarly(d, tierLabel)
		return d, true
	}
	// A callback may have come while the record sat in the run queue
	// (or since it was due): then it is not polled.
	p.takeCallback(w)
	d, call := p.screen(w, &meta, w.decodeErr, now)
	if !call {
		if w.cb != nil {
			w.cbFate = fateUsed // expired or invalid all the same
		}
		p.countEarly(d, tierLabel)
		return d, true
	}
	if w.cb != nil && w.cbFate == fateRelease {
		if d, decided := p.hearCallback(w, &meta, tierLabel, now); decided {
			return d, true
		}
	}
	attempt, _, state := attemptOf(meta)
	*req = Request{Record: userRecord(w.rec, w.user), ID: meta.ID, Attempt: attempt, Polls: meta.Polls, State: state, Meta: meta}
	out, d, end := p.callThrough(ctx, w, req, p.callerFor(w, meta, state), now, tierLabel)
	switch end {
	case abandoned, throttled:
		return decision{}, false
	case decidedEarly:
		return d, true
	}
	d = decide(meta, out, p.pol, w.at)
	if len(state) > 0 {
		if out.Kind == Success {
			w.via, w.since = viaPoll, meta.NotReadySince
		}
		if p.cbs != nil && d.to != toRetry {
			w.polledJob = string(state) // a callback for it from now on is late
		}
	}
	return d, true
}

// begin decodes w and returns what process decides on: its headers with
// an id, the label of its tier, and the clock read for the record.
func (p *pipeline) begin(w *work) (meta retry.Meta, tierLabel string, now time.Time) {
	w.decode()
	if w.ps.tier < 0 && len(w.meta.State) > 0 {
		p.dropForeignState(w)
	}
	now = p.clk.Now()
	w.at = now
	meta = identify(w.meta, w.rec)
	if c := clampFuture(&meta, now); c != 0 && !w.yielded {
		p.hot.countClamped(c)
	}
	tierLabel = "main"
	if w.ps.tier >= 0 {
		tierLabel = p.pol.sched.TierName(w.ps.tier)
		if w.decodeErr == nil && !meta.Due.IsZero() && !now.Before(meta.Due) && !w.yielded {
			p.hot.latenessFor(w.ps.tier, tierLabel).Observe(now.Sub(meta.Due).Seconds())
		}
	}
	return meta, tierLabel, now
}

// screen is screen (decide.go) for w at now, the pipeline's clock: a
// record is called only while that clock says it is due. One whose
// callback came is due: it was not due only because it waited for its
// callback.
func (p *pipeline) screen(w *work, meta *retry.Meta, decodeErr error, now time.Time) (d decision, call bool) {
	d, call = screen(*meta, decodeErr, w.ps.tier, p.pol, now)
	if w.cb != nil && !call && d.hop {
		call = true
	}
	return d, call
}

// hearCallback lets the line hear the callback attached to w: it is the
// service's answer as a call's is (a pause code pauses, the breaker and
// the guard count it). decided: the callback decides w. Else the line
// holds the record: the callback is used up and the record waits for a
// call, no attempt spent; meta is changed for that call.
func (p *pipeline) hearCallback(w *work, meta *retry.Meta, tierLabel string, now time.Time) (d decision, decided bool) {
	out := p.callbackAnswer(w, *meta, tierLabel)
	if !p.line.heard(out, "", now) {
		return p.byCallback(w, *meta, out, now), true
	}
	w.cbFate = fateRetry // the job's next callback is a new one
	if out.Kind == Transient {
		w.held, w.heldCode = true, out.Code
	}
	if out.Kind != Paused {
		// The job itself is over: submitted anew once the line runs.
		resubmit(&w.meta)
		resubmit(meta)
	}
	// A pause keeps the job: it is polled once the pause is over.
	return decision{}, false
}

// callerFor is how w asks the line for a call.
func (p *pipeline) callerFor(w *work, meta retry.Meta, state []byte) caller {
	b := p.cfg.Breaker
	// A record with state (a job submitted to this pipeline's service) is
	// never forwarded: the other service knows nothing of that job.
	c := caller{
		canForward: b.FailoverTo != "" && (w.ps.tier < 0 || b.FailoverRetries) && meta.Failovers < MaxFailovers && len(state) == 0,
		abandoned:  w.ps.leaving.Load,
		canPark:    w.ps.share != nil,
		seq:        w.seq,
		born:       w.rec.Timestamp,
		// The breaker puts a failure with the code the record failed
		// with before on the request (line_breaker.go): its last transient
		// failure, in this process (held by the line) or in its headers.
		prevCode: w.heldCode,
		fresh:    !w.held,
	}
	if !w.held && meta.ErrorClass == retry.ClassTransient {
		c.prevCode, c.fresh = meta.ErrorCode, false
	}
	return c
}

// callEnd is how callThrough ended.
type callEnd int

const (
	answered     callEnd = iota // the handler's outcome is to be decided
	decidedEarly                // decided without an outcome: forwarded, or expired while waiting
	abandoned                   // revoked, shutdown, or yielded: not decided
	throttled                   // a 429 to wait out in the throttled room (w.paceFor): not decided
)

// callThrough calls the handler for w once the line lets it through, and
// again while the line holds the record (the outage's failures, pause
// codes). A 429 to wait out ends it (throttled): the record waits in the
// throttled room, not in the worker (throttle.go). w.at is the time of
// the outcome. Every call but the first that process screened at now is
// screened again when it comes.
func (p *pipeline) callThrough(ctx context.Context, w *work, req *Request, c caller, now time.Time, tierLabel string) (Outcome, decision, callEnd) {
	meta := req.Meta
	for again := false; ; again = true {
		t, e := p.line.enter(ctx, now, c)
		switch e {
		case enterAbandon:
			return Outcome{}, decision{}, abandoned // revoked, shutdown: redelivered as it was
		case enterYield:
			w.yielded, w.yieldNow = true, true // back to the run queue (work)
			return Outcome{}, decision{}, abandoned
		case enterForward:
			fm := meta
			fm.Failovers++
			return Outcome{}, decision{to: toFailover, meta: fm}, decidedEarly
		case enterPark:
			return Outcome{}, p.park(meta, Outcome{Kind: Paused, Code: CodeBreakerOpen, Err: errParked}, now), decidedEarly
		}
		if t.waited || again {
			// Waiting for the line or a 429 took time: the record may have
			// expired, or a step back of the wall clock made it not due.
			now = p.clk.Now()
			w.at = now
			if d, call := p.screen(w, &meta, nil, now); !call {
				t.abandon(p.line)
				p.countEarly(d, tierLabel)
				return Outcome{}, d, decidedEarly
			}
		}
		out, ok := p.callOnce(ctx, w, req, t, now, tierLabel)
		if !ok {
			return Outcome{}, decision{}, abandoned // revoked or past the grace: the next owner redoes it
		}
		now = w.at
		if p.line.leave(t, out, c.prevCode, now) {
			if c.canPark && out.Kind == Transient {
				// The outage's failure of a share group's record: held,
				// it would stop the group's next poll (caller.canPark).
				return Outcome{}, p.park(meta, out, now), decidedEarly
			}
			// The line stopped because of this outage: call again once it
			// runs, no attempt spent. The record has failed now.
			if out.Kind == Transient {
				w.held, w.heldCode = true, out.Code
				c.fresh, c.prevCode = false, out.Code
			}
			continue
		}
		if d := p.throttleWait(w, out); d > 0 {
			w.paceFor = d
			return Outcome{}, decision{}, throttled
		}
		return out, decision{}, answered
	}
}

// park is the decision on a share group's record while the breaker is
// open (caller.canPark): to the tier covering the rest of open_for, no
// attempt spent, as a pause's (out: its last answer, or the breaker's
// code when it was not called); its State (a job id) is kept.
func (p *pipeline) park(meta retry.Meta, out Outcome, now time.Time) decision {
	p.m.parked.WithLabelValues(p.cfg.Name).Inc()
	return decidePaused(meta, Outcome{Kind: Paused, Code: out.Code, Err: out.Err, State: out.State, MinDelay: p.line.parkFor(now)}, p.pol, now)
}

// callOnce calls the handler with the ticket t and counts the outcome;
// false when ctx ended meanwhile. w.at becomes the time of the outcome.
func (p *pipeline) callOnce(ctx context.Context, w *work, req *Request, t ticket, now time.Time, tierLabel string) (Outcome, bool) {
	start := now // no wait for the line: the clock read at the start
	if t.waited {
		start = p.clk.Now()
	}
	if len(req.State) > 0 {
		p.polls.Add(1)
		p.hot.polls.Inc()
	}
	out := p.call(ctx, req)
	if ctx.Err() != nil {
		t.abandon(p.line)
		return out, false
	}
	now = p.clk.Now()
	w.at = now
	out, mistake := checked(out)
	if mistake {
		p.noKind.Do(func() {
			p.log.Warn("handler returned an Outcome without a valid Kind: retrying it as transient; build outcomes with processor.Succeed, Retry, Poll, Fail or Reject (logged once)",
				"id", req.ID, "code", out.Code, "err", out.Err)
		})
	}
	p.hot.handlerFor(out.Kind).Observe(now.Sub(start).Seconds())
	p.hot.outcomeFor(out.Kind, w.ps.tier, tierLabel, out.Code).Inc()
	return out, true
}

// dropForeignState ignores the redrive-state of a main-topic record.
// redrive writes a job id there only on its tier records (a dead letter,
// a replay and a republish carry none): on the main topic it came from a
// producer, and polling it would fetch someone else's job with this
// pipeline's API key.
func (p *pipeline) dropForeignState(w *work) {
	p.foreignState.Do(func() {
		p.log.Warn("redrive-state on a main-topic record ignored (only redrive writes it, on tier records): the request is submitted as new; logged once",
			"topic", w.rec.Topic, "partition", w.rec.Partition, "offset", w.rec.Offset)
	})
	w.meta.State = nil
}

// callbackAnswer is what the callback attached to w says: the handler's
// CallbackOutcome (DefaultCallbackOutcome for a Handler without one),
// counted as an outcome.
func (p *pipeline) callbackAnswer(w *work, meta retry.Meta, tierLabel string) Outcome {
	out, mistake := checked(p.callbackOutcome(meta.ID, *w.cb))
	if mistake {
		p.noKind.Do(func() {
			p.log.Warn("CallbackOutcome returned an Outcome without a valid Kind: retrying it as transient (logged once)",
				"id", meta.ID, "code", out.Code, "err", out.Err)
		})
	}
	if (out.Kind == NotReady || out.Kind == Paused) && len(out.State) == 0 {
		out.State = meta.State // still the same job: poll it, never submit again
	}
	p.hot.outcomeFor(out.Kind, w.ps.tier, tierLabel, out.Code).Inc()
	return out
}

// resubmit makes meta, of a record whose job is over (its callback said
// it failed), one whose next call submits anew with the same attempt
// number: no job id, and a transient failure of the attempt before.
func resubmit(meta *retry.Meta) {
	if meta.ErrorClass == retry.ClassNotReady && meta.Attempt > 0 {
		meta.Attempt-- // a job's attempt counts from its submit
	}
	meta.State, meta.NotReadySince, meta.ErrorClass = nil, time.Time{}, retry.ClassTransient
}

// byCallback decides w, a record with its callback attached, from the
// callback's outcome out (callbackAnswer), which the line let pass: no
// handler call, decided by the usual rules except that it is not a poll.
func (p *pipeline) byCallback(w *work, meta retry.Meta, out Outcome, now time.Time) decision {
	d := decideCallback(meta, out, p.pol, now)
	w.cbFate = fateMatched
	if d.to == toRetry {
		w.cbFate = fateRetry
	}
	if out.Kind == Success {
		w.via, w.since = viaCallback, meta.NotReadySince
	}
	return d
}

// countEarly counts a decision screen made without the handler.
func (p *pipeline) countEarly(d decision, tierLabel string) {
	if d.hop {
		p.m.hops.WithLabelValues(p.cfg.Name, d.meta.Tier).Inc()
	} else {
		p.m.outcomes.WithLabelValues(p.cfg.Name, d.early, tierLabel, d.meta.ErrorCode).Inc()
	}
}

// call runs the handler, turning a panic into a permanent outcome.
func (p *pipeline) call(ctx context.Context, req *Request) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("handler panicked", "id", req.ID, "panic", v)
			out = Fail(CodeHandlerPanic, fmt.Errorf("handler panicked: %v", v))
		}
	}()
	return p.h.Handle(ctx, req)
}

// userRecord is r as handlers see it: the user's headers only. A record
// without redrive-* headers is passed as it is (handlers must not modify
// it), saving a copy per main-topic record.
func userRecord(r *kgo.Record, user []kgo.RecordHeader) *kgo.Record {
	if len(user) == len(r.Headers) {
		return r
	}
	c := *r
	c.Headers = user
	return &c
}
