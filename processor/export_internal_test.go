package processor

import (
	"sync/atomic"
	"testing"
	"time"
)

// SlowBuild holds every pipeline's construction for d once its Kafka
// client exists, until t ends: the group may assign partitions meanwhile.
// Not for parallel tests.
func SlowBuild(t testing.TB, d time.Duration) {
	testHookBuilding = func() { time.Sleep(d) }
	t.Cleanup(func() { testHookBuilding = nil })
}

// SteppedClock is a wall clock that a test steps back and forth, as NTP or
// a resumed virtual machine steps the system's; timers are not moved by
// it, as they are not by those. Its readings carry no monotonic reading,
// so every comparison of them is by the (stepped) wall clock.
type SteppedClock struct{ off atomic.Int64 }

func (c *SteppedClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.off.Load()))
}

// Step moves the wall clock by d (back when d is negative).
func (c *SteppedClock) Step(d time.Duration) { c.off.Add(int64(d)) }

// WithClock makes a Config's pipelines read c as their wall clock (a tweak
// for pipetest's Start).
func WithClock(c *SteppedClock) func(*Config) {
	return func(cfg *Config) { cfg.clock = c }
}
