package processor

import (
	"context"
	"testing"
	"time"
)

// What a stopped line still takes in, by why it is stopped: which records
// are forwarded, and which topics are fetched.
func TestFailoverAndFetch(t *testing.T) {
	off := failover{} // the default: no failover_to
	to := failover{to: "b"}
	retries := failover{to: "b", retries: true}
	for _, c := range []struct {
		name        string
		f           failover
		reasons     []string
		forward     bool
		main, tiers bool // paused
	}{
		{name: "running", f: to},
		{name: "breaker: main fetched for its probes", f: off, reasons: []string{stopBreaker}, tiers: true},
		{name: "pause code", f: off, reasons: []string{stopPauseCode}, main: true, tiers: true},
		{name: "breaker and pause code", f: off, reasons: []string{stopPauseCode, stopBreaker}, main: true, tiers: true},
		{name: "guard", f: off, reasons: []string{stopGuard}, main: true, tiers: true},
		{name: "manual", f: off, reasons: []string{stopManual}, main: true, tiers: true},
		{name: "breaker, failover", f: to, reasons: []string{stopBreaker}, forward: true, tiers: true},
		{name: "pause code, failover", f: to, reasons: []string{stopPauseCode}, forward: true, tiers: true},
		{name: "both, failover", f: to, reasons: []string{stopPauseCode, stopBreaker}, forward: true, tiers: true},
		{name: "breaker, failover of retries too", f: retries, reasons: []string{stopBreaker}, forward: true},
		{name: "pause code, failover of retries too", f: retries, reasons: []string{stopPauseCode}, forward: true},
		{name: "guard: no failover", f: retries, reasons: []string{stopGuard}, main: true, tiers: true},
		{name: "manual: no failover", f: retries, reasons: []string{stopManual}, main: true, tiers: true},
		{name: "guard and breaker: no failover", f: retries, reasons: []string{stopGuard, stopBreaker}, main: true, tiers: true},
		{name: "manual and pause code: no failover", f: to, reasons: []string{stopManual, stopPauseCode}, main: true, tiers: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.f.forward(c.reasons); got != c.forward {
				t.Errorf("forward %v, want %v", got, c.forward)
			}
			if main, tiers := c.f.fetchPaused(c.reasons); main != c.main || tiers != c.tiers {
				t.Errorf("paused: main %v tiers %v; want %v, %v", main, tiers, c.main, c.tiers)
			}
		})
	}
}

func TestManualPauseAndFailover(t *testing.T) {
	tl := newTestLine(t, Pipeline{Topic: "a", Breaker: Breaker{FailoverTo: "b", Consecutive: 1, OpenFor: time.Minute}})
	tl.pauseByHand("test")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, e := tl.enter(ctx, time.Now(), caller{fresh: true, canForward: true, abandoned: never}); e != enterAbandon {
		t.Fatalf("manual pause: %v; want wait (no failover for a manual pause)", e)
	}
	waitFor(t, "fetching paused", func() bool { return tl.lastFetch() == [2]bool{true, true} })
	tl.resume("test")
	// Open the breaker: a record that may be forwarded is, at once; the
	// main topic keeps being fetched, the tiers are not.
	tl.call(t, Retry("http_503", errDown))
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, e := tl.enter(ctx2, time.Now(), caller{fresh: true, canForward: true, abandoned: never}); e != enterForward {
		t.Fatalf("open breaker with failover_to: %v, want forward", e)
	}
	waitFor(t, "tiers paused, main fetched", func() bool { return tl.lastFetch() == [2]bool{false, true} })
}
