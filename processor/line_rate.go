package processor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// rateLimit is the line's last stage: a call the other stages let through
// waits for a token, RateLimit a second in bursts of RateBurst (this
// process's share of them, set). The limiter has a lock of its own, so
// that a wait for a token never holds line.mu.
type rateLimit struct {
	// lim is replaced, not changed, when the share changes: waiters give
	// their reservations back to the old one in any order, which would
	// leave a changed limiter in debt.
	lim    atomic.Pointer[rate.Limiter] // nil: no rate limit
	waited prometheus.Counter           // redrive_rate_limited_seconds_total
}

func newRateLimit(perSecond float64, burst int, waited prometheus.Counter) *rateLimit {
	r := &rateLimit{waited: waited}
	if perSecond > 0 {
		r.lim.Store(rate.NewLimiter(rate.Limit(perSecond), max(1, burst)))
	}
	return r
}

// set replaces the limiter (a limit set) with one of perSecond in bursts
// of burst.
func (r *rateLimit) set(perSecond float64, burst int) {
	if r.lim.Load() != nil {
		r.lim.Store(rate.NewLimiter(rate.Limit(perSecond), max(1, burst)))
	}
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
