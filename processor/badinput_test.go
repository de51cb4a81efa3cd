package processor_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

func TestMalformedRedriveHeadersAreDeadLetteredInvalid(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	s := newScript()
	e.Start(s)
	bad := []struct{ key, value string }{
		{retry.HeaderAttempt, "two"},
		{retry.HeaderDue, "-5"},
		{retry.HeaderErrorClass, "sometimes"},
		{retry.HeaderOriginPartition, "x"},
		{retry.HeaderPolls, "1e3"},
		// Canonical decimal within a range, bounded ids.
		{retry.HeaderAttempt, "9223372036854775807"},
		{retry.HeaderAttempt, "+3"},
		{retry.HeaderAttempt, " 3"},
		{retry.HeaderAttempt, "00003"},
		{retry.HeaderAttempt, "10000"}, // readable, but no attempt can follow
		{retry.HeaderID, strings.Repeat("k", 200<<10)},
	}
	for i, b := range bad {
		e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte{0xff, byte(i)}, Value: []byte("ok"), Headers: []kgo.RecordHeader{
			{Key: "idempotency-key", Value: []byte("bad-" + strconv.Itoa(i))},
			{Key: b.key, Value: []byte(b.value)},
			{Key: "user", Value: []byte("kept")},
		}})
	}
	dead := e.CollectN(e.P.DLQ, len(bad), 30*time.Second, time.Second)
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(bad))
	}
	for _, r := range dead {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "bad-"))
		if reason, _ := kafkatest.Header(r, retry.HeaderReason); reason != "invalid" {
			t.Errorf("%s: reason %q, want invalid", id, reason)
		}
		if code, _ := kafkatest.Header(r, retry.HeaderErrorCode); code != processor.CodeBadHeader {
			t.Errorf("%s: code %q, want %s", id, code, processor.CodeBadHeader)
		}
		if msg, _ := kafkatest.Header(r, retry.HeaderError); !strings.Contains(msg, bad[i].key) {
			t.Errorf("%s: redrive-error %q does not name header %s", id, msg, bad[i].key)
		}
		if u, _ := kafkatest.Header(r, "user"); u != "kept" {
			t.Errorf("%s: user header lost", id)
		}
		if !bytes.Equal(r.Key, []byte{0xff, byte(i)}) || string(r.Value) != "ok" {
			t.Errorf("%s: key/value changed: %q %q", id, r.Key, r.Value)
		}
		// The dead letter itself is valid: the analyzer and the CLI read it.
		if _, err := dlq.Decode(r); err != nil {
			t.Errorf("%s: dead letter does not decode: %v", id, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) != 0 {
		t.Errorf("handler called %d times for invalid records, want 0", len(s.calls))
	}
}

func TestOversizeDeadLetterIsTruncatedNotLost(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	// A DLQ that takes less than the main topic does.
	dlq := e.P.DLQ + ".small"
	limit := "20000"
	e.Cluster.CreateTopic(t, dlq, 1, map[string]*string{"max.message.bytes": &limit})
	e.P.DLQ = dlq
	e.Start(newScript())
	// Incompressible, so that the broker's limit (on the compressed batch)
	// really bites.
	big := make([]byte, 100_000)
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	copy(big, "permanent")
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: big, Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("big")}}})
	// The handler sees the whole value; "permanent..." is not a script
	// word, so it answers invalid.
	dead := e.CollectN(dlq, 1, 30*time.Second, time.Second)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	r := dead[0]
	if len(r.Value) >= 20000 || len(r.Value) == 0 || !bytes.HasPrefix(big, r.Value) {
		t.Errorf("dead letter value is %d bytes, want a non-empty prefix under the 20000-byte limit", len(r.Value))
	}
	if v, _ := kafkatest.Header(r, retry.HeaderTruncated); v != "100000" {
		t.Errorf("redrive-truncated = %q, want 100000", v)
	}
	if id, _ := kafkatest.Header(r, retry.HeaderID); id != "big" {
		t.Errorf("redrive-id = %q", id)
	}
}

// readyLog records the processor's readiness reports.
type readyLog struct {
	mu   sync.Mutex
	last error
	seen []error
}

func (l *readyLog) set(_ string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = err
	l.seen = append(l.seen, err)
}

func (l *readyLog) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

func TestMissingDLQTopicBlocksCommitUntilItExists(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.DLQ = e.P.Topic + ".dlq.missing"
	rl := &readyLog{}
	e.Start(newScript(), func(c *processor.Config) { c.Ready = rl.set })
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("permanent"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("p1")}}})
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("ok1")}}})

	// Not ready, with a message naming the topic.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := rl.get()
		if err != nil && strings.Contains(err.Error(), e.P.DLQ) {
			t.Logf("readiness while the DLQ is missing: %v", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness never reported the missing DLQ; last: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Nothing committed past the failed record (offset 0), even though the
	// record after it succeeded.
	time.Sleep(time.Second)
	if off := committed(e, e.P.Topic, 0); off > 0 {
		t.Fatalf("committed offset %d on the main topic past the record whose dead letter could not be written", off)
	}
	e.CreateTopics(1, e.P.DLQ)
	dead := e.CollectN(e.P.DLQ, 1, 60*time.Second, 0)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters after the DLQ was created, want 1", len(dead))
	}
	deadline = time.Now().Add(30 * time.Second)
	for committed(e, e.P.Topic, 0) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("main topic offset not committed to 2 after the DLQ appeared (at %d)", committed(e, e.P.Topic, 0))
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	for rl.get() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("still not ready after writes recovered: %v", rl.get())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// committed is the group's committed offset for topic/partition, -1 if none.
func committed(e *pipetest.Env, topic string, part int32) int64 {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := e.Admin.FetchOffsets(ctx, e.P.GroupID())
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			e.T.Fatalf("fetch offsets: %v", err)
		}
		return -1
	}
	o, ok := offs.Lookup(topic, part)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

func TestDeadLetterRedactsConfiguredHeadersAndAddsSpringHeaders(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.RedactHeaders = []string{"Authorization"}
	e.P.DLQHeaderStyle = "spring"
	e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		return processor.Outcome{Kind: processor.Permanent, Code: "ERROR_WRONG_USER_KEY", Err: errors.New("400 wrong key")}
	}))
	e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: "authorization", Value: []byte("Bearer secret")},
		{Key: "trace", Value: []byte("t-1")},
	}})
	dead := e.CollectN(e.P.DLQ, 1, 30*time.Second, 500*time.Millisecond)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	r := dead[0]
	if v, _ := kafkatest.Header(r, "authorization"); v != "[redacted]" {
		t.Errorf("authorization = %q, want [redacted]", v)
	}
	if v, _ := kafkatest.Header(r, "trace"); v != "t-1" {
		t.Errorf("trace = %q, want t-1 (unredacted headers kept)", v)
	}
	if v, _ := kafkatest.Header(r, "kafka_dlt-original-topic"); v != e.P.Topic {
		t.Errorf("kafka_dlt-original-topic = %q, want %q", v, e.P.Topic)
	}
	if v, _ := kafkatest.Header(r, "kafka_dlt-exception-message"); v != "400 wrong key" {
		t.Errorf("kafka_dlt-exception-message = %q", v)
	}
	if v, _ := kafkatest.Header(r, retry.HeaderGroup); v != "redrive."+e.P.Name {
		t.Errorf("redrive-group = %q", v)
	}
}

func TestBadHandlerStateIsDeadLetteredAtOnce(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		state := []byte{0xff, 0xfe}
		if string(req.Record.Value) == "big" {
			state = bytes.Repeat([]byte("s"), retry.MaxStateBytes+1)
		}
		return processor.Outcome{Kind: processor.NotReady, Code: "CAPCHA_NOT_READY", State: state}
	}))
	e.Produce(
		&kgo.Record{Topic: e.P.Topic, Value: []byte("binary"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("binary")}}},
		&kgo.Record{Topic: e.P.Topic, Value: []byte("big"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("big")}}},
	)
	dead := e.CollectN(e.P.DLQ, 2, 30*time.Second, 500*time.Millisecond)
	want := map[string]string{"binary": processor.CodeBadState, "big": processor.CodeStateTooLarge}
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	for _, r := range dead {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		code, _ := kafkatest.Header(r, retry.HeaderErrorCode)
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		if code != want[id] || reason != "permanent" {
			t.Errorf("%s: code %q reason %q, want %q permanent", id, code, reason, want[id])
		}
	}
	if tier := e.CollectN(e.P.TierTopics()[0], 1, time.Second, 0); len(tier) != 0 {
		t.Errorf("%d records written to the tier with bad state", len(tier))
	}
}

// A transactional producer's aborted requests are never handled; its
// committed ones are.
func TestAbortedTransactionIsNotHandled(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	s := newScript()
	e.Start(s)
	tx := e.Cluster.Client(t, kgo.TransactionalID("redrive-test-"+e.P.Topic), kgo.DefaultProduceTopic(e.P.Topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		id     string
		commit kgo.TransactionEndTry
	}{{"aborted", kgo.TryAbort}, {"committed", kgo.TryCommit}} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(c.id)}}}
		if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, c.commit); err != nil {
			t.Fatalf("end transaction (%s): %v", c.id, err)
		}
	}
	results := e.CollectN(e.P.Results, 1, 30*time.Second, 2*time.Second)
	if len(results) != 1 {
		t.Fatalf("%d results, want only the committed request's", len(results))
	}
	if id, _ := kafkatest.Header(results[0], retry.HeaderID); id != "committed" {
		t.Errorf("result for %q, want committed", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls["aborted"]) != 0 {
		t.Errorf("the aborted request was handled %d times", len(s.calls["aborted"]))
	}
}
