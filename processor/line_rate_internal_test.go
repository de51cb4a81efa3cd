package processor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// How long each call waits for its token, at the times given.
func TestRateLimitReserve(t *testing.T) {
	for _, c := range []struct {
		name      string
		perSecond float64
		burst     int
		at        []time.Duration // when each call asks, from the start
		want      []time.Duration // how long each waits
	}{
		{name: "20/s, the default burst of 1: spaced by 50ms", perSecond: 20, burst: DefaultRateBurst,
			at: []time.Duration{0, 0, 0}, want: []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "calls already spaced do not wait", perSecond: 20, burst: DefaultRateBurst,
			at: []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond}, want: []time.Duration{0, 0, 0}},
		{name: "a burst of 3 starts at once, the 4th waits", perSecond: 20, burst: 3,
			at: []time.Duration{0, 0, 0, 0}, want: []time.Duration{0, 0, 0, 50 * time.Millisecond}},
		{name: "an idle second fills the burst again", perSecond: 20, burst: 3,
			at: []time.Duration{0, 0, 0, time.Second, time.Second, time.Second}, want: []time.Duration{0, 0, 0, 0, 0, 0}},
		{name: "a burst of 0 is 1", perSecond: 2, burst: 0,
			at: []time.Duration{0, 0}, want: []time.Duration{0, 500 * time.Millisecond}},
		{name: "3000/m", perSecond: 50, burst: DefaultRateBurst,
			at: []time.Duration{0, 0, 10 * time.Millisecond}, want: []time.Duration{0, 20 * time.Millisecond, 30 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRateLimit(c.perSecond, c.burst, nil, nil, nil)
			t0 := time.Now()
			for i, at := range c.at {
				_, d := r.reserve(t0.Add(at))
				if diff := d - c.want[i]; diff < -time.Microsecond || diff > time.Microsecond {
					t.Errorf("call %d at %v waits %v, want %v", i+1, at, d, c.want[i])
				}
			}
		})
	}
}

// No rate limit (the default): no token, no wait, nothing counted.
func TestRateLimitOffByDefault(t *testing.T) {
	cfg := Pipeline{Name: "solve"}.WithDefaults()
	r := newRateLimit(cfg.RateLimit, cfg.RateBurst, nil, nil, nil)
	if r.lim.Load() != nil {
		t.Fatalf("a rate limit of %v by default", cfg.RateLimit)
	}
	for range 1000 {
		if waited, ok := r.wait(context.Background(), nil, nil); waited || !ok {
			t.Fatalf("no rate limit: waited %v ok %v", waited, ok)
		}
	}
}

// stopped is the line looked at again after a change: it stops the call.
func stopped() (<-chan struct{}, bool) { return nil, false }

// A wait for a token that the line's change ends gives the token back:
// the next call waits as if it had never been taken.
func TestRateLimitGivesTheTokenBack(t *testing.T) {
	waitedFor := prometheus.NewCounter(prometheus.CounterOpts{Name: "waited"})
	r := newRateLimit(1, DefaultRateBurst, waitedFor, nil, nil)
	if _, d := r.reserve(time.Now()); d != 0 {
		t.Fatalf("the first token waits %v", d)
	}
	changed := make(chan struct{})
	close(changed)
	if waited, ok := r.wait(context.Background(), changed, stopped); !waited || ok {
		t.Fatalf("a wait the line's change ended: waited %v ok %v, want waited, not ok", waited, ok)
	}
	if _, d := r.reserve(time.Now()); d > time.Second {
		t.Fatalf("the next call waits %v: the token of the ended wait was kept", d)
	}
	// Waited, if briefly: redrive_rate_limited_seconds_total counts it.
	if got := testutil.ToFloat64(waitedFor); got <= 0 {
		t.Fatalf("the ended wait counted %vs", got)
	}
}

// Waiters woken by a change of the line that leaves their calls clear (a
// partition of another record revoked) keep their tokens: 20 waiters at
// 20/s, woken twice, still take about a second, not the debt of tokens
// given back out of order (each cancel restores only what no later
// reservation took).
func TestRateLimitKeepsTokensThroughAChange(t *testing.T) {
	r := newRateLimit(20, 1, prometheus.NewCounter(prometheus.CounterOpts{Name: "waited"}), nil, nil)
	var mu sync.Mutex
	changed := make(chan struct{})
	current := func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return changed }
	kick := func() { mu.Lock(); close(changed); changed = make(chan struct{}); mu.Unlock() }
	still := func() (<-chan struct{}, bool) { return current(), true }
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, ok := r.wait(context.Background(), current(), still); ok {
					return
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	kick()
	time.Sleep(100 * time.Millisecond)
	kick()
	wg.Wait()
	// 19 tokens after the first at 20/s: 950ms. Given back and taken
	// again, they would take up to twice that.
	if took := time.Since(start); took > 1300*time.Millisecond {
		t.Fatalf("20 calls at 20/s woken twice took %v, want about 950ms", took)
	}
}

func TestRateLimitSpacesCalls(t *testing.T) {
	tl := newTestLine(t, Pipeline{RateLimit: 20})
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); tl.call(t, Succeed(nil)) }()
	}
	wg.Wait()
	// 8 calls at 20/s, burst 1: the 8th starts 350ms after the first.
	if took := time.Since(start); took < 330*time.Millisecond {
		t.Fatalf("8 calls at 20/s took %v, want at least 350ms", took)
	}
	if got := testutil.ToFloat64(tl.m.rateLimited.WithLabelValues("solve")); got <= 0 {
		t.Fatalf("redrive_rate_limited_seconds_total = %v, want > 0", got)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"50/s": 50, "3000/m": 50, "7200/h": 2, "2.5": 2.5, "": 0, "0": 0, " 10 / s ": 10} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "50/d", "-1/s", "NaN", "Inf/s", "1/", "/s", "0.000001/h"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, got)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"50/s", "3000/m", "1e9/h", "", "x/y", "-0/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err != nil {
			return
		}
		if v < 0 || v != v || v > 1e308 {
			t.Fatalf("ParseRate(%q) = %v", s, v)
		}
	})
}
