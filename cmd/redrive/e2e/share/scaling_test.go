package share

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
)

// The scaling scenario: a backlog on 2 partitions, a service taking
// 200 ms per call, replicas of Concurrency 8 each (MaxInflight at its
// default). Latency-bound: each replica makes at most 8 / 0.2 s = 40
// calls/s, so the replicas run in this process (processor.New each).
const (
	scaleParts   = 2
	scaleConc    = 8
	scaleCall    = 200 * time.Millisecond
	scaleRecords = 12000
)

// scaleSteps are the replicas of each phase: first 2 (one per partition),
// then 4 more.
var scaleSteps = []int{2, 6}

var scaleSteady = flag.Duration("share.steady", 15*time.Second, "BenchmarkShareScaling: the steady state measured per phase, once every replica is calling (share) or the group is stable (group)")

// scalePhase is one phase of a scaling run.
type scalePhase struct {
	replicas int
	rate     float64  // handler calls finished per second in the window
	callers  []string // replicas that finished calls in the window
	window   time.Duration
	settled  time.Duration // phase start → window start
}

// callLog records the handler calls that finished, per replica.
type callLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (c *callLog) handler(replica string) processor.Handler {
	return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		select {
		case <-time.After(scaleCall):
		case <-ctx.Done():
			return processor.Retry("stopped", ctx.Err())
		}
		c.mu.Lock()
		c.at[replica] = append(c.at[replica], time.Now())
		c.mu.Unlock()
		return processor.Succeed(req.Record.Key)
	})
}

// in counts the calls finished in [from, to) per replica.
func (c *callLog) in(from, to time.Time) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for r, ats := range c.at {
		for _, at := range ats {
			if !at.Before(from) && at.Before(to) {
				out[r]++
			}
		}
	}
	return out
}

// scaleRun runs the phases in mode, each measured over steady once
// settled: in share mode once every replica has finished a call since
// the phase began, in group mode once the consumer group is stable with
// every replica in it; then 2 s more.
func scaleRun(tb testing.TB, mode processor.Consume, steady time.Duration) []scalePhase {
	tb.Helper()
	e := pipetest.New(tb, "share-scale-"+string(mode), scaleParts, schedule)
	e.P.Consume = mode
	e.P.Concurrency = scaleConc
	recs := make([]*kgo.Record, scaleRecords)
	for i := range recs {
		id := fmt.Appendf(nil, "req-%d", i)
		recs[i] = &kgo.Record{Topic: e.P.Topic, Key: id, Value: id}
	}
	e.Produce(recs...)
	calls := &callLog{at: map[string][]time.Time{}}
	var stops []func() error
	defer func() {
		for _, stop := range stops {
			if err := stop(); err != nil {
				tb.Errorf("stop: %v", err)
			}
		}
	}()
	var names []string
	var phases []scalePhase
	for _, k := range scaleSteps {
		began := time.Now()
		for len(names) < k {
			name := fmt.Sprintf("%s-%d", mode, len(names))
			names = append(names, name)
			stops = append(stops, e.Start(calls.handler(name), func(c *processor.Config) { c.Instance = name }))
		}
		var settled func() bool
		if mode == processor.ConsumeShare {
			settled = func() bool {
				got := calls.in(began, time.Now())
				for _, n := range names {
					if got[n] == 0 {
						return false
					}
				}
				return true
			}
		} else {
			settled = func() bool { return groupStable(tb, e, k) }
		}
		if !waitFor(time.Minute, settled) {
			tb.Fatalf("%s, %d replicas: not settled within a minute (calls since the phase began: %v)", mode, k, calls.in(began, time.Now()))
		}
		time.Sleep(2 * time.Second)
		from := time.Now()
		time.Sleep(steady)
		to := time.Now()
		got := calls.in(from, to)
		n := 0
		var callers []string
		for r, c := range got {
			n += c
			callers = append(callers, r)
		}
		slices.Sort(callers)
		if mode == processor.ConsumeGroup && !groupStable(tb, e, k) {
			tb.Logf("%s, %d replicas: the group rebalanced during the window", mode, k)
		}
		phases = append(phases, scalePhase{replicas: k, rate: float64(n) / to.Sub(from).Seconds(), callers: callers,
			window: to.Sub(from), settled: from.Sub(began)})
		if n == 0 {
			tb.Fatalf("%s, %d replicas: no call in %s", mode, k, steady)
		}
	}
	return phases
}

// groupStable says whether the pipeline's consumer group is stable with
// k members.
func groupStable(tb testing.TB, e *pipetest.Env, k int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := e.Admin.DescribeGroups(ctx, e.P.GroupID())
	if err != nil {
		return false
	}
	g, ok := gs[e.P.GroupID()]
	return ok && g.Err == nil && g.State == "Stable" && len(g.Members) == k
}

// TestShareScalesPastPartitions: with 2 partitions, 6 share replicas all
// make calls, where of 6 group replicas at most 2 make calls (one per
// partition; the rest idle). The rates are logged; what they must be is
// BenchmarkShareScaling's (`go run ./bench -only share`).
func TestShareScalesPastPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const steady = 8 * time.Second
	var lines []string
	for _, mode := range []processor.Consume{processor.ConsumeShare, processor.ConsumeGroup} {
		t.Run(string(mode), func(t *testing.T) {
			phases := scaleRun(t, mode, steady)
			last := phases[len(phases)-1]
			switch mode {
			case processor.ConsumeShare:
				if len(last.callers) != last.replicas {
					t.Errorf("%d share replicas on %d partitions: %d made calls (%v), want every one", last.replicas, scaleParts, len(last.callers), last.callers)
				}
			case processor.ConsumeGroup:
				if len(last.callers) > scaleParts {
					t.Errorf("%d group replicas on %d partitions: %d made calls (%v), want at most one per partition", last.replicas, scaleParts, len(last.callers), last.callers)
				}
			}
			for _, p := range phases {
				lines = append(lines, fmt.Sprintf("| %s | %d | %.1f | %d | %s |", mode, p.replicas, p.rate, len(p.callers), p.settled.Round(100*time.Millisecond)))
			}
		})
	}
	t.Logf("%d partitions, a %s call, Concurrency %d per replica, %s measured per phase:\n| mode | replicas | records/s | replicas calling | settled after |\n|---|---:|---:|---:|---:|\n%s",
		scaleParts, scaleCall, scaleConc, steady, strings.Join(lines, "\n"))
}

// BenchmarkShareScaling measures records/s with 2, then 6 replicas in
// share mode and in group mode (scaleRun), -share.steady per phase. It
// reports rec/s-<k>r per phase, and the replicas that made calls with 6.
// The promise: 6 share replicas handle at least 2.5 times what 2 do; in
// group mode replicas 3 to 6 add nothing.
func BenchmarkShareScaling(b *testing.B) {
	for _, mode := range []processor.Consume{processor.ConsumeShare, processor.ConsumeGroup} {
		b.Run("consume="+string(mode), func(b *testing.B) {
			phases := scaleRun(b, mode, *scaleSteady)
			for _, p := range phases {
				b.ReportMetric(p.rate, fmt.Sprintf("rec/s-%dr", p.replicas))
				b.ReportMetric(float64(len(p.callers)), fmt.Sprintf("calling-%dr", p.replicas))
			}
		})
	}
}
