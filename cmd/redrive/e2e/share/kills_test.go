package share

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// schedule is the tests' tier plan: one short tier, so that a request
// failing once comes back within the run.
var schedule = retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 3}

// The kill scenario: requests offered at a steady rate (a stream, so that
// every kill lands mid-stream), replicas SIGKILLed round robin at even
// intervals while it lasts, each replaced at once.
const (
	killRequests = 20000
	killRate     = 500 // requests/s offered, in batches every 100 ms
	killReplicas = 3
	killCount    = 10
	// killSession is the consumer group's session timeout: a killed
	// member keeps its partitions until it passes (kgo's default is 45 s).
	killSession = 6 * time.Second
)

// killRow is one mode's run of the kill scenario.
type killRow struct {
	mode     processor.Consume
	requests int
	kills    int
	lost     int // requests with no result at the end
	dups     int // results beyond one per request
	// dupsFirst are the duplicates of requests that never fail: they come
	// only from main-topic records delivered again (the others also from
	// tier records).
	dupsFirst int
	// redeliverable is, summed over the kills, what a kill leaves Kafka to
	// deliver again, so the most it can duplicate: the records past the
	// consumer group's committed offset on the partitions the killed
	// replica owned (read from the broker right after the kill: a dead
	// member keeps them until its session times out) and, in share mode,
	// the main-topic records it may have held: Concurrency, as a share
	// replica acquires at most a batch of Concurrency records and polls
	// again (which sends the batch's acknowledgements) only once every
	// one of them is acknowledged.
	redeliverable int64
	// held is, summed over the kills, what the killed replica last
	// reported holding (Status().Pipelines[0].Inflight, sampled every
	// 100 ms): records taken from Kafka and not finished. A sample, so
	// less than what it held at the kill at times.
	held int64
	wall time.Duration // first request offered → last request's first result
	// wait is offered → first result, of the requests that never fail
	// (the main topic alone: share or group) and of those failing once
	// (through the tier too, read by the consumer group in both modes).
	wait, waitRetried waits
}

// waits are a distribution of waits.
type waits []time.Duration

func (w waits) q(q float64) time.Duration {
	if len(w) == 0 {
		return 0
	}
	s := slices.Clone(w)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Millisecond)
}

// TestShareKilledReplicasLoseNothing: three replicas of a share pipeline
// (2 partitions, a 1 s tier, the shipped defaults: breaker, guard,
// control topic) take a stream of 20,000 requests (one in ten fails once)
// while a replica is SIGKILLed ten times, round robin, and replaced. Every
// request gets its result, and the duplicates are no more than what the
// kills left Kafka to deliver again; then the same with consume: group,
// both logged side by side.
func TestShareKilledReplicasLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	var rows []killRow
	for _, mode := range []processor.Consume{processor.ConsumeShare, processor.ConsumeGroup} {
		t.Run(string(mode), func(t *testing.T) {
			row := killRun(t, mode)
			rows = append(rows, row)
			if row.lost > 0 {
				t.Errorf("%d of %d requests have no result (lost)", row.lost, row.requests)
			}
			// In group mode the same bound is logged, not asserted: it is
			// the comparison, and kgo holds every member's commits while
			// the group waits out a dead member.
			if mode == processor.ConsumeShare && int64(row.dups) > row.redeliverable {
				t.Errorf("%d duplicate results, more than the %d records the %d kills left to be delivered again", row.dups, row.redeliverable, row.kills)
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d replicas, %d requests offered at %d/s, a SIGKILL every %s round robin, each replaced at once:\n",
		killReplicas, killRequests, killRate, killEvery().Round(100*time.Millisecond))
	b.WriteString("| mode | requests | kills | lost | duplicates (of requests never failing) | redeliverable at kills | held at kills (sampled) | wall time | wait p50 / p99 / max, never failing | wait p50 / max, failing once |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d (%d) | %d | %d | %s | %s / %s / %s | %s / %s |\n", r.mode, r.requests, r.kills, r.lost, r.dups, r.dupsFirst,
			r.redeliverable, r.held, r.wall.Round(100*time.Millisecond), r.wait.q(0.5), r.wait.q(0.99), r.wait.q(1), r.waitRetried.q(0.5), r.waitRetried.q(1))
	}
	b.WriteString("redeliverable: records past the consumer group's committed offset on the partitions the killed replica owned, plus (share) Concurrency for the main-topic records it may have held; " +
		"held: its last report of its in-flight records, at most 100 ms before the kill; wait: offered → first result (one in ten requests fails once and goes through the 1 s tier)")
	t.Log(b.String())
}

// killEvery is the time between kills: ten of them while the stream lasts.
func killEvery() time.Duration {
	offer := time.Duration(killRequests/killRate) * time.Second
	return offer / (killCount + 1)
}

// killRun runs the kill scenario in mode.
func killRun(t *testing.T, mode processor.Consume) killRow {
	e := pipetest.New(t, "share-kills-"+string(mode), 2, schedule)
	e.P.Consume = mode
	conc := e.P.WithDefaults().Concurrency
	spec := func(name string) childSpec {
		return childSpec{Brokers: e.Cluster.Brokers, Pipeline: e.P, Instance: name, SessionTimeout: killSession, Handler: "work"}
	}
	ta := follow(t, e.Cluster, e.P.Results, e.P.DLQ)
	reps := make([]*replica, killReplicas)
	var all []*replica
	for i := range reps {
		reps[i] = startReplica(t, spec(fmt.Sprintf("%s-%d", mode, i)))
		all = append(all, reps[i])
	}
	tails := func() string {
		var s []string
		for _, r := range all {
			s = append(s, r.tail())
		}
		return strings.Join(s, "\n")
	}
	// The stream starts once the replicas are at work (each has made a
	// call in share mode; in group mode one has no main-topic partition),
	// so that every kill lands mid-stream and waits are not start-up's.
	// Warm-up requests ("warm-N") are not counted.
	warm := 0
	atWork := func() bool {
		for _, r := range reps {
			if !r.out.joined.Load() || mode == processor.ConsumeShare && !r.out.called.Load() {
				return false
			}
		}
		for i := range warm {
			if _, ok := ta.firstSeen(fmt.Sprintf("warm-%d", i)); !ok {
				return false
			}
		}
		return warm > 0
	}
	for deadline := time.Now().Add(time.Minute); !atWork(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replicas were not all at work within a minute:\n%s", tails())
		}
		var recs []*kgo.Record
		for range 10 {
			id := fmt.Appendf(nil, "warm-%d", warm)
			recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: id, Value: id})
			warm++
		}
		e.Produce(recs...)
	}

	handled := func() int { return ta.distinct(e.P.Results) - warm }
	start := time.Now()
	var produceErr atomic.Value
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		const batch = killRate / 10
		ctx := context.Background()
		for i := 0; i < killRequests; i += batch {
			for j := i; j < i+batch && j < killRequests; j++ {
				id := fmt.Appendf(nil, "req-%d", j)
				r := &kgo.Record{Topic: e.P.Topic, Key: id, Value: id}
				e.Client.Produce(ctx, r, func(_ *kgo.Record, err error) {
					if err != nil {
						produceErr.CompareAndSwap(nil, err)
					}
				})
			}
			time.Sleep(time.Until(start.Add(time.Duration(i/batch+1) * 100 * time.Millisecond)))
		}
		if err := e.Client.Flush(ctx); err != nil {
			produceErr.CompareAndSwap(nil, err)
		}
	}()

	row := killRow{mode: mode, requests: killRequests, kills: killCount}
	offered := func(i int) time.Time { return start.Add(time.Duration(i/(killRate/10)) * 100 * time.Millisecond) }
	for k := range killCount {
		time.Sleep(time.Until(start.Add(time.Duration(k+1) * killEvery())))
		i := k % killReplicas
		r := reps[i]
		if r.exited() {
			t.Fatalf("replica %s exited by itself (%v):\n%s", r.name, r.err, r.tail())
		}
		held := r.out.inflight.Load()
		r.kill(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tps, err := owned(ctx, e.Admin, e.P.GroupID(), r.name)
		if err != nil {
			t.Fatalf("kill %d: the consumer group: %v", k+1, err)
		}
		left, err := uncommitted(ctx, e.Admin, e.P.GroupID(), tps)
		cancel()
		if err != nil {
			t.Fatalf("kill %d: %v", k+1, err)
		}
		if mode == processor.ConsumeShare {
			left += int64(conc)
		}
		row.held += held
		row.redeliverable += left
		t.Logf("kill %d at %s: %s held %d records, owned %v in the consumer group; %d redeliverable; %d requests had results",
			k+1, time.Since(start).Round(100*time.Millisecond), r.name, held, tps, left, handled())
		reps[i] = startReplica(t, spec(fmt.Sprintf("%s-%d-%d", mode, i, k+1)))
		all = append(all, reps[i])
	}
	<-produced
	if err, _ := produceErr.Load().(error); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if !waitFor(2*time.Minute, func() bool { return handled() >= killRequests }) {
		t.Errorf("%d of %d requests have results 2 minutes after the last was offered", handled(), killRequests)
	}
	row.wall = ta.lastNew().Sub(start)
	// Late duplicates come from records delivered again after every
	// request had its result: wait until nothing is left to deliver.
	var why string
	if !waitFor(time.Minute, func() bool { why = drained(t, e.Cluster, e.Admin, e.P, 2); return why == "" }) {
		t.Errorf("the pipeline still has work a minute after every result: %s", why)
	}
	time.Sleep(2 * time.Second) // the follower reads what was written last

	counts := ta.counts(e.P.Results)
	for i := range killRequests {
		id := fmt.Sprintf("req-%d", i)
		if counts[id] == 0 {
			row.lost++
		}
		extra := max(0, counts[id]-1)
		row.dups += extra
		if !failsOnce(id) {
			row.dupsFirst += extra
		}
		if at, ok := ta.firstSeen(id); ok {
			if failsOnce(id) {
				row.waitRetried = append(row.waitRetried, at.Sub(offered(i)))
			} else {
				row.wait = append(row.wait, at.Sub(offered(i)))
			}
		}
		delete(counts, id)
	}
	for v := range counts {
		if !strings.HasPrefix(v, "warm-") {
			t.Errorf("a result for no request offered: %q", v)
		}
	}
	if dl := ta.records(e.P.DLQ); len(dl) > 0 {
		var s []string
		for _, r := range dl {
			reason, _ := kafkatest.Header(r, retry.HeaderReason)
			code, _ := kafkatest.Header(r, retry.HeaderErrorCode)
			s = append(s, fmt.Sprintf("%s (%s, %s)", r.Key, reason, code))
		}
		t.Errorf("%d dead letters, want none (every request succeeds by its second attempt): %s", len(dl), strings.Join(s, ", "))
	}
	if t.Failed() {
		t.Log(tails())
	}
	return row
}
