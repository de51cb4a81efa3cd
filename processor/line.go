package processor

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Why a pipeline's line is stopped (redrive_paused{reason}, StopReason).
const (
	stopBreaker   = "breaker"    // the circuit breaker is open
	stopPauseCode = "pause_code" // a handler answered a pause code (Outcome Paused)
	stopGuard     = "guard"      // permanent failures reached the guard's ratio
	stopManual    = "manual"     // an operator paused it
)

var stopReasons = []string{stopBreaker, stopPauseCode, stopGuard, stopManual}

// line is a pipeline's flow control: whether a handler call may start. A
// call passes its stages in this order (enter), and its outcome goes back
// to them (leave):
//
//  1. manual (line_manual.go): an operator paused the line.
//  2. guard (line_guard.go): permanent failures reached its ratio.
//  3. pause code (line_pausecode.go): a handler answered a pause code.
//  4. breaker (line_breaker.go): the service fails; open, no call starts;
//     half-open, a few probes do.
//  5. rate (line_rate.go): the rate limiter's token, at rate_limit or the
//     rate learned from the service's 429s (line_learn.go), the smaller.
//
// While any of 1-4 stops the line, no call starts, the records already
// polled wait in their workers (no attempt spent), and run pauses fetching.
// failover (line_failover.go) says what a stopped line still takes in.
// Every stage's state is guarded by line.mu, one lock for the line (the
// rate limiter has its own, so that no one waits for a token holding
// line.mu); the stages have none of their own. How they interact:
//
//   - failover forwards records only while the line is stopped by the
//     service alone (breaker, pause code), and an open breaker alone keeps
//     the main topic fetched: its half-open probes are fresh records.
//   - The breaker's half-open probes prefer fresh work (no failure
//     history, dispatched after the breaker last opened), which fails
//     only if the service does: notClosed tells the run queue to hand out
//     fresh work first, newest first, and a caller that failed before, or
//     that was in the pipeline when the breaker opened (the rest of a
//     burst that may have opened it), gives its worker to fresh work
//     queued behind it (enterYield; newer fresh work, for the latter)
//     while a probe slot is kept for that work. enter asks the run queue
//     (freshQueued, freshNewest) before taking line.mu: pipeline.mu is
//     never taken under line.mu.
//   - leave hands every outcome to every stage, a callback's too (heard):
//     a pause code is counted there (it pauses the line; the breaker and
//     the guard do not count it), the breaker judges transient failures,
//     the guard counts the service's other answers. hold follows the stage
//     that owns the outcome.
//   - The token is taken only once 1-4 let the call through, and its wait
//     ends when the line changes: a call never starts in a stop that came
//     while it waited for its token.
//   - resume clears manual, the guard (and its window), the pause code and
//     the breaker (a new, closed one) at once: the operator says the
//     cause is fixed.
type line struct {
	name string
	cfg  Pipeline
	log  *slog.Logger
	m    *metrics
	// pauseFetch applies which of the main topic and the tiers are not
	// fetched; called from run only.
	pauseFetch func(main, tiers bool)
	// freshQueued reports main-topic records waiting in the run queue for
	// a worker (the half-open breaker gives them its probes first), and
	// freshNewest the seq of the newest of them (0: none); dispatched is
	// how many records were dispatched (the last seq).
	freshQueued func() bool
	freshNewest func() uint64
	dispatched  func() uint64
	// notClosed is set while the breaker is open or half-open: the run
	// queue then hands out fresh work first, newest first, so that probes
	// are fresh.
	notClosed atomic.Bool
	// started counts handler calls let through (the status's calls/s).
	started atomic.Int64
	// counted: redrive_breaker_calls_total, by verdict.
	counted [len(verdicts)]prometheus.Counter
	// Set once by newLine: read without l.mu.
	failover failover
	rate     *rateLimit

	mu        sync.Mutex
	manual    manualPause
	guard     guard
	pauseCode pauseCode
	br        *breaker // nil: disabled; a new one on resume
	// freshWaiting and failedWaiting count callers with no failure
	// history dispatched after the breaker last opened, and the others
	// (their record failed before, or was in the pipeline when it opened),
	// waiting in enter: a half-open probe slot goes to the first kind
	// first (probeClassLocked).
	freshWaiting, failedWaiting int
	// recentWaiting counts the failed callers dispatched after the breaker
	// last opened (the first round's failed probes, among them): a second
	// round asks them first, before the records that opened it.
	recentWaiting int

	// calls is the bound on handler calls in flight (MaxCallsInFlight,
	// this process's share of it): cap 0 is none.
	calls struct{ cap, n int }
	// shared: the line's stops are the pipeline's, told to and by the
	// other processes through the control topic (line_shared.go); nil
	// with scope process.
	shared *sharedLine

	stopped     bool          // shutdown: waiters leave, run ends
	changed     chan struct{} // closed and replaced on every change
	pausedMain  bool          // what run last applied
	pausedTiers bool
	reported    map[string]bool // reasons last reported in metrics and logs
}

func newLine(cfg Pipeline, log *slog.Logger, m *metrics, pauseFetch func(main, tiers bool)) *line {
	l := &line{name: cfg.Name, cfg: cfg, log: log, m: m, pauseFetch: pauseFetch,
		freshQueued: func() bool { return false },
		freshNewest: func() uint64 { return 0 },
		dispatched:  func() uint64 { return 0 },
		failover:    failover{to: cfg.Breaker.FailoverTo, retries: cfg.Breaker.FailoverRetries},
		rate:        newRateLimit(cfg.RateLimit, cfg.RateBurst, m.rateLimited.WithLabelValues(cfg.Name), m.learnedRate.WithLabelValues(cfg.Name), nil),
		guard:       newGuard(cfg.Guard),
		changed:     make(chan struct{}), reported: map[string]bool{}}
	l.rate.kick = l.kick
	if !cfg.Breaker.Disabled {
		l.br = newBreaker(cfg.Breaker, time.Now())
	}
	for v, lv := range verdicts {
		if lv.counted != "" {
			l.counted[v] = m.breakerCalls.WithLabelValues(cfg.Name, lv.counted, lv.outcome)
		}
	}
	return l
}

// stillClear says whether a call the line let through (waiting for its
// token) may still go on after the line changed, and the channel of the
// next change: the line runs, nothing stops it, and c is not abandoned.
// A half-open breaker's probe slot, once given, stands.
func (l *line) stillClear(c caller) (<-chan struct{}, bool) {
	if c.abandoned() {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return l.changed, false
	}
	reasons, _ := l.blockedLocked(time.Now())
	return l.changed, len(reasons) == 0
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

// blockedLocked lists why no call may start at now (stages 1-4, in the
// order the status shows them), and when that may change by itself (zero:
// only by an event). l.mu held.
func (l *line) blockedLocked(now time.Time) (reasons []string, wake time.Time) {
	soon := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	if l.manual.on {
		reasons = append(reasons, stopManual)
	}
	on, resumed, until := l.guard.blocked(now)
	if resumed {
		l.log.Info("guard: line resumed automatically", "after", l.guard.cfg.AutoResumeAfter)
	}
	if on {
		reasons = append(reasons, stopGuard)
		soon(until)
	}
	if l.pauseCode.blocked(now) {
		reasons = append(reasons, stopPauseCode)
		soon(l.pauseCode.until)
	}
	if l.br != nil && l.br.open(now) {
		reasons = append(reasons, stopBreaker)
		soon(l.br.openUntil)
	}
	return reasons, wake
}

// caller is a record asking the line for a call.
type caller struct {
	// fresh: the record has no failure history (no earlier transient
	// failure in its headers or in this process).
	fresh bool
	// prevCode is the code of its last transient failure ("" if none).
	prevCode string
	// seq is the record's number in the order of dispatch (0: unknown);
	// born its record timestamp (when it was produced).
	seq  uint64
	born time.Time
	// canForward: it may be forwarded to breaker.failover_to.
	canForward bool
	// canPark: a share group's record. Held in the process while the
	// breaker is open, it would stop the group's next poll (the poll
	// accepts every record of the last one), so the half-open probes
	// could only be the records that opened it: it goes to a tier
	// instead (enterPark), no attempt spent.
	canPark bool
	// abandoned reports its partition is being revoked.
	abandoned func() bool
}

// admission is what enter decided for a caller.
type admission int

const (
	enterCall    admission = iota // call the handler, then leave
	enterForward                  // forward the record to failover_to
	enterAbandon                  // ctx done, revoked or shutdown: redelivered
	enterPark                     // the breaker is open: to a tier, no attempt spent (caller.canPark)
	// enterYield: the half-open breaker keeps its probes for fresh work
	// that waits in the run queue; give the record back to the queue so
	// that the worker takes that work.
	enterYield
)

// ticket is a call the line let through; leave reports its outcome.
type ticket struct {
	br     *breaker // the breaker that let it through; nil without one
	slot   bool     // it holds a place in calls (MaxCallsInFlight)
	gen    uint64   // its generation then
	probe  bool     // a half-open probe
	waited bool     // the record waited for the line or a token
	seq    uint64   // the caller's
	born   time.Time
	start  time.Time
}

// enter waits until a handler call may start and returns its ticket
// (enterCall). It returns enterForward instead when the record may be
// forwarded and the line is stopped by the service, enterYield when a
// half-open breaker keeps its probes for fresh work queued behind this
// record, and enterAbandon when the record is abandoned: ctx done, its
// partition being revoked, or shutdown.
//
// now is the time of the first look (the caller's clock reading, saving
// one per record); later looks, after a wait, read the clock again.
func (l *line) enter(ctx context.Context, now time.Time, c caller) (t ticket, e admission) {
	for first := true; ; first = false {
		if ctx.Err() != nil || c.abandoned() {
			return t, enterAbandon
		}
		if !first {
			now = time.Now()
		}
		// Read before l.mu: the run queue is guarded by pipeline.mu.
		var queued bool
		var newest uint64
		if l.notClosed.Load() {
			queued, newest = l.freshQueued(), l.freshNewest()
		}
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return t, enterAbandon
		}
		fresh, better := l.probeClassLocked(c, queued, newest)
		// Stages 1-4: is the line stopped, and if so, may the record go
		// elsewhere?
		reasons, wake := l.blockedLocked(now)
		ch := l.changed
		if c.canForward && l.failover.forward(reasons) {
			l.mu.Unlock()
			return t, enterForward
		}
		if c.canPark && slices.Contains(reasons, stopBreaker) {
			l.mu.Unlock()
			return t, enterPark
		}
		if len(reasons) == 0 && l.calls.cap > 0 && l.calls.n >= l.calls.cap {
			// As many calls run as the service may see: wait for one to
			// end (leave and abandon kick).
			reasons, wake = []string{"calls"}, time.Time{}
		}
		if len(reasons) == 0 {
			// Not stopped: a half-open breaker still hands out its probe
			// slots one by one.
			allow, probe, yield := l.admitLocked(now, c, fresh, better)
			if yield {
				l.mu.Unlock()
				return t, enterYield
			}
			if allow {
				t = ticket{br: l.br, probe: probe, waited: t.waited, seq: c.seq, born: c.born, start: now, slot: true}
				if l.br != nil {
					t.gen = l.br.gen
				}
				l.calls.n++
				l.started.Add(1)
				l.mu.Unlock()
				// Stage 5, outside l.mu: the token.
				waited, ok := l.rate.wait(ctx, ch, func() (<-chan struct{}, bool) { return l.stillClear(c) })
				t.waited = t.waited || waited
				if ok {
					return t, enterCall
				}
				t.abandon(l) // the line changed, or ctx: look again
				continue
			}
			// Half-open with every probe slot taken (or kept for fresh
			// work): wait for their outcomes.
			wake = time.Time{}
		}
		n := &l.failedWaiting
		if fresh {
			n = &l.freshWaiting
		}
		recent := !fresh && l.recentLocked(c)
		*n++
		if recent {
			l.recentWaiting++
		}
		l.mu.Unlock()
		t.waited = true
		waitChange(ctx, ch, wake)
		l.mu.Lock()
		*n--
		if recent {
			l.recentWaiting--
		}
		l.mu.Unlock()
	}
}

// parkFor is how long a parked record waits: until the breaker may
// probe (at least a moment).
func (l *line) parkFor(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.br == nil {
		return 0
	}
	return max(l.br.openUntil.Sub(now), 0)
}

// abandon gives a ticket back uncounted (the call was abandoned): a probe
// slot is free again.
func (t ticket) abandon(l *line) {
	if !t.probe && !t.slot {
		return
	}
	l.mu.Lock()
	l.releaseSlotLocked(t)
	if t.probe && t.br == l.br {
		t.br.release(t.gen)
		l.kickLocked()
	}
	l.mu.Unlock()
}

// releaseSlotLocked gives back t's place among the calls in flight.
func (l *line) releaseSlotLocked(t ticket) {
	if t.slot {
		l.calls.n--
		if l.calls.cap > 0 {
			l.kickLocked()
		}
	}
}

// leave hands the outcome of a call the line let through to every stage
// (prevCode: the record's last transient failure before this call, "" if
// none), and reports hold when the record is to be called again once the
// line runs, without spending an attempt: a pause code; a transient
// failure the breaker does not put on the request while it is not closed
// (the outage's, including the one that opened it and failed probes; a
// 429 is not: it waits out its Retry-After); a permanent failure while the guard holds the line.
func (l *line) leave(t ticket, out Outcome, prevCode string, now time.Time) (hold bool) {
	if t.slot {
		// A call's answer (not a callback's): the rate learns from it.
		l.rate.heard(out.Kind == Transient && out.Throttled, now)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseSlotLocked(t)
	l.pauseLocked(out, now)
	l.countBreakerLocked(t, out, prevCode, now)
	l.countGuardLocked(out, now)
	switch out.Kind {
	case Paused:
		return true
	case Transient:
		// A 429 is not the outage's: it waits out its Retry-After
		// (throttle.go) whatever the breaker's state, or the record would
		// be called again at once, against the service's word.
		return !out.RequestFault && !out.Throttled && l.br != nil && l.br.state != breakerClosed
	case Permanent:
		return l.guard.on
	}
	return false
}

// heard counts an answer of the service that was not a call's: a
// callback's (prevCode as for leave). The line treats it as the outcome
// of a call that started now: a pause code pauses, the breaker and the
// guard count it, and hold is leave's.
func (l *line) heard(out Outcome, prevCode string, now time.Time) (hold bool) {
	l.mu.Lock()
	t := ticket{br: l.br, start: now}
	if l.br != nil {
		t.gen = l.br.gen
	}
	l.mu.Unlock()
	return l.leave(t, out, prevCode, now)
}

// resume clears every stop at once: manual, the guard, a pause code's
// pause, and the breaker.
func (l *line) resume(detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resumeLocked(time.Now(), detail)
}

func (l *line) resumeLocked(now time.Time, detail string) {
	l.manual.clear()
	l.guard.clear()
	l.pauseCode.clear()
	l.resetBreakerLocked(now)
	l.log.Info("line resumed by hand", "detail", detail)
	l.kickLocked()
}

// run applies the line's state to fetching (failover.fetchPaused) and to
// the redrive_paused series until stop; it also turns an open breaker
// half-open when its time is up, so that probes can start.
func (l *line) run(ctx context.Context) {
	for {
		now := time.Now()
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return
		}
		if b := l.br; b != nil && b.state == breakerOpen && !b.open(now) {
			l.onBreakerLocked(b.to(breakerHalfOpen, now))
		}
		reasons, wake := l.blockedLocked(now)
		ch := l.changed
		main, tiers := l.failover.fetchPaused(reasons)
		apply := main != l.pausedMain || tiers != l.pausedTiers
		l.pausedMain, l.pausedTiers = main, tiers
		l.reportLocked(reasons)
		l.mu.Unlock()
		if apply {
			l.pauseFetch(main, tiers)
			if main || tiers {
				l.log.Info("fetching paused", "main", main, "tiers", tiers, "why", strings.Join(reasons, ","))
			} else {
				l.log.Info("fetching resumed")
			}
		}
		if waitChange(ctx, ch, wake); ctx.Err() != nil {
			return
		}
	}
}

// reportLocked sets redrive_paused{reason} where reasons changed since the
// last report. l.mu held.
func (l *line) reportLocked(reasons []string) {
	for _, r := range stopReasons {
		on := slices.Contains(reasons, r)
		if on == l.reported[r] {
			continue
		}
		l.reported[r] = on
		l.m.paused.WithLabelValues(l.name, r).Set(b2f(on))
		if !on && r == stopPauseCode {
			l.log.Info("pause over: handler calls resume", "code", l.pauseCode.code)
		}
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
	s := LineStatus{State: "running", Guard: !l.cfg.Guard.Disabled, RateLimit: l.cfg.RateLimit, LearnedRate: l.rate.learnedRate(), FailoverTo: l.cfg.Breaker.FailoverTo}
	reasons, _ := l.blockedLocked(now)
	for _, r := range reasons {
		var sr StopReason
		switch r {
		case stopManual:
			sr = l.manual.stopReason()
		case stopGuard:
			sr = l.guard.stopReason()
		case stopPauseCode:
			sr = l.pauseCode.stopReason()
		case stopBreaker:
			sr = l.br.stopReason()
		}
		s.Reasons = append(s.Reasons, sr)
	}
	l.breakerStatusLocked(&s, now)
	switch {
	case len(reasons) > 0:
		s.State = "stopped"
	case s.Breaker == "half-open":
		s.State = "probing"
	}
	return s
}
