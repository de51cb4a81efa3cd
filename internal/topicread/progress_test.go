package topicread

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A partition has something to catch up only when its end is past its
// start; it reaches its end once nothing before the end is left, and only
// once.
func TestProgress(t *testing.T) {
	s := Start{
		From: map[int32]int64{0: 0, 1: 5, 2: 7, 3: 0},
		Ends: map[int32]int64{0: 10, 1: 5, 2: 3, 4: 9}, // 3 has none; 4 is not read
	}
	p := newProgress(s)
	if len(p) != 1 {
		t.Fatalf("behind %v, want only partition 0", p)
	}
	for _, c := range []struct {
		part    int32
		next    int64
		reached bool
	}{
		{1, 100, false}, // nothing to catch up
		{0, 5, false},
		{0, 9, false},
		{0, 10, true},
		{0, 11, false}, // once
	} {
		if got := p.advance(c.part, c.next); got != c.reached {
			t.Errorf("advance(%d, %d) = %v, want %v", c.part, c.next, got, c.reached)
		}
	}
	if _, ok := p.end(0); ok || len(p) != 0 {
		t.Errorf("after reaching every end: %v", p)
	}
}

// Without RetryList the Lister's error is Open's; with it, each error is
// reported and the listing tried again after the pause, until it succeeds
// or ctx ends.
func TestListStartRetry(t *testing.T) {
	boom := errors.New("no broker")
	failing := func(n int) (Lister, *int) {
		calls := 0
		return func(context.Context) (Start, error) {
			calls++
			if calls <= n {
				return Start{}, boom
			}
			return Start{From: map[int32]int64{0: 1}}, nil
		}, &calls
	}
	ctx := context.Background()

	once := defaults()
	list, calls := failing(1)
	if _, err := once.listStart(ctx, list); !errors.Is(err, boom) || *calls != 1 {
		t.Errorf("no retry: %v after %d calls, want the Lister's error after 1", err, *calls)
	}

	var reported []error
	retry := defaults()
	RetryList(time.Millisecond, func(err error) { reported = append(reported, err) })(&retry)
	list, calls = failing(3)
	s, err := retry.listStart(ctx, list)
	if err != nil || s.From[0] != 1 || *calls != 4 || len(reported) != 3 {
		t.Errorf("retry: %v %v after %d calls, %d reported; want the start after 4 calls, 3 reported", s, err, *calls, len(reported))
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	list, _ = failing(1 << 30)
	if _, err := retry.listStart(cctx, list); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ctx ended while retrying: %v, want ctx's error", err)
	}
}
