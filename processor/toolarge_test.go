package processor_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// A result too large for the results topic is dead-lettered (permanent,
// record_too_large) with the request's own value and the outcome's counts,
// never dropped and never retried.
func TestResultTooLargeIsDeadLettered(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	small := e.P.Results + ".small"
	limit := "20000"
	resp, err := e.Admin.CreateTopics(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &limit}, small)
	if err != nil || resp[small].Err != nil {
		t.Fatalf("create %s: %v %v", small, err, resp[small].Err)
	}
	e.P.Results = small
	// Incompressible, so that the broker's limit really bites.
	big := make([]byte, 50_000)
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if req.Attempt == 1 {
			return processor.Retry("http_503", nil)
		}
		return processor.Succeed(big)
	}))
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("request"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("r1")}}})
	dead := e.CollectN(e.P.DLQ, 1, 30*time.Second, time.Second)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	r := dead[0]
	want := map[string]string{
		retry.HeaderID: "r1", retry.HeaderReason: "permanent", retry.HeaderErrorCode: processor.CodeRecordTooLarge,
		retry.HeaderErrorClass: "permanent", retry.HeaderAttempt: "2", retry.HeaderOriginTopic: e.P.Topic,
	}
	for k, v := range want {
		if got, _ := kafkatest.Header(r, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if string(r.Value) != "request" {
		t.Errorf("dead letter value %q, want the request's", r.Value)
	}
	for _, k := range []string{retry.HeaderFirstErrorAt, retry.HeaderLastErrorAt, retry.HeaderError, retry.HeaderGroup} {
		if v, _ := kafkatest.Header(r, k); v == "" {
			t.Errorf("dead letter lacks %s", k)
		}
	}
	if res := e.CollectN(small, 1, time.Second, 0); len(res) != 0 {
		t.Errorf("%d results written", len(res))
	}
}
