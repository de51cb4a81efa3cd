package processor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// With the run queue full of main-topic records, a tier record that is due
// is handled before all of them, although they arrived first: a worker
// (the real one, Concurrency 1) takes it next.
func TestDueTierRecordOvertakesQueuedMainRecords(t *testing.T) {
	p, tier := newMatchPipeline(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	main := &partState{tp: tp{p.cfg.Topic, 0}, tier: -1, offsets: newOffsetTracker(), ctx: ctx, cancel: cancel, committed: -1}
	p.parts[main.tp] = main

	now := time.Now()
	var fresh []*kgo.Record
	for i := range 50 {
		fresh = append(fresh, &kgo.Record{Topic: main.tp.topic, Offset: int64(i), Timestamp: now, Key: fmt.Appendf(nil, "m%d", i), Value: []byte("x")})
	}
	p.admit(main.tp.topic, 0, fresh, 50, now) // no worker runs: all 50 queued
	due := retry.Meta{ID: "retry-1", Attempt: 2, Due: now.Add(-time.Millisecond), Tier: "1s"}
	p.admit(tier.tp.topic, 0, []*kgo.Record{{Topic: tier.tp.topic, Offset: 0, Timestamp: now.Add(-time.Second), Key: []byte("t"), Value: []byte("x"), Headers: retry.Encode(due, nil)}}, 1, now)
	p.mu.Lock()
	if q := p.disp.runq.len(); q != 51 {
		p.mu.Unlock()
		t.Fatalf("run queue holds %d records, want 51", q)
	}

	var mu sync.Mutex
	var order []string
	all := make(chan struct{})
	p.h = HandlerFunc(func(_ context.Context, r *Request) Outcome {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, string(r.Record.Key))
		if len(order) == 51 {
			close(all)
		}
		return Succeed(nil)
	})
	p.cfg.Concurrency = 1
	p.disp.workers++
	go p.worker()
	p.mu.Unlock()

	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not handle the 51 queued records")
	}
	mu.Lock()
	defer mu.Unlock()
	if order[0] != "t" {
		t.Fatalf("first handled %q, want the due tier record \"t\" ahead of the 50 main-topic records that arrived first; order %v", order[0], order)
	}
	for i, k := range order[1:] {
		if want := fmt.Sprintf("m%d", i); k != want {
			t.Fatalf("main-topic record %d handled as %q, want %q (FIFO among them)", i, k, want)
		}
	}
}

// Due work goes first but takes at most dueBurst picks in a row while
// main-topic records wait: the main topic is never starved. Within each
// class the order is arrival.
func TestRunQueueBoundsTheDueShare(t *testing.T) {
	mainPS, tierPS := &partState{tier: -1}, &partState{tier: 0}
	var q runQueue
	const nMain, nDue = 10, 3*dueBurst - 1
	for i := range nMain {
		q.push(&work{ps: mainPS, size: int64(i)})
	}
	for i := range nDue {
		q.push(&work{ps: tierPS, size: int64(i)})
	}
	var got []string
	next := map[bool]int64{}
	for w := q.pop(); w != nil; w = q.pop() {
		isDue := w.ps.tier >= 0
		if w.size != next[isDue] {
			t.Fatalf("%v record %d taken when %d was next", isDue, w.size, next[isDue])
		}
		next[isDue]++
		if isDue {
			got = append(got, "d")
		} else {
			got = append(got, "m")
		}
	}
	// dueBurst due and one main, twice; then the last dueBurst-1 due
	// (the main topic waits no more than dueBurst picks), then the rest
	// of the main topic.
	want := strings.Repeat(strings.Repeat("d", dueBurst)+"m", 2) + strings.Repeat("d", dueBurst-1) + strings.Repeat("m", nMain-2)
	if g := strings.Join(got, ""); g != want {
		t.Fatalf("pick order %s, want %s", g, want)
	}
	if q.len() != 0 || q.pop() != nil {
		t.Fatal("queue not empty after taking everything")
	}
}

// While the breaker is not closed the run queue hands out fresh work
// first (the half-open probes are fresh requests), and records given back
// by the line (pushDue) wait behind it; closed, due work goes first again.
func TestRunQueueFreshFirstWhileBreakerNotClosed(t *testing.T) {
	var notClosed atomic.Bool
	q := runQueue{freshFirst: &notClosed}
	mainPS, tierPS := &partState{tier: -1}, &partState{tier: 0}
	retry1, fresh1, yielded := &work{ps: tierPS}, &work{ps: mainPS}, &work{ps: mainPS}
	q.push(retry1)
	q.push(fresh1)
	q.pushDue(yielded)
	if !q.freshWaiting() {
		t.Fatal("freshWaiting false with a main-topic record queued")
	}
	notClosed.Store(true)
	if w := q.pop(); w != fresh1 {
		t.Fatal("breaker not closed: the fresh record was not handed out first")
	}
	if q.freshWaiting() {
		t.Fatal("freshWaiting true with no main-topic record queued (the yielded one waits as due work)")
	}
	notClosed.Store(false)
	if w := q.pop(); w != retry1 {
		t.Fatal("closed: due work did not go first")
	}
	if w := q.pop(); w != yielded {
		t.Fatal("the yielded record was lost")
	}
}

// While the breaker is not closed, fresh work is handed out newest first:
// the half-open probes are the records that came last, not the oldest,
// which may be the rest of the burst that opened it. freshNewest follows
// the newest waiting. Closed again, the rest goes oldest first.
func TestRunQueueFreshNewestFirstWhileBreakerNotClosed(t *testing.T) {
	var notClosed atomic.Bool
	q := runQueue{freshFirst: &notClosed}
	mainPS, tierPS := &partState{tier: -1}, &partState{tier: 0}
	var fresh []*work
	for seq := uint64(1); seq <= 5; seq++ {
		w := &work{ps: mainPS}
		w.seq = seq
		fresh = append(fresh, w)
		q.push(w)
	}
	retry1 := &work{ps: tierPS}
	retry1.seq = 6
	q.push(retry1)
	if n := q.freshNewest(); n != 5 {
		t.Fatalf("freshNewest %d, want 5", n)
	}
	notClosed.Store(true)
	for _, want := range []uint64{5, 4} {
		if w := q.pop(); w != fresh[want-1] {
			t.Fatalf("breaker not closed: took seq %d, want the newest fresh record, %d", w.seq, want)
		}
	}
	if n := q.freshNewest(); n != 3 {
		t.Fatalf("freshNewest %d after taking the two newest, want 3", n)
	}
	late := &work{ps: mainPS}
	late.seq = 7
	q.push(late)
	if w := q.pop(); w != late {
		t.Fatalf("took seq %d, want the record that came last, 7", w.seq)
	}
	notClosed.Store(false)
	var got []uint64
	for w := q.pop(); w != nil; w = q.pop() {
		got = append(got, w.seq)
	}
	if fmt.Sprint(got) != "[6 1 2 3]" {
		t.Fatalf("closed: order %v, want the due record, then the fresh ones oldest first [6 1 2 3]", got)
	}
	if q.freshWaiting() || q.freshNewest() != 0 {
		t.Fatal("fresh work reported waiting in an empty queue")
	}
}

// popBack takes the last element, and the queue stays usable from both
// ends, as its compaction moves elements.
func TestQueuePopBack(t *testing.T) {
	var q queue[int]
	for i := range 200 {
		q.push(i)
	}
	for i := range 100 {
		if v := q.pop(); v != i {
			t.Fatalf("pop %d, want %d", v, i)
		}
	}
	for i := 199; i >= 150; i-- {
		if v := q.popBack(); v != i {
			t.Fatalf("popBack %d, want %d", v, i)
		}
	}
	for i := 100; i < 150; i++ {
		if v := q.pop(); v != i {
			t.Fatalf("pop %d, want %d", v, i)
		}
	}
	if q.len() != 0 || q.popBack() != 0 {
		t.Fatal("queue not empty")
	}
	q.push(7)
	if v := q.popBack(); v != 7 || q.len() != 0 {
		t.Fatalf("popBack %d len %d, want 7 and empty", v, q.len())
	}
}
