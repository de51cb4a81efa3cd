package analyzer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// TestAggregationAndRepublishThroughTheProcessor: a processor fills the DLQ
// from a scripted failure mix; the analyzer's statistics match it exactly,
// also after the analyzer restarts; a rule republishes the exhausted
// no-slot requests after a cool-down, and they succeed once the solver
// recovers.
func TestAggregationAndRepublishThroughTheProcessor(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "agg")
	p := processor.Pipeline{Name: topic, Topic: topic, Results: topic + ".results", DLQ: topic + ".dlq",
		Schedule: retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2}}
	for _, n := range append([]string{p.Topic, p.Results, p.DLQ}, p.TierTopics()...) {
		c.CreateTopic(t, n, 2, nil)
	}
	var recovered atomic.Bool
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		switch string(req.Record.Value) {
		case "wrong-key":
			return processor.Outcome{Kind: processor.Permanent, Code: "ERROR_WRONG_USER_KEY", Err: errors.New("400")}
		case "no-slot":
			if !recovered.Load() {
				return processor.Outcome{Kind: processor.Transient, Code: "ERROR_NO_SLOT_AVAILABLE", Err: errors.New("503")}
			}
		case "broken":
			return processor.Outcome{Kind: processor.Invalid, Code: "undecodable", Err: errors.New("not JSON")}
		}
		return processor.Outcome{Kind: processor.Success, Result: []byte("ok")}
	})
	stopProcessor := pipetest.Run(t, processor.Config{Brokers: c.Brokers, Pipelines: []processor.Pipeline{p}, Registerer: prometheus.NewRegistry(),
		SessionTimeout: 6 * time.Second, ShutdownGrace: 5 * time.Second}, h)
	defer func() { _ = stopProcessor() }()

	mix := map[string]int{"wrong-key": 7, "no-slot": 5, "broken": 3, "fine": 10}
	cl := c.Client(t)
	var rs []*kgo.Record
	for v, n := range mix {
		for i := range n {
			id := fmt.Sprintf("%s-%d", v, i)
			rs = append(rs, &kgo.Record{Topic: p.Topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
		}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dead := 7 + 5 + 3
	if got := collect(t, c, p.DLQ, dead, 30*time.Second); len(got) != dead {
		t.Fatalf("%d dead letters from the processor, want %d", len(got), dead)
	}

	e := &env{t: t, c: c, cl: cl, main: p.Topic, dlqName: p.DLQ}
	check := func(ps analyzerStats) {
		t.Helper()
		want := map[string]int64{"ERROR_WRONG_USER_KEY": 7, "ERROR_NO_SLOT_AVAILABLE": 5, "undecodable": 3}
		for code, n := range want {
			if ps.Stats.ByCode[code] != n {
				t.Errorf("by_code[%s] = %d, want %d (all: %v)", code, ps.Stats.ByCode[code], n, ps.Stats.ByCode)
			}
		}
		if ps.Stats.ByReason["permanent"] != 7 || ps.Stats.ByReason["exhausted"] != 5 || ps.Stats.ByReason["invalid"] != 3 || ps.Stats.Total != int64(dead) {
			t.Errorf("by_reason %v, total %d", ps.Stats.ByReason, ps.Stats.Total)
		}
		if ps.Stats.ByOrigin[p.Topic] != int64(dead) {
			t.Errorf("by_origin %v", ps.Stats.ByOrigin)
		}
	}

	// First analyzer (its own group, so its rule worker's "keep" of
	// everything does not stand for the second's), then stopped.
	base, stop := e.startStoppable(p.Name+"-first", nil)
	check(waitStats(t, base, int64(dead)))
	stop()

	// Second analyzer, same DLQ: the same statistics, rebuilt; and a rule
	// that republishes the no-slot ones 2s after they died.
	rules := []dlq.Rule{{Name: "no-slot-again", Match: dlq.Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}}, Action: dlq.ActionRepublish, After: 2 * time.Second, MaxRedrives: 1}}
	recovered.Store(true)
	base, stop = e.startStoppable(p.Name, rules)
	defer stop()
	ps := waitStats(t, base, int64(dead))
	check(ps)
	results := collect(t, c, p.Results, 10+5, 30*time.Second)
	redriven := 0
	for _, r := range results {
		m, _, _ := retry.Decode(r.Headers)
		if m.Redrives == 1 {
			redriven++
			if m.Attempt != 1 {
				t.Errorf("a republished request succeeded on attempt %d, want 1 (attempts reset)", m.Attempt)
			}
		}
	}
	if redriven != 5 {
		t.Errorf("%d republished requests succeeded, want the 5 no-slot ones", redriven)
	}
}

type analyzerStats = analyzer.PipelineStats
