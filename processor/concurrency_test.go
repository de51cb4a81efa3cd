package processor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// keyWatch is a handler that records, per key, how many calls overlap and
// the order values arrive in.
type keyWatch struct {
	mu       sync.Mutex
	inflight map[string]int
	maxSame  int // most calls for one key at once
	order    map[string][]string
	total    atomic.Int64
}

func (k *keyWatch) Handle(ctx context.Context, req *processor.Request) processor.Outcome {
	key := string(req.Record.Key)
	k.mu.Lock()
	k.inflight[key]++
	k.maxSame = max(k.maxSame, k.inflight[key])
	k.order[key] = append(k.order[key], string(req.Record.Value))
	k.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
	k.mu.Lock()
	k.inflight[key]--
	k.mu.Unlock()
	k.total.Add(1)
	return processor.Outcome{Kind: processor.Success}
}

func runKeyed(t *testing.T, ordered bool) *keyWatch {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.OrderByKey = ordered
	e.P.Concurrency = 16
	k := &keyWatch{inflight: map[string]int{}, order: map[string][]string{}}
	e.Start(k)
	const keys, per = 4, 50
	var rs []*kgo.Record
	for i := range per {
		for j := range keys {
			rs = append(rs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("key-%d", j)), Value: []byte(fmt.Sprintf("%03d", i))})
		}
	}
	e.Produce(rs...)
	deadline := time.Now().Add(30 * time.Second)
	for k.total.Load() < keys*per && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := k.total.Load(); got != keys*per {
		t.Fatalf("handled %d of %d", got, keys*per)
	}
	return k
}

func TestOrderingByKey(t *testing.T) {
	k := runKeyed(t, true)
	if k.maxSame != 1 {
		t.Errorf("ordering: key: %d calls for one key at once, want 1", k.maxSame)
	}
	for key, vs := range k.order {
		for i := 1; i < len(vs); i++ {
			if vs[i] < vs[i-1] {
				t.Fatalf("%s handled out of order: %v", key, vs)
			}
		}
	}
}

// Without ordering, records of one partition (and one key) run
// concurrently: the same workload overlaps.
func TestNoOrderingHandlesOnePartitionConcurrently(t *testing.T) {
	k := runKeyed(t, false)
	if k.maxSame < 2 {
		t.Errorf("without ordering, at most %d call per key at once on one partition; want several", k.maxSame)
	}
}

// At the in-flight bound the processor stops fetching: with a handler that
// never returns, no more than max_inflight records are polled and exactly
// concurrency calls run.
func TestInflightBoundStopsFetching(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 2)
	e.P.Concurrency, e.P.MaxInflight = 4, 10
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	var running, peak, calls atomic.Int64
	e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		calls.Add(1)
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		running.Add(-1)
		return processor.Outcome{Kind: processor.Success}
	}), func(c *processor.Config) { c.Registerer = reg })
	var rs []*kgo.Record
	for i := range 200 {
		rs = append(rs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprint(i)), Value: []byte("x")})
	}
	e.Produce(rs...)
	deadline := time.Now().Add(20 * time.Second)
	for running.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // give it the chance to over-fetch
	if peak.Load() != 4 {
		t.Errorf("%d handler calls at once, want concurrency 4", peak.Load())
	}
	if in := gaugeSum(t, reg, "redrive_inflight_records"); in > 10 {
		t.Errorf("%v records in flight, want at most max_inflight 10", in)
	}
	if c := counterSum(t, reg, "redrive_records_consumed_total"); c > 10 {
		t.Errorf("%v records polled while blocked, want at most max_inflight 10", c)
	}
	close(release)
	results := e.CollectN(e.P.Results, 200, 30*time.Second, 0)
	if len(results) < 200 {
		t.Fatalf("%d results after release, want 200", len(results))
	}
}

// Two pipelines in one process: each reads its own topics, writes its own
// results, in its own group.
func TestTwoPipelinesInOneProcess(t *testing.T) {
	a := newEnv(t, []time.Duration{time.Second}, 1)
	bp := a.P
	bp.Name, bp.Topic = a.P.Name+"-b", a.P.Topic+"-b"
	bp.Results, bp.DLQ = bp.Topic+".results", bp.Topic+".dlq"
	a.CreateTopics(1, append([]string{bp.Topic, bp.Results, bp.DLQ}, bp.TierTopics()...)...)
	s := newScript()
	a.Start(s, func(c *processor.Config) { c.Pipelines = append(c.Pipelines, bp) })
	a.Produce(&kgo.Record{Topic: a.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("in-a")}}})
	a.Produce(&kgo.Record{Topic: bp.Topic, Value: []byte("transient:1"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("in-b")}}})
	ra := a.CollectN(a.P.Results, 1, 30*time.Second, 200*time.Millisecond)
	rb := a.CollectN(bp.Results, 1, 30*time.Second, 200*time.Millisecond)
	if len(ra) != 1 || len(rb) != 1 {
		t.Fatalf("results: %d in a, %d in b; want 1 each", len(ra), len(rb))
	}
	if id, _ := kafkatest.Header(ra[0], retry.HeaderID); id != "in-a" {
		t.Errorf("a's result is %q", id)
	}
	if att, _ := kafkatest.Header(rb[0], retry.HeaderAttempt); att != "2" {
		t.Errorf("b's result after one 503 has attempt %q, want 2", att)
	}
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
