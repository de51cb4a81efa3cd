package pipetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// The harness end to end: topics exist, Start runs the handler on the
// pipeline, the result arrives, and stop ends Run cleanly, the same answer
// on every call.
func TestEnvRunsAProcessor(t *testing.T) {
	e := pipetest.New(t, "pipetest", 2, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	var instance string
	stop := e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		return processor.Outcome{Kind: processor.Success, Result: []byte("done:" + string(req.Record.Value))}
	}), func(c *processor.Config) { c.Instance = "tweaked"; instance = c.Instance })
	if instance != "tweaked" {
		t.Fatalf("tweak not applied")
	}
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("x")})
	res := e.CollectN(e.P.Results, 1, 30*time.Second, 0)
	if len(res) != 1 || string(res[0].Value) != "done:x" {
		t.Fatalf("results %v, want one done:x", res)
	}
	if v, _ := kafkatest.Header(res[0], retry.HeaderOriginTopic); v != e.P.Topic {
		t.Errorf("origin topic %q, want %q", v, e.P.Topic)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if p := e.LagProblem([]string{e.P.Topic}, 2); p != "" {
		t.Errorf("after stop: %s", p)
	}
}
