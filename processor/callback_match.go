package processor

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// How a callback is matched: a tier record whose state (its job id) has a
// callback is finished with the callback's outcome instead of a handler
// call: at admit (takeCallback), when the callback comes while the record
// waits in the waiting room (matchWaiting: whoever takes the record out of
// the heap dispatches it, once), or just before its handler call
// (process). finishJob settles the callback with the record.

// callbacks is a pipeline's callbacks reader and store.
type callbacks struct {
	cfg   Callbacks
	store *cbStore
	// caughtUp is closed once the reader has read the callbacks topic up
	// to the end offsets it saw at start (or gave up finding them).
	caughtUp  chan struct{}
	caughtOne sync.Once
	badOnce   sync.Once
}

func newCallbacks(cfg Callbacks, m *metrics, pipeline string) *callbacks {
	s := newCBStore(cfg.MaxEntries, cfg.MaxBytes, cfg.Wait+CallbackMargin)
	s.prom, s.held, s.heldB = m.callbackCounters(pipeline)
	return &callbacks{cfg: cfg, store: s, caughtUp: make(chan struct{})}
}

func (c *callbacks) caught() { c.caughtOne.Do(func() { close(c.caughtUp) }) }

// onCallbackRecord takes one callback record in.
func (p *pipeline) onCallbackRecord(r *kgo.Record, now time.Time) {
	c := p.cbs
	cb, err := DecodeCallback(r)
	if err != nil {
		c.store.count(cbBad)
		c.badOnce.Do(func() {
			p.log.Warn("callback record without a valid job id skipped (counted in redrive_callbacks_total{event=\"bad\"}, logged once)",
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		})
		return
	}
	c.store.count(cbReceived)
	// A copy: the value is a slice of the fetched batch, which a held
	// callback would otherwise keep alive for minutes.
	cb.Result = bytes.Clone(cb.Result)
	if c.store.add(cb, now) {
		p.matchWaiting(cb.JobID)
	}
}

// matchWaiting dispatches the record waiting in the waiting room for job,
// with its callback, if there is one. A record the waiting room already
// popped is left to onDue: process takes the callback then.
func (p *pipeline) matchWaiting(job string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.jobs[job]
	if w == nil {
		return
	}
	if w.ps.gone || w.ps.revoking {
		p.unindexLocked(w)
		return
	}
	cb, ok := p.cbs.store.take(job)
	if !ok {
		return
	}
	if !p.room.remove(w) {
		p.cbs.store.release(job) // popped: onDue dispatches it, process takes the callback
		return
	}
	p.unindexLocked(w)
	w.cb = &cb
	p.dueLocked(w)
}

// waitsForCallback: w is a tier record with a job id (its state) in a
// pipeline with callbacks, decoded.
func (p *pipeline) waitsForCallback(w *work) bool {
	return p.cbs != nil && w.ps.tier >= 0 && w.decodeErr == nil && len(w.meta.State) > 0
}

// indexLocked lets matchWaiting find w, waiting in the waiting room, by its
// job id. A second waiting record of the same job (a redelivered copy) is
// not indexed while the first is: process finds the callback for it. p.mu
// held.
func (p *pipeline) indexLocked(w *work) {
	job := string(w.meta.State)
	if old := p.jobs[job]; old != nil && !old.ps.gone && !old.ps.revoking {
		return
	}
	p.jobs[job] = w
	w.indexed = job
}

// unindexLocked removes w from the index. p.mu held.
func (p *pipeline) unindexLocked(w *work) {
	if w.indexed == "" {
		return
	}
	if p.jobs[w.indexed] == w {
		delete(p.jobs, w.indexed)
	}
	w.indexed = ""
}

// takeCallback attaches the pending callback of w's job, if any, to w.
func (p *pipeline) takeCallback(w *work) {
	if w.cb != nil || !p.waitsForCallback(w) {
		return
	}
	if cb, ok := p.cbs.store.take(string(w.meta.State)); ok {
		w.cb = &cb
	}
}

// callbackOutcome is what the handler makes of cb (CallbackHandler), or
// DefaultCallbackOutcome; a panic is a permanent outcome, as in call.
func (p *pipeline) callbackOutcome(id string, cb Callback) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("handler panicked in CallbackOutcome", "id", id, "job", cb.JobID, "panic", v)
			out = Fail(CodeHandlerPanic, fmt.Errorf("handler panicked in CallbackOutcome: %v", v))
		}
	}()
	if ch, ok := p.h.(CallbackHandler); ok {
		return ch.CallbackOutcome(cb)
	}
	return DefaultCallbackOutcome(cb)
}

// cbFate is what becomes of a record's callback once the record finished.
type cbFate uint8

const (
	// fateRelease (not decided yet): if the record is abandoned its
	// callback is given back for the redelivered record.
	fateRelease cbFate = iota
	// fateUsed: decided before the callback counted (expired): done.
	fateUsed
	// fateMatched: the callback's outcome finished the job: done, matched.
	fateMatched
	// fateRetry: the callback's outcome was a retry (not ready, a failure
	// to try again): matched, and forgotten so that the job's next
	// callback is a new one.
	fateRetry
)

// jobVia is what finished a job with success (redrive_job_seconds{via}).
type jobVia uint8

const (
	viaNone jobVia = iota
	viaCallback
	viaPoll
)

// finishJob does the callback bookkeeping of w once it completed:
// finished (its outcome acknowledged) or abandoned.
func (p *pipeline) finishJob(w *work, finished bool) {
	if finished && w.via != viaNone {
		if !w.since.IsZero() {
			p.hot.observeJob(w.via, time.Since(w.since))
		}
		if w.via == viaCallback {
			p.viaCallback.Add(1)
		} else {
			p.viaPoll.Add(1)
		}
	}
	if p.cbs == nil {
		return
	}
	s := p.cbs.store
	switch {
	case w.cb != nil && !finished:
		s.release(w.cb.JobID)
	case w.cb != nil:
		switch w.cbFate {
		case fateRetry:
			s.count(cbMatched)
			s.forget(w.cb.JobID)
		case fateMatched:
			s.count(cbMatched)
			s.done(w.cb.JobID)
		default:
			s.done(w.cb.JobID)
		}
	case finished && w.polledJob != "":
		s.finishedByPoll(w.polledJob, time.Now())
	}
}

// callbackStatus is the pipeline's CallbackStatus.
func (p *pipeline) callbackStatus() *CallbackStatus {
	c := p.cbs
	if c == nil {
		return nil
	}
	s := c.store
	wait := c.cfg.Wait.String()
	if c.cfg.Wait%time.Second == 0 {
		wait = retry.FormatDelay(c.cfg.Wait)
	}
	return &CallbackStatus{Topic: c.cfg.Topic, Wait: wait, Held: s.len(),
		Received: s.stat(cbReceived), Matched: s.stat(cbMatched), Duplicate: s.stat(cbDuplicate), Late: s.stat(cbLate),
		Polls: p.polls.Load(), ViaCallback: p.viaCallback.Load(), ViaPoll: p.viaPoll.Load()}
}
