package processor_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/internal/promtest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// consume: share. The main topic is read by a share group; these run at
// the shipped defaults (breaker, guard, scope pipeline, control topic).

// shareSchedule is a short schedule for share-mode tests.
var shareSchedule = retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 3}

// TestShareReplicasHandleEveryRecord: three replicas of a share pipeline
// over a 2-partition topic handle every request; those failing once come
// back through the tier (read by the consumer group), those failing for
// good are dead-lettered, and none is lost.
func TestShareReplicasHandleEveryRecord(t *testing.T) {
	e := pipetest.New(t, "share-every", 2, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	const n = 600
	var mu sync.Mutex
	calls := map[string]int{}
	callsBy := map[string]int{}
	h := func(replica string) processor.Handler {
		return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
			id := string(req.Record.Key)
			mu.Lock()
			calls[id]++
			callsBy[replica]++
			mu.Unlock()
			i, _ := strconv.Atoi(id)
			switch {
			case i%10 == 0:
				return processor.Fail("bad_request", fmt.Errorf("request %d is bad", i))
			case i%7 == 0 && req.Attempt == 1:
				return processor.Retry("busy", fmt.Errorf("busy"))
			}
			return processor.Succeed([]byte(id))
		})
	}
	var recs []*kgo.Record
	for i := 1; i <= n; i++ {
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(strconv.Itoa(i)), Value: []byte("v")})
	}
	// Written before any replica starts: a new share group starts at the
	// earliest record.
	e.Produce(recs...)
	for _, name := range []string{"a", "b", "c"} {
		cfg := e.Config()
		cfg.Instance = name
		pipetest.Run(t, cfg, h(name))
	}
	bad := n / 10
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.Results]) >= n-bad && len(g[e.P.DLQ]) >= bad
	}, 90*time.Second, 2*time.Second)
	results := map[string]int{}
	for _, r := range got[e.P.Results] {
		results[string(r.Key)]++
	}
	for i := 1; i <= n; i++ {
		id := strconv.Itoa(i)
		if i%10 == 0 {
			continue
		}
		if results[id] == 0 {
			t.Errorf("request %s has no result", id)
		}
	}
	if len(got[e.P.DLQ]) != bad {
		t.Errorf("%d dead letters, want %d", len(got[e.P.DLQ]), bad)
	}
	if len(got[e.P.Results]) != n-bad {
		t.Errorf("%d results, want %d (duplicates without a crash)", len(got[e.P.Results]), n-bad)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("calls by replica: %v", callsBy)
	for _, name := range []string{"a", "b", "c"} {
		if callsBy[name] == 0 {
			t.Errorf("replica %s made no call: the share group did not spread the records", name)
		}
	}
}

// TestShareCrashLoopRecordDeadLettered: a record whose handling never
// ends in an outcome (here: the processor stops past its grace each time
// it holds it, so the record is released) is delivered again and again;
// past max_deliveries it is dead-lettered "crashed" with its delivery
// count, and the others are handled.
func TestShareCrashLoopRecordDeadLettered(t *testing.T) {
	e := pipetest.New(t, "share-crash", 1, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	held := make(chan struct{}, 16)
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if string(req.Record.Key) == "poison" {
			held <- struct{}{}
			<-ctx.Done() // until the grace is over
			return processor.Retry("gone", ctx.Err())
		}
		return processor.Succeed(nil)
	})
	e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte("poison"), Value: []byte("x")})
	for i := range processor.DefaultMaxDeliveries {
		stop := e.Start(h, func(c *processor.Config) { c.ShutdownGrace = 100 * time.Millisecond })
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d: the poison record was not handed to the handler", i+1)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	var ok []*kgo.Record
	for i := range 20 {
		ok = append(ok, &kgo.Record{Topic: e.P.Topic, Key: []byte("ok" + strconv.Itoa(i)), Value: []byte("x")})
	}
	e.Produce(ok...)
	e.Start(h)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.DLQ]) >= 1 && len(g[e.P.Results]) >= len(ok)
	}, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) != 1 {
		t.Fatalf("%d dead letters, want the poison record", len(got[e.P.DLQ]))
	}
	dl := got[e.P.DLQ][0]
	if r, _ := kafkatest.Header(dl, "redrive-reason"); r != "crashed" {
		t.Errorf("reason %q, want crashed", r)
	}
	if len(got[e.P.Results]) != len(ok) {
		t.Errorf("%d results, want %d", len(got[e.P.Results]), len(ok))
	}
	select {
	case <-held:
		t.Errorf("the poison record was handled a %dth time", processor.DefaultMaxDeliveries+1)
	default:
	}
}

// TestShareRecordChargedWithoutRunningIsHandled: the share group counts a
// delivery for every record a member acquired, run or not (franz-go
// fetches the next batch while a record delivered again runs alone, and a
// death counts it too). A record delivered more than max_deliveries times
// that never ran alone is no proof of a crash: it runs, alone, and is
// handled, not dead-lettered "crashed".
func TestShareRecordChargedWithoutRunningIsHandled(t *testing.T) {
	e := pipetest.New(t, "share-charged", 1, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte("bystander"), Value: []byte("x")})

	// Another member of the group acquires it and gives it back unrun,
	// max_deliveries times.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	group := e.P.ShareGroupID()
	if err := topics.EnsureShareGroup(ctx, e.Client, group); err != nil {
		t.Fatal(err)
	}
	// It gives the record back only once no fetch of its is in flight
	// (paused, and longer than a fetch waits): franz-go fetches again as
	// soon as a poll takes the last record, and a fetch pending at the
	// broker would acquire the released record once more.
	other, err := kgo.NewClient(kgo.SeedBrokers(e.Cluster.Brokers...), kgo.ShareGroup(group),
		kgo.ConsumeTopics(e.P.Topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	max := e.P.WithDefaults().MaxDeliveries
	for d := 1; d <= max; d++ {
		other.ResumeFetchTopics(e.P.Topic)
		var r *kgo.Record
		for r == nil {
			fs := other.PollRecords(ctx, 1)
			if ctx.Err() != nil {
				t.Fatalf("delivery %d: the record was not acquired: %v", d, ctx.Err())
			}
			if recs := fs.Records(); len(recs) > 0 {
				r = recs[0]
			}
		}
		if got := int(r.DeliveryCount()); got != d {
			t.Fatalf("acquired with delivery count %d, want %d", got, d)
		}
		other.PauseFetchTopics(e.P.Topic)
		time.Sleep(time.Second)
		r.Ack(kgo.AckRelease)
		if err := other.FlushAcks(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other.Close()

	var calls atomic.Int32
	e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		calls.Add(1)
		return processor.Succeed([]byte("done"))
	}))
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.Results])+len(g[e.P.DLQ]) >= 1
	}, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) > 0 {
		reason, _ := kafkatest.Header(got[e.P.DLQ][0], "redrive-reason")
		deliveries, _ := kafkatest.Header(got[e.P.DLQ][0], "redrive-deliveries")
		t.Fatalf("dead-lettered (reason %q, deliveries %q) though it never ran: want it handled", reason, deliveries)
	}
	if len(got[e.P.Results]) != 1 || calls.Load() != 1 {
		t.Fatalf("%d results, %d calls; want 1 and 1", len(got[e.P.Results]), calls.Load())
	}
}

// TestShareSuspectRunsWithNothingElseHeld: while a record delivered
// again runs alone, its process holds no other record of the main topic,
// so its death would count a delivery of that record only. A hook keeps
// the poll that returns the suspect open a moment, so franz-go fetches
// the next batch then, every time (without it, only now and then): that
// batch is released before the suspect runs, and another member takes
// it while the suspect still runs.
func TestShareSuspectRunsWithNothingElseHeld(t *testing.T) {
	e, other, batch := shareSuspectBehindBatch(t, "share-held")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	running, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if string(req.Record.Key) == "suspect" {
			once.Do(func() { close(running) })
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return processor.Succeed(req.Record.Key)
	})
	e.Start(h, func(c *processor.Config) {
		c.ClientOpts = append(c.ClientOpts, kgo.WithHooks(&slowSuspectPoll{topic: e.P.Topic}))
	})
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the suspect did not run")
	}
	// The other member takes what is left while the suspect runs: all of
	// it, unless the suspect's process holds some.
	other.ResumeFetchTopics(e.P.Topic)
	took := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for len(took) < batch && time.Now().Before(deadline) {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		for _, r := range other.PollRecords(pctx, 0).Records() {
			took[string(r.Key)] = true
			r.Ack(kgo.AckAccept)
		}
		pcancel()
	}
	if err := other.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	if len(took) < batch {
		t.Errorf("while the suspect ran alone, another member could take %d of the %d records behind its batch: its process held the others", len(took), batch)
	}

	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.Results])+len(g[e.P.DLQ])+len(took) >= 2*batch+1
	}, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) > 0 {
		t.Errorf("%d dead letters, want none", len(got[e.P.DLQ]))
	}
	for _, r := range got[e.P.Results] {
		took[string(r.Key)] = true
	}
	if len(took) != 2*batch+1 {
		t.Errorf("%d of %d records handled", len(took), 2*batch+1)
	}
}

// shareSuspectBehindBatch makes a share pipeline whose main topic holds a
// suspect (delivered once, released unrun by another member: the returned
// one, paused) followed by two batches (Concurrency) of records keyed g0,
// g1, ...
func shareSuspectBehindBatch(t *testing.T, base string) (*pipetest.Env, *kgo.Client, int) {
	t.Helper()
	e := pipetest.New(t, base, 1, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	group := e.P.ShareGroupID()
	if err := topics.EnsureShareGroup(ctx, e.Client, group); err != nil {
		t.Fatal(err)
	}
	e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte("suspect"), Value: []byte("x")})
	other, err := kgo.NewClient(kgo.SeedBrokers(e.Cluster.Brokers...), kgo.ShareGroup(group),
		kgo.ConsumeTopics(e.P.Topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	for taken := false; !taken; {
		for _, r := range other.PollRecords(ctx, 1).Records() {
			other.PauseFetchTopics(e.P.Topic) // nothing more fetched: the release is the record's only one
			time.Sleep(time.Second)
			r.Ack(kgo.AckRelease)
			taken = true
		}
		if ctx.Err() != nil {
			t.Fatal("the record was not acquired")
		}
	}
	if err := other.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	batch := e.P.WithDefaults().Concurrency
	var recs []*kgo.Record
	for i := range 2 * batch {
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: fmt.Appendf(nil, "g%d", i), Value: []byte("x")})
	}
	e.Produce(recs...)
	return e, other, batch
}

// TestShareRecordReleasedUnrunIsNoSuspect: the records a reader released
// unrun while a suspect ran come back to it with their delivery count one
// up; that delivery is not counted against them: they run as a batch,
// not one at a time like records delivered again.
func TestShareRecordReleasedUnrunIsNoSuspect(t *testing.T) {
	e, other, batch := shareSuspectBehindBatch(t, "share-unrun")
	other.Close() // no other member: the released records come back to the pipeline
	var mu sync.Mutex
	inflight, most := 0, 0
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		key := string(req.Record.Key)
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "g"))
		if key == "suspect" || n < batch {
			return processor.Succeed(req.Record.Key)
		}
		// Behind the suspect's batch: released unrun once.
		mu.Lock()
		inflight++
		most = max(most, inflight)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		inflight--
		mu.Unlock()
		return processor.Succeed(req.Record.Key)
	})
	e.Start(h, func(c *processor.Config) {
		c.ClientOpts = append(c.ClientOpts, kgo.WithHooks(&slowSuspectPoll{topic: e.P.Topic}))
	})
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.Results])+len(g[e.P.DLQ]) >= 2*batch+1
	}, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) > 0 || len(got[e.P.Results]) != 2*batch+1 {
		t.Fatalf("%d results, %d dead letters; want %d and none", len(got[e.P.Results]), len(got[e.P.DLQ]), 2*batch+1)
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("the records released unrun ran one at a time (at most %d in flight): their release was counted as a delivery that ended with no outcome", most)
	}
}

// slowSuspectPoll holds open the poll that returns a record delivered
// again: franz-go fetches the next batch while a poll is open.
type slowSuspectPoll struct {
	topic string
	once  sync.Once
}

func (h *slowSuspectPoll) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled && r.Topic == h.topic && r.DeliveryCount() > 1 {
		h.once.Do(func() { time.Sleep(500 * time.Millisecond) })
	}
}

// shareSettled waits until every running replica of a share pipeline
// counts them all (its status names as many members as run) and their
// shares add up to the whole.
func shareSettled(rs *replicas, timeout time.Duration) bool {
	return kafkatest.Eventually(timeout, func() bool {
		st, _, err := control.Read(context.Background(), rs.e.Client, control.DefaultTopic)
		if err != nil {
			return false
		}
		rs.mu.Lock()
		want := len(rs.pr)
		rs.mu.Unlock()
		sum, n := 0.0, 0
		for _, rep := range st.Replicas(time.Now()) {
			if rep.Pipeline != rs.e.P.Name || rep.Stale || time.Since(rep.Seen) > 1500*time.Millisecond {
				continue
			}
			if rep.Members != want {
				return false
			}
			n++
			sum += rep.Share
		}
		return n == want && math.Abs(sum-1) < 0.01
	})
}

// TestShareReplicasShareTheRateLimit: a share group has no partition
// assignment to split the budgets by; three replicas of a 2-partition
// pipeline with rate_limit 60/s make about 60 calls/s together (each a
// third), and after one leaves or a fourth joins, again about 60.
func TestShareReplicasShareTheRateLimit(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "share-rate", 2, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	e.P.RateLimit = 60
	svc := newService()
	rs := newReplicas(t, e, svc, nil)
	e.Produce(backlog(e.P.Topic, 20000)...)
	for _, n := range []string{"a", "b", "c"} {
		rs.start(n)
	}
	phase := func(what string, d time.Duration, names ...string) {
		t.Helper()
		if !shareSettled(rs, 30*time.Second) {
			t.Fatalf("%s: the replicas' shares did not settle", what)
		}
		// A replica counts from its first status; the share group gives
		// it records at its next heartbeat (5s at Kafka's defaults).
		if !kafkatest.Eventually(20*time.Second, func() bool {
			for _, n := range names {
				if svc.between(time.Now().Add(-time.Second), time.Now(), n) == 0 {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s: not every replica of %v is calling", what, names)
		}
		from := time.Now()
		time.Sleep(d)
		to := time.Now()
		avg := float64(svc.between(from, to, "")) / to.Sub(from).Seconds()
		peak := float64(svc.maxWindow(from, to, 5*time.Second)) / 5
		t.Logf("%s: %.1f calls/s on average over %v, at most %.1f/s over 5s", what, avg, to.Sub(from).Round(time.Millisecond), peak)
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			if c := svc.between(from, to, n); c > 0 {
				t.Logf("%s: replica %s: %.1f calls/s", what, n, float64(c)/to.Sub(from).Seconds())
			}
		}
		if peak > 63 {
			t.Errorf("%s: %.1f calls/s over 5s, want at most 63", what, peak)
		}
		if avg < 54 || avg > 66 {
			t.Errorf("%s: %.1f calls/s on average, want 60 ±10%%", what, avg)
		}
	}
	phase("three replicas", 10*time.Second, "a", "b", "c")
	rs.halt("c")
	phase("one replica left", 8*time.Second, "a", "b")
	rs.start("d")
	phase("a third joined again", 8*time.Second, "a", "b", "d")
	rs.start("e")
	phase("a fourth joined", 8*time.Second, "a", "b", "d", "e")
	rs.mu.Lock()
	pr := rs.pr["a"]
	rs.mu.Unlock()
	if st := pr.Status().Pipelines[0]; st.Consume != "share" || st.ShareGroup != e.P.ShareGroupID() || st.Members != 4 {
		t.Errorf("status: consume %q, share group %q, members %d; want share, %s, 4", st.Consume, st.ShareGroup, st.Members, e.P.ShareGroupID())
	}
}

// TestShareLongCallRenewsItsLock: a call that outlives the share group's
// acquisition lock (here the smallest Kafka allows, 15s, set on the
// group) keeps its record: it is renewed, not handed to the other
// replica, so the service is called once.
func TestShareLongCallRenewsItsLock(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "share-renew", 1, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	if err := topics.SetGroupConfigs(context.Background(), e.Client, e.P.ShareGroupID(), map[string]string{"share.record.lock.duration.ms": "15000"}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if calls.Add(1) == 1 {
			select {
			case <-time.After(22 * time.Second):
			case <-ctx.Done():
			}
		}
		return processor.Succeed(nil)
	})
	e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte("long"), Value: []byte("x")})
	for _, name := range []string{"a", "b"} {
		cfg := e.Config()
		cfg.Instance = name
		cfg.ShutdownGrace = 30 * time.Second
		pipetest.Run(t, cfg, h)
	}
	got := e.CollectN(e.P.Results, 1, 60*time.Second, 3*time.Second)
	if len(got) != 1 || calls.Load() != 1 {
		t.Errorf("%d results and %d calls, want 1 and 1 (the lock was not renewed: the record went to the other replica)", len(got), calls.Load())
	}
}

// TestShareLagCountsWhatIsNotAcknowledged: redrive_share_lag (what KEDA
// scales a share pipeline on) counts the main topic's records its share
// group has not acknowledged: all of them while the service holds the
// first calls, none once every outcome is written.
func TestShareLagCountsWhatIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	e := pipetest.New(t, "share-lag", 2, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	release := make(chan struct{})
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return processor.Succeed(nil)
	})
	const n = 200
	e.Produce(backlog(e.P.Topic, n)...)
	reg := prometheus.NewRegistry()
	e.Start(h, func(c *processor.Config) { c.Registerer = reg })
	lag := func() float64 {
		return promtest.Sum(t, reg, "redrive_share_lag", map[string]string{"pipeline": e.P.Name})
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { return lag() == n }) {
		t.Fatalf("redrive_share_lag %v while no record is finished, want %d", lag(), n)
	}
	close(release)
	if !kafkatest.Eventually(30*time.Second, func() bool { return lag() == 0 }) {
		got := e.CollectN(e.P.Results, n, 10*time.Second, time.Second)
		d, err := kadm.NewClient(e.Client).DescribeShareGroupOffsets(context.Background(), e.P.ShareGroupID())
		t.Fatalf("redrive_share_lag %v once every record is finished, want 0 (%d results; %v %+v)", lag(), len(got), err, d)
	}
}
