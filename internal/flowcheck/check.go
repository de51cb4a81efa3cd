package flowcheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Outcome is one outcome record the run read: a result or a dead letter
// (read_committed in an exactly-once run).
type Outcome struct {
	ID         string
	DeadLetter bool
	Reason     string        // a dead letter's redrive-reason
	At         time.Duration // when the reader saw it, on the service's clock
}

// Run is what one run left to judge.
type Run struct {
	Scenario *Scenario
	Calls    []Call
	Outcomes []Outcome
	// ForeignCalls and ForeignOutcomes carry an id the scenario never
	// produced.
	ForeignCalls, ForeignOutcomes int
	// Opens is how many times a replica's breaker was seen opening.
	Opens int
	// Probes is the breaker's probes per half-open (its default).
	Probes int
	// Bound is when every request the service lets succeed must have its
	// result (the baseline's last result × 1.25 + open_for + 5 s); 0: not
	// checked (the baseline itself).
	Bound time.Duration
	// BoundWhy says how Bound was made, for the report.
	BoundWhy string
	// Succeeded are the requests the service let succeed: those with a
	// result in the breaker-off run. Bound holds for them; nil: for all.
	// (A request that run dead-lettered in an outage, which the breaker
	// saves, is not one the service let succeed.)
	Succeeded map[string]bool
	// End is when the run stopped reading outcomes.
	End time.Duration
	// ClockSteps are the steps of the replicas' wall clock the run made,
	// at their times on the service's clock (Service.Steps).
	ClockSteps []ClockStep
}

// Invariants, as violations name them.
const (
	Lost             = "lost"               // no result and no dead letter
	WrittenTwice     = "written-twice"      // more than one outcome where that is never allowed
	ResultUnanswered = "result-unanswered"  // a result without a 200 from the service
	UnearnedDead     = "unearned-dead"      // dead-lettered, yet the service's answers do not justify it
	EarlyRetry       = "early-retry"        // attempt n+1 called before tier n's delay after attempt n failed
	BeforeRetryAfter = "before-retry-after" // called again before the Retry-After of its last answer
	EarlyPoll        = "early-poll"         // a not-ready job polled before the first tier's delay
	SkippedAttempt   = "skipped-attempt"    // attempt n+1 called without attempt n ever called
	CallAfterSuccess = "call-after-success" // called again after a 200, no rebalance in the scenario
	Late             = "late"               // a request the service lets succeed finished after the bound
	ExtraCalls       = "extra-calls"        // calls beyond one per attempt that no answer explains
	Foreign          = "foreign"            // calls or outcomes with an id never produced
)

// Violation is one broken invariant, for one request where it is about
// one.
type Violation struct {
	Invariant string
	ID        string
	Detail    string
}

func (v Violation) String() string {
	if v.ID == "" {
		return v.Invariant + ": " + v.Detail
	}
	return v.Invariant + ": " + v.ID + ": " + v.Detail
}

// Check judges run r.
func Check(r Run) []Violation {
	sc := r.Scenario
	var vs []Violation
	bad := func(inv, id, format string, args ...any) {
		vs = append(vs, Violation{Invariant: inv, ID: id, Detail: fmt.Sprintf(format, args...)})
	}
	if r.ForeignCalls > 0 || r.ForeignOutcomes > 0 {
		bad(Foreign, "", "%d calls and %d outcome records with an id never produced", r.ForeignCalls, r.ForeignOutcomes)
	}
	calls := map[string][]Call{}
	for _, c := range r.Calls {
		calls[c.ID] = append(calls[c.ID], c)
	}
	outs := map[string][]Outcome{}
	for _, o := range r.Outcomes {
		outs[o.ID] = append(outs[o.ID], o)
	}
	extra, throttles, crashes := 0, 0, 0
	for i := range sc.Requests {
		req := &sc.Requests[i]
		cs := calls[req.ID]
		slices.SortStableFunc(cs, func(a, b Call) int { return cmp.Compare(a.At, b.At) })
		os := outs[req.ID]
		log := func() string { return describe(req, cs, os) }

		// Nothing lost; nothing written twice.
		switch {
		case len(os) == 0:
			bad(Lost, req.ID, "no result and no dead letter by the run's end at %v; %s", r.End.Round(time.Millisecond), log())
		case len(os) > 1 && !sc.TwiceAllowed():
			bad(WrittenTwice, req.ID, "%d outcome records (%s, no rebalance can explain one); %s", len(os), sc.Delivery, log())
		}

		// Each outcome earned by the service's answers.
		var result *Outcome
		for j := range os {
			o := &os[j]
			if !o.DeadLetter {
				if result == nil {
					result = o
				}
				if !slices.ContainsFunc(cs, func(c Call) bool { return c.Kind == OK && c.At <= o.At }) {
					bad(ResultUnanswered, req.ID, "a result at %v, and no call answered 200 before it; %s", o.At, log())
				}
				continue
			}
			if why := unearned(sc, o, cs); why != "" {
				bad(UnearnedDead, req.ID, "dead-lettered %q at %v: %s; %s", o.Reason, o.At, why, log())
			}
		}

		// The healthy finish within the bound.
		if r.Bound > 0 && result != nil && result.At > r.Bound && (r.Succeeded == nil || r.Succeeded[req.ID]) {
			bad(Late, req.ID, "result at %v, bound %v (%s); %s", result.At, r.Bound, r.BoundWhy, log())
		}

		// Calls: none early, none without a cause.
		vs = append(vs, timing(sc, wall{r.ClockSteps}, req, cs, log)...)
		keys := map[string]int{}
		for _, c := range cs {
			keys[fmt.Sprintf("%d/%s", c.Attempt, c.State)]++
			switch c.Kind {
			case Throttle:
				throttles++
			case Crash:
				crashes++
			}
		}
		for _, n := range keys {
			extra += n - 1
		}
	}

	// Calls beyond one per attempt (and poll): each is explained by a 429,
	// a record the breaker held when it opened (at most the concurrency
	// per replica per opening), a probe, or a rebalance handing records in
	// flight to another replica.
	replicas := sc.Replicas + len(sc.Kills) + crashes
	allowed := throttles + (r.Opens+1)*(sc.Concurrency+r.Probes)*replicas
	if sc.RepeatsAllowed() {
		allowed += len(sc.Requests) * replicas
	}
	if extra > allowed {
		bad(ExtraCalls, "", "%d calls beyond one per attempt and poll; at most %d are explained (%d answers 429, (%d breaker openings + 1) × (concurrency %d + %d probes) × %d replicas)",
			extra, allowed, throttles, r.Opens, sc.Concurrency, r.Probes, replicas)
	}
	return vs
}

// unearned says why dead letter o is not justified by the calls cs; ""
// when it is. Permanent: a call answered 400. Exhausted: max_attempts
// attempts, each with a failure that is not a 429 (a 429 is the service
// asking to slow down, not the request failing: it keeps its attempt).
// Crashed: a call of it crashed a replica. Nothing else is justified: no
// scenario has a TTL or runs past the not-ready deadline.
func unearned(sc *Scenario, o *Outcome, cs []Call) string {
	switch o.Reason {
	case "permanent":
		if slices.ContainsFunc(cs, func(c Call) bool { return c.Kind == Permanent && c.At <= o.At }) {
			return ""
		}
		return "no call was answered 400"
	case "crashed":
		if slices.ContainsFunc(cs, func(c Call) bool { return c.Kind == Crash && c.At <= o.At }) {
			return ""
		}
		return "no call of it crashed a replica"
	case "exhausted":
		failed := map[int]bool{}
		for _, c := range cs {
			if c.At <= o.At && c.Kind.Failed() && c.Kind != Throttle && c.Kind != NotReady {
				failed[c.Attempt] = true
			}
		}
		if len(failed) >= sc.MaxAttempts {
			return ""
		}
		return fmt.Sprintf("%d of %d attempts failed (429s keep their attempt)", len(failed), sc.MaxAttempts)
	}
	return "no answer of the service leads to this reason"
}

// hangupSlack is how much later than the handler the service may see a
// call given up, or a timed-out call arrive after the handler sent it:
// the handler's timeout starts before the request is on its way, and
// under -race with hundreds of calls in flight on 2 cores that way took
// up to 140 ms (seeds 4 and 15). An early retry this bound lets through
// is under a third of the shortest tier; the injected-clock tests check
// due times to the millisecond.
const hangupSlack = 300 * time.Millisecond

// wall converts a time on the service's clock (monotonic, from the start)
// to the replicas' wall clock, which the run's steps moved: due times and
// Retry-After waits are kept by that clock (processor/clock.go), so the
// gaps timing checks are measured by it. The processor reads its clock a
// little after an answer and a little before a call: a step in between
// is counted in the processor's favour, within stepSlack.
type wall struct{ steps []ClockStep }

// stepSlack is how long before a call's arrival the processor may have
// read its clock for it, and how long after an answer it may read its
// clock for the outcome, under -race on a loaded machine.
const stepSlack = hangupSlack

// offset is the sum of the steps made by t.
func (w wall) offset(t time.Duration) time.Duration {
	var o time.Duration
	for _, s := range w.steps {
		if s.At <= t {
			o += s.By
		}
	}
	return o
}

// lo is the least wall-clock reading the processor can have taken for
// an answer it had at t at the earliest, and by end + stepSlack (end: when
// the service answered, or saw the caller hang up).
func (w wall) lo(t, end time.Duration) time.Duration {
	o := w.offset(t)
	for _, s := range w.steps {
		if s.At > t && s.At <= max(t, end)+stepSlack {
			o = min(o, w.offset(s.At))
		}
	}
	return t + o
}

// hi is the greatest wall-clock reading the processor can have taken
// within stepSlack before t.
func (w wall) hi(t time.Duration) time.Duration {
	o := w.offset(t)
	for _, s := range w.steps {
		if s.At > t-stepSlack && s.At <= t {
			o = max(o, w.offset(s.At-1))
		}
	}
	return t + o
}

// timing checks the gaps between the calls of one request, in arrival
// order, by the replicas' wall clock (w): attempt n+1 not before tier n's delay after attempt n failed
// (attempt n called at all), a call not before the Retry-After of the
// answer before it, a poll not before the first tier's delay, no call
// after a 200. Where a rebalance may hand a record to another replica,
// two handlings of one request interleave: the tier check then measures
// from attempt n's first failing call (never a false alarm), and the
// checks that need the one call before are skipped.
func timing(sc *Scenario, w wall, req *Request, cs []Call, log func() string) []Violation {
	var vs []Violation
	bad := func(inv, format string, args ...any) {
		vs = append(vs, Violation{Invariant: inv, ID: req.ID, Detail: fmt.Sprintf(format, args...) + "; " + log()})
	}
	seq := !sc.RepeatsAllowed()
	// When a failing call came back to the processor, at the earliest.
	// The service answers before the handler reads the answer; but it
	// notices a hangup only after the handler gave up, tens of ms later on
	// a loaded machine, and a timed-out call was given up by its arrival +
	// the timeout (the handler's clock started before it arrived): from
	// the earlier of the two, less hangupSlack for the request's way.
	back := func(p *Call) time.Duration {
		switch p.Kind {
		case Hangup:
			return min(p.End, p.At+sc.Timeout) - hangupSlack
		case Crash:
			return p.End - hangupSlack
		}
		return p.End
	}
	for j, c := range cs {
		if c.Attempt >= 2 {
			var prev *Call
			called := false
			for k := range cs {
				p := &cs[k]
				if p.Attempt != c.Attempt-1 {
					continue
				}
				called = called || p.At <= c.At
				if k == j || p.End > c.At || !p.Kind.Failed() {
					continue
				}
				if prev == nil || (seq && p.End > prev.End) {
					prev = p
				}
			}
			switch {
			case !called:
				bad(SkippedAttempt, "attempt %d called at %v, attempt %d never before", c.Attempt, c.At, c.Attempt-1)
			case prev != nil && w.hi(c.At)-w.lo(back(prev), prev.End) < sc.Tier(prev.Attempt):
				bad(EarlyRetry, "attempt %d at %v, %v after attempt %d failed (%s) at %v%s; tier %v",
					c.Attempt, c.At, w.hi(c.At)-w.lo(back(prev), prev.End), prev.Attempt, prev.Kind, back(prev), w.says(), sc.Tier(prev.Attempt))
			}
		}
		if !seq || j == 0 {
			continue
		}
		// The call just before, ended before this one came.
		var p *Call
		for k := j - 1; k >= 0; k-- {
			if cs[k].End <= c.At {
				p = &cs[k]
				break
			}
		}
		if p == nil {
			continue
		}
		gap := w.hi(c.At) - w.lo(back(p), p.End)
		switch {
		case p.Kind == OK:
			bad(CallAfterSuccess, "called at %v (attempt %d) after a 200 at %v", c.At, c.Attempt, back(p))
		case p.RetryAfter > 0 && gap < time.Duration(p.RetryAfter)*time.Second:
			bad(BeforeRetryAfter, "called at %v, %v after a %s with Retry-After: %d%s", c.At, gap, p.Kind, p.RetryAfter, w.says())
		case p.Kind == NotReady && c.Attempt == p.Attempt && gap < sc.Tier(1):
			bad(EarlyPoll, "polled at %v, %v after a not-ready answer%s; tier %v", c.At, gap, w.says(), sc.Tier(1))
		}
	}
	return vs
}

// says is how a report names the clock of a gap: the wall clock where it
// stepped.
func (w wall) says() string {
	if len(w.steps) == 0 {
		return ""
	}
	return " by the replicas' wall clock (stepped)"
}

// Stories is every request's story (its script, calls and outcomes), a
// line each, for a verbose report.
func Stories(r Run) []string {
	calls := map[string][]Call{}
	for _, c := range r.Calls {
		calls[c.ID] = append(calls[c.ID], c)
	}
	outs := map[string][]Outcome{}
	for _, o := range r.Outcomes {
		outs[o.ID] = append(outs[o.ID], o)
	}
	var lines []string
	for i := range r.Scenario.Requests {
		req := &r.Scenario.Requests[i]
		cs := calls[req.ID]
		slices.SortStableFunc(cs, func(a, b Call) int { return cmp.Compare(a.At, b.At) })
		lines = append(lines, req.ID+": "+describe(req, cs, outs[req.ID]))
	}
	return lines
}

// describe is one request's story for a report: its script, its calls
// and its outcomes.
func describe(req *Request, cs []Call, os []Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "script %s; calls:", req.Class)
	const most = 12
	for i, c := range cs {
		if i == most {
			fmt.Fprintf(&b, " … %d more", len(cs)-most)
			break
		}
		fmt.Fprintf(&b, " [a%d", c.Attempt)
		if c.State != "" {
			b.WriteString(" poll")
		}
		fmt.Fprintf(&b, " %.3fs→%.3fs %s", c.At.Seconds(), c.End.Seconds(), c.Kind)
		if c.RetryAfter > 0 {
			fmt.Fprintf(&b, " RA%d", c.RetryAfter)
		}
		if c.Cause != "script" {
			b.WriteString(" " + c.Cause)
		}
		b.WriteString("]")
	}
	if len(cs) == 0 {
		b.WriteString(" none")
	}
	b.WriteString("; outcomes:")
	for _, o := range os {
		if o.DeadLetter {
			fmt.Fprintf(&b, " dead letter %s at %.3fs", o.Reason, o.At.Seconds())
		} else {
			fmt.Fprintf(&b, " result at %.3fs", o.At.Seconds())
		}
	}
	if len(os) == 0 {
		b.WriteString(" none")
	}
	return b.String()
}

// Summary groups vs by invariant: a line per invariant with its count and
// up to examples of them.
func Summary(vs []Violation, examples int) string {
	by := map[string][]Violation{}
	for _, v := range vs {
		by[v.Invariant] = append(by[v.Invariant], v)
	}
	var b strings.Builder
	for _, inv := range sortedKeys(by) {
		list := by[inv]
		fmt.Fprintf(&b, "%s: %d\n", inv, len(list))
		for i, v := range list {
			if i == examples {
				break
			}
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
