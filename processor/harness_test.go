package processor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// env is one behaviour test's broker and pipeline topics.
type env struct {
	t       testing.TB
	c       *kafkatest.Cluster
	cl      *kgo.Client
	adm     *kadm.Client
	p       processor.Pipeline
	brokers []string
}

func newEnv(t testing.TB, tiers []time.Duration, partitions int32) *env {
	t.Helper()
	c := kafkatest.New(t)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	e := &env{t: t, c: c, cl: cl, adm: kadm.NewClient(cl), brokers: c.Brokers}
	topic := kafkatest.Topic(t, "solve")
	e.p = processor.Pipeline{
		Name:     topic,
		Topic:    topic,
		Results:  topic + ".results",
		DLQ:      topic + ".dlq",
		Schedule: retry.Schedule{Tiers: tiers, MaxAttempts: 3},
	}
	names := append([]string{topic, e.p.Results, e.p.DLQ}, e.p.TierTopics()...)
	e.create(partitions, names...)
	return e
}

func (e *env) create(partitions int32, names ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := e.adm.CreateTopics(ctx, partitions, 1, nil, names...)
	if err != nil {
		e.t.Fatalf("create topics: %v", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			e.t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
}

// start runs a processor for the env's pipeline until the test ends or
// stop is called; stop returns Run's error.
func (e *env) start(h processor.Handler, tweak ...func(*processor.Config)) (stop func() error) {
	e.t.Helper()
	cfg := processor.Config{
		Brokers:        e.brokers,
		Pipelines:      []processor.Pipeline{e.p},
		SessionTimeout: 6 * time.Second,
		ShutdownGrace:  10 * time.Second,
		CommitInterval: 200 * time.Millisecond,
		Registerer:     prometheus.NewRegistry(),
		Instance:       "test",
	}
	for _, f := range tweak {
		f(&cfg)
	}
	pr, err := processor.New(cfg, h)
	if err != nil {
		e.t.Fatalf("processor.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				runErr = fmt.Errorf("processor did not stop within 60s")
			}
		})
		return runErr
	}
	e.t.Cleanup(func() { _ = stop() })
	return stop
}

// produce writes records to topic and waits for them to be acknowledged.
func (e *env) produce(rs ...*kgo.Record) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

// collect reads topic from the start until n records arrived or timeout,
// then keeps reading for settle to catch extras.
func (e *env) collect(topic string, n int, timeout, settle time.Duration) []*kgo.Record {
	e.t.Helper()
	cl := e.c.Client(e.t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	var out []*kgo.Record
	deadline := time.Now().Add(timeout)
	var settleAt time.Time
	for {
		now := time.Now()
		if len(out) >= n && settleAt.IsZero() {
			settleAt = now.Add(settle)
		}
		if !settleAt.IsZero() && now.After(settleAt) || now.After(deadline) {
			return out
		}
		end := deadline
		if !settleAt.IsZero() {
			end = settleAt
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
}

func header(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

func countHeader(r *kgo.Record, k string) int {
	n := 0
	for _, h := range r.Headers {
		if h.Key == k {
			n++
		}
	}
	return n
}
