package processor

import (
	"fmt"
	"math"
	"time"
)

// breaker judges whether the service is failing, not whether some requests
// are. It is a state machine without a lock of its own: the line guards it
// with line.mu, and every method takes the caller's clock reading.
//
// What it counts (verdict): a transient outcome is a failure of the
// service unless the request owns it — a code listed as a request fault
// (Outcome.RequestFault), a request to slow down (Outcome.Throttled, a
// 429), or the same code the record failed with before
// (that failure was counted the first time, and a request that fails for
// its own reasons fails again and again, its retries coming due in runs).
// Until the service has answered once since the process started, though,
// a repeated failure counts: a replica starting during an outage finds
// due retries first, and must not spend their attempts. Every answer that
// is not transient (success, not-ready, permanent, invalid) shows the
// service working. Pause codes and abandoned calls are not counted at all.
//
// Closed, it opens on Consecutive counted failures in a row, or on
// FailureRatio of at least MinCalls counted calls in Window. "In a row"
// counts calls that started after the last success came back: calls that
// hang until their timeout end together, and a burst of timeouts of calls
// started while others were answered is not an outage. Open, no call
// starts until OpenFor (doubled at every reopening, up to MaxOpen) is
// over. Half-open, Probes calls go through; the line gives those slots to
// work with no failure history dispatched since it opened first (fresh
// main-topic records, newest first), and to retries and the records that
// were in the pipeline when it opened only when none waits: a burst of
// bad requests larger than the concurrency leaves part of itself queued
// when it opens the breaker, and those must not be its probes. It opens
// again once FailureRatio of the Probes have failed (3 of the default 5),
// and closes once enough have succeeded that this cannot happen; outcomes
// not counted give their slot back. When fresh probes fail while records
// that failed before wait, the breaker asks those before it opens again
// (a second round of probes, for them first): if they succeed the service
// is up, and it is the new requests that fail, for their own reasons. It then closes having learned
// the codes the fresh probes failed with: until it opens again, a new
// request failing with one of them is not counted, and a retry failing
// with it again is (so an outage answering with that code is still caught,
// by the retries). Once closed, a failure of a record that was in the
// pipeline when it last opened is not counted either (suspect). Outcomes
// of calls started in an earlier state or round are ignored: each starts
// a new generation.
type breaker struct {
	cfg Breaker
	// others: the counted failures in a row of the pipeline's other
	// processes, as they report them (scope pipeline).
	others int
	state  breakerState
	since  time.Time
	gen    uint64 // bumped at every transition
	// Closed: counted calls and failures in the rolling window, and
	// counted failures in a row (of calls started after lastOK).
	calls ratioWindow
	run   int
	// Uncounted transient failures in the window, for the status.
	skipped ratioWindow
	// lastOK is the last counted success: the service answers.
	lastOK time.Time
	// Open: until when, for how long this time, reopenings in a row, why.
	openUntil time.Time
	openFor   time.Duration
	reopens   int
	why       string
	// Half-open: probe slots handed out (outcome pending or counted), and
	// the counted outcomes; second says the fresh probes failed and the
	// slots go to records that failed before first.
	granted, ok, failed int
	second              bool
	// probeCodes are the codes fresh probes of the first round failed
	// with; learned, those a second round's success showed to be the new
	// requests' own (until it opens again).
	probeCodes, learned map[string]bool
	// openedSeq is the seq of the last record dispatched when it last
	// opened (set by the line): records up to it were in the pipeline
	// then, the rest of what opened it among them. openedAt is when;
	// closedSeq the last dispatched when it last closed (line.judgedSeqLocked).
	openedSeq, closedSeq uint64
	openedAt             time.Time
}

type breakerState int

const (
	breakerClosed breakerState = iota
	breakerHalfOpen
	breakerOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerHalfOpen:
		return "half-open"
	case breakerOpen:
		return "open"
	}
	return "closed"
}

// verdict is how the breaker counts one outcome (redrive_breaker_calls_total).
type verdict int

const (
	countSuccess  verdict = iota // counted: the service answered
	countFailure                 // counted: the service failed
	skipRepeat                   // not counted: the record's earlier failure, again
	skipRequest                  // not counted: a request-fault code
	skipLearned                  // not counted: a new request failing with a learned code
	skipThrottled                // not counted: the service asked to slow down (429)
	skipSuspect                  // not counted: in the pipeline when it opened, failing after it closed
	skipNone                     // not counted, not a call (pause code, abandoned)
)

// verdicts are the label values of redrive_breaker_calls_total{counted, outcome}.
var verdicts = [...]struct{ counted, outcome string }{
	countSuccess:  {"yes", "success"},
	countFailure:  {"yes", "failure"},
	skipRepeat:    {"no", "repeat"},
	skipRequest:   {"no", "request_fault"},
	skipLearned:   {"no", "learned"},
	skipThrottled: {"no", "throttled"},
	skipSuspect:   {"no", "suspect"},
	skipNone:      {}, // not a call the breaker judges: no series
}

// transition is a state change for the line to log and count.
type transition struct {
	to   breakerState
	from breakerState
}

func newBreaker(cfg Breaker, now time.Time) *breaker {
	return &breaker{cfg: cfg, since: now, openFor: cfg.OpenFor,
		calls: newRatioWindow(cfg.Window), skipped: newRatioWindow(cfg.Window)}
}

// setOthers sets the counted failures in a row the pipeline's other
// processes report (line_shared.go): the pipeline opens on Consecutive
// failures in a row counted over all its processes, about as many calls
// as one process alone would make.
func (b *breaker) setOthers(n int) { b.others = n }

// follow opens the breaker until until because another process's breaker
// is open (or probing): no call starts here, and this one does not probe
// unless until passes without word. It returns the transition, nil when
// it was open already (only until moved).
func (b *breaker) follow(until time.Time, why string, now time.Time) *transition {
	if b.state == breakerOpen && !until.After(b.openUntil) {
		return nil
	}
	var tr *transition
	if b.state != breakerOpen {
		tr = &transition{from: b.state, to: breakerOpen}
		b.since = now
		b.gen++
		b.granted, b.ok, b.failed, b.second = 0, 0, 0, false
		b.learned, b.probeCodes = nil, nil
	}
	b.state, b.openUntil, b.openFor, b.why = breakerOpen, until, until.Sub(now), why
	return tr
}

// judge says how an outcome of a call counts. prevCode is the code
// the record failed with before ("" when it has no failure history); probe
// says the call was a half-open probe, whose failures count whatever the
// record did before (a probe is asked whether the service is back); seq
// is the record's number in the order of dispatch (0: unknown).
func (b *breaker) judge(out Outcome, prevCode string, probe bool, seq uint64) verdict {
	switch out.Kind {
	case Paused:
		return skipNone
	case Transient:
		learned := b.learned[out.Code]
		switch {
		case out.RequestFault:
			return skipRequest
		case out.Throttled:
			return skipThrottled
		case probe:
			return countFailure
		case learned && prevCode == "":
			return skipLearned
		case learned:
			return countFailure // the request failed before: now it is the service
		case prevCode != "" && prevCode == out.Code && !b.lastOK.IsZero():
			return skipRepeat
		case b.suspect(seq):
			return skipSuspect
		}
		return countFailure
	}
	return countSuccess
}

// suspect says the record numbered seq was in the pipeline when the
// breaker last opened, and it has closed since: the failures of that time
// were judged (they opened it), and probes of newer records found the
// service up. A record of that time failing now is most likely the rest
// of what opened it: counted, it would open the breaker again at once,
// and the traffic behind it would wait another open_for. Records
// dispatched since still count, so an outage that comes back opens it.
func (b *breaker) suspect(seq uint64) bool {
	return b.state == breakerClosed && seq != 0 && seq <= b.openedSeq
}

// noteProbe remembers the code a fresh probe of the first round failed
// with (learned if a second round then closes the breaker).
func (b *breaker) noteProbe(gen uint64, code string) {
	if gen != b.gen || b.state != breakerHalfOpen || b.second {
		return
	}
	if b.probeCodes == nil {
		b.probeCodes = map[string]bool{}
	}
	b.probeCodes[code] = true
}

// waiters is who waits for a probe slot besides the caller: records with
// no failure history (waiting in the line, or queued for a worker) and
// records that failed before (waiting in the line).
type waiters struct {
	fresh, failed bool
	// recent: of the failed ones, some were dispatched after it last
	// opened (line.recentLocked).
	recent bool
}

// admit says whether a call may start at now, and whether it is a probe.
// fresh: the caller's record has no failure history; recent: it failed,
// and was dispatched after the breaker last opened. tr is the transition
// admit made (open → half-open when OpenFor is over).
func (b *breaker) admit(now time.Time, fresh, recent bool, w waiters) (allow, probe bool, tr *transition) {
	if b.state == breakerOpen {
		if now.Before(b.openUntil) {
			return false, false, nil
		}
		tr = b.to(breakerHalfOpen, now)
	}
	if b.state == breakerClosed {
		return true, false, tr
	}
	if b.granted >= b.cfg.Probes {
		return false, false, tr
	}
	// First round: fresh work first; second round: the records that
	// failed before first, and of those the ones that failed since it
	// opened (the first round's failed probes among them) before the
	// ones that opened it: a burst of bad requests held since then fails
	// again for its own reasons, and would say nothing of the service.
	if (!b.second && !fresh && w.fresh) || (b.second && fresh && w.failed) || (b.second && !fresh && !recent && w.recent) {
		return false, false, tr
	}
	b.granted++
	return true, true, tr
}

// slotFree reports a half-open probe slot of the first round free: a
// record that failed before gives its worker to queued fresh work.
func (b *breaker) slotFree() bool {
	return b.state == breakerHalfOpen && !b.second && b.granted < b.cfg.Probes
}

// open reports whether no call may start at now because of the breaker
// (open, its time not over).
func (b *breaker) open(now time.Time) bool {
	return b.state == breakerOpen && now.Before(b.openUntil)
}

// release gives back a probe slot whose outcome is not counted (abandoned,
// a pause code, a request fault). gen: the generation the call started in.
func (b *breaker) release(gen uint64) {
	if gen == b.gen && b.state == breakerHalfOpen && b.granted > 0 {
		b.granted--
	}
}

// record counts the outcome v of a call started at start in generation gen
// (probe: it was a half-open probe) and returns the transition it caused,
// if any. failedWait: records that failed before wait for a probe slot (a
// second round asks them when the fresh probes failed).
func (b *breaker) record(gen uint64, probe bool, start time.Time, v verdict, now time.Time, failedWait bool) *transition {
	if gen != b.gen {
		return nil // a call of an earlier state: it says nothing of this one
	}
	switch v {
	case skipRepeat, skipRequest, skipLearned, skipThrottled, skipSuspect:
		b.skipped.add(now, false)
		if probe {
			b.release(gen)
		}
		return nil
	case skipNone:
		if probe {
			b.release(gen)
		}
		return nil
	}
	failure := v == countFailure
	lastOK := b.lastOK
	if !failure {
		b.lastOK = now
	}
	switch b.state {
	case breakerClosed:
		b.calls.add(now, failure)
		if !failure {
			b.run = 0
			return nil
		}
		// Summed on a failure only: a success cannot open it.
		calls, failed := b.calls.sum(now)
		if start.After(lastOK) {
			b.run++
		}
		c := b.cfg
		switch {
		case b.run+b.others >= c.Consecutive:
			b.why = fmt.Sprintf("%d counted failures in a row", b.run)
			if b.others > 0 {
				b.why = fmt.Sprintf("%d counted failures in a row (%d here, %d in the pipeline's other processes)", b.run+b.others, b.run, b.others)
			}
		case calls >= c.MinCalls && float64(failed) >= c.FailureRatio*float64(calls):
			b.why = fmt.Sprintf("%d of %d counted calls failed in %s", failed, calls, c.Window)
		default:
			return nil
		}
		return b.to(breakerOpen, now)
	case breakerHalfOpen:
		if !probe {
			return nil
		}
		if failure {
			b.failed++
		} else {
			b.ok++
		}
		limit := b.probeFailLimit()
		switch {
		case b.failed >= limit && !b.second && failedWait:
			b.why = fmt.Sprintf("%d of %d fresh probes failed; probing requests that failed before", b.failed, b.cfg.Probes)
			b.second = true
			b.gen++
			b.granted, b.ok, b.failed = 0, 0, 0
			return &transition{from: breakerHalfOpen, to: breakerHalfOpen}
		case b.failed >= limit:
			b.why = fmt.Sprintf("%d of %d probes failed", b.failed, b.cfg.Probes)
			return b.to(breakerOpen, now)
		case b.ok > b.cfg.Probes-limit:
			return b.to(breakerClosed, now)
		}
	}
	return nil
}

// probeFailLimit is how many failed probes open the breaker again:
// FailureRatio of Probes, rounded up, at least 1.
func (b *breaker) probeFailLimit() int {
	return max(1, int(math.Ceil(b.cfg.FailureRatio*float64(b.cfg.Probes)-1e-9)))
}

// to moves the breaker to state s at now, starting a new generation.
func (b *breaker) to(s breakerState, now time.Time) *transition {
	tr := &transition{from: b.state, to: s}
	second := b.second
	b.state, b.since = s, now
	b.gen++
	b.granted, b.ok, b.failed, b.second = 0, 0, 0, false
	switch s {
	case breakerOpen:
		if tr.from == breakerHalfOpen {
			b.reopens++
		} else {
			b.reopens = 0
		}
		b.openFor = min(b.cfg.OpenFor<<min(b.reopens, 20), b.cfg.MaxOpen)
		b.openUntil = now.Add(b.openFor)
	case breakerClosed:
		b.reopens, b.openFor, b.run = 0, b.cfg.OpenFor, 0
		b.calls.reset()
		b.skipped.reset()
		if second {
			b.learned = b.probeCodes
		}
	}
	if s != breakerClosed {
		b.learned = nil
	}
	b.probeCodes = nil
	return tr
}

// counts is the closed window as the status shows it.
func (b *breaker) counts(now time.Time) BreakerCounts {
	calls, failed := b.calls.sum(now)
	skipped, _ := b.skipped.sum(now)
	return BreakerCounts{Window: b.cfg.Window.String(), Calls: calls, Failures: failed, InARow: b.run,
		NotCounted: skipped, Probes: b.granted, ProbesOK: b.ok, ProbesFailed: b.failed}
}

// The line's side of the breaker: the line asks it for calls, tells it
// outcomes, and logs, counts and shows what it did. l.mu held throughout.

// probeClassLocked says how c stands for a half-open breaker's probe
// slots, given what waits in the run queue (queued: fresh work; newest:
// the seq of the newest). fresh: c's record has no failure history and
// was dispatched after the breaker last opened, so there is nothing to
// suspect it of. better: work with a better claim waits in the run queue:
// any fresh work, for a record that failed before; newer fresh work, for
// one that was in the pipeline when the breaker opened (its probes are
// then the newest records, not the rest of a burst that opened it).
func (l *line) probeClassLocked(c caller, queued bool, newest uint64) (fresh, better bool) {
	switch {
	case !c.fresh:
		return false, queued
	case l.br == nil || c.seq == 0 || l.judgedSeqLocked(c.seq, c.born) > l.br.openedSeq:
		return true, false
	}
	return false, newest > c.seq
}

// judgedSeqLocked is the seq the breaker judges a record by (probes,
// suspects): its own, or the last of the opening for a record produced
// before the breaker last opened (born, its record timestamp) that was
// dispatched after it opened and before it closed again. A burst larger
// than one poll is still being fetched when it opens the breaker: its
// rest was as much part of what opened it as the records dispatched by
// then. A record dispatched after the breaker closed is new work,
// however old (a backlog), and counts as such.
func (l *line) judgedSeqLocked(seq uint64, born time.Time) uint64 {
	b := l.br
	if b == nil || seq == 0 || seq <= b.openedSeq || b.openedAt.IsZero() || !born.Before(b.openedAt) {
		return seq
	}
	if b.state == breakerClosed && seq > b.closedSeq {
		return seq
	}
	return b.openedSeq
}

// recentLocked says c's record was dispatched after the breaker last
// opened: failing, it failed since, not as part of what opened it.
func (l *line) recentLocked(c caller) bool {
	return l.br != nil && c.seq != 0 && l.judgedSeqLocked(c.seq, c.born) > l.br.openedSeq
}

// admitLocked asks the breaker whether a caller may call at now, the other
// stages letting it. fresh and better are probeClassLocked's. yield: no,
// and a probe slot is kept for the better work, which no worker has
// taken: give this worker to it.
func (l *line) admitLocked(now time.Time, c caller, fresh, better bool) (allow, probe, yield bool) {
	b := l.br
	if b == nil {
		return true, false, false
	}
	var tr *transition
	allow, probe, tr = b.admit(now, fresh, !fresh && l.recentLocked(c), waiters{fresh: l.freshWaiting > 0 || better, failed: l.failedWaiting > 0, recent: l.recentWaiting > 0})
	l.onBreakerLocked(tr)
	yield = !allow && better && l.freshWaiting == 0 && b.slotFree()
	return allow, probe, yield
}

// countBreakerLocked has the breaker that let t through judge and count
// out (prevCode: the record's last transient failure before the call). A
// breaker that resume has replaced since says nothing.
func (l *line) countBreakerLocked(t ticket, out Outcome, prevCode string, now time.Time) {
	b := t.br
	if b == nil || b != l.br {
		return
	}
	v := b.judge(out, prevCode, t.probe, l.judgedSeqLocked(t.seq, t.born))
	if t.probe && v == countFailure && prevCode == "" {
		b.noteProbe(t.gen, out.Code)
	}
	if c := l.counted[v]; c != nil && t.gen == b.gen {
		c.Inc()
	}
	l.othersLocked(now)
	l.onBreakerLocked(b.record(t.gen, t.probe, t.start, v, now, l.failedWaiting > 0))
	l.tellRunLocked(now)
	if t.probe && v != countSuccess {
		l.kickLocked() // a slot is free again, or the verdict changed
	}
}

// onBreakerLocked logs and counts a breaker transition.
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
	switch tr.to {
	case breakerOpen:
		b.openedSeq, b.openedAt = l.dispatched(), time.Now()
	case breakerClosed:
		b.closedSeq = l.dispatched()
	}
	l.notClosed.Store(tr.to != breakerClosed)
	l.m.breakerState.WithLabelValues(l.name).Set(float64(tr.to))
	l.m.breakerTrans.WithLabelValues(l.name, tr.to.String()).Inc()
	l.publishBreakerLocked(tr, time.Now())
	l.kickLocked()
}

// resetBreakerLocked replaces the breaker with a new, closed one (resume:
// the operator says the service is back); tickets of the old one are not
// counted.
func (l *line) resetBreakerLocked(now time.Time) {
	if l.br == nil {
		return
	}
	wasOpen := l.br.state != breakerClosed
	l.br = newBreaker(l.cfg.Breaker, now)
	if wasOpen {
		l.onBreakerLocked(&transition{from: breakerOpen, to: breakerClosed})
	}
}

func (b *breaker) stopReason() StopReason {
	return StopReason{Reason: stopBreaker, Since: b.since, Until: b.openUntil, Detail: b.why}
}

// breakerStatusLocked fills in the breaker's part of the status at now.
func (l *line) breakerStatusLocked(s *LineStatus, now time.Time) {
	b := l.br
	if b == nil {
		s.Breaker = "disabled"
		return
	}
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

// ratioWindow is the closed breaker's window: calls and the failures among
// them over a rolling span of ten buckets.
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

// add counts a call (hit: a failure) at now.
func (w *ratioWindow) add(now time.Time, hit bool) {
	e := now.UnixNano() / int64(w.bucket)
	s := &w.slots[e%int64(len(w.slots))]
	if s.epoch != e {
		s.epoch, s.calls, s.hits = e, 0, 0
	}
	s.calls++
	if hit {
		s.hits++
	}
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
