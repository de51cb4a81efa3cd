// Package pipetest runs the real processor against a kafkatest broker for
// behaviour tests: create a pipeline's topics, start a processor, produce
// requests; collecting outputs, waiting for lag 0 and reading headers are
// kafkatest's (they need no processor).
//
// It is the one copy of these helpers. It lives apart from kafkatest
// because it imports processor: kafkatest stays free of it so that any
// test can use a broker, internal tests of packages processor imports
// (retry, dlq) and of processor itself included, without an import cycle.
// Only external test packages (processor_test, httphandler_test,
// analyzer_test, cmd/redrive, interop, deploy) can import pipetest.
//
// It is imported only by tests.
package pipetest

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
	"github.com/redrive/redrive/topics"
)

// Env is one behaviour test's broker and pipeline, its topics created.
type Env struct {
	T       testing.TB
	Cluster *kafkatest.Cluster
	// Client produces (1ms linger) and is closed when the test ends.
	Client *kgo.Client
	Admin  *kadm.Client
	// P is the pipeline under test: topic, results, DLQ and tiers named
	// after a unique main topic. Tests may change its options before Start;
	// its topics exist already.
	P processor.Pipeline
}

// New gets a broker (kafkatest.New), names a pipeline after base (unique
// per run) with sched, and creates its main, results, DLQ and tier topics
// with partitions each.
func New(t testing.TB, base string, partitions int32, sched retry.Schedule) *Env {
	t.Helper()
	c := kafkatest.New(t)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	e := &Env{T: t, Cluster: c, Client: cl, Admin: kadm.NewClient(cl)}
	topic := kafkatest.Topic(t, base)
	e.P = processor.Pipeline{
		Name:     topic,
		Topic:    topic,
		Results:  topic + ".results",
		DLQ:      topic + ".dlq",
		Schedule: sched,
		// The breaker and the guard are on, as they ship: every scenario
		// runs at the defaults a user gets.
	}
	e.CreateTopics(partitions, append([]string{topic, e.P.Results, e.P.DLQ}, e.P.TierTopics()...)...)
	return e
}

// WithCallbacks gives e.P callbacks (processor.Callbacks) that wait for
// wait, and creates its callbacks topic (topics.CallbacksTopic of the main
// topic) with partitions. It returns the callbacks topic; write callbacks
// to it with processor.CallbackRecord.
func (e *Env) WithCallbacks(partitions int32, wait time.Duration) string {
	e.T.Helper()
	topic := topics.CallbacksTopic(e.P.Topic)
	e.CreateTopics(partitions, topic)
	e.P.Callbacks = &processor.Callbacks{Topic: topic, Wait: wait}
	return topic
}

// CreateTopics creates more topics on the env's broker.
func (e *Env) CreateTopics(partitions int32, names ...string) {
	e.T.Helper()
	e.Cluster.CreateTopics(e.T, partitions, nil, names...)
}

// Config is the processor configuration Start uses for e.P: short session
// and commit interval so tests run fast, a fresh registry, instance "test".
func (e *Env) Config() processor.Config {
	return processor.Config{
		Brokers:        e.Cluster.Brokers,
		Pipelines:      []processor.Pipeline{e.P},
		SessionTimeout: 6 * time.Second,
		ShutdownGrace:  10 * time.Second,
		CommitInterval: 200 * time.Millisecond,
		Registerer:     prometheus.NewRegistry(),
		Instance:       "test",
	}
}

// Start runs a processor for e.P with h, its Config changed by tweak, until
// stop is called or the test ends.
func (e *Env) Start(h processor.Handler, tweak ...func(*processor.Config)) (stop func() error) {
	e.T.Helper()
	cfg := e.Config()
	for _, f := range tweak {
		f(&cfg)
	}
	return Run(e.T, cfg, h)
}

// Run runs processor.New(cfg, h) until stop is called or t ends; stop
// cancels Run and returns its error (an error of its own when Run has not
// returned within 60s), the same on every call.
func Run(t testing.TB, cfg processor.Config, h processor.Handler) (stop func() error) {
	t.Helper()
	_, stop = RunProcessor(t, cfg, h)
	return stop
}

// RunProcessor is Run that also gives the processor (its Status, Pause,
// Resume, PipelinesHandler).
func RunProcessor(t testing.TB, cfg processor.Config, h processor.Handler) (pr *processor.Processor, stop func() error) {
	t.Helper()
	pr, err := processor.New(cfg, h)
	if err != nil {
		t.Fatalf("processor.New: %v", err)
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
	t.Cleanup(func() { _ = stop() })
	return pr, stop
}

// Produce writes records and fails the test unless all are acknowledged
// within 60s.
func (e *Env) Produce(rs ...*kgo.Record) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		e.T.Fatalf("produce: %v", err)
	}
}

// Collect reads topics from their start until enough holds or timeout
// passes, then settle more to catch extras (kafkatest.CollectUntil).
func (e *Env) Collect(topics []string, enough func(got kafkatest.Got) bool, timeout, settle time.Duration) kafkatest.Got {
	e.T.Helper()
	return e.Cluster.CollectUntil(e.T, topics, enough, timeout, settle)
}

// CollectN reads topic from its start until n records arrived or timeout
// passes, then settle more to catch extras.
func (e *Env) CollectN(topic string, n int, timeout, settle time.Duration) []*kgo.Record {
	e.T.Helper()
	return e.Collect([]string{topic}, func(got kafkatest.Got) bool { return len(got[topic]) >= n }, timeout, settle)[topic]
}

// LagProblem says why the pipeline's group has not consumed partitions
// 0..parts-1 of topics to the end; "" at lag 0 everywhere.
func (e *Env) LagProblem(topics []string, parts int32) string {
	e.T.Helper()
	return e.Cluster.LagProblem(e.T, e.P.GroupID(), topics, parts)
}
