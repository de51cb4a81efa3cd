package processor

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// scheduler holds tier records until they are due and hands each to onDue
// then. One goroutine and one timer per pipeline; nothing sleeps in the
// poll loop.
type scheduler struct {
	mu    sync.Mutex
	h     workHeap
	wake  chan struct{}
	onDue func(*work)
}

func newScheduler(onDue func(*work)) *scheduler {
	return &scheduler{wake: make(chan struct{}, 1), onDue: onDue}
}

func (s *scheduler) push(w *work) {
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
func (s *scheduler) remove(w *work) bool {
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
func (s *scheduler) purge(gone func(*work) bool) {
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

func (s *scheduler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

func (s *scheduler) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*work
	for {
		now := time.Now()
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
		timer.Reset(time.Until(next))
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
