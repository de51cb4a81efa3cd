package processor

// dueBurst bounds the run queue's priority: while main-topic records wait,
// due work (tier records, not-ready polls, records of callbacks) takes at
// most dueBurst worker picks in a row, then a main-topic record takes one.
// So due work never waits behind fresh work, and the main topic keeps at
// least 1/(dueBurst+1) of the workers however much is due. Measured
// (BENCHMARKS.md, issue 17): with 3 a saturated failure path (every request
// retried once) handled retries up to 375 ms late at p99, as the retries of
// a burst of fresh work came due faster than three quarters of the workers
// took them; with 7, 194 ms.
const dueBurst = 7

// runQueue holds dispatched work no worker has taken yet, in two FIFO
// classes: due work (a tier partition's records) and fresh work (the main
// topic's). Guarded by pipeline.mu.
type runQueue struct {
	due, fresh fifo
	// streak counts due picks in a row while fresh work waited.
	streak int
}

func (q *runQueue) push(w *work) {
	if w.ps.tier >= 0 {
		q.due.push(w)
		return
	}
	q.fresh.push(w)
}

func (q *runQueue) len() int { return q.due.len() + q.fresh.len() }

// pop takes the next work for a worker, nil when empty.
func (q *runQueue) pop() *work {
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
		return q.fresh.pop()
	}
	return nil
}

// each calls f for every queued work, due first (tests, drop).
func (q *runQueue) each(f func(*work)) {
	q.due.each(f)
	q.fresh.each(f)
}

// fifo is a queue of work in a slice read from head; the slice is
// compacted once most of it is read, so memory follows the queue's length.
type fifo struct {
	s    []*work
	head int
}

func (f *fifo) push(w *work) { f.s = append(f.s, w) }

func (f *fifo) len() int { return len(f.s) - f.head }

func (f *fifo) pop() *work {
	if f.head == len(f.s) {
		return nil
	}
	w := f.s[f.head]
	f.s[f.head] = nil
	f.head++
	switch {
	case f.head == len(f.s):
		f.s, f.head = f.s[:0], 0
	case f.head > 1024 && f.head > len(f.s)/2:
		n := copy(f.s, f.s[f.head:])
		clear(f.s[n:])
		f.s, f.head = f.s[:n], 0
	}
	return w
}

func (f *fifo) each(fn func(*work)) {
	for _, w := range f.s[f.head:] {
		fn(w)
	}
}
