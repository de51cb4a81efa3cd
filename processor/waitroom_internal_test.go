package processor

import (
	"context"
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

// The waiting room hands a record over only once the wall clock says it is
// due: its timer runs on the monotonic clock, so when the wall clock steps
// back while a record waits, the timer fires before the record is due and
// the room must wait again.
func TestWaitRoomWaitsAgainWhenWallClockStepsBack(t *testing.T) {
	c := &SteppedClock{}
	handed := make(chan time.Time, 1)
	s := newWaitRoom(func(*work) { handed <- c.Now() }, c)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { s.run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()

	due := c.Now().Add(300 * time.Millisecond)
	s.push(&work{ps: &partState{}, waitUntil: due})
	time.Sleep(100 * time.Millisecond) // the timer is armed for the 300 ms
	c.Step(-time.Second)
	select {
	case at := <-handed:
		if at.Before(due) {
			t.Fatalf("handed over %v before it is due by the wall clock", due.Sub(at))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not handed over 10 s after it was due")
	}
}
