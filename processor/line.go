package processor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// line is a pipeline's flow control: whether a handler call may start. It
// is stopped while the circuit breaker is open, a pause code's pause runs,
// the guard has tripped or an operator paused it; while stopped no call
// starts, the records already polled wait in their workers (no attempt
// spent), and fetching of the main topic and the tiers is paused (run).
// Calls also wait for the rate limiter's token. The breaker (breaker.go)
// is guarded by line.mu.
type line struct {
	name string
	cfg  Pipeline
	log  *slog.Logger
	m    *metrics
	// pauseFetch applies which of the main topic and the tiers are not
	// fetched; called from run only.
	pauseFetch func(main, tiers bool)
	// freshQueued reports main-topic records waiting in the run queue for
	// a worker (the half-open breaker gives them its probes first).
	freshQueued func() bool
	// notClosed is set while the breaker is open or half-open: the run
	// queue then hands out fresh work first, so that probes are fresh.
	notClosed atomic.Bool
	// counted: redrive_breaker_calls_total, by verdict.
	counted [len(verdicts)]prometheus.Counter

	lim *rate.Limiter // nil: no rate limit

	mu sync.Mutex
	br *breaker // nil: disabled; a new one on resume
	// freshWaiting and failedWaiting count callers with no failure
	// history, and callers whose record failed before, waiting in enter:
	// a half-open probe slot goes to the first kind first (breaker.go).
	freshWaiting, failedWaiting int

	pauseSince, pauseUntil time.Time
	pauseCode              string

	guardOn      bool
	guardSince   time.Time
	guardDetail  string
	guardCalls   lastCalls
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
		freshQueued: func() bool { return false },
		changed:     make(chan struct{}), reported: map[string]bool{}}
	if cfg.RateLimit > 0 {
		l.lim = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, cfg.RateBurst))
	}
	if !cfg.Breaker.Disabled {
		l.br = newBreaker(cfg.Breaker, time.Now())
	}
	for v, lv := range verdicts {
		if lv.counted != "" {
			l.counted[v] = m.breakerCalls.WithLabelValues(cfg.Name, lv.counted, lv.outcome)
		}
	}
	if g := cfg.Guard; !g.Disabled {
		l.guardCalls = newLastCalls(g.MinCalls)
	}
	return l
}

// onBreakerLocked logs and counts a breaker transition. l.mu held.
func (l *line) onBreakerLocked(tr *transition) {
	if tr == nil {
		return
	}
	b := l.br
	if tr.from == tr.to {
		// A second round of probes: not a transition.
		l.log.Info("breaker half-open: the fresh probes failed; probing requests that failed before", "why", b.why)
		l.kickLocked()
		return
	}
	switch tr.to {
	case breakerOpen:
		l.log.Warn("breaker open: handler calls stopped, fetching paused, no attempts spent", "why", b.why, "open_for", b.openFor, "failover_to", l.cfg.Breaker.FailoverTo)
	case breakerHalfOpen:
		l.log.Info("breaker half-open: probing, fresh requests first", "probes", l.cfg.Breaker.Probes)
	case breakerClosed:
		l.log.Info("breaker closed: handler calls resume", "was", tr.from.String())
	}
	l.notClosed.Store(tr.to != breakerClosed)
	l.m.breakerState.WithLabelValues(l.name).Set(float64(tr.to))
	l.m.breakerTrans.WithLabelValues(l.name, tr.to.String()).Inc()
	l.kickLocked()
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
	if l.br != nil && l.br.open(now) {
		reasons = append(reasons, stopBreaker)
		soon(l.br.openUntil)
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

// caller is a record asking the line for a call.
type caller struct {
	// fresh: the record has no failure history (no earlier transient
	// failure in its headers or in this process).
	fresh bool
	// prevCode is the code of its last transient failure ("" if none).
	prevCode string
	// canForward: it may be forwarded to breaker.failover_to.
	canForward bool
	// abandoned reports its partition is being revoked.
	abandoned func() bool
}

// admission is what enter decided for a caller.
type admission int

const (
	enterCall    admission = iota // call the handler, then leave
	enterForward                  // forward the record to failover_to
	enterAbandon                  // ctx done, revoked or shutdown: redelivered
	// enterYield: the half-open breaker keeps its probes for fresh work
	// that waits in the run queue; give the record back to the queue so
	// that the worker takes that work.
	enterYield
)

// ticket is a call the line let through; leave reports its outcome.
type ticket struct {
	br     *breaker // the breaker that let it through; nil without one
	gen    uint64   // its generation then
	probe  bool     // a half-open probe
	waited bool     // the record waited for the line or a token
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
		freshQueued := !c.fresh && l.notClosed.Load() && l.freshQueued()
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return t, enterAbandon
		}
		reasons, wake := l.blockedLocked(now)
		ch := l.changed
		if canForward := c.canForward && l.failoverLocked(reasons); canForward {
			l.mu.Unlock()
			return t, enterForward
		}
		if len(reasons) == 0 {
			allow, probe, br := true, false, l.br
			if br != nil {
				var tr *transition
				allow, probe, tr = br.admit(now, c.fresh, waiters{fresh: l.freshWaiting > 0 || freshQueued, failed: l.failedWaiting > 0})
				l.onBreakerLocked(tr)
				if !allow && freshQueued && l.freshWaiting == 0 && br.slotFree() {
					// A probe slot is kept for fresh work that no worker
					// has taken: give this worker to it.
					l.mu.Unlock()
					return t, enterYield
				}
			}
			if allow {
				t = ticket{br: br, probe: probe, waited: t.waited, start: now}
				if br != nil {
					t.gen = br.gen
				}
				l.mu.Unlock()
				if l.lim == nil {
					return t, enterCall
				}
				waited, ok := l.token(ctx, ch)
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
		if c.fresh {
			n = &l.freshWaiting
		}
		*n++
		l.mu.Unlock()
		t.waited = true
		waitChange(ctx, ch, wake)
		l.mu.Lock()
		*n--
		l.mu.Unlock()
	}
}

// sleep waits d for a throttled record (a 429's Retry-After); false when
// the record is abandoned meanwhile (ctx done, its partition revoked, or
// shutdown).
func (l *line) sleep(ctx context.Context, d time.Duration, abandoned func() bool) bool {
	until := time.Now().Add(d)
	for {
		l.mu.Lock()
		ch, stopped := l.changed, l.stopped
		l.mu.Unlock()
		if stopped || ctx.Err() != nil || abandoned() {
			return false
		}
		if !time.Now().Before(until) {
			return true
		}
		waitChange(ctx, ch, until)
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

// abandon gives a ticket back uncounted (the call was abandoned): a probe
// slot is free again.
func (t ticket) abandon(l *line) {
	if !t.probe {
		return
	}
	l.mu.Lock()
	if t.br == l.br {
		t.br.release(t.gen)
		l.kickLocked()
	}
	l.mu.Unlock()
}

// leave counts the outcome of a call the line let through (prevCode: the
// record's last transient failure before this call, "" if none), and
// reports hold when the record is to be called again once the line runs,
// without spending an attempt: a pause code; a transient failure the
// breaker does not put on the request while it is not closed (the
// outage's, including the one that opened it and failed probes); a
// permanent failure while the guard holds the line.
func (l *line) leave(t ticket, out Outcome, prevCode string, now time.Time) (hold bool) {
	if out.Kind == Paused {
		l.pause(out, now)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := skipNone
	if t.br != nil && t.br == l.br {
		v = t.br.judge(out, prevCode, t.probe)
		if t.probe && v == countFailure && prevCode == "" {
			t.br.noteProbe(t.gen, out.Code)
		}
		if c := l.counted[v]; c != nil && t.gen == t.br.gen {
			c.Inc()
		}
		l.onBreakerLocked(t.br.record(t.gen, t.probe, t.start, v, now, l.failedWaiting > 0))
		if t.probe && v != countSuccess {
			l.kickLocked() // a slot is free again, or the verdict changed
		}
	}
	if !l.cfg.Guard.Disabled && out.Kind != Transient && out.Kind != Paused {
		l.countGuardLocked(out, now)
	}
	switch out.Kind {
	case Paused:
		return true
	case Transient:
		return !out.RequestFault && l.br != nil && l.br.state != breakerClosed
	case Permanent:
		return l.guardOn
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
	calls, perm := l.guardCalls.add(now, out.Kind == Permanent, g.Window)
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
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.manualOn, l.guardOn = false, false
	l.guardCalls.reset()
	l.pauseUntil = time.Time{}
	if l.br != nil {
		wasOpen := l.br.state != breakerClosed
		l.br = newBreaker(l.cfg.Breaker, now) // tickets of the old one are not counted
		if wasOpen {
			l.onBreakerLocked(&transition{from: breakerOpen, to: breakerClosed})
		}
	}
	l.log.Info("line resumed by hand", "detail", detail)
	l.kickLocked()
}

// run applies the line's state to fetching and to the redrive_paused
// series until stop: a stopped line pauses the tiers, and the main topic
// unless only the breaker stops it (or it may be forwarded); it also turns
// an open breaker half-open when its time is up, so that probes can start.
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
		fwd := l.failoverLocked(reasons)
		stopped := len(reasons) > 0
		// An open breaker alone keeps the main topic fetched (up to
		// max_inflight, the records wait in memory): its half-open probes
		// are fresh requests, which must be there when it half-opens.
		onlyBreaker := len(reasons) == 1 && reasons[0] == stopBreaker
		main := stopped && !fwd && !onlyBreaker
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
			sr.Since, sr.Until, sr.Detail = l.br.since, l.br.openUntil, l.br.why
		}
		s.Reasons = append(s.Reasons, sr)
	}
	switch b := l.br; {
	case b == nil:
		s.Breaker = "disabled"
	default:
		s.Breaker, s.BreakerSince = b.state.String(), b.since
		if b.state == breakerOpen {
			s.OpenFor = b.openFor.String()
		}
		if b.state != breakerClosed {
			s.Why = b.why
		}
		c := b.counts(now)
		s.Counts = &c
	}
	switch {
	case len(reasons) > 0:
		s.State = "stopped"
	case s.Breaker == "half-open":
		s.State = "probing"
	}
	return s
}

// lastCalls is the guard's window: the last n calls with an answer, and
// which failed permanently. A count, not a time span: a key rotated after
// an hour of successes is caught within n calls, not once the successes
// of the last minute have aged out.
type lastCalls struct {
	at   []time.Time
	perm []bool
	next int // where the next call goes
	full bool
}

func newLastCalls(n int) lastCalls {
	return lastCalls{at: make([]time.Time, max(n, 1)), perm: make([]bool, max(n, 1))}
}

// add records a call at now and returns how many of the last n calls
// came within span of now, and how many of those failed permanently.
func (c *lastCalls) add(now time.Time, perm bool, span time.Duration) (calls, perms int) {
	c.at[c.next], c.perm[c.next] = now, perm
	c.next = (c.next + 1) % len(c.at)
	c.full = c.full || c.next == 0
	n := c.next
	if c.full {
		n = len(c.at)
	}
	for i := range n {
		if now.Sub(c.at[i]) < span {
			calls++
			if c.perm[i] {
				perms++
			}
		}
	}
	return calls, perms
}

func (c *lastCalls) reset() {
	clear(c.at)
	clear(c.perm)
	c.next, c.full = 0, false
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

// sum is the window's totals at now.
func (w *ratioWindow) sum(now time.Time) (calls, hits int) {
	e := now.UnixNano() / int64(w.bucket)
	for _, s := range w.slots {
		if s.epoch > e-int64(len(w.slots)) && s.epoch <= e {
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
