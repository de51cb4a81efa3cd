package processor

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Callbacks, the processor side (callback.go is the contract): a reader
// per pipeline with Callbacks follows the callbacks topic
// (callback_reader.go) into a bounded store by job id (this file), and a
// tier record whose state (its job id) has a callback is finished with
// the callback's outcome instead of a handler call (callback_match.go).
//
// Lock order: pipeline.mu, then waitRoom.mu or cbStore.mu; the store and
// the waiting room never take another lock while they hold theirs.

// cbEvent is an event label of redrive_callbacks_total.
type cbEvent int

const (
	cbReceived  cbEvent = iota // a valid callback record read
	cbMatched                  // a record finished by its callback
	cbDuplicate                // a second callback for a job in the store
	cbLate                     // a callback for a job finished by a poll
	cbEvicted                  // dropped unmatched at MaxEntries or MaxBytes
	cbBad                      // a record without a valid job id
	nCBEvents
)

var cbEventNames = [nCBEvents]string{cbReceived: "received", cbMatched: "matched", cbDuplicate: "duplicate",
	cbLate: "late", cbEvicted: "evicted", cbBad: "bad"}

// cbState is where a stored callback is.
type cbState uint8

const (
	cbPending cbState = iota // waiting for its record
	cbTaken                  // attached to a record being handled
	cbDone                   // its record finished: kept until its age ends, so a second callback is a duplicate
)

type cbEntry struct {
	cb      Callback
	expires time.Time
	state   cbState
	cost    int64 // what it adds to cbStore.bytes
}

type polledJob struct {
	job     string
	expires time.Time
}

// cbCost is what a callback held with its result and error costs.
func cbCost(cb Callback) int64 {
	return int64(len(cb.JobID)+len(cb.Result)+len(cb.Error)) + CallbackEntryOverhead
}

// polledCost is what a job remembered as finished by polling costs.
func polledCost(job string) int64 { return int64(len(job)) + CallbackEntryOverhead }

// cbStore holds a pipeline's callbacks by job id, oldest first, bounded by
// max entries and maxBytes (the oldest dropped first) and by age (from
// the callback's timestamp). It also remembers, within the same bounds,
// the jobs this process finished by polling, so that their callbacks
// count as late. Safe for concurrent use; its lock is taken last (after
// pipeline.mu).
type cbStore struct {
	max      int
	maxBytes int64
	age      time.Duration

	mu     sync.Mutex
	byJob  map[string]*list.Element // of *cbEntry, in order
	order  list.List                // *cbEntry, oldest first
	polled map[string]*list.Element // of polledJob, in polledOrder
	pOrder list.List                // polledJob, oldest first
	// bytes is what the callbacks and the polled jobs held cost
	// (cbCost, polledCost); polledBytes is the polled jobs' part.
	bytes, polledBytes int64

	counts [nCBEvents]atomic.Uint64
	prom   [nCBEvents]prometheus.Counter // nil: not exported (tests)
	held   prometheus.Gauge              // nil: not exported
	heldB  prometheus.Gauge              // nil: not exported
}

func newCBStore(max int, maxBytes int64, age time.Duration) *cbStore {
	return &cbStore{max: max, maxBytes: maxBytes, age: age, byJob: map[string]*list.Element{}, polled: map[string]*list.Element{}}
}

func (s *cbStore) count(ev cbEvent) {
	s.counts[ev].Add(1)
	if c := s.prom[ev]; c != nil {
		c.Inc()
	}
}

func (s *cbStore) stat(ev cbEvent) uint64 { return s.counts[ev].Load() }

// len is how many callbacks the store holds.
func (s *cbStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byJob)
}

// size is what the store's callbacks and polled jobs cost, in bytes.
func (s *cbStore) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// heldLocked publishes the size. s.mu held.
func (s *cbStore) heldLocked() {
	if s.held != nil {
		s.held.Set(float64(len(s.byJob)))
	}
	if s.heldB != nil {
		s.heldB.Set(float64(s.bytes))
	}
}

// add stores cb (received at now) and reports whether it is new: a
// callback for a job already in the store is a duplicate, one for a job
// this process finished by polling is late, and one older than the age
// bound is skipped; none of them changes anything.
func (s *cbStore) add(cb Callback, now time.Time) (added bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if _, dup := s.byJob[cb.JobID]; dup {
		s.count(cbDuplicate)
		return false
	}
	if _, late := s.polled[cb.JobID]; late {
		s.count(cbLate)
		return false
	}
	at := cb.At
	if at.IsZero() || at.After(now) {
		at = now
	}
	expires := at.Add(s.age)
	if !expires.After(now) {
		return false // older than a record can wait for it
	}
	e := &cbEntry{cb: cb, expires: expires, cost: cbCost(cb)}
	s.byJob[cb.JobID] = s.order.PushBack(e)
	s.bytes += e.cost
	s.boundLocked()
	s.heldLocked()
	_, kept := s.byJob[cb.JobID]
	return kept
}

// boundLocked drops the oldest until the store is within its bounds: the
// polled jobs first while they take more than a quarter of the bytes (the
// callbacks are what waiting records need), else the oldest callback. s.mu
// held.
func (s *cbStore) boundLocked() {
	for len(s.byJob) > s.max {
		s.dropOldestLocked()
	}
	for len(s.polled) > s.max {
		s.dropPolledLocked()
	}
	for s.bytes > s.maxBytes {
		switch {
		case s.polledBytes > s.maxBytes/4 || s.order.Len() == 0:
			s.dropPolledLocked()
		default:
			s.dropOldestLocked()
		}
	}
}

// dropOldestLocked drops the oldest callback. s.mu held, one held.
func (s *cbStore) dropOldestLocked() {
	e := s.order.Remove(s.order.Front()).(*cbEntry)
	delete(s.byJob, e.cb.JobID)
	s.bytes -= e.cost
	if e.state == cbPending {
		s.count(cbEvicted) // its record is polled
	}
}

// dropPolledLocked forgets the oldest polled job. s.mu held, one held.
func (s *cbStore) dropPolledLocked() {
	j := s.pOrder.Remove(s.pOrder.Front()).(polledJob)
	delete(s.polled, j.job)
	c := polledCost(j.job)
	s.bytes -= c
	s.polledBytes -= c
}

// take attaches the pending callback of job to the caller's record: no
// one else can take it until it is released.
func (s *cbStore) take(job string) (Callback, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.byJob[job]
	if el == nil {
		return Callback{}, false
	}
	e := el.Value.(*cbEntry)
	if e.state != cbPending {
		return Callback{}, false
	}
	e.state = cbTaken
	return e.cb, true
}

// setState moves a taken callback of job to st.
func (s *cbStore) setState(job string, st cbState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.byJob[job]; el != nil {
		if e := el.Value.(*cbEntry); e.state == cbTaken {
			s.setLocked(e, st)
		}
	}
}

// setLocked moves e to st; a done callback keeps only its job id, which
// is all a duplicate is told by. s.mu held.
func (s *cbStore) setLocked(e *cbEntry, st cbState) {
	e.state = st
	if st == cbDone {
		e.cb.Result, e.cb.Error = nil, ""
		c := cbCost(e.cb)
		s.bytes -= e.cost - c
		e.cost = c
		s.heldLocked()
	}
}

// release gives a taken callback back: its record was abandoned (revoke,
// shutdown) and is redelivered, to be matched again.
func (s *cbStore) release(job string) { s.setState(job, cbPending) }

// done marks a taken callback used: its record finished.
func (s *cbStore) done(job string) { s.setState(job, cbDone) }

// forget drops the callback of job: it did not finish the job (its
// outcome was a retry), so the next callback for the job is a new one.
func (s *cbStore) forget(job string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.byJob[job]; el != nil {
		s.bytes -= s.order.Remove(el).(*cbEntry).cost
		delete(s.byJob, job)
		s.heldLocked()
	}
}

// finishedByPoll notes that a poll finished job: a callback for it that
// is still pending came too late (counted late, kept as done so that a
// later copy is a duplicate), and one that comes later is late.
func (s *cbStore) finishedByPoll(job string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.byJob[job]; el != nil {
		if e := el.Value.(*cbEntry); e.state == cbPending {
			s.setLocked(e, cbDone)
			s.count(cbLate)
		}
		return
	}
	if _, ok := s.polled[job]; ok {
		return
	}
	s.polled[job] = s.pOrder.PushBack(polledJob{job: job, expires: now.Add(s.age)})
	c := polledCost(job)
	s.bytes += c
	s.polledBytes += c
	s.boundLocked()
	s.heldLocked()
}

// sweep drops what is older than the age bound.
func (s *cbStore) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	s.heldLocked()
}

// sweepLocked drops entries from the front while they are past their
// age: arrival order is nearly timestamp order, so an entry behind a
// younger one may outlive its age by a little, never the MaxEntries and
// MaxBytes bounds.
func (s *cbStore) sweepLocked(now time.Time) {
	for f := s.order.Front(); f != nil && !f.Value.(*cbEntry).expires.After(now); f = s.order.Front() {
		s.dropOldestLocked()
	}
	for f := s.pOrder.Front(); f != nil && !f.Value.(polledJob).expires.After(now); f = s.pOrder.Front() {
		s.dropPolledLocked()
	}
}
