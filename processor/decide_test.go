package processor

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

var (
	t0    = time.UnixMilli(1_740_830_400_000)
	sched = retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 3}
	pol   = policy{sched: sched, ttl: time.Hour, notReadyDeadline: 10 * time.Minute, results: true}
)

// fresh is a request's headers on its first handling from the main topic.
func fresh() retry.Meta {
	return retry.Meta{ID: "req-1", Redrives: 1, HasOrigin: true, OriginTopic: "solve", OriginPartition: 2, OriginOffset: 7, OriginTimestamp: t0.Add(-time.Minute)}
}

// failed is fresh after n failed attempts, the last of class c at t0-10s.
func failed(n int, c retry.Class) retry.Meta {
	m := fresh()
	m.Attempt = n
	m.FirstErrorAt, m.LastErrorAt = t0.Add(-40*time.Second), t0.Add(-10*time.Second)
	m.ErrorClass, m.ErrorCode, m.Error = c, "old_code", "old error"
	m.Due, m.Tier = t0.Add(-time.Millisecond), "30s"
	return m
}

// polled is a request accepted at attempt 1 and polled twice.
func polled() retry.Meta {
	m := failed(1, retry.ClassNotReady)
	m.Polls, m.State, m.NotReadySince = 2, []byte("task-9"), t0.Add(-time.Minute)
	return m
}

// marked is m with a failure of class c at t0.
func marked(m retry.Meta, c retry.Class, code, msg string) retry.Meta {
	if m.FirstErrorAt.IsZero() {
		m.FirstErrorAt = t0
	}
	m.LastErrorAt, m.ErrorClass, m.ErrorCode, m.Error = t0, c, code, msg
	return m
}

// errored is m after its handler answered a failure of class c at t0: the
// previous state and due time are gone.
func errored(m retry.Meta, c retry.Class, code, msg string) retry.Meta {
	m = marked(m, c, code, msg)
	m.State, m.Due, m.Tier = nil, time.Time{}, ""
	return m
}

func toTier(m retry.Meta, idx int, after time.Duration) decision {
	m.Due, m.Tier = t0.Add(after), retry.FormatDelay(sched.Tiers[idx])
	return decision{to: toRetry, meta: m, tier: idx}
}

func toDead(m retry.Meta, reason string) decision {
	m.Reason = reason
	return decision{to: toDLQ, meta: m}
}

func with[T any](v T, f func(*T)) T {
	f(&v)
	return v
}

// TestDecide is the outcome table: every kind of answer, on a first
// attempt, a retry and a poll, with the schedule's tiers and limits.
func TestDecide(t *testing.T) {
	errNoSlot := errors.New("503: no slot")
	cases := []struct {
		name string
		meta retry.Meta
		out  Outcome
		pol  policy
		want decision
	}{
		{"success to the results topic", fresh(), Succeed([]byte("answer")), pol,
			decision{to: toResults, result: []byte("answer"), meta: retry.Meta{ID: "req-1", Attempt: 1, Redrives: 1, HasOrigin: true,
				OriginTopic: "solve", OriginPartition: 2, OriginOffset: 7, OriginTimestamp: t0.Add(-time.Minute)}}},
		{"success without a results topic writes nothing", fresh(), Succeed([]byte("answer")), policy{sched: sched}, decision{}},
		{"success after retries counts the attempt, drops the errors", failed(2, retry.ClassTransient), Succeed(nil), pol,
			decision{to: toResults, meta: retry.Meta{ID: "req-1", Attempt: 3, Redrives: 1, HasOrigin: true,
				OriginTopic: "solve", OriginPartition: 2, OriginOffset: 7, OriginTimestamp: t0.Add(-time.Minute)}}},
		{"success on a poll: attempt unchanged, polls+1", polled(), Succeed(nil), pol,
			decision{to: toResults, meta: retry.Meta{ID: "req-1", Attempt: 1, Polls: 3, Redrives: 1, HasOrigin: true,
				OriginTopic: "solve", OriginPartition: 2, OriginOffset: 7, OriginTimestamp: t0.Add(-time.Minute)}}},

		{"transient on attempt 1: first tier", fresh(), Retry("http_503", errNoSlot), pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_503", "503: no slot"), 0, 5*time.Second)},
		{"transient on attempt 2: second tier", failed(1, retry.ClassTransient), Retry("http_503", errNoSlot), pol,
			toTier(errored(failed(2, retry.ClassTransient), retry.ClassTransient, "http_503", "503: no slot"), 1, 30*time.Second)},
		{"transient on the last attempt: exhausted", failed(2, retry.ClassTransient), Retry("http_503", errNoSlot), pol,
			toDead(errored(failed(3, retry.ClassTransient), retry.ClassTransient, "http_503", "503: no slot"), reasonExhausted)},
		{"transient with max_attempts 1: exhausted at once", fresh(), Retry("http_503", nil), policy{sched: retry.Schedule{Tiers: sched.Tiers, MaxAttempts: 1}},
			toDead(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_503", "http_503"), reasonExhausted)},
		{"retry-after moves up to the tier covering it", fresh(), RetryAfter("http_429", nil, 20*time.Second), pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_429", "http_429"), 1, 30*time.Second)},
		{"retry-after shorter than the attempt's tier changes nothing", failed(1, retry.ClassTransient), RetryAfter("http_429", nil, time.Second), pol,
			toTier(errored(failed(2, retry.ClassTransient), retry.ClassTransient, "http_429", "http_429"), 1, 30*time.Second)},
		{"retry-after beyond the last tier: last tier, due after the delay", fresh(), RetryAfter("http_429", nil, time.Hour), pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_429", "http_429"), 2, time.Hour)},
		// A 429 past what is waited out in memory keeps its attempt.
		{"throttled past the in-memory wait: the tier covering it, no attempt spent", fresh(), Throttled("http_429", nil, 20*time.Second), pol,
			toTier(errored(fresh(), retry.ClassTransient, "http_429", "http_429"), 1, 20*time.Second)},
		{"throttled on attempt 2 keeps attempt 1 done", failed(1, retry.ClassTransient), Throttled("http_429", nil, 20*time.Second), pol,
			toTier(errored(failed(1, retry.ClassTransient), retry.ClassTransient, "http_429", "http_429"), 1, 20*time.Second)},
		{"throttled on the last attempt is not exhausted", failed(2, retry.ClassTransient), Throttled("http_429", nil, 6*time.Second), pol,
			toTier(errored(failed(2, retry.ClassTransient), retry.ClassTransient, "http_429", "http_429"), 1, 6*time.Second)},
		// redrive never writes a due time it would refuse.
		{"retry-after beyond the due limit is cut to it (ttl)", fresh(), RetryAfter("http_429", nil, 48*time.Hour), pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_429", "http_429"), 2, 5*time.Minute+time.Hour)},
		{"retry-after beyond the due limit is cut to it (no ttl: 24h)", fresh(), RetryAfter("http_429", nil, 1000*time.Hour), policy{sched: sched, notReadyDeadline: 10 * time.Minute},
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_429", "http_429"), 2, 5*time.Minute+DefaultDueHorizon)},
		{"retry-after beyond max_due is cut to it", fresh(), RetryAfter("http_429", nil, 48*time.Hour), policy{sched: with(sched, func(s *retry.Schedule) { s.MaxDue = 2 * time.Hour }), ttl: time.Hour},
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "http_429", "http_429"), 2, 2*time.Hour)},
		{"not-ready poll interval beyond the deadline is cut to it", polled(), Poll([]byte("task-9"), time.Hour), pol,
			toTier(with(errored(with(polled(), func(m *retry.Meta) { m.Polls = 3 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("task-9") }), 2, 15*time.Minute)},
		{"transient without error or code", fresh(), Retry("", nil), pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "", "transient failure"), 0, 5*time.Second)},
		{"transient on a poll: the job's attempt failed, polls+1, not-ready clock reset", polled(), Retry("http_503", errNoSlot), pol,
			toTier(errored(with(polled(), func(m *retry.Meta) { m.Attempt, m.Polls, m.NotReadySince = 1, 3, time.Time{} }),
				retry.ClassTransient, "http_503", "503: no slot"), 0, 5*time.Second)},
		{"retry drops DLQ-only headers of a redriven record", with(fresh(), func(m *retry.Meta) { m.Reason, m.Group, m.Instance = "exhausted", "g", "pod" }),
			Retry("x", nil), pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, "x", "x"), 0, 5*time.Second)},

		{"not-ready first answer: first tier, state kept, clock starts", fresh(),
			Outcome{Kind: NotReady, Code: "CAPCHA_NOT_READY", State: []byte("task-1")}, pol,
			toTier(with(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassNotReady, "CAPCHA_NOT_READY", "CAPCHA_NOT_READY"),
				func(m *retry.Meta) { m.State = []byte("task-1") }), 0, 5*time.Second)},
		{"not-ready poll: tier covering the poll interval, due after it, polls+1, attempts unchanged", polled(), Poll([]byte("task-9b"), 20*time.Second), pol,
			toTier(with(errored(with(polled(), func(m *retry.Meta) { m.Polls = 3 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("task-9b") }), 1, 20*time.Second)},
		{"not-ready state too large", fresh(), Poll([]byte(strings.Repeat("s", retry.MaxStateBytes+1)), 0), pol,
			toDead(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassPermanent, CodeStateTooLarge,
				fmt.Sprintf("handler state of %d bytes exceeds %d", retry.MaxStateBytes+1, retry.MaxStateBytes)), reasonPermanent)},
		{"not-ready binary state", fresh(), Poll([]byte{0xff}, 0), pol,
			toDead(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassPermanent, CodeBadState,
				"handler state is not valid UTF-8 (encode binary state, e.g. base64)"), reasonPermanent)},

		{"permanent", fresh(), Fail("ERROR_WRONG_USER_KEY", errors.New("wrong key")), pol,
			toDead(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassPermanent, "ERROR_WRONG_USER_KEY", "wrong key"), reasonPermanent)},
		{"permanent on a poll: polls+1", polled(), Fail("", nil), pol,
			toDead(errored(with(polled(), func(m *retry.Meta) { m.Polls = 3 }), retry.ClassPermanent, "", "permanent failure"), reasonPermanent)},
		{"invalid", failed(1, retry.ClassTransient), Reject("bad_json", errors.New("not JSON")), pol,
			toDead(errored(failed(2, retry.ClassTransient), retry.ClassInvalid, "bad_json", "not JSON"), reasonInvalid)},
		{"invalid without error", fresh(), Reject("", nil), pol,
			toDead(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassInvalid, "", "invalid request"), reasonInvalid)},

		{"no kind with an error is retried, never success", fresh(), Outcome{Err: errNoSlot}, pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, CodeNoKind, "503: no slot"), 0, 5*time.Second)},
		{"empty outcome is retried with ErrNoKind", failed(1, retry.ClassTransient), Outcome{}, pol,
			toTier(errored(failed(2, retry.ClassTransient), retry.ClassTransient, CodeNoKind, ErrNoKind.Error()), 1, 30*time.Second)},
		{"no kind on the last attempt: exhausted", failed(2, retry.ClassTransient), Outcome{Result: []byte("looks done"), Code: "mine"}, pol,
			toDead(errored(failed(3, retry.ClassTransient), retry.ClassTransient, "mine", ErrNoKind.Error()), reasonExhausted)},
		{"unknown kind is retried", fresh(), Outcome{Kind: Kind(42), Err: errNoSlot}, pol,
			toTier(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1 }), retry.ClassTransient, CodeNoKind, "503: no slot"), 0, 5*time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decide(c.meta, c.out, c.pol, t0)
			checkDecision(t, got, c.want)
		})
	}
}

// TestDecideJobs is the job APIs' part of the table: a transient or paused
// outcome that keeps its State (a failed poll of a job API), the submit
// of a pipeline with callbacks waiting for its callback, and an outcome
// given by a callback (decideCallback: not a poll).
func TestDecideJobs(t *testing.T) {
	errDown := errors.New("503: down")
	cbPol := with(pol, func(p *policy) { p.callbackWait = 2 * time.Minute })
	// transientPoll is polled() after a failed poll that kept its job.
	transientPoll := func(state string) retry.Meta {
		m := errored(with(polled(), func(m *retry.Meta) { m.Attempt, m.Polls = 1, 3 }), retry.ClassTransient, "http_503", "503: down")
		m.State = []byte(state)
		return m
	}
	cases := []struct {
		name     string
		meta     retry.Meta
		out      Outcome
		pol      policy
		callback bool
		want     decision
	}{
		{"transient with state keeps it and the not-ready clock", polled(), Outcome{Kind: Transient, Code: "http_503", Err: errDown, State: []byte("task-9")}, pol, false,
			toTier(transientPoll("task-9"), 0, 5*time.Second)},
		{"transient with a new state takes it", polled(), Outcome{Kind: Transient, Code: "http_503", Err: errDown, State: []byte("task-10")}, pol, false,
			toTier(transientPoll("task-10"), 0, 5*time.Second)},
		{"transient with state on the last attempt: exhausted", with(polled(), func(m *retry.Meta) { m.Attempt = 3 }),
			Outcome{Kind: Transient, Code: "http_503", Err: errDown, State: []byte("task-9")}, pol, false,
			toDead(with(transientPoll("task-9"), func(m *retry.Meta) { m.Attempt = 3 }), reasonExhausted)},
		{"transient without state drops the clock (as before)", polled(), Retry("http_503", errDown), pol, false,
			toTier(errored(with(polled(), func(m *retry.Meta) { m.Attempt, m.Polls, m.NotReadySince = 1, 3, time.Time{} }), retry.ClassTransient, "http_503", "503: down"), 0, 5*time.Second)},
		{"transient state too large", polled(), Outcome{Kind: Transient, Code: "http_503", State: []byte(strings.Repeat("s", retry.MaxStateBytes+1))}, pol, false,
			toDead(errored(with(polled(), func(m *retry.Meta) { m.Attempt, m.Polls = 1, 3 }), retry.ClassPermanent, CodeStateTooLarge,
				fmt.Sprintf("handler state of %d bytes exceeds %d", retry.MaxStateBytes+1, retry.MaxStateBytes)), reasonPermanent)},
		{"transient binary state", polled(), Outcome{Kind: Transient, Code: "http_503", State: []byte{0xff}}, pol, false,
			toDead(errored(with(polled(), func(m *retry.Meta) { m.Attempt, m.Polls = 1, 3 }), retry.ClassPermanent, CodeBadState,
				"handler state is not valid UTF-8 (encode binary state, e.g. base64)"), reasonPermanent)},
		{"paused with state keeps it, no attempt spent", polled(), Outcome{Kind: Paused, Code: "ERROR_ZERO_BALANCE", MinDelay: 20 * time.Second, State: []byte("task-9")}, pol, false,
			toTier(with(errored(polled(), retry.ClassTransient, "ERROR_ZERO_BALANCE", "ERROR_ZERO_BALANCE"), func(m *retry.Meta) { m.State = []byte("task-9") }), 1, 30*time.Second)},
		{"paused without state drops it (as before)", polled(), Pause("ERROR_ZERO_BALANCE", nil, 20*time.Second), pol, false,
			toTier(errored(polled(), retry.ClassTransient, "ERROR_ZERO_BALANCE", "ERROR_ZERO_BALANCE"), 1, 30*time.Second)},
		{"paused binary state", polled(), Outcome{Kind: Paused, Code: "ERROR_ZERO_BALANCE", State: []byte{0xff}}, pol, false,
			toDead(errored(polled(), retry.ClassPermanent, CodeBadState, "handler state is not valid UTF-8 (encode binary state, e.g. base64)"), reasonPermanent)},

		// The wait is a poll interval: the tier covering it, due when it is over.
		{"submit with callbacks waits for the callback: tier covering the wait, due after it", fresh(), Poll([]byte("job-1"), 15*time.Second), cbPol, false,
			toTier(with(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("job-1") }), 2, 2*time.Minute)},
		{"submit with callbacks asking for longer than the wait keeps its delay", fresh(), Poll([]byte("job-1"), 6*time.Minute), cbPol, false,
			toTier(with(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("job-1") }), 2, 6*time.Minute)},
		{"submit with a wait beyond the last tier: due after the wait", fresh(), Poll([]byte("job-1"), 0), with(pol, func(p *policy) { p.callbackWait = 7 * time.Minute }), false,
			toTier(with(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("job-1") }), 2, 7*time.Minute)},
		{"submit without callbacks: the handler's delay", fresh(), Poll([]byte("job-1"), 15*time.Second), pol, false,
			toTier(with(errored(with(fresh(), func(m *retry.Meta) { m.Attempt = 1; m.NotReadySince = t0 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("job-1") }), 1, 15*time.Second)},
		{"a fallback poll with callbacks: the handler's delay", polled(), Poll([]byte("task-9"), 0), cbPol, false,
			toTier(with(errored(with(polled(), func(m *retry.Meta) { m.Polls = 3 }), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("task-9") }), 0, 5*time.Second)},

		{"callback success: attempt unchanged, not a poll", polled(), Succeed([]byte("token")), cbPol, true,
			decision{to: toResults, result: []byte("token"), meta: retry.Meta{ID: "req-1", Attempt: 1, Polls: 2, Redrives: 1, HasOrigin: true,
				OriginTopic: "solve", OriginPartition: 2, OriginOffset: 7, OriginTimestamp: t0.Add(-time.Minute)}}},
		{"callback failure: permanent, polls unchanged", polled(), Fail("ERROR_CAPTCHA_UNSOLVABLE", nil), cbPol, true,
			toDead(errored(polled(), retry.ClassPermanent, "ERROR_CAPTCHA_UNSOLVABLE", "ERROR_CAPTCHA_UNSOLVABLE"), reasonPermanent)},
		{"callback not ready with its job: the handler's delay, polls unchanged", polled(), Poll([]byte("task-9"), 0), cbPol, true,
			toTier(with(errored(polled(), retry.ClassNotReady, "", "not ready"),
				func(m *retry.Meta) { m.State = []byte("task-9") }), 0, 5*time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got decision
			if c.callback {
				got = decideCallback(c.meta, c.out, c.pol, t0)
			} else {
				got = decide(c.meta, c.out, c.pol, t0)
			}
			checkDecision(t, got, c.want)
		})
	}
}

// A retry record of a failed poll (transient, with state) is read back
// whole: retry.Decode takes state whatever the class.
func TestTransientStateRoundTrip(t *testing.T) {
	d := decide(polled(), Outcome{Kind: Transient, Code: "http_503", State: []byte("task-9")}, pol, t0)
	m, _, err := retry.Decode(retry.Encode(d.meta, nil))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if string(m.State) != "task-9" || m.ErrorClass != retry.ClassTransient || !m.NotReadySince.Equal(polled().NotReadySince) {
		t.Errorf("decoded %+v: want state task-9, class transient, not-ready-since kept", m)
	}
	if _, _, state := attemptOf(m); string(state) != "task-9" {
		t.Errorf("the next attempt gets state %q, want task-9", state)
	}
}

func checkDecision(t *testing.T, got, want decision) {
	t.Helper()
	if got.to != want.to || got.tier != want.tier || got.hop != want.hop || got.early != want.early || string(got.result) != string(want.result) {
		t.Errorf("decision to=%q tier=%d hop=%v early=%q result=%q, want to=%q tier=%d hop=%v early=%q result=%q",
			got.to, got.tier, got.hop, got.early, got.result, want.to, want.tier, want.hop, want.early, want.result)
	}
	if !reflect.DeepEqual(got.meta, want.meta) {
		t.Errorf("meta\n got %+v\nwant %+v", got.meta, want.meta)
	}
}

// TestScreen is what is decided before the handler is called.
func TestScreen(t *testing.T) {
	badHeader := &retry.BadHeaderError{Header: retry.HeaderAttempt, Value: "two", Reason: "not a decimal integer"}
	cases := []struct {
		name string
		meta retry.Meta
		err  error
		tier int
		pol  policy
		call bool
		want decision
	}{
		{"main-topic record: call", fresh(), nil, -1, pol, true, decision{}},
		{"due tier record: call", failed(1, retry.ClassTransient), nil, 1, pol, true, decision{}},
		{"malformed header: invalid at once", failed(1, retry.ClassTransient), badHeader, 1, pol, false,
			with(toDead(marked(failed(1, retry.ClassTransient), retry.ClassInvalid, CodeBadHeader, badHeader.Error()), reasonInvalid),
				func(d *decision) { d.early = "invalid" })},
		{"not due: hop to the tier covering the rest, no attempt spent", with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.Due = t0.Add(20 * time.Second) }),
			nil, 0, pol, false,
			decision{to: toRetry, tier: 1, hop: true, meta: with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.Due, m.Tier = t0.Add(20*time.Second), "30s" })}},
		{"not due beyond every tier: hop through the last", with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.Due = t0.Add(2 * time.Hour) }),
			nil, 2, policy{sched: sched}, false,
			decision{to: toRetry, tier: 2, hop: true, meta: with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.Due, m.Tier = t0.Add(2*time.Hour), "5m" })}},
		{"a due time on the main topic is not waited for", with(fresh(), func(m *retry.Meta) { m.Due = t0.Add(time.Minute) }), nil, -1, pol, true, decision{}},
		{"past the ttl: expired", with(fresh(), func(m *retry.Meta) { m.OriginTimestamp = t0.Add(-2 * time.Hour) }), nil, -1, pol, false,
			with(toDead(marked(with(fresh(), func(m *retry.Meta) { m.OriginTimestamp = t0.Add(-2 * time.Hour) }), retry.ClassExpired, CodeTTL, "request older than ttl 1h0m0s"), reasonExpired),
				func(d *decision) { d.early = "expired" })},
		{"no ttl: never expires", with(fresh(), func(m *retry.Meta) { m.OriginTimestamp = t0.Add(-200 * time.Hour) }), nil, -1, policy{sched: sched}, true, decision{}},
		{"not-ready deadline passed: expired", with(polled(), func(m *retry.Meta) { m.NotReadySince = t0.Add(-11 * time.Minute) }), nil, 0, pol, false,
			with(toDead(marked(with(polled(), func(m *retry.Meta) { m.NotReadySince = t0.Add(-11 * time.Minute) }), retry.ClassExpired, CodeNotReadyDeadline,
				"still not ready 11m0s after the first not-ready answer (not_ready_deadline 10m0s)"), reasonExpired),
				func(d *decision) { d.early = "expired" })},
		{"not-ready within the deadline: poll", polled(), nil, 0, pol, true, decision{}},
		// Expiry is checked before a hop.
		{"past the ttl and not due: expired, not hopped", with(failed(1, retry.ClassTransient), func(m *retry.Meta) {
			m.OriginTimestamp, m.Due = t0.Add(-2*time.Hour), t0.Add(20*time.Second)
		}), nil, 0, pol, false,
			with(toDead(marked(with(failed(1, retry.ClassTransient), func(m *retry.Meta) {
				m.OriginTimestamp, m.Due = t0.Add(-2*time.Hour), t0.Add(20*time.Second)
			}), retry.ClassExpired, CodeTTL, "request older than ttl 1h0m0s"), reasonExpired), func(d *decision) { d.early = "expired" })},
		{"past the not-ready deadline and not due: expired, not hopped", with(polled(), func(m *retry.Meta) {
			m.NotReadySince, m.Due = t0.Add(-11*time.Minute), t0.Add(2*time.Minute)
		}), nil, 0, pol, false,
			with(toDead(marked(with(polled(), func(m *retry.Meta) { m.NotReadySince, m.Due = t0.Add(-11*time.Minute), t0.Add(2*time.Minute) }),
				retry.ClassExpired, CodeNotReadyDeadline, "still not ready 11m0s after the first not-ready answer (not_ready_deadline 10m0s)"), reasonExpired),
				func(d *decision) { d.early = "expired" })},
		// A due time within the limit (plus the skew
		// allowance) hops; further ahead it is invalid (TestScreenDueLimit).
		{"due at the limit plus the skew: hop", with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.Due = t0.Add(65*time.Minute + dueSkew) }),
			nil, 2, pol, false,
			decision{to: toRetry, tier: 2, hop: true, meta: with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.Due, m.Tier = t0.Add(65*time.Minute+dueSkew), "5m" })}},
		{"a far due time on the main topic is not looked at", with(fresh(), func(m *retry.Meta) { m.Due = t0.AddDate(100, 0, 0) }), nil, -1, pol, true, decision{}},
		{"the deadline only counts for not-ready records", with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.NotReadySince = t0.Add(-time.Hour) }),
			nil, 0, pol, true, decision{}},
		// A count at the top of its range is invalid, so
		// that the next one is never out of range (or negative).
		{"attempt at its maximum: invalid", failed(retry.MaxAttempt, retry.ClassTransient), nil, 1, pol, false,
			with(toDead(marked(failed(retry.MaxAttempt, retry.ClassTransient), retry.ClassInvalid, CodeBadHeader,
				`header redrive-attempt="10000": at its maximum 10000: no further attempt can be counted`), reasonInvalid),
				func(d *decision) { d.early = "invalid" })},
		{"attempt just below its maximum: call", failed(retry.MaxAttempt-1, retry.ClassTransient), nil, 1, pol, true, decision{}},
		{"polls at their maximum: invalid", with(polled(), func(m *retry.Meta) { m.Polls = retry.MaxCount }), nil, 0, pol, false,
			with(toDead(marked(with(polled(), func(m *retry.Meta) { m.Polls = retry.MaxCount }), retry.ClassInvalid, CodeBadHeader,
				`header redrive-polls="1000000000": at its maximum 1000000000: no further poll can be counted`), reasonInvalid),
				func(d *decision) { d.early = "invalid" })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, call := screen(c.meta, c.err, c.tier, c.pol, t0)
			if call != c.call {
				t.Fatalf("call = %v, want %v", call, c.call)
			}
			checkDecision(t, got, c.want)
		})
	}
}

// TestScreenDueLimit: a tier record due further ahead than the largest
// tier plus ttl / not_ready_deadline / 24h, or max_due, is invalid:
// before, a record due in 100 years hopped through the last tier forever.
func TestScreenDueLimit(t *testing.T) {
	noTTL := policy{sched: sched, notReadyDeadline: 10 * time.Minute}
	maxDue := policy{sched: with(sched, func(s *retry.Schedule) { s.MaxDue = 2 * time.Hour }), ttl: time.Hour, notReadyDeadline: 10 * time.Minute}
	transient := failed(1, retry.ClassTransient)
	cases := []struct {
		name    string
		meta    retry.Meta
		pol     policy
		due     time.Duration // from t0
		invalid string        // "" : hop; else part of redrive-error
	}{
		{"100 years ahead", transient, pol, 100 * 365 * 24 * time.Hour,
			"further than the limit 1h5m0s (the largest tier with its jitter 5m0s plus ttl 1h0m0s)"},
		{"100 years ahead, no ttl", transient, noTTL, 100 * 365 * 24 * time.Hour,
			"further than the limit 24h5m0s (the largest tier with its jitter 5m0s plus 24h0m0s)"},
		{"ttl: past the limit and skew", transient, pol, 66*time.Minute + time.Millisecond, "1h5m0s"},
		{"ttl: within", transient, pol, 65 * time.Minute, ""},
		{"no ttl: a day is fine", transient, noTTL, 24 * time.Hour, ""},
		{"no ttl: past 24h and the largest tier", transient, noTTL, 24*time.Hour + 6*time.Minute + time.Millisecond, "24h5m0s"},
		{"not-ready: the deadline bounds it", polled(), pol, 16*time.Minute + time.Millisecond,
			"further than the limit 15m0s (the largest tier with its jitter 5m0s plus not_ready_deadline 10m0s)"},
		{"not-ready: within the deadline", polled(), pol, 15 * time.Minute, ""},
		{"max_due replaces the default", transient, maxDue, 2 * time.Hour, ""},
		{"past max_due", transient, maxDue, 3*time.Hour + time.Millisecond, "further than the limit 2h0m0s (max_due 2h0m0s)"},
		{"never beyond 10 years, whatever ttl", transient, policy{sched: sched, ttl: 200 * 365 * 24 * time.Hour}, 100 * 365 * 24 * time.Hour,
			"further than the limit 87600h0m0s (at most 87600h0m0s)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := c.meta
			m.Due = t0.Add(c.due)
			if c.due > 300*24*time.Hour {
				m.Due = t0.AddDate(100, 0, 0)
			}
			d, call := screen(m, nil, 2, c.pol, t0)
			if call {
				t.Fatal("handler called")
			}
			if c.invalid == "" {
				if d.to != toRetry || !d.hop {
					t.Fatalf("decision %+v, want a hop", d)
				}
				return
			}
			if d.to != toDLQ || d.hop || d.early != "invalid" || d.meta.Reason != reasonInvalid || d.meta.ErrorCode != CodeBadHeader ||
				d.meta.ErrorClass != retry.ClassInvalid {
				t.Fatalf("decision to=%q hop=%v early=%q reason=%q code=%q, want an invalid dead letter", d.to, d.hop, d.early, d.meta.Reason, d.meta.ErrorCode)
			}
			if !strings.HasPrefix(d.meta.Error, `header redrive-due="`) || !strings.Contains(d.meta.Error, c.invalid) {
				t.Errorf("redrive-error %q, want the header and %q", d.meta.Error, c.invalid)
			}
		})
	}
}

// Whatever the handler answers, the retry record redrive writes passes
// screen when it is read back: redrive never writes a due time it would
// call invalid.
func TestWrittenDueIsAlwaysReadable(t *testing.T) {
	pols := map[string]policy{
		"ttl":              pol,
		"no ttl":           {sched: sched, notReadyDeadline: 10 * time.Minute},
		"max_due":          {sched: with(sched, func(s *retry.Schedule) { s.MaxDue = 5 * time.Minute; s.Jitter = 0 }), notReadyDeadline: time.Hour},
		"jitter":           {sched: with(sched, func(s *retry.Schedule) { s.Jitter = 1 }), ttl: time.Minute, notReadyDeadline: time.Second},
		"ttl of 200 years": {sched: with(sched, func(s *retry.Schedule) { s.Jitter = 1 }), ttl: 200 * 365 * 24 * time.Hour, notReadyDeadline: 1<<63 - 1},
		"max_due 10 years": {sched: with(sched, func(s *retry.Schedule) { s.Jitter = 1; s.MaxDue = retry.MaxMaxDue }), notReadyDeadline: time.Hour},
	}
	for name, p := range pols {
		for _, min := range []time.Duration{0, time.Second, 20 * time.Minute, 2 * time.Hour, 48 * time.Hour, 1 << 62, 1<<63 - 1} {
			for _, out := range []Outcome{RetryAfter("x", nil, min), Poll([]byte("s"), min)} {
				for _, m := range []retry.Meta{fresh(), polled()} {
					d := decide(m, out, p, t0)
					if d.to != toRetry {
						continue
					}
					if err := outOfRange(d.meta, d.tier, p, t0); err != nil {
						t.Errorf("%s, %s with min delay %s: %v", name, out.Kind, min, err)
					}
					floor := sched.Tiers[0]
					if out.Kind == NotReady && min > 0 {
						floor = minDur(floor, min) // a poll interval is the service's (Schedule.NextPoll)
					}
					if ahead := d.meta.Due.Sub(t0); ahead > p.dueLimit(d.meta) || ahead < floor {
						t.Errorf("%s, %s with min delay %s: due %s ahead", name, out.Kind, min, ahead)
					}
					// The header reads back: within redrive-due's range.
					if _, _, err := retry.Decode(retry.Encode(d.meta, nil)); err != nil {
						t.Errorf("%s, %s with min delay %s: %v", name, out.Kind, min, err)
					}
				}
			}
		}
	}
}

// TestClampFuture: times from a record that drive ages are taken as now
// when more than clockSkew ahead, so that a request with
// a future origin timestamp still expires ttl after redrive first saw it.
func TestClampFuture(t *testing.T) {
	cases := []struct {
		name                  string
		origin, notReadySince time.Time
		want                  clampMask
		wantOrigin, wantNRS   time.Time
	}{
		{"past times are kept", t0.Add(-time.Hour), t0.Add(-time.Minute), 0, t0.Add(-time.Hour), t0.Add(-time.Minute)},
		{"within the skew allowance", t0.Add(clockSkew), t0.Add(clockSkew), 0, t0.Add(clockSkew), t0.Add(clockSkew)},
		{"100 years ahead", t0.AddDate(100, 0, 0), t0.AddDate(100, 0, 0), 1<<clampOriginTimestamp | 1<<clampNotReadySince, t0, t0},
		{"just past the allowance", t0.Add(clockSkew + time.Millisecond), time.Time{}, 1 << clampOriginTimestamp, t0, time.Time{}},
		{"absent not-ready-since stays absent", t0, time.Time{}, 0, t0, time.Time{}},
		{"a record without a timestamp (-1 ms)", time.UnixMilli(-1), time.Time{}, 1 << clampOriginTimestamp, t0, time.Time{}},
	}
	for _, c := range cases {
		m := with(polled(), func(m *retry.Meta) { m.OriginTimestamp, m.NotReadySince = c.origin, c.notReadySince })
		got := clampFuture(&m, t0)
		if got != c.want || !m.OriginTimestamp.Equal(c.wantOrigin) || !m.NotReadySince.Equal(c.wantNRS) {
			t.Errorf("%s: mask %b origin %v not-ready-since %v, want %b %v %v", c.name, got, m.OriginTimestamp, m.NotReadySince, c.want, c.wantOrigin, c.wantNRS)
		}
	}
	// Clamped at the first look, the request expires ttl later.
	m := with(fresh(), func(m *retry.Meta) { m.OriginTimestamp = t0.AddDate(100, 0, 0) })
	clampFuture(&m, t0)
	later := t0.Add(pol.ttl + time.Second)
	if d, call := screen(m, nil, -1, pol, later); call || d.meta.ErrorCode != CodeTTL {
		t.Errorf("ttl after the first look: call %v code %q, want expired (ttl)", call, d.meta.ErrorCode)
	}
}

func TestAttemptOf(t *testing.T) {
	cases := []struct {
		name    string
		meta    retry.Meta
		attempt int
		poll    bool
		state   string
	}{
		{"first", fresh(), 1, false, ""},
		{"after two failures", failed(2, retry.ClassTransient), 3, false, ""},
		// A failed poll keeps its job id; the next attempt polls it again.
		{"state of a failed attempt is passed on", with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.State = []byte("s") }), 2, false, "s"},
		{"state of a paused record is passed on", with(failed(1, retry.ClassTransient), func(m *retry.Meta) { m.State, m.ErrorCode = []byte("job-7"), "ERROR_ZERO_BALANCE" }), 2, false, "job-7"},
		{"poll keeps the accepted attempt", polled(), 1, true, "task-9"},
		{"poll of a foreign record without attempts", with(fresh(), func(m *retry.Meta) { m.ErrorClass = retry.ClassNotReady }), 1, true, ""},
	}
	for _, c := range cases {
		attempt, poll, state := attemptOf(c.meta)
		if attempt != c.attempt || poll != c.poll || string(state) != c.state {
			t.Errorf("%s: attempt %d poll %v state %q, want %d %v %q", c.name, attempt, poll, state, c.attempt, c.poll, c.state)
		}
	}
}

func TestIdentify(t *testing.T) {
	r := &kgo.Record{Topic: "solve", Partition: 3, Offset: 9, Timestamp: t0}
	m := identify(retry.Meta{}, r)
	if m.ID != "solve/3/9" || !m.HasOrigin || m.OriginTopic != "solve" || m.OriginPartition != 3 || m.OriginOffset != 9 || !m.OriginTimestamp.Equal(t0) {
		t.Errorf("fresh record: %+v", m)
	}
	m = identify(fresh(), r)
	if !reflect.DeepEqual(m, fresh()) {
		t.Errorf("record with headers: %+v, want them kept", m)
	}
	m = identify(with(fresh(), func(m *retry.Meta) { m.OriginTimestamp = time.Time{} }), r)
	if !m.OriginTimestamp.Equal(t0) || m.OriginTopic != "solve" || m.OriginOffset != 7 {
		t.Errorf("origin without timestamp: %+v, want the record's timestamp, the rest kept", m)
	}
}

func TestConstructors(t *testing.T) {
	err := errors.New("boom")
	cases := []struct {
		name string
		got  Outcome
		want Outcome
	}{
		{"Succeed", Succeed([]byte("r")), Outcome{Kind: Success, Result: []byte("r")}},
		{"Retry", Retry("c", err), Outcome{Kind: Transient, Code: "c", Err: err}},
		{"RetryAfter", RetryAfter("c", err, time.Minute), Outcome{Kind: Transient, Code: "c", Err: err, MinDelay: time.Minute}},
		{"Poll", Poll([]byte("s"), time.Second), Outcome{Kind: NotReady, State: []byte("s"), MinDelay: time.Second}},
		{"Fail", Fail("c", err), Outcome{Kind: Permanent, Code: "c", Err: err}},
		{"Reject", Reject("c", err), Outcome{Kind: Invalid, Code: "c", Err: err}},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
		if _, mistake := checked(c.got); mistake {
			t.Errorf("%s: counted as a handler mistake", c.name)
		}
	}
	var zero Outcome
	if zero.Kind == Success || zero.Kind.String() != "unset" || zero.Kind.Class() != retry.ClassTransient {
		t.Errorf("zero Kind %v (class %q): must not be success, and is retried as transient", zero.Kind, zero.Kind.Class())
	}
	if out, mistake := checked(zero); !mistake || out.Kind != Transient || !errors.Is(out.Err, ErrNoKind) || out.Code != CodeNoKind {
		t.Errorf("checked(Outcome{}) = %+v, %v", out, mistake)
	}
	if out, _ := checked(Outcome{Err: err, Code: "mine"}); out.Err != err || out.Code != "mine" {
		t.Errorf("checked kept neither the handler's error nor its code: %+v", out)
	}
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// The attempt numbers a handler sees for one job run 1, 2, 3 without a
// gap: the submit and its polls are one attempt, and a poll that fails
// (keeping its job) fails that attempt; the next call is the next one.
func TestAttemptsOfAJobDoNotSkip(t *testing.T) {
	meta := fresh()
	var seen []int
	for _, out := range []Outcome{
		Poll([]byte("job-1"), 0),                                    // submit: accepted
		{Kind: Transient, Code: "http_503", State: []byte("job-1")}, // poll fails, keeps the job
		{Kind: Transient, Code: "http_503", State: []byte("job-1")}, // again
	} {
		attempt, _, _ := attemptOf(meta)
		seen = append(seen, attempt)
		d := decide(meta, out, pol, t0)
		if d.to != toRetry {
			t.Fatalf("after attempt %d: %+v, want a retry", attempt, d)
		}
		meta = d.meta
	}
	attempt, _, state := attemptOf(meta)
	seen = append(seen, attempt)
	if want := []int{1, 1, 2, 3}; !slices.Equal(seen, want) || string(state) != "job-1" {
		t.Errorf("attempts seen %v (state %q), want %v polling job-1", seen, state, want)
	}
}
