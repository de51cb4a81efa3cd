package processor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// steppingHandler fails the first attempt and steps the wall clock back,
// then forward, while its retry waits; answers the retry's first call with
// a 429 and steps the clock back over the 429's wait; and succeeds on the
// next call. It notes every call made before its redrive-due by the wall
// clock the pipeline reads.
type steppingHandler struct {
	c     *processor.SteppedClock
	mu    sync.Mutex
	calls int
	early []string
}

func (h *steppingHandler) Handle(_ context.Context, r *processor.Request) processor.Outcome {
	now := h.c.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if !r.Meta.Due.IsZero() && now.Before(r.Meta.Due) {
		h.early = append(h.early, fmt.Sprintf("call %d (attempt %d) %v before its redrive-due %s",
			h.calls, r.Attempt, r.Meta.Due.Sub(now), r.Meta.Due.Format(time.RFC3339Nano)))
	}
	switch h.calls {
	case 1:
		// The retry is due in 1 s: 300 ms on, the wall clock steps back
		// 3 s, 300 ms later forward 1 s.
		time.AfterFunc(300*time.Millisecond, func() { h.c.Step(-3 * time.Second) })
		time.AfterFunc(600*time.Millisecond, func() { h.c.Step(time.Second) })
		return processor.Retry("busy", nil)
	case 2:
		// Due now; the 429's wait (1 to 1.5 s) ends 1.5 to 2 s before it
		// by the wall clock: the rest fits the 2 s tier, one hop.
		h.c.Step(-3 * time.Second)
		return processor.Throttled("http_429", nil, time.Second)
	}
	return processor.Succeed(nil)
}

// A tier record is never called before its redrive-due by the wall clock,
// whichever way that clock steps: a step back while the record waits puts
// its call off, and so does one during a 429's wait in the worker (the
// record hops through a tier for the rest); a step forward brings it
// sooner. Throttling and the hop spend no attempt.
func TestNoCallBeforeDueWhenWallClockSteps(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 2 * time.Second}, 1)
	h := &steppingHandler{c: &processor.SteppedClock{}}
	e.Start(h, processor.WithClock(h.c))
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("x")})
	res := e.CollectN(e.P.Results, 1, 60*time.Second, 0)
	if len(res) != 1 {
		t.Fatalf("%d results, want 1", len(res))
	}
	if a, _ := kafkatest.Header(res[0], retry.HeaderAttempt); a != "2" {
		t.Errorf("attempt %q, want 2: a 429 and a hop spend no attempt", a)
	}
	// The retry and the hop after the 429: the step back while the retry
	// waited made the waiting room wait again, not hand it over to hop.
	tiers := e.P.TierTopics()
	got := e.Collect(tiers, func(g kafkatest.Got) bool { return g.Total(tiers...) > 2 }, 2*time.Second, 0)
	if n := got.Total(tiers...); n != 2 {
		t.Errorf("%d tier records, want 2: the retry and one hop", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.early {
		t.Error(e)
	}
	if h.calls != 3 {
		t.Errorf("%d handler calls, want 3", h.calls)
	}
}
