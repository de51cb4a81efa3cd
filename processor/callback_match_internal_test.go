package processor

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

func cbAt(job string, at time.Time) Callback {
	return Callback{JobID: job, Result: []byte("r-" + job), At: at}
}

// The store's rules: a callback is taken once, given back when its record
// is abandoned, kept as done when its record finished; a second one is a
// duplicate, one for a job finished by polling is late; forget makes
// room for the job's next callback.
func TestCBStoreLifecycle(t *testing.T) {
	now := time.Now()
	s := newCBStore(10, DefaultCallbackBytes, time.Minute)
	if !s.add(cbAt("a", now), now) {
		t.Fatal("first callback for a: not added")
	}
	if s.add(cbAt("a", now), now) || s.stat(cbDuplicate) != 1 {
		t.Errorf("second callback for a (pending): added or not counted as duplicate (%d)", s.stat(cbDuplicate))
	}
	cb, ok := s.take("a")
	if !ok || cb.JobID != "a" || string(cb.Result) != "r-a" {
		t.Fatalf("take a = %+v, %v", cb, ok)
	}
	if _, ok := s.take("a"); ok {
		t.Error("a taken twice")
	}
	s.release("a")
	if _, ok := s.take("a"); !ok {
		t.Error("a released (its record abandoned) but cannot be taken again")
	}
	s.done("a")
	if _, ok := s.take("a"); ok {
		t.Error("a done but taken again")
	}
	if s.add(cbAt("a", now), now) || s.stat(cbDuplicate) != 2 {
		t.Errorf("callback for a (done): added or not a duplicate (%d)", s.stat(cbDuplicate))
	}
	if _, ok := s.take("nope"); ok {
		t.Error("took a callback never received")
	}

	// Late: after the poll, and before it (pending while the poll ran).
	s.finishedByPoll("b", now)
	if s.add(cbAt("b", now), now) || s.stat(cbLate) != 1 {
		t.Errorf("callback for b after its poll: added or not late (%d)", s.stat(cbLate))
	}
	s.add(cbAt("c", now), now)
	s.finishedByPoll("c", now)
	if s.stat(cbLate) != 2 {
		t.Errorf("pending callback for c when its poll finished: late %d, want 2", s.stat(cbLate))
	}
	if _, ok := s.take("c"); ok {
		t.Error("c was finished by a poll, its callback taken all the same")
	}

	// Forget: the callback's outcome was a retry; the next one is new.
	s.add(cbAt("d", now), now)
	s.take("d")
	s.forget("d")
	if !s.add(cbAt("d", now), now) {
		t.Error("after forget, the next callback for d was not added")
	}
	if s.len() != 3 { // a, c, d
		t.Errorf("held %d, want 3", s.len())
	}
}

// MaxEntries: the oldest are dropped first; unmatched ones are counted as
// evicted. Age: a callback is kept Wait+margin from its timestamp; one
// older than that is not taken in at all. The finished-by-poll set has the
// same bounds.
func TestCBStoreBounds(t *testing.T) {
	now := time.Now()
	s := newCBStore(3, DefaultCallbackBytes, time.Minute)
	for i := range 5 {
		s.add(cbAt(fmt.Sprint(i), now.Add(time.Duration(i)*time.Millisecond)), now)
	}
	if s.len() != 3 || s.stat(cbEvicted) != 2 {
		t.Errorf("held %d evicted %d, want 3 and 2", s.len(), s.stat(cbEvicted))
	}
	for _, j := range []string{"0", "1"} {
		if _, ok := s.take(j); ok {
			t.Errorf("%s should have been evicted (oldest first)", j)
		}
	}
	if _, ok := s.take("4"); !ok {
		t.Error("the newest was evicted")
	}
	s.done("4")
	s.add(cbAt("5", now), now) // evicts 2 (pending)
	s.add(cbAt("6", now), now) // evicts 3 (pending)
	s.add(cbAt("7", now), now) // evicts 4 (done: not counted)
	if s.stat(cbEvicted) != 4 {
		t.Errorf("evicted %d, want 4 (a matched one dropped is not counted)", s.stat(cbEvicted))
	}

	a := newCBStore(100, DefaultCallbackBytes, time.Minute)
	a.add(cbAt("old", now.Add(-50*time.Second)), now)
	a.add(cbAt("new", now), now)
	if a.add(cbAt("ancient", now.Add(-2*time.Minute)), now) {
		t.Error("a callback older than the age bound was taken in")
	}
	a.add(cbAt("future", now.Add(time.Hour)), now) // a clock ahead: kept from now
	a.sweep(now.Add(11 * time.Second))
	if _, ok := a.take("old"); ok {
		t.Error("old outlived its age")
	}
	if a.len() != 2 {
		t.Errorf("after 11s held %d, want 2 (new, future)", a.len())
	}
	a.sweep(now.Add(61 * time.Second))
	if a.len() != 0 {
		t.Errorf("after the age held %d, want 0", a.len())
	}

	// The finished-by-poll set: bounded, and forgotten after the age.
	p := newCBStore(2, DefaultCallbackBytes, time.Minute)
	p.finishedByPoll("x", now)
	p.finishedByPoll("y", now)
	p.finishedByPoll("z", now) // drops x
	if !p.add(cbAt("x", now), now) || p.stat(cbLate) != 0 {
		t.Error("x dropped from the polled set (bound 2) still counted late")
	}
	p.sweep(now.Add(2 * time.Minute))
	if !p.add(cbAt("y", now.Add(2*time.Minute)), now.Add(2*time.Minute)) {
		t.Error("y's poll is older than the age: its callback should be a new one")
	}
}

// newMatchPipeline is a pipeline with callbacks and no broker (the client
// never connects) whose dispatched work stays in the run queue: no worker
// runs (Concurrency 0 after validation). One tier partition is assigned.
func newMatchPipeline(t *testing.T) (*pipeline, *partState) {
	t.Helper()
	cfg := Pipeline{Name: "solve", Topic: "solve", Schedule: retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 3},
		Callbacks: &Callbacks{Wait: time.Second}}
	c := Config{Brokers: []string{"127.0.0.1:1"}, Instance: "test", Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
	pc := &c
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPipeline(pc, cfg.WithDefaults(), HandlerFunc(func(context.Context, *Request) Outcome { return Succeed(nil) }), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.cl.Close)
	p.cfg.Concurrency = 0
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ps := &partState{tp: tp{p.tiers[0], 0}, tier: 0, offsets: newOffsetTracker(), ctx: ctx, cancel: cancel, committed: -1}
	p.parts[ps.tp] = ps
	return p, ps
}

// tierRecord is a not-ready tier record for job, due at due.
func tierRecord(topic string, off int64, job string, now, due time.Time) *kgo.Record {
	m := retry.Meta{ID: "id-" + job, Attempt: 1, ErrorClass: retry.ClassNotReady, State: []byte(job), Due: due, Tier: "1s", NotReadySince: now}
	return &kgo.Record{Topic: topic, Offset: off, Timestamp: now, Value: []byte(job), Headers: retry.Encode(m, nil)}
}

// The race between the scheduler popping a waiting record and its
// callback arriving: whoever takes the record out of the heap dispatches
// it, exactly once, and the callback is either attached or still pending
// for process to take. Also at admit: a callback already in the store is
// attached and the record dispatched at once. The index is empty after.
func TestMatchWaitingRace(t *testing.T) {
	p, ps := newMatchPipeline(t)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.room.run(sctx); close(done) }()
	defer func() { stop(); <-done }()

	const n = 2000
	now := time.Now()
	rnd := rand.New(rand.NewPCG(1, 2))
	early := map[string]bool{}
	var recs []*kgo.Record
	for i := range n {
		job := fmt.Sprintf("job-%d", i)
		due := now.Add(time.Duration(rnd.IntN(40)) * time.Millisecond)
		recs = append(recs, tierRecord(ps.tp.topic, int64(i), job, now, due))
		if i%10 == 0 { // its callback came before the record
			early[job] = true
			p.cbs.store.add(cbAt(job, now), now)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			job := fmt.Sprintf("job-%d", i)
			if !early[job] {
				p.onCallbackRecord(CallbackRecord("cb", cbAt(job, time.Now())), time.Now())
			}
		}
	}()
	for i := 0; i < n; i += 100 {
		p.admit(ps.tp.topic, 0, recs[i:i+100], 0, time.Now())
	}
	wg.Wait()

	// Every record leaves the scheduler: by its callback or when due.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		queued, waiting := p.disp.runq.len(), ps.waiting
		p.mu.Unlock()
		if queued == n && waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d dispatched, %d waiting, want %d and 0", queued, waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]int{}
	attached := 0
	p.disp.runq.each(func(w *work) {
		job := string(w.meta.State)
		seen[job]++
		if w.cb != nil {
			attached++
			if w.cb.JobID != job {
				t.Fatalf("record of %s got the callback of %s", job, w.cb.JobID)
			}
			return
		}
		// Popped by the scheduler: process takes the callback.
		p.takeCallback(w)
		if w.cb == nil {
			t.Errorf("%s: dispatched without its callback, and process could not take it", job)
		}
	})
	for i := range n {
		if job := fmt.Sprintf("job-%d", i); seen[job] != 1 {
			t.Errorf("%s dispatched %d times, want once", job, seen[job])
		}
	}
	if len(p.jobs) != 0 {
		t.Errorf("index holds %d records after all were dispatched", len(p.jobs))
	}
	if p.waiting != 0 || p.inflight != n {
		t.Errorf("waiting %d inflight %d, want 0 and %d", p.waiting, p.inflight, n)
	}
	if attached < n/10 {
		t.Errorf("only %d callbacks attached before dispatch; the %d early ones at least should be", attached, n/10)
	}
	t.Logf("%d of %d matched before dispatch (early or while waiting)", attached, n)
}

// A revoke drops the partition's records from the index: a callback for
// one of them does nothing here (the next owner matches it), and stays
// pending in the store.
func TestDropUnindexes(t *testing.T) {
	p, ps := newMatchPipeline(t)
	now := time.Now()
	p.admit(ps.tp.topic, 0, []*kgo.Record{tierRecord(ps.tp.topic, 0, "j", now, now.Add(time.Hour))}, 0, now)
	p.mu.Lock()
	if p.jobs["j"] == nil || ps.waiting != 1 {
		t.Fatalf("admit: index %v waiting %d", p.jobs, ps.waiting)
	}
	p.mu.Unlock()
	p.drop(context.Background(), p.cl, map[string][]int32{ps.tp.topic: {0}}, false)
	p.mu.Lock()
	if len(p.jobs) != 0 {
		t.Errorf("after the revoke the index holds %v", p.jobs)
	}
	p.mu.Unlock()
	p.onCallbackRecord(CallbackRecord("cb", cbAt("j", now)), now)
	p.mu.Lock()
	queued := p.disp.runq.len()
	p.mu.Unlock()
	if queued != 0 {
		t.Errorf("a record of a revoked partition was dispatched by its callback")
	}
	if _, ok := p.cbs.store.take("j"); !ok {
		t.Error("the callback is not pending for a redelivered record")
	}
}

// The race's narrow case, step by step: the scheduler popped the record,
// its callback arrives before onDue runs. The reader leaves the record to
// onDue (which dispatches it once) and the callback pending for process.
func TestMatchAfterPop(t *testing.T) {
	p, ps := newMatchPipeline(t)
	now := time.Now()
	p.admit(ps.tp.topic, 0, []*kgo.Record{tierRecord(ps.tp.topic, 0, "j", now, now.Add(time.Hour))}, 0, now)
	p.room.mu.Lock()
	w := heap.Pop(&p.room.h).(*work) // what run does when it is due
	p.room.mu.Unlock()
	p.onCallbackRecord(CallbackRecord("cb", cbAt("j", now)), now)
	p.mu.Lock()
	queued := p.disp.runq.len()
	p.mu.Unlock()
	if queued != 0 || w.cb != nil {
		t.Fatalf("popped record dispatched by the reader (queued %d, callback %v)", queued, w.cb)
	}
	p.onDue(w)
	p.mu.Lock()
	queued = p.disp.runq.len()
	indexed := len(p.jobs)
	p.mu.Unlock()
	if queued != 1 || indexed != 0 || ps.waiting != 0 {
		t.Fatalf("after onDue: queued %d indexed %d waiting %d, want 1, 0, 0", queued, indexed, ps.waiting)
	}
	p.takeCallback(w)
	if w.cb == nil || w.cb.JobID != "j" {
		t.Fatalf("process could not take the pending callback: %+v", w.cb)
	}
	if p.room.remove(w) {
		t.Error("remove of a popped record reported true")
	}
}

// MaxBytes: whatever the callbacks carry, the store holds at most its byte
// bound, oldest dropped first; a matched callback keeps only its job id,
// so duplicates are still told after its result is gone; jobs finished by
// polling count against the same bound.
func TestCBStoreBytes(t *testing.T) {
	now := time.Now()
	const bound = 1 << 20
	s := newCBStore(100_000, bound, time.Hour)
	big := func(id string) Callback {
		return Callback{JobID: id + strings.Repeat("i", 4000), Result: bytes.Repeat([]byte("r"), 60_000), Error: strings.Repeat("e", 60_000), At: now}
	}
	for i := range 100 {
		s.add(big(fmt.Sprint(i)), now)
		if got := s.size(); got > bound {
			t.Fatalf("after %d callbacks the store holds %d bytes, more than its bound %d", i+1, got, bound)
		}
	}
	if s.len() == 0 || s.len() > bound/124_000 {
		t.Errorf("held %d callbacks of ~124KB in %d bytes", s.len(), bound)
	}
	if _, ok := s.take(fmt.Sprint(0) + strings.Repeat("i", 4000)); ok {
		t.Error("the oldest callback outlived the byte bound")
	}
	newest := fmt.Sprint(99) + strings.Repeat("i", 4000)
	if _, ok := s.take(newest); !ok {
		t.Fatal("the newest callback was dropped")
	}
	before := s.size()
	s.done(newest)
	if freed := before - s.size(); freed < 120_000 {
		t.Errorf("a matched callback freed %d bytes, want its result and error (~120KB)", freed)
	}
	if s.add(big("99"), now) || s.stat(cbDuplicate) != 1 {
		t.Error("a second callback for a matched job was not a duplicate")
	}

	p := newCBStore(100_000, bound, time.Hour)
	for i := range 1000 {
		p.finishedByPoll(fmt.Sprint(i)+strings.Repeat("j", 4000), now)
	}
	if got := p.size(); got > bound {
		t.Errorf("polled jobs hold %d bytes, more than the bound %d", got, bound)
	}
}
