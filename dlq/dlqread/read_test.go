package dlqread_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq/dlqread"
	"github.com/redrive/redrive/internal/kafkatest"
)

// produce writes n records to each of the partitions and waits for them.
func produce(t *testing.T, cl *kgo.Client, topic string, partitions []int32, n int, tag string) {
	t.Helper()
	var rs []*kgo.Record
	for _, p := range partitions {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", tag, p, i)})
		}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func manual(c *kafkatest.Cluster, t *testing.T) *kgo.Client {
	return c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

type seen struct {
	mu sync.Mutex
	rs []*kgo.Record
}

func (s *seen) add(r *kgo.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rs = append(s.rs, r)
	return nil
}

func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rs)
}

func (s *seen) all() []*kgo.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*kgo.Record(nil), s.rs...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestScanReadsToTheEndsAtStart(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "scan")
	c.CreateTopic(t, topic, 3, nil)
	cl := manual(c, t)
	produce(t, cl, topic, []int32{0, 1}, 10, "old") // partition 2 stays empty

	var s seen
	first := true
	err := dlqread.Scan(ctxT(t), c.Client(t), topic, func(r *kgo.Record) error {
		if first {
			// Written during the scan: past the ends, so not read.
			first = false
			produce(t, cl, topic, []int32{0, 1, 2}, 3, "new")
		}
		return s.add(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	next := map[int32]int64{}
	for _, r := range s.all() {
		if r.Offset != next[r.Partition] {
			t.Errorf("partition %d: offset %d, want %d (in order, once each)", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition] = r.Offset + 1
		if string(r.Value[:3]) != "old" {
			t.Errorf("read %s, written after the scan started", r.Value)
		}
	}
	if s.len() != 20 || next[0] != 10 || next[1] != 10 || next[2] != 0 {
		t.Errorf("read %d records (%v), want 10 of partitions 0 and 1", s.len(), next)
	}
}

func TestScanEmptyMissingAndStopped(t *testing.T) {
	c := kafkatest.New(t)
	cl := c.Client(t)
	ctx := ctxT(t)

	empty := kafkatest.Topic(t, "empty")
	c.CreateTopic(t, empty, 2, nil)
	start := time.Now()
	if err := dlqread.Scan(ctx, cl, empty, func(*kgo.Record) error { t.Error("record in an empty topic"); return nil }); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("empty topic took %v", d)
	}

	err := dlqread.Scan(ctx, cl, "no.such.topic."+empty, func(*kgo.Record) error { return nil })
	if !errors.Is(err, dlqread.ErrNoTopic) {
		t.Fatalf("missing topic: %v, want ErrNoTopic", err)
	}
	if err := dlqread.Tail(ctx, cl, "no.such.topic."+empty, true, func(*kgo.Record) error { return nil }); !errors.Is(err, dlqread.ErrNoTopic) {
		t.Fatalf("tail of a missing topic: %v, want ErrNoTopic", err)
	}

	topic := kafkatest.Topic(t, "stop")
	c.CreateTopic(t, topic, 1, nil)
	produce(t, manual(c, t), topic, []int32{0}, 10, "r")
	stop := errors.New("enough")
	n := 0
	err = dlqread.Scan(ctx, cl, topic, func(*kgo.Record) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Errorf("fn's error: Scan returned %v after %d records, want it unchanged after 3", err, n)
	}

	cctx, cancel := context.WithCancel(ctx)
	n = 0
	err = dlqread.Scan(cctx, cl, topic, func(*kgo.Record) error { n++; cancel(); return nil })
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("cancelled: %v after %d records, want context.Canceled after 1", err, n)
	}
}

func TestScanAfterDeleteRecordsAndTransactions(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "trunc")
	c.CreateTopic(t, topic, 2, nil)
	produce(t, manual(c, t), topic, []int32{0}, 10, "r")
	del, err := c.Admin(t).DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 6}}})
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		t.Fatal(err)
	}

	// A transactional writer: its commit marker takes the partition's last offset.
	tx := c.Client(t, kgo.TransactionalID("dlqread-test-"+topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		tx.Produce(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: fmt.Appendf(nil, "tx-%d", i)}, nil)
	}
	if err := tx.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	// Kafka writes the commit marker after EndTransaction returns.
	var b map[int32]dlqread.Bounds
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if b, err = dlqread.Offsets(ctx, c.Client(t), topic); err != nil {
			t.Fatal(err)
		}
		if b[1].End == 4 || time.Now().After(deadline) {
			break
		}
	}
	if b[0] != (dlqread.Bounds{Start: 6, End: 10}) || b[1].End != 4 || b[0].Len() != 4 {
		t.Errorf("bounds %v: want 0: 6-10, 1: ends at 4 (3 records + commit marker)", b)
	}
	var s seen
	done := make(chan error, 1)
	go func() { done <- dlqread.Scan(ctx, c.Client(t), topic, s.add) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Scan did not end: a partition ending in a commit marker is never done?")
	}
	var got []string
	for _, r := range s.all() {
		got = append(got, fmt.Sprintf("%d:%d:%s", r.Partition, r.Offset, r.Value))
	}
	if s.len() != 7 {
		t.Errorf("read %v, want partition 0 from offset 6 (4 records) and the 3 committed records", got)
	}
	for _, r := range s.all() {
		if r.Partition == 0 && r.Offset < 6 {
			t.Errorf("read deleted record %d", r.Offset)
		}
	}
}

func TestTailFollowsNewRecords(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "tail")
	c.CreateTopic(t, topic, 2, nil)
	cl := manual(c, t)
	produce(t, cl, topic, []int32{0, 1}, 2, "old")

	// From the end: only what comes after.
	tctx, cancel := context.WithCancel(ctx)
	var s seen
	done := make(chan error, 1)
	go func() { done <- dlqread.Tail(tctx, c.Client(t), topic, true, s.add) }()
	deadline := time.Now().Add(30 * time.Second)
	for s.len() == 0 && time.Now().Before(deadline) {
		produce(t, cl, topic, []int32{1}, 1, "new") // until Tail has started and sees one
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Tail after cancel: %v, want nil", err)
	}
	if s.len() == 0 {
		t.Fatal("Tail saw no new record within 30s")
	}
	for _, r := range s.all() {
		if string(r.Value[:3]) != "new" {
			t.Errorf("Tail from the end read %s", r.Value)
		}
	}

	// From the start: the old ones, then new ones, a new partition's too.
	old := dlqread.FollowCheckInterval
	dlqread.FollowCheckInterval = 100 * time.Millisecond
	t.Cleanup(func() { dlqread.FollowCheckInterval = old })
	tctx, cancel = context.WithCancel(ctx)
	defer cancel()
	var all seen
	go func() { done <- dlqread.Tail(tctx, c.Client(t), topic, false, all.add) }()
	for all.len() < 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := c.Admin(t).CreatePartitions(ctx, 1, topic); err != nil || r[topic].Err != nil {
		t.Fatalf("add a partition: %v %v", err, r)
	}
	for { // the producer learns of the new partition with fresh metadata
		err := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 2, Value: []byte("p2-2-0")}).FirstErr()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		got := map[string]bool{}
		for _, r := range all.all() {
			got[string(r.Value)] = true
		}
		if got["old-0-0"] && got["old-1-1"] && got["p2-2-0"] {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range all.all() {
		got[string(r.Value)] = true
	}
	if !got["old-0-0"] || !got["old-0-1"] || !got["old-1-0"] || !got["old-1-1"] || !got["p2-2-0"] {
		t.Errorf("Tail from the start read %v, want the 4 old records and the new partition's", got)
	}
}
