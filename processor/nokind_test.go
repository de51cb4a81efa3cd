package processor_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// lockedBuffer is a log sink written by the processor's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An Outcome without a Kind is a handler mistake: it must never commit a
// failed record as done. It is retried like a transient failure, attempts
// counted, and dead-lettered as exhausted; the mistake is logged once per
// pipeline, not per record.
func TestOutcomeWithoutKindIsRetriedNeverSuccess(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	var logs lockedBuffer
	e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if string(req.Record.Value) == "err" {
			return processor.Outcome{Err: errors.New("upstream said no")}
		}
		return processor.Outcome{}
	}), func(c *processor.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	e.Produce(
		&kgo.Record{Topic: e.P.Topic, Value: []byte("err"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("err")}}},
		&kgo.Record{Topic: e.P.Topic, Value: []byte("empty"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("empty")}}},
	)
	dead := e.CollectN(e.P.DLQ, 2, 60*time.Second, 500*time.Millisecond)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	wantErr := map[string]string{"err": "upstream said no", "empty": processor.ErrNoKind.Error()}
	for _, r := range dead {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		attempt, _ := kafkatest.Header(r, retry.HeaderAttempt)
		class, _ := kafkatest.Header(r, retry.HeaderErrorClass)
		code, _ := kafkatest.Header(r, retry.HeaderErrorCode)
		msg, _ := kafkatest.Header(r, retry.HeaderError)
		if reason != "exhausted" || attempt != "3" || class != "transient" || code != processor.CodeNoKind || msg != wantErr[id] {
			t.Errorf("%s: reason %q attempt %q class %q code %q error %q; want exhausted after 3 transient attempts, code %s, error %q",
				id, reason, attempt, class, code, msg, processor.CodeNoKind, wantErr[id])
		}
	}
	if tier := e.CollectN(e.P.TierTopics()[0], 4, 10*time.Second, 0); len(tier) != 4 {
		t.Errorf("%d retry records, want 2 per request", len(tier))
	}
	if res := e.CollectN(e.P.Results, 1, time.Second, 0); len(res) != 0 {
		t.Errorf("%d results written for outcomes without a Kind", len(res))
	}
	if n := strings.Count(logs.String(), "without a valid Kind"); n != 1 {
		t.Errorf("the handler mistake was logged %d times, want once:\n%s", n, logs.String())
	}
}
