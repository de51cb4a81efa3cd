package processor

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/redrive/redrive/retry"
)

// How a retry is scheduled: decide (decide.go) picks its tier and due time
// from retry.Schedule and writes them in its headers; when the tier record
// is fetched, admitTierLocked holds it here until waitUntil, and onDue
// dispatches it (dispatch.go) ahead of the main topic's work. So that due
// records are fetched at all while the main topic is busy, fetchorder.go
// holds the main topic when a tier partition has records wanted by now.

// waitRoom holds tier records until they are due and hands each to onDue
// then: a heap by due time under its own lock, one goroutine and one timer
// per pipeline; nothing sleeps in the poll loop. What the pipeline counts
// of it (waiting per partition, max_waiting's pauses) is under
// pipeline.mu. Due times are wall-clock times, its timer a monotonic one
// (clock.go).
type waitRoom struct {
	mu    sync.Mutex
	h     workHeap
	wake  chan struct{}
	onDue func(*work)
	clk   clock
}

func newWaitRoom(onDue func(*work), clk clock) *waitRoom {
	return &waitRoom{wake: make(chan struct{}, 1), onDue: onDue, clk: clk}
}

func (s *waitRoom) push(w *work) {
	s.mu.Lock()
	heap.Push(&s.h, w)
	first := s.h[0] == w
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// remove takes w out of the heap before it is due (its callback came).
// It reports false when w is not in the heap: run already popped it and
// hands it to onDue (or has), which then dispatches it, so a waiting
// record is dispatched exactly once, by whoever took it out of the heap.
func (s *waitRoom) remove(w *work) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := w.heapIdx
	if i < 0 || i >= len(s.h) || s.h[i] != w {
		return false
	}
	heap.Remove(&s.h, i)
	return true
}

// purge drops the waiting records for which gone is true (their
// partition was dropped), so that they do not stay in memory until due.
// Called with pipeline.mu held (gone reads partition state).
func (s *waitRoom) purge(gone func(*work) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.h[:0]
	for _, w := range s.h {
		if gone(w) {
			w.heapIdx = -1
			continue
		}
		w.heapIdx = len(kept)
		kept = append(kept, w)
	}
	clear(s.h[len(kept):])
	s.h = kept
	heap.Init(&s.h)
}

func (s *waitRoom) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// run hands each record to onDue once the wall clock reaches its
// waitUntil. The timer is armed for the wall-clock time left and runs on
// the monotonic clock: when it fires, the wall clock is read again, so a
// record whose time a step back of the wall clock put off is not handed
// over but waited for again.
func (s *waitRoom) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*work
	for {
		now := s.clk.Now()
		next := now.Add(time.Hour)
		s.mu.Lock()
		for len(s.h) > 0 && !s.h[0].waitUntil.After(now) {
			due = append(due, heap.Pop(&s.h).(*work))
		}
		if len(s.h) > 0 {
			next = s.h[0].waitUntil
		}
		s.mu.Unlock()
		for i, w := range due {
			s.onDue(w)
			due[i] = nil
		}
		due = due[:0]
		timer.Reset(next.Sub(s.clk.Now()))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
	}
}

type workHeap []*work

func (h workHeap) Len() int           { return len(h) }
func (h workHeap) Less(i, j int) bool { return h[i].waitUntil.Before(h[j].waitUntil) }
func (h workHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *workHeap) Push(x any) { w := x.(*work); w.heapIdx = len(*h); *h = append(*h, w) }
func (h *workHeap) Pop() any {
	old := *h
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.heapIdx = -1
	*h = old[:n-1]
	return w
}

// admitTierLocked takes in w, a fetched tier record: dispatched at once
// when due (or its callback already came, or its headers are broken),
// else held until due; a partition with max_waiting records held is
// paused. p.mu held.
func (p *pipeline) admitTierLocked(w *work, now time.Time) {
	ps := w.ps
	w.decode()
	if w.decodeErr == nil {
		w.waitUntil = p.waitUntil(ps.tier, w, now)
	}
	// A job whose callback came before its record: finished at once.
	p.takeCallback(w)
	if w.cb != nil || w.decodeErr != nil || !w.waitUntil.After(now) {
		p.dispatchLocked(w)
		return
	}
	ps.waiting++
	p.waiting++
	if w.waitUntil.After(ps.lastWait) {
		ps.lastWait = w.waitUntil
	}
	if p.waitsForCallback(w) {
		p.indexLocked(w) // before the push: matchWaiting holds p.mu too
	}
	p.room.push(w)
	if ps.waiting >= p.cfg.MaxWaiting && !ps.paused {
		ps.paused = true
		p.cl.PauseFetchPartitions(map[string][]int32{ps.tp.topic: {ps.tp.partition}})
		p.m.pausedParts.WithLabelValues(p.cfg.Name).Inc()
	}
}

// waitUntil is when a tier record may be handled: its due time, but no later
// than the tier's delay (plus jitter) after the record was written. A record
// due later than that (a minimum delay longer than the largest tier, or a
// foreign producer's far due time) is looked at then and hops through the
// tier again, so it never holds up the records behind it. A record
// timestamp more than clockSkew in the future counts as now (counted in
// redrive_future_times_clamped_total), or it would
// hold the record, and the partition's commit point, until then.
func (p *pipeline) waitUntil(tier int, w *work, now time.Time) time.Time {
	d := p.cfg.Schedule.Tiers[tier]
	written := w.rec.Timestamp
	if written.After(now.Add(clockSkew)) {
		written = now
		p.hot.countClamped(1 << clampRecordTimestamp)
	}
	limit := written.Add(d + time.Duration(float64(d)*p.cfg.Schedule.Jitter) + 10*time.Millisecond)
	if w.meta.Due.After(limit) {
		return limit
	}
	return w.meta.Due
}

func (w *work) decode() {
	if w.decoded {
		return
	}
	w.decoded = true
	// The record's header bytes are never changed and live as long as w.
	w.meta, w.user, w.decodeErr = retry.DecodeView(w.rec.Headers)
	if w.decodeErr == nil && len(w.user) != len(w.rec.Headers) {
		// From here on the record carries its user headers only: the
		// redrive-* ones are in w.meta (their values still shared), so
		// the full slice and kgo's string per header key are not kept
		// alive by a tier record while it waits, and the handler's record
		// is w.rec itself (userRecord copies nothing). A record whose
		// headers did not decode keeps them all for its dead letter.
		w.rec.Headers = w.user
	}
}

// resumeLead is how long before its last held record is due a paused tier
// partition resumes, to cover the fetch round trip.
const resumeLead = 300 * time.Millisecond

// onDue is called by the waiting room when a waiting record is due.
func (p *pipeline) onDue(w *work) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unindexLocked(w)
	if w.ps.gone || w.ps.revoking {
		return
	}
	p.dueLocked(w)
}

// dueLocked dispatches w, taken out of the waiting room (due, or its
// callback came), and resumes its partition when few records wait. p.mu
// held; w.ps is neither gone nor revoking.
func (p *pipeline) dueLocked(w *work) {
	ps := w.ps
	ps.waiting--
	p.waiting--
	p.hot.waiting.Set(float64(p.waiting))
	p.dispatchLocked(w)
	if ps.paused && (ps.waiting <= p.cfg.MaxWaiting/2 || ps.lastWait.Sub(p.clk.Now()) < resumeLead) {
		ps.paused = false
		p.cl.ResumeFetchPartitions(map[string][]int32{ps.tp.topic: {ps.tp.partition}})
		p.m.pausedParts.WithLabelValues(p.cfg.Name).Dec()
	}
}
