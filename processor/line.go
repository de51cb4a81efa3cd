package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"
)

// Why a pipeline's line is stopped (redrive_paused{reason}, StopReason).
const (
	stopBreaker   = "breaker"    // the circuit breaker is open
	stopPauseCode = "pause_code" // a handler answered a pause code (Outcome Paused)
	stopGuard     = "guard"      // permanent failures reached the guard's ratio
	stopManual    = "manual"     // an operator paused it
)

var stopReasons = []string{stopBreaker, stopPauseCode, stopGuard, stopManual}

// Sentinels told to the breaker for an outcome: a failure (the service's
// fault) or one not counted at all (a pause code, an abandoned call).
var (
	errServiceFailure = errors.New("service failure")
	errNotCounted     = errors.New("not counted")
)

// line is a pipeline's flow control: whether a handler call may start. It
// is stopped while the circuit breaker is open, a pause code's pause runs,
// the guard has tripped or an operator paused it; while stopped no call
// starts, the records already polled wait in their workers (no attempt
// spent), and fetching of the main topic and the tiers is paused (run).
// Calls also wait for the rate limiter's token.
//
// Lock order: the breaker's own lock, then line.mu (the breaker calls
// onBreaker and tripped under its lock). So no breaker method is called
// while line.mu is held.
type line struct {
	name string
	cfg  Pipeline
	log  *slog.Logger
	m    *metrics
	// pauseFetch applies which of the main topic and the tiers are not
	// fetched; called from run only.
	pauseFetch func(main, tiers bool)

	lim *rate.Limiter // nil: no rate limit

	mu sync.Mutex
	cb *gobreaker.TwoStepCircuitBreaker[struct{}] // nil: disabled; a new one on Resume
	// gen numbers the breakers: callbacks of one replaced by resume (a
	// call still in flight reports to it) are ignored.
	gen int
	// The breaker's state as its callback told it; openUntil is when an
	// open breaker lets probes through (OpenFor doubled per reopening, up
	// to MaxOpen), kept here because gobreaker's own open time is fixed.
	bstate    gobreaker.State
	bsince    time.Time
	openUntil time.Time
	openFor   time.Duration
	reopens   int
	trip      string // why it opened, for the log and the status

	pauseSince, pauseUntil time.Time
	pauseCode              string

	guardOn      bool
	guardSince   time.Time
	guardDetail  string
	guardCalls   ratioWindow
	manualOn     bool
	manualSince  time.Time
	manualDetail string
	stopped      bool          // shutdown: waiters leave, run ends
	changed      chan struct{} // closed and replaced on every change
	pausedMain   bool          // what run last applied
	pausedTiers  bool
	reported     map[string]bool // reasons last reported in metrics and logs
}

func newLine(cfg Pipeline, log *slog.Logger, m *metrics, pauseFetch func(main, tiers bool)) *line {
	l := &line{name: cfg.Name, cfg: cfg, log: log, m: m, pauseFetch: pauseFetch,
		changed: make(chan struct{}), reported: map[string]bool{}}
	if cfg.RateLimit > 0 {
		l.lim = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, cfg.RateBurst))
	}
	l.cb = l.newBreaker(0)
	l.openFor = cfg.Breaker.OpenFor
	if g := cfg.Guard; !g.Disabled {
		l.guardCalls = newRatioWindow(g.Window)
	}
	return l
}

// newBreaker is a closed breaker (gobreaker, a rolling window of ten
// buckets over Window), nil when disabled.
func (l *line) newBreaker(gen int) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	b := l.cfg.Breaker
	if b.Disabled {
		return nil
	}
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         l.name,
		MaxRequests:  uint32(b.Probes),
		Interval:     b.Window,
		BucketPeriod: max(b.Window/10, time.Millisecond),
		Timeout:      b.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			calls := c.TotalSuccesses + c.TotalFailures
			var why string
			switch {
			case int(c.ConsecutiveFailures) >= b.Consecutive:
				why = fmt.Sprintf("%d failures in a row", c.ConsecutiveFailures)
			case int(calls) >= b.MinCalls && float64(c.TotalFailures) >= b.FailureRatio*float64(calls):
				why = fmt.Sprintf("%d of %d calls failed in %s", c.TotalFailures, calls, b.Window)
			default:
				return false
			}
			l.mu.Lock()
			if l.gen == gen {
				l.trip = why
			}
			l.mu.Unlock()
			return true
		},
		IsExcluded:    func(err error) bool { return errors.Is(err, errNotCounted) },
		OnStateChange: func(_ string, from, to gobreaker.State) { l.onBreaker(gen, from, to) },
	})
}

// onBreaker follows the breaker's transitions (called under its lock).
func (l *line) onBreaker(gen int, from, to gobreaker.State) {
	now := time.Now()
	l.mu.Lock()
	if gen != l.gen {
		l.mu.Unlock()
		return // a breaker resume replaced
	}
	l.bstate, l.bsince = to, now
	b := l.cfg.Breaker
	switch to {
	case gobreaker.StateOpen:
		if from == gobreaker.StateHalfOpen {
			l.reopens++
			l.trip = "a probe failed"
		} else {
			l.reopens = 0
		}
		l.openFor = min(b.OpenFor<<min(l.reopens, 20), b.MaxOpen)
		l.openUntil = now.Add(l.openFor)
		l.log.Warn("breaker open: handler calls stopped, fetching paused, no attempts spent", "why", l.trip, "open_for", l.openFor, "failover_to", b.FailoverTo)
	case gobreaker.StateHalfOpen:
		l.log.Info("breaker half-open: probing", "probes", b.Probes)
	case gobreaker.StateClosed:
		l.reopens = 0
		l.openFor = b.OpenFor
		l.log.Info("breaker closed: handler calls resume", "was", from.String())
	}
	l.m.breakerState.WithLabelValues(l.name).Set(float64(breakerGauge(to)))
	l.m.breakerTrans.WithLabelValues(l.name, to.String()).Inc()
	l.kickLocked()
	l.mu.Unlock()
}

func breakerGauge(s gobreaker.State) int {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

// kickLocked wakes every waiter and run. l.mu held.
func (l *line) kickLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *line) kick() {
	l.mu.Lock()
	l.kickLocked()
	l.mu.Unlock()
}

// stop ends the line at shutdown: waiters leave (their records are
// redelivered), run returns.
func (l *line) stop() {
	l.mu.Lock()
	l.stopped = true
	l.kickLocked()
	l.mu.Unlock()
}

// blockedLocked lists why no call may start at now, and when that may
// change by itself (zero: only by an event). l.mu held.
func (l *line) blockedLocked(now time.Time) (reasons []string, wake time.Time) {
	soon := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	if l.manualOn {
		reasons = append(reasons, stopManual)
	}
	if l.guardOn {
		if a := l.cfg.Guard.AutoResumeAfter; a > 0 && !now.Before(l.guardSince.Add(a)) {
			l.guardOn = false
			l.guardCalls.reset()
			l.log.Info("guard: line resumed automatically", "after", a)
		} else {
			reasons = append(reasons, stopGuard)
			if a > 0 {
				soon(l.guardSince.Add(a))
			}
		}
	}
	if now.Before(l.pauseUntil) {
		reasons = append(reasons, stopPauseCode)
		soon(l.pauseUntil)
	}
	if l.cb != nil && now.Before(l.openUntil) {
		reasons = append(reasons, stopBreaker)
		soon(l.openUntil)
	}
	return reasons, wake
}

// failoverLocked: records may be forwarded instead of waiting, because the
// line is stopped only by the service (breaker, pause code).
func (l *line) failoverLocked(reasons []string) bool {
	if l.cfg.Breaker.FailoverTo == "" || len(reasons) == 0 {
		return false
	}
	for _, r := range reasons {
		if r != stopBreaker && r != stopPauseCode {
			return false
		}
	}
	return true
}

// ticket is a call the line let through; leave reports its outcome.
type ticket struct {
	done   func(error) // the breaker's; nil without one
	waited bool        // the record waited for the line or a token
}

// enter waits until a handler call may start and returns its ticket. It
// returns forward instead when the record may be forwarded (canForward)
// and the line is stopped by the service; ok false when the record is
// abandoned: ctx done, abandoned() true (its partition is being revoked),
// or shutdown.
//
// now is the time of the first look (the caller's clock reading, saving
// one per record); later looks, after a wait, read the clock again.
func (l *line) enter(ctx context.Context, now time.Time, canForward bool, abandoned func() bool) (t ticket, forward, ok bool) {
	for first := true; ; first = false {
		if ctx.Err() != nil || abandoned() {
			return t, false, false
		}
		if !first {
			now = time.Now()
		}
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return t, false, false
		}
		reasons, wake := l.blockedLocked(now)
		ch, cb := l.changed, l.cb
		fwd := canForward && l.failoverLocked(reasons)
		l.mu.Unlock()
		if fwd {
			return t, true, true
		}
		if len(reasons) == 0 {
			if l.lim != nil {
				waited, ok := l.token(ctx, ch)
				t.waited = t.waited || waited
				if !ok {
					continue // the line changed, or ctx: look again
				}
			}
			if cb == nil {
				return t, false, true
			}
			done, err := cb.Allow()
			if err == nil {
				t.done = done
				return t, false, true
			}
			// Half-open with every probe out: wait for their outcomes.
			wake = time.Time{}
		}
		t.waited = true
		waitChange(ctx, ch, wake)
	}
}

// waitChange waits until the line changes (ch), ctx ends, or wake (when
// the state changes by itself); at most a second, after which the caller
// looks again anyway.
func waitChange(ctx context.Context, ch <-chan struct{}, wake time.Time) {
	d := time.Second
	if !wake.IsZero() {
		d = min(d, max(time.Until(wake), time.Millisecond))
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-ch:
	case <-timer.C:
	}
}

// token waits for the rate limiter. ok is false when ch (the line
// changed) or ctx ended the wait: the token is given back.
func (l *line) token(ctx context.Context, ch <-chan struct{}) (waited, ok bool) {
	r := l.lim.Reserve()
	d := r.Delay()
	if d <= 0 {
		return false, true
	}
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		ok = true
	case <-ch:
		r.Cancel()
	case <-ctx.Done():
		r.Cancel()
	}
	l.m.rateLimited.WithLabelValues(l.name).Add(time.Since(start).Seconds())
	return true, ok
}

// abandon gives a ticket back uncounted (the call was abandoned).
func (t ticket) abandon() {
	if t.done != nil {
		t.done(errNotCounted)
	}
}

// leave counts the outcome of a call the line let through, and reports
// hold when the record is to be called again once the line runs, without
// spending an attempt: a pause code; a transient failure while the
// breaker is not closed (the outage's, including the one that opened it
// and failed probes); a permanent failure while the guard holds the line.
func (l *line) leave(t ticket, out Outcome, now time.Time) (hold bool) {
	switch out.Kind {
	case Paused:
		if t.done != nil {
			t.done(errNotCounted)
		}
		l.pause(out, now)
		return true
	case Transient:
		if t.done != nil {
			t.done(errServiceFailure)
		}
	default:
		if t.done != nil {
			t.done(nil) // the service answered
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cfg.Guard.Disabled && out.Kind != Transient {
		l.countGuardLocked(out, now)
	}
	switch out.Kind {
	case Transient:
		return l.cb != nil && (l.bstate != gobreaker.StateClosed || now.Before(l.openUntil))
	case Permanent:
		return l.guardOn
	}
	return false
}

// pause stops the line for a pause code's duration (extending a running
// pause, never shortening it).
func (l *line) pause(out Outcome, now time.Time) {
	d := max(out.MinDelay, time.Second)
	until := now.Add(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !until.After(l.pauseUntil) {
		return
	}
	if !now.Before(l.pauseUntil) {
		l.pauseSince = now
	}
	l.pauseUntil, l.pauseCode = until, out.Code
	l.log.Warn("pause code: handler calls stopped, the record is retried after the pause without spending an attempt",
		"code", out.Code, "for", d, "until", until.Format(time.RFC3339Nano))
	l.kickLocked()
}

// countGuardLocked adds a call with a service answer to the guard's
// window and stops the line at the ratio. l.mu held.
func (l *line) countGuardLocked(out Outcome, now time.Time) {
	g := l.cfg.Guard
	calls, perm := l.guardCalls.add(now, out.Kind == Permanent)
	if l.guardOn || out.Kind != Permanent || calls < g.MinCalls || float64(perm) < g.PermanentRatio*float64(calls) {
		return
	}
	l.guardOn, l.guardSince = true, now
	l.guardDetail = fmt.Sprintf("%d of %d calls failed permanently in %s (last code %s)", perm, calls, g.Window, out.Code)
	how := "POST /api/pipelines/" + l.name + "/resume"
	if g.AutoResumeAfter > 0 {
		how += fmt.Sprintf(" (or automatically after %s)", g.AutoResumeAfter)
	}
	l.log.Error("guard: line stopped; fix the cause (API key, account), then resume: "+how, "why", l.guardDetail)
	l.kickLocked()
}

// Manual pause and resume.

func (l *line) pauseByHand(detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.manualOn {
		l.manualOn, l.manualSince = true, time.Now()
	}
	l.manualDetail = detail
	l.log.Warn("line paused by hand", "detail", detail)
	l.kickLocked()
}

// resume clears every stop: manual, guard, a pause code's pause, and the
// breaker (a new, closed one; the operator says the service is back).
func (l *line) resume(detail string) {
	l.mu.Lock()
	l.gen++
	gen := l.gen
	l.mu.Unlock()
	var cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	if !l.cfg.Breaker.Disabled {
		cb = l.newBreaker(gen)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	wasOpen := l.cb != nil && (l.bstate != gobreaker.StateClosed || time.Now().Before(l.openUntil))
	l.manualOn, l.guardOn = false, false
	l.guardCalls.reset()
	l.pauseUntil = time.Time{}
	l.cb, l.openUntil, l.reopens, l.openFor = cb, time.Time{}, 0, l.cfg.Breaker.OpenFor
	if wasOpen {
		l.bstate, l.bsince = gobreaker.StateClosed, time.Now()
		l.m.breakerState.WithLabelValues(l.name).Set(0)
		l.m.breakerTrans.WithLabelValues(l.name, gobreaker.StateClosed.String()).Inc()
	}
	l.log.Info("line resumed by hand", "detail", detail)
	l.kickLocked()
}

// run applies the line's state to fetching and to the redrive_paused
// series until stop: a stopped line pauses the main topic and the tiers
// (except what may be forwarded); it also turns an open breaker half-open
// when its time is up, so that probes can start.
func (l *line) run(ctx context.Context) {
	for {
		now := time.Now()
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return
		}
		reasons, wake := l.blockedLocked(now)
		ch, cb := l.changed, l.cb
		fwd := l.failoverLocked(reasons)
		stopped := len(reasons) > 0
		main := stopped && !fwd
		tiers := stopped && !(fwd && l.cfg.Breaker.FailoverRetries)
		apply := main != l.pausedMain || tiers != l.pausedTiers
		l.pausedMain, l.pausedTiers = main, tiers
		for _, r := range stopReasons {
			on := slices.Contains(reasons, r)
			if on != l.reported[r] {
				l.reported[r] = on
				l.m.paused.WithLabelValues(l.name, r).Set(b2f(on))
				if !on && r == stopPauseCode {
					l.log.Info("pause over: handler calls resume", "code", l.pauseCode)
				}
			}
		}
		halfOpen := cb != nil && l.bstate == gobreaker.StateOpen && !now.Before(l.openUntil)
		l.mu.Unlock()
		if apply {
			l.pauseFetch(main, tiers)
			if main || tiers {
				l.log.Info("fetching paused", "main", main, "tiers", tiers, "why", strings.Join(reasons, ","))
			} else {
				l.log.Info("fetching resumed")
			}
		}
		if halfOpen {
			cb.State() // open → half-open (onBreaker logs it and kicks)
		}
		if waitChange(ctx, ch, wake); ctx.Err() != nil {
			return
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// status is the line as GET /api/pipelines shows it.
func (l *line) status(now time.Time) LineStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := LineStatus{State: "running", Guard: !l.cfg.Guard.Disabled, RateLimit: l.cfg.RateLimit, FailoverTo: l.cfg.Breaker.FailoverTo}
	reasons, _ := l.blockedLocked(now)
	for _, r := range reasons {
		sr := StopReason{Reason: r}
		switch r {
		case stopManual:
			sr.Since, sr.Detail = l.manualSince, l.manualDetail
		case stopGuard:
			sr.Since, sr.Detail = l.guardSince, l.guardDetail
			if a := l.cfg.Guard.AutoResumeAfter; a > 0 {
				sr.Until = l.guardSince.Add(a)
			}
		case stopPauseCode:
			sr.Since, sr.Until, sr.Detail = l.pauseSince, l.pauseUntil, "pause code "+l.pauseCode
		case stopBreaker:
			sr.Since, sr.Until, sr.Detail = l.bsince, l.openUntil, l.trip
		}
		s.Reasons = append(s.Reasons, sr)
	}
	switch {
	case l.cb == nil:
		s.Breaker = "disabled"
	case now.Before(l.openUntil):
		s.Breaker, s.BreakerSince, s.OpenFor = "open", l.bsince, l.openFor.String()
	case l.bstate == gobreaker.StateClosed:
		s.Breaker, s.BreakerSince = "closed", l.bsince
	default: // open with its time up: half-open at the next call
		s.Breaker, s.BreakerSince = "half-open", l.bsince
	}
	switch {
	case len(reasons) > 0:
		s.State = "stopped"
	case s.Breaker == "half-open":
		s.State = "probing"
	}
	return s
}

// ratioWindow counts calls and the failures among them over a rolling
// window of ten buckets.
type ratioWindow struct {
	bucket time.Duration
	slots  [10]struct {
		epoch       int64
		calls, hits int
	}
}

func newRatioWindow(span time.Duration) ratioWindow {
	return ratioWindow{bucket: max(span/10, time.Millisecond)}
}

// add counts a call (hit: a failure) at now and returns the window's
// totals.
func (w *ratioWindow) add(now time.Time, hit bool) (calls, hits int) {
	e := now.UnixNano() / int64(w.bucket)
	s := &w.slots[e%int64(len(w.slots))]
	if s.epoch != e {
		s.epoch, s.calls, s.hits = e, 0, 0
	}
	s.calls++
	if hit {
		s.hits++
	}
	for _, s := range w.slots {
		if s.epoch > e-int64(len(w.slots)) {
			calls += s.calls
			hits += s.hits
		}
	}
	return calls, hits
}

func (w *ratioWindow) reset() {
	w.slots = [10]struct {
		epoch       int64
		calls, hits int
	}{}
}
