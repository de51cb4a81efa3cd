package processor

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// policy is what the decision needs of a pipeline's configuration.
type policy struct {
	sched            retry.Schedule
	ttl              time.Duration // 0: no expiry
	notReadyDeadline time.Duration
	results          bool       // the pipeline has a results topic
	rnd              *rand.Rand // jitter source; nil: the global one
	// callbackWait is Callbacks.Wait of a pipeline with callbacks (0:
	// none): a submit's NotReady waits at least this long for its
	// callback before the first poll.
	callbackWait time.Duration
}

func policyOf(cfg Pipeline) policy {
	p := policy{sched: cfg.Schedule, ttl: cfg.TTL, notReadyDeadline: cfg.NotReadyDeadline, results: cfg.Results != ""}
	// Every tier named once: a retry's decision would format its delay.
	names := make([]string, len(p.sched.Tiers))
	for i := range names {
		names[i] = p.sched.TierName(i)
	}
	p.sched.Names = names
	if cfg.Callbacks != nil {
		p.callbackWait = cfg.Callbacks.Wait
	}
	return p
}

// decision is what becomes of one record. It is made by screen (before the
// handler is called) or decide (from the handler's outcome), both pure
// functions of the record's headers, the outcome, the policy and the time,
// so that every rule can be tested without a broker.
type decision struct {
	// to is where the outcome record goes; "" means nothing is written
	// (success without a results topic): the record is just done.
	to outKind
	// meta is the redrive-* headers of the outcome record: for toDLQ with
	// Reason set (the dlq builder adds group, instance and drops retry-only
	// fields), for toResults only the identity and counts.
	meta retry.Meta
	// tier is the tier's index, for toRetry.
	tier int
	// hop: toRetry without spending an attempt (not due yet).
	hop bool
	// result is the value of the results record, for toResults.
	result []byte
	// early is the outcome label of a decision made without the handler
	// ("invalid", "expired"), for redrive_outcomes_total; "" otherwise.
	early string
}

// identify fills the request id and origin from r when meta lacks them.
func identify(meta retry.Meta, r *kgo.Record) retry.Meta {
	if meta.ID == "" {
		meta.ID = retry.RequestID(r)
	}
	if !meta.HasOrigin {
		meta.HasOrigin = true
		meta.OriginTopic, meta.OriginPartition, meta.OriginOffset, meta.OriginTimestamp = r.Topic, r.Partition, r.Offset, r.Timestamp
	}
	if meta.OriginTimestamp.IsZero() {
		meta.OriginTimestamp = r.Timestamp
	}
	return meta
}

// screen decides what it can before the handler is called: a malformed
// redrive header (DLQ invalid, decodeErr or outOfRange names it), past the
// TTL or the not-ready deadline (DLQ expired), a tier record not due yet
// (hop to the tier covering the rest). Expiry is checked before the hop, so
// that a record past its TTL is dead-lettered, not hopped. call is true
// when none applies. tier is the consumed record's tier index, -1 for the
// main topic.
func screen(meta retry.Meta, decodeErr error, tier int, p policy, now time.Time) (d decision, call bool) {
	if decodeErr == nil {
		decodeErr = outOfRange(meta, tier, p, now)
	}
	if decodeErr != nil {
		fail(&meta, now, retry.ClassInvalid, CodeBadHeader, decodeErr.Error())
		return dead(meta, reasonInvalid, "invalid"), false
	}
	if p.ttl > 0 && now.Sub(meta.OriginTimestamp) > p.ttl {
		fail(&meta, now, retry.ClassExpired, CodeTTL, fmt.Sprintf("request older than ttl %s", p.ttl))
		return dead(meta, reasonExpired, "expired"), false
	}
	if meta.ErrorClass == retry.ClassNotReady && !meta.NotReadySince.IsZero() && now.Sub(meta.NotReadySince) > p.notReadyDeadline {
		fail(&meta, now, retry.ClassExpired, CodeNotReadyDeadline, fmt.Sprintf("still not ready %s after the first not-ready answer (not_ready_deadline %s)",
			now.Sub(meta.NotReadySince).Round(time.Second), p.notReadyDeadline))
		return dead(meta, reasonExpired, "expired"), false
	}
	if tier >= 0 && now.Before(meta.Due) {
		// Due later than this tier's delay: re-queue, no attempt spent.
		idx, _ := p.sched.TierForDelay(meta.Due.Sub(now))
		meta.Tier = p.sched.TierName(idx)
		return retryTo(meta, idx, true), false
	}
	return decision{}, true
}

// DefaultDueHorizon is how far beyond the largest tier (with its jitter) a
// retry record's redrive-due may lie when neither max_due, ttl nor (for a
// not-ready record) not_ready_deadline bounds it: the HTTP handler's
// largest Retry-After.
const DefaultDueHorizon = 24 * time.Hour

// dueSkew is the clock difference between processes that outOfRange
// allows on top of the due limit: a record written at the limit by a
// process whose clock is ahead is not invalid.
const dueSkew = time.Minute

// dueLimit is how far ahead of now a retry record with headers meta may be
// due: max_due when configured; else the largest tier
// with its jitter plus what bounds the record's life: ttl when set, and
// for a not-ready record not_ready_deadline, whichever is smaller, or
// DefaultDueHorizon when neither applies. A record due later would never be
// handled before it expires (or at all): it is invalid.
func (p policy) dueLimit(meta retry.Meta) time.Duration {
	if p.sched.MaxDue > 0 {
		return p.sched.MaxDue
	}
	return min(p.sched.LongestWait()+p.dueHorizon(meta), retry.MaxMaxDue)
}

// dueHorizon is what dueLimit adds to the longest wait by default.
func (p policy) dueHorizon(meta retry.Meta) time.Duration {
	h := DefaultDueHorizon
	if p.ttl > 0 {
		h = p.ttl
	}
	if meta.ErrorClass == retry.ClassNotReady && p.notReadyDeadline > 0 && p.notReadyDeadline < h {
		h = p.notReadyDeadline
	}
	return h
}

// dueLimitWhy says how dueLimit came about, for the error message.
func (p policy) dueLimitWhy(meta retry.Meta) string {
	h := p.dueHorizon(meta)
	var why string
	switch {
	case p.sched.MaxDue > 0:
		return "max_due " + p.sched.MaxDue.String()
	case p.sched.LongestWait()+h > retry.MaxMaxDue:
		return "at most " + retry.MaxMaxDue.String()
	case meta.ErrorClass == retry.ClassNotReady && h == p.notReadyDeadline:
		why = "not_ready_deadline " + h.String()
	case p.ttl > 0:
		why = "ttl " + h.String()
	default:
		why = h.String()
	}
	return "the largest tier with its jitter " + p.sched.LongestWait().String() + " plus " + why
}

// capDue keeps a due time redrive writes within dueLimit, so that redrive
// never writes a record it would refuse to read: a minimum delay (a long
// Retry-After) beyond it is cut to it (decide also cuts the minimum delay
// before Schedule.Next adds jitter to it, so that nothing overflows).
func (p policy) capDue(meta retry.Meta, now, due time.Time) time.Time {
	if lim := now.Add(p.dueLimit(meta)); due.After(lim) {
		return lim.Truncate(time.Millisecond)
	}
	return due
}

// outOfRange says why meta, decoded without error, cannot be handled, or
// nil: a count at the top of its range (the next one would not be
// readable), or a tier record due further ahead than dueLimit (plus
// dueSkew).
func outOfRange(meta retry.Meta, tier int, p policy, now time.Time) error {
	if meta.Attempt >= retry.MaxAttempt {
		return &retry.BadHeaderError{Header: retry.HeaderAttempt, Value: strconv.Itoa(meta.Attempt),
			Reason: fmt.Sprintf("at its maximum %d: no further attempt can be counted", retry.MaxAttempt)}
	}
	if meta.Polls >= retry.MaxCount {
		return &retry.BadHeaderError{Header: retry.HeaderPolls, Value: strconv.Itoa(meta.Polls),
			Reason: fmt.Sprintf("at its maximum %d: no further poll can be counted", retry.MaxCount)}
	}
	if tier < 0 || meta.Due.IsZero() {
		return nil
	}
	if ahead := meta.Due.Sub(now); ahead > p.dueLimit(meta)+dueSkew {
		return &retry.BadHeaderError{Header: retry.HeaderDue, Value: strconv.FormatInt(meta.Due.UnixMilli(), 10),
			Reason: fmt.Sprintf("due %s, %s ahead: further than the limit %s (%s)",
				meta.Due.UTC().Format(time.RFC3339), ahead.Round(time.Second), p.dueLimit(meta), p.dueLimitWhy(meta))}
	}
	return nil
}

// clockSkew is how far ahead of now a time from a record may be without
// being clamped: clocks of producers and processes differ a little.
const clockSkew = time.Second

// clampMask says which times clampFuture (or the wait bound) clamped: bit
// i is clampedTimes[i].
type clampMask uint8

const (
	clampRecordTimestamp = iota // the consumed record's timestamp (the wait bound)
	clampOriginTimestamp        // redrive-origin-timestamp, or the record's on the first read (ttl)
	clampNotReadySince          // redrive-not-ready-since (not_ready_deadline)
)

// clampFuture sets the times in meta that drive ages to now when they lie
// more than clockSkew ahead of it: the origin timestamp
// (ttl counts from it) and redrive-not-ready-since (not_ready_deadline
// counts from it). A future one would make the age negative, so the
// request would never expire; clamped, the age counts from the first time
// redrive saw it, and the clamped time is what later hops carry. It returns
// what it clamped, for redrive_future_times_clamped_total.
func clampFuture(meta *retry.Meta, now time.Time) (clamped clampMask) {
	limit := now.Add(clockSkew)
	// Before 1970 (a record without a timestamp has -1 ms) is as unusable:
	// written on, it would make the next hop's redrive-origin-timestamp
	// malformed.
	if meta.OriginTimestamp.After(limit) || meta.OriginTimestamp.UnixMilli() < 0 {
		meta.OriginTimestamp = now
		clamped |= 1 << clampOriginTimestamp
	}
	if meta.NotReadySince.After(limit) {
		meta.NotReadySince = now
		clamped |= 1 << clampNotReadySince
	}
	return clamped
}

// attemptOf is the attempt number, whether the call is a not-ready poll, and
// the state the handler gets, for a record with these headers. The state
// is passed on whatever the last class: a not-ready answer's, and a
// transient failure's or a pause's that carried one (a failed poll of a
// job API keeps its job id, so the next attempt polls again instead of
// submitting a second job).
func attemptOf(meta retry.Meta) (attempt int, poll bool, state []byte) {
	poll = meta.ErrorClass == retry.ClassNotReady
	attempt = meta.Attempt + 1
	if poll && meta.Attempt > 0 {
		attempt = meta.Attempt // a poll belongs to the attempt that was accepted
	}
	return attempt, poll, meta.State
}

// decide is what becomes of a record with headers meta (identity and
// origin filled) whose handler answered out at now. An Outcome without a
// valid Kind is decided as Transient (see checked).
func decide(meta retry.Meta, out Outcome, p policy, now time.Time) decision {
	return decideAs(meta, out, p, now, false)
}

// decideCallback is decide for an outcome that a callback gave
// (callback_match.go): the same rules, but it is not a poll, so redrive-polls
// is not counted.
func decideCallback(meta retry.Meta, out Outcome, p policy, now time.Time) decision {
	return decideAs(meta, out, p, now, true)
}

func decideAs(meta retry.Meta, out Outcome, p policy, now time.Time, byCallback bool) decision {
	out, _ = checked(out)
	attempt, poll, callState := attemptOf(meta)
	if byCallback {
		poll = false // redrive-polls counts handler calls only
	}
	meta.State = nil
	meta.Due, meta.Tier = time.Time{}, ""
	if out.Kind == Paused {
		return decidePaused(meta, out, p, now)
	}
	if out.Kind == Transient && out.Throttled {
		// A 429 not waited out in memory (a Retry-After over
		// MaxThrottleWait, or its waits spent): the service asks to
		// wait, it did not fail the request; spending an attempt would
		// dead-letter requests for the provider's rate.
		return decideThrottled(meta, out, p, now)
	}
	// Any other answer ends the attempt made (a transient failure's: a
	// submit's, one more than before, or a poll's, the attempt its job
	// was submitted in), and a poll is counted.
	meta.Attempt = attempt
	meta.Polls += btoi(poll)
	switch out.Kind {
	case Success:
		return decideSuccess(meta, out, p)
	case NotReady:
		return decideNotReady(meta, out, p, now, len(callState) == 0)
	case Transient:
		return decideTransient(meta, out, p, now)
	case Invalid:
		fail(&meta, now, retry.ClassInvalid, out.Code, errText(out, "invalid request"))
		return dead(meta, reasonInvalid, "")
	default: // Permanent
		fail(&meta, now, retry.ClassPermanent, out.Code, errText(out, "permanent failure"))
		return dead(meta, reasonPermanent, "")
	}
}

// decideSuccess writes the result, with the identity and counts only,
// when the pipeline has a results topic.
func decideSuccess(meta retry.Meta, out Outcome, p policy) decision {
	if !p.results {
		return decision{}
	}
	m := retry.Meta{ID: meta.ID, Attempt: meta.Attempt, Polls: meta.Polls, Redrives: meta.Redrives, HasOrigin: true,
		OriginTopic: meta.OriginTopic, OriginPartition: meta.OriginPartition, OriginOffset: meta.OriginOffset, OriginTimestamp: meta.OriginTimestamp}
	return decision{to: toResults, meta: m, result: out.Result}
}

// decideNotReady sends the record to the tier of its next poll, with the
// state to poll with. submit: the call carried no state.
func decideNotReady(meta retry.Meta, out Outcome, p policy, now time.Time, submit bool) decision {
	if meta.NotReadySince.IsZero() {
		meta.NotReadySince = now
	}
	fail(&meta, now, retry.ClassNotReady, out.Code, errText(out, "not ready"))
	if d, bad := badState(&meta, out, now); bad {
		return d
	}
	meta.State = out.State
	minDelay := out.MinDelay
	if submit && minDelay < p.callbackWait {
		// A submit in a pipeline with callbacks: the record waits for
		// its callback; the first poll is not before the wait is over.
		minDelay = p.callbackWait
	}
	idx, due := p.sched.NextPoll(now, min(minDelay, p.dueLimit(meta)), p.rnd)
	return p.retryAt(meta, now, idx, due)
}

// decideTransient sends the record to the tier of its next attempt, or
// to the DLQ once the schedule's attempts are spent.
func decideTransient(meta retry.Meta, out Outcome, p policy, now time.Time) decision {
	fail(&meta, now, retry.ClassTransient, out.Code, errText(out, "transient failure"))
	if len(out.State) > 0 {
		// A failed poll that keeps its job: the next attempt polls the
		// same job again (never submits a second one), and the
		// not-ready clock goes on.
		if d, bad := badState(&meta, out, now); bad {
			return d
		}
		meta.State = out.State
	} else {
		meta.NotReadySince = time.Time{}
	}
	if p.sched.Exhausted(meta.Attempt) {
		return dead(meta, reasonExhausted, "")
	}
	idx, due := p.sched.Next(now, meta.Attempt+1, min(out.MinDelay, p.dueLimit(meta)), p.rnd)
	return p.retryAt(meta, now, idx, due)
}

// decidePaused: the pipeline's line holds a paused record and calls it
// again (line.go); decided here only without one: back to the tier
// covering the pause, no attempt spent, its State (a job id) kept.
func decidePaused(meta retry.Meta, out Outcome, p policy, now time.Time) decision {
	if d, bad := keepWaiting(&meta, out, now, "paused"); bad {
		return d
	}
	idx, due := p.sched.Next(now, 0, min(out.MinDelay, p.dueLimit(meta)), p.rnd)
	return p.retryAt(meta, now, idx, due)
}

// decideThrottled: a 429 past what is waited out in memory (throttle.go)
// goes to the smallest tier covering its Retry-After (1 s without one),
// due then as a poll is (the service's own timing, not a backoff), no
// attempt spent, its State kept.
func decideThrottled(meta retry.Meta, out Outcome, p policy, now time.Time) decision {
	if d, bad := keepWaiting(&meta, out, now, "throttled"); bad {
		return d
	}
	idx, due := p.sched.NextPoll(now, min(max(out.MinDelay, time.Second), p.dueLimit(meta)), p.rnd)
	return p.retryAt(meta, now, idx, due)
}

// keepWaiting notes the answer of a record the service asked to wait
// (what: the error text without the outcome's) and keeps its State;
// bad with the dead letter when that State cannot be written.
func keepWaiting(meta *retry.Meta, out Outcome, now time.Time, what string) (decision, bool) {
	fail(meta, now, retry.ClassTransient, out.Code, errText(out, what))
	if len(out.State) > 0 {
		if d, bad := badState(meta, out, now); bad {
			return d, true
		}
		meta.State = out.State
	}
	return decision{}, false
}

// retryAt is the retry to tier idx, due at due (cut to dueLimit).
func (p policy) retryAt(meta retry.Meta, now time.Time, idx int, due time.Time) decision {
	meta.Due, meta.Tier = p.capDue(meta, now, due), p.sched.TierName(idx)
	return retryTo(meta, idx, false)
}

// badState is the permanent dead letter of an outcome whose State cannot
// be written: larger than retry.MaxStateBytes or not UTF-8 (header values
// are UTF-8 text, the wire contract; binary state would make the retry
// record invalid on its next read). bad is false when the state is fine.
func badState(meta *retry.Meta, out Outcome, now time.Time) (d decision, bad bool) {
	if len(out.State) > retry.MaxStateBytes {
		fail(meta, now, retry.ClassPermanent, CodeStateTooLarge, fmt.Sprintf("handler state of %d bytes exceeds %d", len(out.State), retry.MaxStateBytes))
		return dead(*meta, reasonPermanent, ""), true
	}
	if !utf8.Valid(out.State) {
		fail(meta, now, retry.ClassPermanent, CodeBadState, "handler state is not valid UTF-8 (encode binary state, e.g. base64)")
		return dead(*meta, reasonPermanent, ""), true
	}
	return decision{}, false
}

func dead(meta retry.Meta, reason, early string) decision {
	meta.Reason = reason
	return decision{to: toDLQ, meta: meta, early: early}
}

// crashed is the decision on a share group's record delivered more than
// max times with no outcome: each delivery ended the process that had it
// (or its lock ran out), so it is dead-lettered before it is handled again.
func crashed(meta retry.Meta, deliveries, max int, now time.Time) decision {
	meta.Deliveries = deliveries
	fail(&meta, now, retry.ClassPermanent, CodeCrashed,
		fmt.Sprintf("delivered %d times with no outcome (max_deliveries %d): handling it ended the process each time", deliveries, max))
	return dead(meta, reasonCrashed, reasonCrashed)
}

func retryTo(meta retry.Meta, idx int, hop bool) decision {
	// A record back from the DLQ or a foreign producer may carry DLQ-only
	// headers; a retry record never does.
	meta.Reason, meta.Group, meta.Instance = "", "", ""
	return decision{to: toRetry, meta: meta, tier: idx, hop: hop}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func errText(out Outcome, dflt string) string {
	if out.Err != nil {
		return out.Err.Error()
	}
	if out.Code != "" {
		return out.Code
	}
	return dflt
}

func fail(m *retry.Meta, now time.Time, class retry.Class, code, msg string) {
	if m.FirstErrorAt.IsZero() {
		m.FirstErrorAt = now
	}
	m.LastErrorAt = now
	m.ErrorClass, m.ErrorCode, m.Error = class, code, retry.TruncateUTF8(msg, retry.MaxErrorBytes)
}
