package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/internal/promtest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// collectCommitted reads topics from their start as a read_committed
// consumer (what exactly-once promises) until enough holds or timeout,
// then settle more to catch duplicates.
func collectCommitted(t *testing.T, e *pipetest.Env, topics []string, enough func(kafkatest.Got) bool, timeout, settle time.Duration) kafkatest.Got {
	t.Helper()
	return e.Cluster.CollectCommittedUntil(t, topics, enough, timeout, settle)
}

// idCounts counts the records of topic per redrive-id.
func idCounts(got kafkatest.Got, topic string) map[string]int {
	n := map[string]int{}
	for _, r := range got[topic] {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		n[id]++
	}
	return n
}

func exactlyOnceEnv(t *testing.T, parts int32) *pipetest.Env {
	e := newEnv(t, []time.Duration{time.Second, 2 * time.Second}, parts)
	e.P.Delivery = processor.ExactlyOnce
	return e
}

// TestExactlyOnceOutcomes: an exactly-once pipeline writes each request's
// terminal record and each retry hop once, read_committed, commits every
// offset, and counts its transactions.
func TestExactlyOnceOutcomes(t *testing.T) {
	e := exactlyOnceEnv(t, 3)
	s := newScript()
	reg := prometheus.NewRegistry()
	stop := e.Start(s, func(c *processor.Config) { c.Registerer = reg })

	scripts := []struct {
		v     string
		dlq   bool
		tier1 int // records written to the first tier
	}{{"ok", false, 0}, {"transient:1", false, 1}, {"notready:1", false, 1}, {"permanent", true, 0}}
	const per = 50
	var recs []*kgo.Record
	wantDLQ := map[string]bool{}
	wantTier := map[string]int{}
	for i := 0; i < per; i++ {
		for _, sc := range scripts {
			id := fmt.Sprintf("%s-%d", sc.v, i)
			wantDLQ[id] = sc.dlq
			wantTier[id] = sc.tier1
			recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(id), Value: []byte(sc.v),
				Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
		}
	}
	e.Produce(recs...)
	tier1 := e.P.TierTopics()[0]
	topics := []string{e.P.Results, e.P.DLQ, tier1}
	got := collectCommitted(t, e, topics, func(g kafkatest.Got) bool {
		return len(idCounts(g, e.P.Results))+len(idCounts(g, e.P.DLQ)) >= len(wantDLQ)
	}, 60*time.Second, 2*time.Second)
	res, dead, hops := idCounts(got, e.P.Results), idCounts(got, e.P.DLQ), idCounts(got, tier1)
	for id, toDLQ := range wantDLQ {
		in, other := res, dead
		if toDLQ {
			in, other = dead, res
		}
		if in[id] != 1 || other[id] != 0 {
			t.Errorf("%s: %d records in its terminal topic and %d in the other, want exactly 1 and 0", id, in[id], other[id])
		}
		if hops[id] != wantTier[id] {
			t.Errorf("%s: %d records in %s, want %d", id, hops[id], tier1, wantTier[id])
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// The tier was written in transactions: its markers are committed past too.
	if p := e.LagProblem([]string{e.P.Topic, tier1}, 3); p != "" {
		t.Errorf("after stop: %s", p)
	}
	if n := promtest.Sum(t, reg, "redrive_transactions_total", map[string]string{"pipeline": e.P.Name, "result": "committed"}); n < 1 {
		t.Errorf("redrive_transactions_total{result=committed} = %v, want at least 1", n)
	}
}

// TestExactlyOnceHoldsUntilPrefix: within a partition records are handled
// concurrently, but no outcome becomes visible (read_committed) while an
// earlier record of its partition is still being handled; once it
// finishes, all of them are, once.
func TestExactlyOnceHoldsUntilPrefix(t *testing.T) {
	e := exactlyOnceEnv(t, 1)
	release := make(chan struct{})
	var handled atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if string(req.Record.Key) == "first" {
			select {
			case <-release:
			case <-ctx.Done():
				return processor.Outcome{Kind: processor.Transient, Code: "cancelled"}
			}
		}
		handled.Add(1)
		return processor.Succeed([]byte("r"))
	})
	e.Start(h)
	recs := []*kgo.Record{{Topic: e.P.Topic, Key: []byte("first"), Value: []byte("x")}}
	for i := 0; i < 20; i++ {
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("later-%d", i)), Value: []byte("x")})
	}
	e.Produce(recs...)
	if !kafkatest.Eventually(30*time.Second, func() bool { return handled.Load() >= 20 }) {
		t.Fatalf("the 20 later records were not handled: %d", handled.Load())
	}
	// Several transaction intervals pass: nothing may be committed.
	got := collectCommitted(t, e, []string{e.P.Results}, func(kafkatest.Got) bool { return false }, 2*time.Second, 0)
	if n := len(got[e.P.Results]); n != 0 {
		t.Fatalf("%d results visible while the partition's first record is still handled, want 0", n)
	}
	close(release)
	got = collectCommitted(t, e, []string{e.P.Results}, func(g kafkatest.Got) bool { return len(g[e.P.Results]) >= 21 }, 30*time.Second, time.Second)
	counts := idCounts(got, e.P.Results)
	if len(counts) != 21 || len(got[e.P.Results]) != 21 {
		t.Fatalf("after the first record finished: %d results of %d requests, want 21 of 21", len(got[e.P.Results]), len(counts))
	}
	// In offset order: the prefix is written as a whole.
	if k := string(got[e.P.Results][0].Key); k != "first" {
		t.Errorf("first result is %q, want the first record's", k)
	}
}

// TestExactlyOnceRebalanceNoDuplicates: a second processor joins and the
// first leaves mid-run; transactions open across the rebalances abort and
// their records are handled again, so the handler may see a request twice,
// but every request's result is written once (read_committed).
func TestExactlyOnceRebalanceNoDuplicates(t *testing.T) {
	e := exactlyOnceEnv(t, 4)
	var mu sync.Mutex
	calls := map[string]int{}
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		calls[req.ID]++
		mu.Unlock()
		return processor.Succeed([]byte("r"))
	})
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls)
	}
	const n = 3000
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("k-%d", i)), Value: []byte("x")})
	}
	e.Produce(recs...)
	tweak := func(instance string) func(*processor.Config) {
		return func(c *processor.Config) {
			c.Instance = instance
			for i := range c.Pipelines {
				c.Pipelines[i].Concurrency = 8
			}
		}
	}
	stopA := e.Start(h, tweak("a"))
	if !kafkatest.Eventually(60*time.Second, func() bool { return distinct() >= n/5 }) {
		t.Fatalf("first processor handled %d of %d", distinct(), n)
	}
	stopB := e.Start(h, tweak("b"))
	if !kafkatest.Eventually(60*time.Second, func() bool { return distinct() >= n/2 }) {
		t.Fatalf("handled %d of %d after the second joined", distinct(), n)
	}
	if err := stopA(); err != nil {
		t.Fatalf("stop first: %v", err)
	}
	got := collectCommitted(t, e, []string{e.P.Results}, func(g kafkatest.Got) bool { return len(idCounts(g, e.P.Results)) >= n }, 90*time.Second, 2*time.Second)
	counts := idCounts(got, e.P.Results)
	dups := 0
	for _, c := range counts {
		dups += c - 1
	}
	if len(counts) != n || dups != 0 {
		t.Fatalf("%d of %d requests have a result, %d duplicate results; want all, 0", len(counts), n, dups)
	}
	if err := stopB(); err != nil {
		t.Fatalf("stop second: %v", err)
	}
	if p := e.LagProblem([]string{e.P.Topic}, 4); p != "" {
		t.Errorf("after stop: %s", p)
	}
	mu.Lock()
	again := 0
	for _, c := range calls {
		again += c - 1
	}
	mu.Unlock()
	t.Logf("%d requests, %d handler calls repeated by aborted transactions, 0 duplicate results", n, again)
}

// TestExactlyOnceSameInstanceFailsClearly: two live processes given the
// same instance share a transactional id; the one started first is fenced
// and stops with an error naming the cause (and reports not ready), the
// other goes on, and every request still has exactly one result.
func TestExactlyOnceSameInstanceFailsClearly(t *testing.T) {
	e := exactlyOnceEnv(t, 2)
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		time.Sleep(time.Millisecond)
		return processor.Succeed([]byte("r"))
	})
	const n = 2000
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("k-%d", i)), Value: []byte("x")})
	}
	var mu sync.Mutex
	var notReady []string
	cfgA := e.Config()
	cfgA.Instance = "same"
	cfgA.Ready = func(name string, err error) {
		if err != nil {
			mu.Lock()
			notReady = append(notReady, err.Error())
			mu.Unlock()
		}
	}
	prA, err := processor.New(cfgA, h)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { doneA <- prA.Run(ctxA) }()
	e.Produce(recs[:n/4]...)
	if got := collectCommitted(t, e, []string{e.P.Results}, func(g kafkatest.Got) bool { return len(g[e.P.Results]) >= 10 }, 30*time.Second, 0); len(got[e.P.Results]) < 10 {
		t.Fatalf("the first processor wrote %d results", len(got[e.P.Results]))
	}
	e.Start(h, func(c *processor.Config) { c.Instance = "same" })
	// The second begins a transaction with the same id: the first is
	// fenced at its next one and stops by itself. Records keep coming,
	// so that both have transactions to write.
	var errA error
	rest := recs[n/4:]
	deadline := time.After(60 * time.Second)
wait:
	for {
		select {
		case errA = <-doneA:
			break wait
		case <-deadline:
			t.Fatal("the first processor was not stopped by the second one's producer within 60s")
		case <-time.After(100 * time.Millisecond):
		}
		if len(rest) > 0 {
			k := min(10, len(rest))
			e.Produce(rest[:k]...)
			rest = rest[k:]
		}
	}
	e.Produce(rest...)
	got := collectCommitted(t, e, []string{e.P.Results}, func(g kafkatest.Got) bool { return len(idCounts(g, e.P.Results)) >= n }, 60*time.Second, 2*time.Second)
	counts := idCounts(got, e.P.Results)
	dups := 0
	for _, c := range counts {
		dups += c - 1
	}
	if len(counts) != n || dups != 0 {
		t.Fatalf("%d of %d requests have a result, %d duplicates; want all, 0", len(counts), n, dups)
	}
	if errA == nil || !strings.Contains(errA.Error(), "fenced") || !strings.Contains(errA.Error(), "instance") {
		t.Errorf("the fenced processor stopped with %v, want an error saying it is fenced and naming instance", errA)
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, m := range notReady {
		found = found || strings.Contains(m, "fenced")
	}
	if !found {
		t.Errorf("readiness never reported the fenced producer: %q", notReady)
	}
}
