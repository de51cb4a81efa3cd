package processor

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// rateLimit is the line's last stage: a call the other stages let through
// waits for a token, at the smaller of this process's share of RateLimit
// (in bursts of its share of RateBurst) and the rate learned from the
// service's 429s (line_learn.go). The limiter has a lock of its own, so
// that a wait for a token never holds line.mu.
type rateLimit struct {
	// lim is replaced, not changed, when the share changes: waiters give
	// their reservations back to the old one in any order, which would
	// leave a changed limiter in debt. A learned limit changes it in
	// place (SetLimitAt): the reservations made stand.
	lim     atomic.Pointer[rate.Limiter] // nil: no rate limit
	waited  prometheus.Counter           // redrive_rate_limited_seconds_total
	learned prometheus.Gauge             // redrive_learned_rate
	// kick wakes the callers waiting for a token (line.kick): a limiter
	// replaced is given up for the new one. Never called under mu.
	kick func()

	// The epoch of calls the learner looks at next: answered calls, 429s
	// among them, when its first call was answered (unix ns; 0: none
	// yet), whether a caller waited for a token. Counted without mu.
	calls, throttled atomic.Int64
	first            atomic.Int64
	// last is when the last call was answered (unix ns); busy sums the
	// gaps between calls, each up to learnGap (epochCalls.busy).
	last, busy atomic.Int64
	bound      atomic.Bool
	// checking is learn.checking, read without mu: a 429 then may undo
	// the decrease before the epoch is over.
	checking atomic.Bool
	// armed: the epochs are counted, from a 429 on while no limit is
	// learned (the calls of a service that never answers 429 cost one
	// load each).
	armed atomic.Bool
	// settle is learn.settleUntil (unix ns), read without mu.
	settle atomic.Int64

	mu sync.Mutex
	// configured: RateLimit is set; perSecond and burst are this
	// process's share of it and of RateBurst.
	configured bool
	perSecond  float64
	burst      int
	learn      learner
}

func newRateLimit(perSecond float64, burst int, waited prometheus.Counter, learned prometheus.Gauge, kick func()) *rateLimit {
	r := &rateLimit{waited: waited, learned: learned, kick: kick, configured: perSecond > 0, perSecond: perSecond, burst: max(1, burst)}
	if perSecond > 0 {
		r.lim.Store(rate.NewLimiter(rate.Limit(perSecond), max(1, burst)))
	}
	return r
}

// set replaces the limiter with one of perSecond in bursts of burst (a
// limit set: this process's share of it changed), or of the learned
// limit if that is lower.
func (r *rateLimit) set(perSecond float64, burst int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.configured {
		return
	}
	r.perSecond, r.burst = perSecond, max(1, burst)
	r.lim.Store(rate.NewLimiter(rate.Limit(r.limitLocked()), r.burstLocked()))
}

// limitLocked is the limit in force (meaningless when neither is set).
func (r *rateLimit) limitLocked() float64 {
	if r.learn.limit > 0 && (!r.configured || r.learn.limit < r.perSecond) {
		return r.learn.limit
	}
	return r.perSecond
}

// burstLocked is the burst in force: a learned limit in force lets a
// tenth of a second's worth of calls start at once (requests come in
// batches; the service's own bucket holds some), else this process's
// share of RateBurst.
func (r *rateLimit) burstLocked() int {
	if l := r.limitLocked(); l == r.learn.limit && l > 0 {
		return max(r.burst, int(math.Ceil(l/10)))
	}
	return r.burst
}

// heard counts an answered call for the learner (throttled: a 429), and
// ends its epoch when it is over.
func (r *rateLimit) heard(throttled bool, now time.Time) {
	if !r.armed.Load() {
		if !throttled {
			return // no 429 lately, no limit learned: nothing to count
		}
		r.armed.Store(true)
	}
	ns := now.UnixNano()
	if ns < r.settle.Load() {
		return // a decrease just made: these calls started before it
	}
	last := r.last.Swap(ns)
	if r.calls.Add(1) == 1 {
		r.first.Store(ns)
	} else if last != 0 && ns > last {
		// Within the epoch only: the gap before its first call (a pause,
		// the settle after a decrease) is not its.
		r.busy.Add(min(ns-last, int64(learnGap)))
	}
	if throttled {
		r.throttled.Add(1)
	}
	first := r.first.Load()
	if first == 0 {
		return
	}
	done := epochDone(r.calls.Load(), r.throttled.Load(), time.Duration(ns-first), r.checking.Load())
	if !done && !(throttled && r.checking.Load()) {
		return
	}
	if r.end(first, ns, now, done) && r.kick != nil {
		r.kick()
	}
}

// end ends the epoch whose first call was answered at first (unix ns),
// unless another call ended it already, and applies the limit learned;
// before the epoch is over (done false) only to undo a decrease early.
// replaced: the limiter was replaced (a decrease, or one undone), and its
// waiters are to give it up.
func (r *rateLimit) end(first, ns int64, now time.Time, done bool) (replaced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.Load() != first {
		return false // ended meanwhile
	}
	dur := time.Duration(ns - first)
	old := r.learn.limit
	var learned float64
	var undone bool
	if !done {
		e := epochCalls{calls: r.calls.Load(), throttled: r.throttled.Load(), dur: dur, busy: time.Duration(r.busy.Load())}
		if !r.learn.undoEarly(e, now) {
			return false
		}
		learned, undone = r.learn.limit, true
	}
	// first before calls: the first call of the next epoch, counted after
	// the swap, sets it again.
	r.first.Store(0)
	e := epochCalls{calls: r.calls.Swap(0), throttled: r.throttled.Swap(0), dur: dur, busy: time.Duration(r.busy.Swap(0)), bound: r.bound.Swap(false)}
	if done {
		ceiling := 0.0
		if r.configured {
			ceiling = r.perSecond
		}
		learned, undone = r.learn.end(e, now, ceiling)
	}
	r.checking.Store(r.learn.checking)
	if learned == 0 && e.throttled == 0 && !r.learn.checking {
		r.armed.Store(false) // until the next 429
	}
	r.settle.Store(r.learn.settleUntil.UnixNano())
	if learned == old {
		return false
	}
	r.learned.Set(learned)
	lim := r.lim.Load()
	switch {
	case learned == 0 && !r.configured:
		r.lim.Store(nil) // a learned limit undone: no limit
		return true
	case lim == nil || learned < old || undone:
		// A first limit, a decrease, or a decrease undone: the waiters'
		// reservations, made at the rate before, are given up for the
		// new limiter. It starts empty: after 429s the service's own
		// bucket is.
		n := rate.NewLimiter(rate.Limit(r.limitLocked()), r.burstLocked())
		n.AllowN(now, n.Burst())
		r.lim.Store(n)
		return lim != nil
	}
	lim.SetLimitAt(now, rate.Limit(r.limitLocked()))
	lim.SetBurstAt(now, r.burstLocked())
	return false
}

// learnedRate is the rate learned from 429s, calls/s (0: none).
func (r *rateLimit) learnedRate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.learn.limit
}

// reserve takes a token at now and says how long its call waits for it.
func (r *rateLimit) reserve(now time.Time) (*rate.Reservation, time.Duration) {
	res := r.lim.Load().ReserveN(now, 1)
	return res, res.DelayFrom(now)
}

// wait takes a token and waits for it. ok is false when ctx ended the
// wait, or ch (the line changed) fired and still (the line looked at
// again) says the call may not go on as it was: the token is given back,
// and the caller looks at the line again, so that a token is never waited
// for through a stop that came meanwhile. A change that leaves the call
// clear (another partition revoked, a breaker verdict) keeps the token:
// waiters giving theirs back in any order would leave the limiter in
// debt, and every caller behind them waiting for tokens no one took. A
// limiter replaced (the share changed) is always given up, for the new
// one.
func (r *rateLimit) wait(ctx context.Context, ch <-chan struct{}, still func() (<-chan struct{}, bool)) (waited, ok bool) {
	lim := r.lim.Load()
	if lim == nil {
		return false, true
	}
	start := time.Now()
	res := lim.ReserveN(start, 1)
	d := res.DelayFrom(start)
	if d <= 0 {
		return false, true
	}
	r.bound.Store(true)
	timer := time.NewTimer(d)
	defer timer.Stop()
	defer func() { r.waited.Add(time.Since(start).Seconds()) }()
	for {
		select {
		case <-timer.C:
			return true, true
		case <-ch:
			var clear bool
			if ch, clear = still(); clear && r.lim.Load() == lim {
				continue
			}
		case <-ctx.Done():
		}
		res.Cancel()
		return true, false
	}
}
