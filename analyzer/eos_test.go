package analyzer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/promtest"
	"github.com/redrive/redrive/retry"
)

// deadLetterAt produces dead letter id to partition part of e's DLQ with
// cl (a client with kgo.ManualPartitioner).
func (e *env) deadLetterAt(cl *kgo.Client, part int32, id, reason, code string, ts time.Time) {
	e.t.Helper()
	src := &kgo.Record{Topic: e.main, Partition: 0, Offset: 1, Key: []byte("key-" + id), Value: []byte("value-" + id)}
	m := retry.Meta{ID: id, Attempt: 3, HasOrigin: true, OriginTopic: e.main, OriginOffset: 1, OriginTimestamp: ts,
		ErrorClass: retry.ClassTransient, ErrorCode: code, Error: "failed: " + code, Reason: reason}
	r := dlq.Build(src, m, nil, dlq.BuildOptions{Topic: e.dlqName, Group: "redrive.x", Instance: "i"})
	r.Timestamp, r.Partition = ts, part
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// committedIDs reads topic from its start as a read_committed consumer
// until enough holds of what it counted (redrive-id → records) or timeout,
// then for settle more.
func committedIDs(t *testing.T, c *kafkatest.Cluster, topic string, enough func(map[string]int) bool, timeout, settle time.Duration) map[string]int {
	t.Helper()
	count := func(got kafkatest.Got) map[string]int {
		ids := map[string]int{}
		for _, r := range got[topic] {
			m, _, _ := retry.Decode(r.Headers)
			ids[m.ID]++
		}
		return ids
	}
	return count(c.CollectCommittedUntil(t, []string{topic}, func(got kafkatest.Got) bool { return enough(count(got)) }, timeout, settle))
}

func has(ids ...string) func(map[string]int) bool {
	return func(got map[string]int) bool {
		for _, id := range ids {
			if got[id] == 0 {
				return false
			}
		}
		return true
	}
}

// TestExactlyOnceRepublishBehindAWaitingOne: dead letters republished
// behind one that waits for its rule's after are past the committed
// offset. Exactly once, the commit's metadata names them: an analyzer
// started again on the same group republishes only what is new. At
// least once (the same run, ExactlyOnce off) republishes them again,
// which shows the test tells the two apart.
func TestExactlyOnceRepublishBehindAWaitingOne(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly-once=%v", eos), func(t *testing.T) {
			e := newEnv(t)
			cl := e.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			now := time.Now().Truncate(time.Millisecond)
			rules := []dlq.Rule{
				{Name: "later", Match: dlq.Filter{Reasons: []string{"expired"}}, Action: dlq.ActionRepublish, After: time.Hour},
				{Name: "now", Match: dlq.Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}}, Action: dlq.ActionRepublish, To: e.other},
			}
			e.deadLetterAt(cl, 0, "wait", "expired", "timeout", now)
			var first []string
			for i := range 5 {
				id := fmt.Sprintf("r%d", i)
				first = append(first, id)
				e.deadLetterAt(cl, 0, id, "exhausted", "ERROR_NO_SLOT_AVAILABLE", now)
			}
			e.deadLetterAt(cl, 1, "p1", "exhausted", "ERROR_NO_SLOT_AVAILABLE", now)
			pipes := []analyzer.Pipeline{{Name: e.main, Topic: e.main, DLQ: e.dlqName, Rules: rules, ExactlyOnce: eos}}
			reg := prometheus.NewRegistry()
			_, stop := e.launch(analyzer.Options{Pipelines: pipes, Instance: "a", Registerer: reg})
			got := committedIDs(t, e.c, e.other, has(append(first, "p1")...), 30*time.Second, 0)
			if !has(append(first, "p1")...)(got) {
				t.Fatalf("republished (read_committed): %v, want %v and p1", got, first)
			}
			stop()
			if eos {
				if n := promtest.Sum(t, reg, "redrive_analyzer_transactions_total", map[string]string{"result": "committed"}); n == 0 {
					t.Errorf("redrive_analyzer_transactions_total{result=committed} = 0 after republishing")
				}
				offs, err := e.c.Admin(t).FetchOffsets(context.Background(), "redrive."+e.main+".analyzer")
				if err != nil {
					t.Fatal(err)
				}
				if o, ok := offs.Lookup(e.dlqName, 0); !ok || o.At != 0 || !strings.HasPrefix(o.Metadata, "redrive.finished.1:") {
					t.Errorf("partition 0 committed %+v, want offset 0 (the waiting one) with the finished runs behind it", o)
				}
			}

			// Again, same group: one new dead letter behind the others.
			_, stop = e.launch(analyzer.Options{Pipelines: pipes, Instance: "a", Registerer: prometheus.NewRegistry()})
			defer stop()
			e.deadLetterAt(cl, 0, "new", "exhausted", "ERROR_NO_SLOT_AVAILABLE", now)
			got = committedIDs(t, e.c, e.other, has("new"), 30*time.Second, time.Second)
			if got["new"] != 1 || got["p1"] != 1 {
				t.Errorf("new republished %d times, p1 %d, want 1: %v", got["new"], got["p1"], got)
			}
			again := 0
			for _, id := range first {
				again += got[id] - 1
			}
			if eos && again != 0 {
				t.Errorf("exactly once: %d republished again after a restart: %v", again, got)
			}
			if !eos && again != len(first) {
				t.Errorf("at least once: %d of %d republished again after a restart, want all (they are past the committed offset): %v", again, len(first), got)
			}
		})
	}
}

// TestExactlyOnceAcrossRebalances: two exactly-once analyzers join and
// leave the rule worker's group while dead letters stream in; a
// read_committed reader sees each republished once.
func TestExactlyOnceAcrossRebalances(t *testing.T) {
	e := newEnv(t)
	rules := []dlq.Rule{{Name: "now", Match: dlq.Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}}, Action: dlq.ActionRepublish, To: e.other}}
	pipes := []analyzer.Pipeline{{Name: e.main, Topic: e.main, DLQ: e.dlqName, Rules: rules, ExactlyOnce: true}}
	start := func(instance string) func() {
		_, stop := e.launch(analyzer.Options{Pipelines: pipes, Instance: instance, Registerer: prometheus.NewRegistry(), SessionTimeout: 6 * time.Second})
		return stop
	}
	cl := e.c.Client(t, kgo.ProducerLinger(time.Millisecond))
	const n = 1200
	produced := make(chan int, n/20)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(produced)
		now := time.Now()
		for i := 0; i < n; i += 20 {
			var rs []*kgo.Record
			for j := i; j < i+20; j++ {
				id := fmt.Sprintf("d%d", j)
				src := &kgo.Record{Topic: e.main, Key: []byte(id), Value: []byte("v")}
				m := retry.Meta{ID: id, Attempt: 3, ErrorClass: retry.ClassTransient, ErrorCode: "ERROR_NO_SLOT_AVAILABLE", Reason: "exhausted"}
				r := dlq.Build(src, m, nil, dlq.BuildOptions{Topic: e.dlqName})
				r.Timestamp = now
				rs = append(rs, r)
			}
			if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			produced <- i + 20
			time.Sleep(25 * time.Millisecond)
		}
	}()
	stopA := start("a")
	var stopB func()
	for p := range produced {
		switch {
		case p == n/4:
			stopB = start("b")
		case p == n/2:
			stopA()
		case p == 3*n/4:
			stopA = start("a")
		}
	}
	wg.Wait()
	defer stopA()
	defer stopB()
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("d%d", i)
	}
	got := committedIDs(t, e.c, e.other, has(want...), 60*time.Second, 2*time.Second)
	missing, dups := 0, 0
	for _, id := range want {
		switch c := got[id]; {
		case c == 0:
			missing++
		case c > 1:
			dups += c - 1
		}
	}
	if missing > 0 || dups > 0 || len(got) != n {
		t.Errorf("of %d dead letters: %d not republished, %d republished more than once, %d ids in all", n, missing, dups, len(got))
	}
}

// TestExactlyOnceFailedRepublishIsRedone: republishing to a topic that
// does not exist yet fails; the transaction is aborted (counted) and
// redone from the committed offsets until the topic exists; then every
// dead letter is republished exactly once.
func TestExactlyOnceFailedRepublishIsRedone(t *testing.T) {
	e := newEnv(t)
	later := e.main + ".later"
	rules := []dlq.Rule{{Name: "later-topic", Action: dlq.ActionRepublish, To: later}}
	pipes := []analyzer.Pipeline{{Name: e.main, Topic: e.main, DLQ: e.dlqName, Rules: rules, ExactlyOnce: true}}
	cl := e.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	now := time.Now()
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("f%d", i)
		ids = append(ids, id)
		e.deadLetterAt(cl, int32(i%2), id, "exhausted", "http_503", now)
	}
	reg := prometheus.NewRegistry()
	e.launch(analyzer.Options{Pipelines: pipes, Instance: "a", Registerer: reg, ClientOpts: []kgo.Opt{kgo.UnknownTopicRetries(1)}})
	aborted := func() bool {
		return promtest.Sum(t, reg, "redrive_analyzer_transactions_total", map[string]string{"result": "aborted"}) >= 1 &&
			promtest.Sum(t, reg, "redrive_analyzer_republish_failures_total", nil) >= 1
	}
	if !kafkatest.Eventually(30*time.Second, aborted) {
		t.Fatal("no aborted transaction counted within 30s while the target topic does not exist")
	}
	e.c.CreateTopic(t, later, 2, nil)
	got := committedIDs(t, e.c, later, has(ids...), 60*time.Second, time.Second)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("%s republished %d times (read_committed), want 1: %v", id, got[id], got)
		}
	}
	if len(got) != len(ids) {
		t.Errorf("%d ids republished, want %d: %v", len(got), len(ids), got)
	}
}
