package processor

import (
	"testing"
	"time"
)

// purge drops exactly the records of dropped partitions and keeps the
// rest in due order.
func TestSchedulerPurgeKeepsOrder(t *testing.T) {
	s := newWaitRoom(func(*work) {}, wallClock{})
	kept, gone := &partState{}, &partState{gone: true}
	base := time.Now()
	var want []*work
	for i := 0; i < 50; i++ {
		w := &work{ps: kept, waitUntil: base.Add(time.Duration(50-i) * time.Millisecond)}
		if i%3 == 0 {
			w.ps = gone
		} else {
			want = append(want, w)
		}
		s.push(w)
	}
	s.purge(func(w *work) bool { return w.ps.gone })
	if n := s.len(); n != len(want) {
		t.Fatalf("%d waiting after purge, want %d", n, len(want))
	}
	var last time.Time
	for s.len() > 0 {
		w := s.h[0]
		if w.ps.gone || !s.remove(w) {
			t.Fatalf("a purged record is still in the heap, or the heap index is wrong")
		}
		if w.waitUntil.Before(last) {
			t.Fatalf("out of due order after purge")
		}
		last = w.waitUntil
	}
}
