package processor

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// dispatcher is how admitted work reaches a handler: the run queue (due
// work ahead of fresh, runqueue.go), the lanes that keep one record of a
// key in flight at a time (ordering: key), and the worker goroutines.
// Guarded by pipeline.mu, as the in-flight counts it changes with.
type dispatcher struct {
	// runq holds dispatched work no worker has taken yet; workers counts
	// the worker goroutines (at most Concurrency), each of which takes
	// work from runq until it is empty.
	runq    runQueue
	workers int
	// lanes holds, per key in flight, the records of that key waiting
	// behind it.
	lanes map[string]*lane
	// dispatched counts the work dispatched: each work's seq is its
	// number in that order. The line reads it (without pipeline.mu) when
	// its breaker opens: work dispatched until then was in the pipeline
	// when it opened.
	dispatched atomic.Uint64
}

type lane struct{ queue []*work }

// dispatchLocked starts w, or queues it behind its key's lane. p.mu held.
func (p *pipeline) dispatchLocked(w *work) {
	w.seq = p.disp.dispatched.Add(1)
	p.inflight++
	p.bytes += w.size
	w.ps.inflight++
	p.hot.inflight.Set(float64(p.inflight))
	if p.cfg.OrderByKey && w.rec.Key != nil {
		k := string(w.rec.Key)
		if l := p.disp.lanes[k]; l != nil {
			l.queue = append(l.queue, w)
			return
		}
		p.disp.lanes[k] = &lane{}
	}
	p.startLocked(w)
}

// startLocked queues w for a worker, starting one if fewer than
// Concurrency run; due work goes ahead of the main topic's (runQueue).
// p.mu held.
func (p *pipeline) startLocked(w *work) {
	p.wg.Add(1)
	p.disp.runq.push(w)
	if p.disp.workers < p.cfg.Concurrency {
		p.disp.workers++
		go p.worker()
	}
}

// worker handles queued work until the queue is empty, then exits. At most
// Concurrency workers run, so at most Concurrency handler calls are in
// flight; a worker lives across records, so its stack is grown once rather
// than once per record.
func (p *pipeline) worker() {
	req := new(Request) // the handler's, for each record in turn (process)
	for {
		p.mu.Lock()
		w := p.disp.runq.pop()
		if w == nil {
			p.disp.workers--
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.work(w, req)
	}
}

// work handles w on a worker. The worker moves on to the next record as
// soon as the outcome record is handed to the producer; w stays in flight
// until the broker acknowledges it. Work of a revoked partition (or past
// the shutdown grace) is abandoned: process sees its cancelled context.
func (p *pipeline) work(w *work, req *Request) {
	d, ok := p.process(w, req)
	switch {
	case !ok && w.paceFor > 0:
		p.pace(w) // a 429 to wait out: the worker goes on
	case !ok && w.yieldNow:
		w.yieldNow = false
		p.mu.Lock()
		p.disp.runq.pushDue(w) // not probe material: it failed before, or came before the breaker opened
		p.mu.Unlock()
	case !ok:
		p.complete(w, false)
	default:
		p.commits.finish(w, d)
	}
}

// complete records the end of w: finished means its outcome is acknowledged
// and its offset may be committed.
func (p *pipeline) complete(w *work, finished bool) { p.completeWith(w, finished, nil) }

// completeWith is complete for w whose retry record (its outcome) was
// acknowledged, when retry is not nil: the tier partition it went to
// notes it (noteTierWriteLocked).
func (p *pipeline) completeWith(w *work, finished bool, retry *kgo.Record) {
	if w.cb != nil || w.via != viaNone || w.polledJob != "" {
		p.finishJob(w, finished)
	}
	p.mu.Lock()
	if retry != nil {
		p.noteTierWriteLocked(retry, w.meta.Due) // w.meta: the outcome record's (outcomeRecord)
	}
	p.releaseLocked(w, finished)
	p.nextInLaneLocked(w)
	p.mu.Unlock()
	p.signalCap()
	p.wg.Done()
}

// releaseLocked takes w out of flight; finished marks its tracker entry
// (its outcome is written, its offset may be committed). p.mu held.
func (p *pipeline) releaseLocked(w *work, finished bool) {
	ps := w.ps
	switch {
	case ps.share != nil:
		ps.share.done(w, finished)
	case finished && !ps.gone:
		ps.offsets.finish(w.e)
	}
	ps.inflight--
	if ps.inflight == 0 && ps.idle != nil {
		close(ps.idle) // a revoke waits for it (awaitIdle)
		ps.idle = nil
	}
	p.inflight--
	p.bytes -= w.size
	p.hot.inflight.Set(float64(p.inflight))
}

// nextInLaneLocked starts the next record of w's key (ordering: key), if
// one waits. p.mu held.
func (p *pipeline) nextInLaneLocked(w *work) {
	if !p.cfg.OrderByKey || w.rec.Key == nil {
		return
	}
	k := string(w.rec.Key)
	l := p.disp.lanes[k]
	if l == nil {
		return
	}
	if len(l.queue) == 0 {
		delete(p.disp.lanes, k)
		return
	}
	var next *work
	next, l.queue = l.queue[0], l.queue[1:]
	p.startLocked(next)
}

// signalCap wakes a poll loop waiting at the in-flight bound.
func (p *pipeline) signalCap() {
	select {
	case p.capCh <- struct{}{}:
	default:
	}
	if p.share != nil {
		p.share.signal()
	}
}
