package processor_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

func TestTTLExpiredWithoutCallingHandler(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.TTL = 2 * time.Second
	s := newScript()
	e.Start(s)
	e.Produce(
		&kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Timestamp: time.Now().Add(-time.Minute), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("old")}}},
		&kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("fresh")}}},
	)
	dead := e.CollectN(e.P.DLQ, 1, 30*time.Second, time.Second)
	res := e.CollectN(e.P.Results, 1, 30*time.Second, 0)
	if len(dead) != 1 || len(res) != 1 {
		t.Fatalf("%d dead letters and %d results, want 1 and 1", len(dead), len(res))
	}
	if id, _ := kafkatest.Header(dead[0], retry.HeaderID); id != "old" {
		t.Errorf("dead letter for %q, want old", id)
	}
	if r, _ := kafkatest.Header(dead[0], retry.HeaderReason); r != "expired" {
		t.Errorf("reason %q, want expired", r)
	}
	if c, _ := kafkatest.Header(dead[0], retry.HeaderErrorCode); c != processor.CodeTTL {
		t.Errorf("code %q, want %s", c, processor.CodeTTL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.calls["old"]); n != 0 {
		t.Errorf("handler called %d times for an expired request", n)
	}
}

// alwaysNotReady answers not-ready forever, counting polls.
type alwaysNotReady struct{ calls atomic.Int64 }

func (a *alwaysNotReady) Handle(_ context.Context, r *processor.Request) processor.Outcome {
	a.calls.Add(1)
	return processor.Outcome{Kind: processor.NotReady, Code: "CAPCHA_NOT_READY", State: []byte("task-1")}
}

func TestNotReadyDeadlineExpires(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.NotReadyDeadline = 3 * time.Second
	h := &alwaysNotReady{}
	e.Start(h)
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("x")})
	dead := e.CollectN(e.P.DLQ, 1, 30*time.Second, time.Second)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	if r, _ := kafkatest.Header(d, retry.HeaderReason); r != "expired" {
		t.Errorf("reason %q, want expired", r)
	}
	if c, _ := kafkatest.Header(d, retry.HeaderErrorCode); c != processor.CodeNotReadyDeadline {
		t.Errorf("code %q, want %s", c, processor.CodeNotReadyDeadline)
	}
	if a, _ := kafkatest.Header(d, retry.HeaderAttempt); a != "1" {
		t.Errorf("attempt %q, want 1 (polls are not attempts)", a)
	}
	polls, _ := kafkatest.Header(d, retry.HeaderPolls)
	n, _ := strconv.Atoi(polls)
	calls := int(h.calls.Load())
	// One attempt, then a poll every ~1s until 3s have passed.
	if n < 2 || n+1 != calls {
		t.Errorf("redrive-polls %q with %d handler calls; want polls = calls-1 and at least 2", polls, calls)
	}
	if _, ok := kafkatest.Header(d, retry.HeaderState); ok {
		t.Errorf("dead letter carries redrive-state")
	}
}

// retryAfter fails the first attempt asking for a minimum delay longer
// than every tier, then succeeds.
type retryAfter struct {
	mu    sync.Mutex
	calls []time.Time
	dues  []time.Time // each call's redrive-due
	min   time.Duration
}

func (h *retryAfter) Handle(_ context.Context, r *processor.Request) processor.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, time.Now())
	h.dues = append(h.dues, r.Meta.Due)
	if len(h.calls) == 1 {
		return processor.Outcome{Kind: processor.Transient, Code: "http_429", MinDelay: h.min}
	}
	return processor.Outcome{Kind: processor.Success}
}

func TestRetryAfterLongerThanTiersHopsWithoutSpendingAttempts(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 2 * time.Second}, 1)
	h := &retryAfter{min: 5 * time.Second}
	e.Start(h)
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("x")})
	res := e.CollectN(e.P.Results, 1, 60*time.Second, time.Second)
	if len(res) != 1 {
		t.Fatalf("%d results, want 1", len(res))
	}
	if a, _ := kafkatest.Header(res[0], retry.HeaderAttempt); a != "2" {
		t.Errorf("attempt %q, want 2: hops must not spend attempts", a)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) != 2 {
		t.Fatalf("%d handler calls, want 2", len(h.calls))
	}
	// Due times are wall-clock times (every process reads them), and what
	// is promised is by the wall clock: a step of it (NTP, a resumed
	// virtual machine) changes the gap on the monotonic clock, which is
	// only shown.
	first, second, due := h.calls[0].Round(0), h.calls[1].Round(0), h.dues[1]
	if due.Sub(first) < h.min {
		t.Errorf("redrive-due %s, %v after the first call, want at least the Retry-After %v",
			due.Format(time.RFC3339Nano), due.Sub(first), h.min)
	}
	if second.Before(due) {
		t.Errorf("second call at %s, %v before its redrive-due %s (monotonic clock: %v after the first)",
			second.Format(time.RFC3339Nano), due.Sub(second), due.Format(time.RFC3339Nano), h.calls[1].Sub(h.calls[0]))
	}
	// It went through the 2s tier more than once (the hop).
	hops := e.CollectN(e.P.TierTopics()[1], 2, 10*time.Second, 0)
	if len(hops) < 2 {
		t.Errorf("%d records in the 2s tier, want at least 2 (first write and a hop)", len(hops))
	}
}

// slow takes d per record.
type slow struct {
	d             time.Duration
	started, done atomic.Int64
}

func (s *slow) Handle(ctx context.Context, _ *processor.Request) processor.Outcome {
	s.started.Add(1)
	select {
	case <-time.After(s.d):
		s.done.Add(1)
		return processor.Outcome{Kind: processor.Success}
	case <-ctx.Done():
		return processor.Outcome{Kind: processor.Transient, Code: "canceled", Err: ctx.Err()}
	}
}

func TestShutdownFinishesInFlightAndCommits(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.Concurrency = 4
	h := &slow{d: 700 * time.Millisecond}
	stop := e.Start(h)
	var rs []*kgo.Record
	for i := 0; i < 8; i++ {
		rs = append(rs, &kgo.Record{Topic: e.P.Topic, Value: []byte("x")})
	}
	e.Produce(rs...)
	// Stop while the first four are in the handler.
	deadline := time.Now().Add(30 * time.Second)
	for h.started.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after a clean shutdown, want nil", err)
	}
	took := time.Since(start)
	if took > 10*time.Second+5*time.Second {
		t.Errorf("shutdown took %v, past the 10s grace", took)
	}
	handled := h.done.Load()
	res := e.CollectN(e.P.Results, int(handled), 10*time.Second, time.Second)
	if int64(len(res)) != handled {
		t.Errorf("%d records handled but %d results written", handled, len(res))
	}
	committed := committed(e, e.P.Topic, 0)
	if committed < handled {
		t.Errorf("committed offset %d after shutdown, want at least %d (every finished record)", committed, handled)
	}
	t.Logf("shutdown took %v with %d of 8 handled, committed offset %d", took.Round(time.Millisecond), handled, committed)
}

// Stopping while tier records keep coming due must neither race nor lose
// them: a record due during the drain stays uncommitted and the next run
// handles it.
func TestShutdownWhileTierRecordsComeDue(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 2)
	e.P.Concurrency = 8
	s := newScript()
	stop := e.Start(s)
	const n = 400
	// Spread the first attempts over about two seconds, so that retries come
	// due all through the shutdown below. A third fail once: a service
	// failing every new request is an outage to the breaker.
	for b := 0; b < 8; b++ {
		var rs []*kgo.Record
		for i := 0; i < n/8; i++ {
			v := "ok"
			if i%3 == 0 {
				v = "transient:1"
			}
			rs = append(rs, &kgo.Record{Topic: e.P.Topic, Key: []byte(strconv.Itoa(i)), Value: []byte(v)})
		}
		e.Produce(rs...)
		time.Sleep(250 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after a clean shutdown, want nil", err)
	}
	e.Start(s)
	res := e.CollectN(e.P.Results, n, 90*time.Second, time.Second)
	ids := map[string]bool{}
	for _, r := range res {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		ids[id] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct requests reached the results topic, want %d", len(ids), n)
	}
	t.Logf("%d results for %d requests (%d duplicates)", len(res), n, len(res)-n)
}

// A tier record due far ahead (year 2262: beyond the
// header's range; now + 100 years: beyond the due limit) is dead-lettered
// as invalid at its first look instead of hopping through the last tier
// forever, and a record past its ttl is expired, not hopped. The partition
// goes on.
func TestFarDueAndExpiredTierRecordsAreDeadLetteredNotHopped(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.TTL = time.Hour
	s := newScript()
	e.Start(s)
	now := time.Now()
	tierRec := func(id string, origin time.Time, due string) *kgo.Record {
		m := retry.Meta{ID: id, Attempt: 1, Tier: "1s", HasOrigin: true, OriginTopic: e.P.Topic, OriginTimestamp: origin,
			ErrorClass: retry.ClassTransient, ErrorCode: "http_503", FirstErrorAt: now, LastErrorAt: now}
		hs := retry.Encode(m, []kgo.RecordHeader{{Key: "user", Value: []byte("kept")}})
		hs = append(hs, kgo.RecordHeader{Key: retry.HeaderDue, Value: []byte(due)})
		return &kgo.Record{Topic: e.P.TierTopics()[0], Value: []byte("ok"), Headers: hs}
	}
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	want := map[string]struct{ reason, code, msg string }{
		"due-2262":     {"invalid", processor.CodeBadHeader, `header redrive-due="9223372036854": out of range`},
		"due-100y":     {"invalid", processor.CodeBadHeader, "further than the limit 1h0m1s (the largest tier with its jitter 1s plus ttl 1h0m0s)"},
		"past-ttl-due": {"expired", processor.CodeTTL, "older than ttl"},
	}
	e.Produce(
		tierRec("due-2262", now, "9223372036854"),
		tierRec("due-100y", now, ms(now.AddDate(100, 0, 0))),
		tierRec("past-ttl-due", now.Add(-2*time.Hour), ms(now.Add(10*time.Minute))),
		&kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("after")}}},
	)
	dead := e.CollectN(e.P.DLQ, len(want), 20*time.Second, time.Second)
	if len(dead) != len(want) {
		t.Fatalf("%d dead letters, want %d (far due times hopped?)", len(dead), len(want))
	}
	for _, r := range dead {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		w, ok := want[id]
		if !ok {
			t.Errorf("unexpected dead letter %q", id)
			continue
		}
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		code, _ := kafkatest.Header(r, retry.HeaderErrorCode)
		msg, _ := kafkatest.Header(r, retry.HeaderError)
		if reason != w.reason || code != w.code || !strings.Contains(msg, w.msg) {
			t.Errorf("%s: reason %q code %q error %q, want %q %q and %q", id, reason, code, msg, w.reason, w.code, w.msg)
		}
		if u, _ := kafkatest.Header(r, "user"); u != "kept" {
			t.Errorf("%s: user header lost", id)
		}
		if _, err := dlq.Decode(r); err != nil {
			t.Errorf("%s: dead letter does not decode: %v", id, err)
		}
	}
	if res := e.CollectN(e.P.Results, 1, 20*time.Second, 0); len(res) != 1 {
		t.Fatalf("%d results, want the record after them handled", len(res))
	}
	if hops := e.CollectN(e.P.TierTopics()[0], 4, 2*time.Second, 0); len(hops) != 3 {
		t.Errorf("%d records in the tier, want the 3 produced: none hopped", len(hops))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range want {
		if n := len(s.calls[id]); n != 0 {
			t.Errorf("handler called %d times for %s", n, id)
		}
	}
}
