package processor

import (
	"math/rand/v2"
	"time"
)

// A 429 (Outcome.Throttled) with a Retry-After of at most MaxThrottleWait
// is waited out like a tier record's due time, not in a worker: the
// record leaves its worker for the throttled room (a waiting room of its
// own, by the time it may be called again) and is then queued as due work
// and processed again from the start, with the same attempt. It stays in
// flight meanwhile (its offset uncommitted, its key's lane held, counted
// in max_inflight), so nothing is written for it and no attempt is spent.
// A worker never sleeps for a 429: due retries keep the workers.
//
// Records of a partition being revoked (or reset, or at shutdown) are
// taken out of the room at once and queued: process abandons them as it
// abandons any record of a partition leaving (line.enter, the partition's
// context), so they are redelivered and a revoke never waits for their
// Retry-After.
type throttledRoom struct {
	room *waitRoom
	// closed: shutdown took the records out; pace queues no more. Under
	// pipeline.mu.
	closed bool
}

// throttleWait is how long w waits before it is called again, when out
// asks for a wait it takes in memory: a throttled transient outcome with
// a MinDelay of at most MaxThrottleWait, fewer than MaxThrottleWaits
// times for w. Otherwise 0: out is decided (a longer or further wait goes
// through the tiers, an attempt spent).
func (p *pipeline) throttleWait(w *work, out Outcome) time.Duration {
	if out.Kind != Transient || !out.Throttled || out.MinDelay > MaxThrottleWait || w.throttles >= MaxThrottleWaits {
		return 0
	}
	w.throttles++
	p.hot.throttled.Inc()
	// Up to half again, at random: records refused together must not come
	// back together, or only the service's burst gets through each time.
	d := max(out.MinDelay, time.Second)
	return d + time.Duration(rand.Int64N(int64(d/2)+1))
}

// pace puts w, throttled (process set w.paceFor), in the throttled room
// until its wait is over. A record whose partition is leaving, or one
// throttled during shutdown, is abandoned instead (redelivered).
func (p *pipeline) pace(w *work) {
	d := w.paceFor
	w.paceFor = 0
	p.mu.Lock()
	if w.ps.revoking || w.ps.gone || w.ps.leaving.Load() || p.throttled.closed {
		p.mu.Unlock()
		p.complete(w, false)
		return
	}
	w.waitUntil = p.clk.Now().Add(d)
	p.throttled.room.push(w)
	p.mu.Unlock()
}

// onPaced is the throttled room's: w's wait is over.
func (p *pipeline) onPaced(w *work) {
	p.mu.Lock()
	p.againLocked(w)
	p.mu.Unlock()
}

// againLocked queues w, in flight already, as due work to be processed
// again from the start (its wait counted once), starting a worker if
// fewer than Concurrency run. p.mu held.
func (p *pipeline) againLocked(w *work) {
	w.yielded = true
	p.disp.runq.pushDue(w)
	if p.disp.workers < p.cfg.Concurrency {
		p.disp.workers++
		go p.worker()
	}
}

// releaseThrottledLocked queues at once the throttled records for which
// leaving is true (their partition is revoked or reset), so that they are
// abandoned now rather than when their wait is over. p.mu held.
func (p *pipeline) releaseThrottledLocked(leaving func(*work) bool) {
	var out []*work
	p.throttled.room.purge(func(w *work) bool {
		if leaving(w) {
			out = append(out, w)
			return true
		}
		return false
	})
	for _, w := range out {
		p.againLocked(w)
	}
}

// closeThrottled ends the throttled room at shutdown, after its loop
// ended: the records in it are queued and abandoned (the line is
// stopped), and no more come in.
func (p *pipeline) closeThrottled() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.throttled.closed = true
	p.releaseThrottledLocked(func(*work) bool { return true })
}
