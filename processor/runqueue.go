package processor

import "sync/atomic"

// dueBurst bounds the run queue's priority: while main-topic records wait,
// due work (tier records, not-ready polls, records of callbacks) takes at
// most dueBurst worker picks in a row, then a main-topic record takes one.
// So due work never waits behind fresh work, and the main topic keeps at
// least 1/(dueBurst+1) of the workers however much is due. Measured
// (BENCHMARKS.md): with 3 a saturated failure path (every request
// retried once) handled retries up to 375 ms late at p99, as the retries of
// a burst of fresh work came due faster than three quarters of the workers
// took them; with 7, 194 ms.
const dueBurst = 7

// runQueue holds dispatched work no worker has taken yet, in two FIFO
// classes: due work (a tier partition's records) and fresh work (the main
// topic's). Guarded by pipeline.mu.
type runQueue struct {
	due, fresh queue[*work]
	// streak counts due picks in a row while fresh work waited.
	streak int
	// freshN is fresh.len(), and newest the seq of the last fresh work
	// queued (0: none), read without pipeline.mu (freshWaiting,
	// freshNewest).
	freshN atomic.Int64
	newest atomic.Uint64
	// freshFirst, while set (the breaker is open or half-open), hands out
	// fresh work first and newest first: a half-open breaker probes with
	// work that has no failure history and came after it opened, not with
	// the rest of the burst that opened it (line.go). Key order holds: a
	// key lane queues one record of a key at a time. nil: never.
	freshFirst *atomic.Bool
}

func (q *runQueue) push(w *work) {
	if w.ps.tier >= 0 {
		q.due.push(w)
		return
	}
	q.fresh.push(w)
	q.noteFresh()
}

// noteFresh updates what is read of the fresh class without pipeline.mu.
func (q *runQueue) noteFresh() {
	q.freshN.Store(int64(q.fresh.len()))
	var newest uint64
	if q.fresh.len() > 0 {
		newest = (*q.fresh.back()).seq
	}
	q.newest.Store(newest)
}

// pushDue queues w as due work whatever its topic: a record the line gave
// back (enterYield) because it failed before, or was in the pipeline when
// the breaker opened; behind fresh work while the breaker is not closed,
// ahead of it after.
func (q *runQueue) pushDue(w *work) { q.due.push(w) }

// freshWaiting reports fresh work waiting for a worker; safe without
// pipeline.mu.
func (q *runQueue) freshWaiting() bool { return q.freshN.Load() > 0 }

// freshNewest is the seq of the newest fresh work waiting (0: none); safe
// without pipeline.mu.
func (q *runQueue) freshNewest() uint64 { return q.newest.Load() }

func (q *runQueue) len() int { return q.due.len() + q.fresh.len() }

// pop takes the next work for a worker, nil when empty.
func (q *runQueue) pop() *work {
	if q.fresh.len() > 0 && q.freshFirst != nil && q.freshFirst.Load() {
		w := q.fresh.popBack()
		q.noteFresh()
		return w
	}
	switch {
	case q.due.len() > 0 && (q.fresh.len() == 0 || q.streak < dueBurst):
		if q.fresh.len() > 0 {
			q.streak++
		} else {
			q.streak = 0
		}
		return q.due.pop()
	case q.fresh.len() > 0:
		q.streak = 0
		return q.popFresh()
	}
	return nil
}

func (q *runQueue) popFresh() *work {
	w := q.fresh.pop()
	q.noteFresh()
	return w
}

// each calls f for every queued work, due first (tests, drop).
func (q *runQueue) each(f func(*work)) {
	q.due.each(f)
	q.fresh.each(f)
}

// queue is a FIFO in a slice read from head; the slice is compacted once
// most of it is read, so memory follows the queue's length. The run
// queue's classes, the offset trackers and the tiers' pending lists use it.
type queue[T any] struct {
	s    []T
	head int
}

func (q *queue[T]) push(v T) { q.s = append(q.s, v) }

func (q *queue[T]) len() int { return len(q.s) - q.head }

// front is the first element; the queue must not be empty.
func (q *queue[T]) front() *T { return &q.s[q.head] }

// back is the last element; the queue must not be empty.
func (q *queue[T]) back() *T { return &q.s[len(q.s)-1] }

// pop takes the first element (the zero value when empty).
func (q *queue[T]) pop() T {
	var zero T
	if q.head == len(q.s) {
		return zero
	}
	v := q.s[q.head]
	q.s[q.head] = zero
	q.head++
	switch {
	case q.head == len(q.s):
		q.s, q.head = q.s[:0], 0
	case q.head > 64 && q.head > len(q.s)/2:
		n := copy(q.s, q.s[q.head:])
		clear(q.s[n:])
		q.s, q.head = q.s[:n], 0
	}
	return v
}

// popBack takes the last element (the zero value when empty).
func (q *queue[T]) popBack() T {
	var zero T
	if q.head == len(q.s) {
		return zero
	}
	n := len(q.s) - 1
	v := q.s[n]
	q.s[n] = zero
	q.s = q.s[:n]
	if q.head == n {
		q.s, q.head = q.s[:0], 0
	}
	return v
}

// items are the queued elements, first to last (a view: do not keep it
// across a push or pop).
func (q *queue[T]) items() []T { return q.s[q.head:] }

func (q *queue[T]) each(fn func(T)) {
	for _, v := range q.items() {
		fn(v)
	}
}
