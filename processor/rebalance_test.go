package processor_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// rbCall is one handler call in the rebalance test.
type rbCall struct {
	at        time.Time
	due       time.Time
	topic     string
	partition int32
	by        string
}

// rbHandler is shared by every processor of the rebalance test, so that
// "transient-once" means the first call anywhere fails and any later one
// succeeds.
type rbHandler struct {
	mu    sync.Mutex
	calls map[string][]rbCall
	by    map[string]int // calls per processor
	tier  map[string]int // tier-record calls per processor
	busy  map[string]int // calls in flight per processor
	lost  map[string]int // calls whose context ended first, per processor
}

func newRBHandler() *rbHandler {
	return &rbHandler{calls: map[string][]rbCall{}, by: map[string]int{}, tier: map[string]int{}, busy: map[string]int{}, lost: map[string]int{}}
}

// as is the handler of the processor named name; each call takes delay
// (cut short when its context ends).
func (h *rbHandler) as(name, tierTopic string, delay time.Duration) processor.Handler {
	return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		c := rbCall{at: time.Now(), due: req.Meta.Due, topic: req.Record.Topic, partition: req.Record.Partition, by: name}
		h.mu.Lock()
		h.calls[req.ID] = append(h.calls[req.ID], c)
		n := len(h.calls[req.ID])
		h.by[name]++
		if c.topic == tierTopic {
			h.tier[name]++
		}
		h.busy[name]++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.busy[name]--
			h.mu.Unlock()
		}()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				h.mu.Lock()
				h.lost[name]++
				h.mu.Unlock()
				return processor.Outcome{Kind: processor.Transient, Code: "timeout", Err: ctx.Err()}
			}
		}
		switch string(req.Record.Value) {
		case "ok":
			return processor.Outcome{Kind: processor.Success, Result: []byte("done:" + req.ID)}
		case "transient-once":
			if n == 1 {
				return processor.Outcome{Kind: processor.Transient, Code: "http_503", Err: fmt.Errorf("503")}
			}
			return processor.Outcome{Kind: processor.Success, Result: []byte("done:" + req.ID)}
		case "permanent":
			return processor.Outcome{Kind: processor.Permanent, Code: "ERROR_WRONG_USER_KEY", Err: fmt.Errorf("bad key")}
		}
		return processor.Outcome{Kind: processor.Invalid, Code: "unknown_script"}
	})
}

func (h *rbHandler) inflightOf(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.busy[name]
}

func (h *rbHandler) abandonedOf(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost[name]
}

func (h *rbHandler) counts(name string) (all, tier int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[name], h.tier[name]
}

// terminals watches the results and DLQ topics from the start and notes
// when each request id arrived where.
type terminals struct {
	mu   sync.Mutex
	seen map[string][]terminal
}

type terminal struct {
	topic string
	at    time.Time
}

func watchTerminals(e *pipetest.Env) *terminals {
	e.T.Helper()
	w := &terminals{seen: map[string][]terminal{}}
	cl := e.Cluster.Client(e.T, kgo.ConsumeTopics(e.P.Results, e.P.DLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				id, _ := kafkatest.Header(r, retry.HeaderID)
				w.seen[id] = append(w.seen[id], terminal{topic: r.Topic, at: now})
			})
			w.mu.Unlock()
		}
	}()
	e.T.Cleanup(func() { cancel(); <-done })
	return w
}

// missing lists the ids that have not reached any terminal topic yet.
func (w *terminals) missing(ids []string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, id := range ids {
		if len(w.seen[id]) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// gaugeValue is the sum of a gauge's series in reg; ok is false while the
// gauge has no series.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) (v float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetGauge().GetValue()
			}
			return v, true
		}
	}
	return 0, false
}

// requests are the test's solve requests: what each is and where it must end.
type requests struct {
	mu     sync.Mutex
	ids    []string
	value  map[string]string // id → script
	expect map[string]string // id → terminal topic
}

// make registers n requests of phase and returns their records.
func (rq *requests) make(e *pipetest.Env, phase string, n int, value func(i int) string) ([]*kgo.Record, []string) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	var recs []*kgo.Record
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("rb-%s-%d", phase, i)
		v := value(i)
		rq.value[id] = v
		rq.expect[id] = e.P.Results
		if v == "permanent" {
			rq.expect[id] = e.P.DLQ
		}
		rq.ids = append(rq.ids, id)
		ids = append(ids, id)
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(id), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	return recs, ids
}

func (rq *requests) all() []string {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	return slices.Clone(rq.ids)
}

// mixed: 30% fail once (one trip through the tier), 60% succeed at once,
// 10% are permanent. (Half failing would be the breaker's failure_ratio:
// a failing service.)
func mixed(i int) string {
	switch {
	case i%10 < 3:
		return "transient-once"
	case i%10 < 9:
		return "ok"
	}
	return "permanent"
}

// testLog sends a processor's log lines to the test log (shown on failure
// or with -v), prefixed with its name; once over is set (the test's last
// cleanup), lines are dropped: logging after a test ends panics.
type testLog struct {
	t    testing.TB
	name string
	over *atomic.Bool
}

func (l testLog) Write(b []byte) (int, error) {
	if !l.over.Load() {
		l.t.Logf("[%s] %s", l.name, strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

// pauseWatch samples a processor's redrive_paused_partitions and
// redrive_waiting_records every 10ms until the test ends. It keeps the most
// partitions seen paused at once, and the longest stretch during which
// partitions were paused while no record waited: a paused tier partition
// resumes once half its waiting records are dispatched, so a pause with
// nothing waiting is a partition nobody will resume.
type pauseWatch struct {
	mu           sync.Mutex
	max          float64
	stuckSince   time.Time
	longestStuck time.Duration
}

func watchPauses(t *testing.T, reg *prometheus.Registry) *pauseWatch {
	w := &pauseWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mfs, err := reg.Gather()
			if err != nil {
				continue
			}
			var paused, waiting float64
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					switch mf.GetName() {
					case "redrive_paused_partitions":
						paused += m.GetGauge().GetValue()
					case "redrive_waiting_records":
						waiting += m.GetGauge().GetValue()
					}
				}
			}
			now := time.Now()
			w.mu.Lock()
			w.max = max(w.max, paused)
			switch {
			case paused == 0 || waiting > 0:
				w.stuckSince = time.Time{}
			case w.stuckSince.IsZero():
				w.stuckSince = now
			default:
				w.longestStuck = max(w.longestStuck, now.Sub(w.stuckSince))
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *pauseWatch) maxPaused() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

func (w *pauseWatch) stuck() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longestStuck
}

// rbProc is one processor of the rebalance test.
type rbProc struct {
	reg    *prometheus.Registry
	pauses *pauseWatch
	stop   func() error
}

// Rebalance: a second processor joins and leaves mid-run while tier
// partitions are paused; nothing is lost and nothing stays paused.
//
// Traffic flows all along (30% of the requests fail once and go through a 2s
// tier; MaxWaiting 5 keeps tier partitions paused most of the time).
// Processor A runs alone until its tier partitions are paused. B joins the
// group, takes main and tier partitions (and pauses tier partitions of its
// own), then leaves gracefully. C joins with a slow handler and leaves with
// a 1ms shutdown grace, abandoning its in-flight work to A. After C left, a
// last batch, half of it transient-once, must go through A's main topic and
// every tier partition within the tier delay plus a few seconds: nothing
// was left paused by the rebalances.
//
// The phases run in order as named cases; a phase that fails stops the
// test, since the next one needs its state. The cases after the last batch
// check the whole run, each one promise.
func TestRebalanceJoinLeaveWhileTierPaused(t *testing.T) {
	const (
		parts    = 4
		tierWait = 2 * time.Second
	)
	var over atomic.Bool
	t.Cleanup(func() { over.Store(true) }) // runs last
	e := newEnv(t, []time.Duration{tierWait}, parts)
	e.P.MaxWaiting = 5
	tier := e.P.TierTopics()[0]
	h := newRBHandler()
	term := watchTerminals(e)
	rq := &requests{value: map[string]string{}, expect: map[string]string{}}
	began := time.Now()
	elapsed := func() time.Duration { return time.Since(began).Round(time.Millisecond) }

	// Processors, their pause watches and logs live for the whole test
	// (the outer t), not for the phase that starts them.
	outer := t
	start := func(name string, delay, grace time.Duration) rbProc {
		reg := prometheus.NewRegistry()
		stop := e.Start(h.as(name, tier, delay), func(c *processor.Config) {
			c.Registerer = reg
			c.Instance = name
			c.Logger = slog.New(slog.NewTextHandler(testLog{outer, name, &over}, nil))
			if grace > 0 {
				c.ShutdownGrace = grace
			}
		})
		return rbProc{reg: reg, pauses: watchPauses(outer, reg), stop: stop}
	}
	gauge := func(p rbProc, name string) float64 { v, _ := gaugeValue(outer, p.reg, name); return v }
	phase := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	// Traffic: 30 requests every 250ms until the last phase.
	trafficStop := make(chan struct{})
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for k := 0; ; k++ {
			recs, _ := rq.make(e, fmt.Sprintf("t%d", k), 30, mixed)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := e.Client.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				outer.Errorf("produce: %v", err)
				return
			}
			select {
			case <-trafficStop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	stopTraffic := func() {
		select {
		case <-trafficStop:
		default:
			close(trafficStop)
		}
		<-trafficDone
	}
	t.Cleanup(stopTraffic)

	var a, b, c rbProc
	phase("A alone pauses its tier partitions at MaxWaiting", func(t *testing.T) {
		a = start("A", 0, 0)
		if !kafkatest.Eventually(20*time.Second, func() bool { return gauge(a, "redrive_paused_partitions") >= 1 }) {
			t.Fatalf("no tier partition of A paused within 20s (MaxWaiting 5)")
		}
		t.Logf("%v: A has %v tier partitions paused, %v records waiting; B joins", elapsed(),
			gauge(a, "redrive_paused_partitions"), gauge(a, "redrive_waiting_records"))
	})

	phase("B joins while A is paused then works pauses and leaves with nothing paused", func(t *testing.T) {
		joined := time.Now()
		b = start("B", 0, 0)
		if !kafkatest.Eventually(30*time.Second, func() bool {
			all, tierN := h.counts("B")
			return all-tierN >= 10 && tierN >= 10 && b.pauses.maxPaused() >= 1 && time.Since(joined) > 4*time.Second &&
				len(assignment(e)["redrive-B"][tier]) > 0
		}) {
			all, tierN := h.counts("B")
			t.Fatalf("B, 30s after joining: %d main and %d tier records handled, up to %v tier partitions paused; want 10, 10, 1", all-tierN, tierN, b.pauses.maxPaused())
		}
		all, tierN := h.counts("B")
		t.Logf("%v: group members and partitions: %v", elapsed(), assignment(e))
		t.Logf("%v: B leaves after %d main and %d tier records, %v tier partitions paused now (up to %v); A: %v paused, %v waiting",
			elapsed(), all-tierN, tierN, gauge(b, "redrive_paused_partitions"), b.pauses.maxPaused(),
			gauge(a, "redrive_paused_partitions"), gauge(a, "redrive_waiting_records"))
		if err := b.stop(); err != nil {
			t.Fatalf("B's Run: %v", err)
		}
		if v := gauge(b, "redrive_paused_partitions"); v != 0 {
			t.Errorf("B's redrive_paused_partitions = %v after it left, want 0", v)
		}
	})

	phase("A takes back every partition B had", func(t *testing.T) {
		// A takes B's partitions back (paused ones among them) before C joins.
		if !kafkatest.Eventually(20*time.Second, func() bool { return ownsAll(assignment(e), "redrive-A", []string{e.P.Topic, tier}, parts) }) {
			t.Fatalf("A does not own every partition 20s after B left: %v", assignment(e))
		}
		t.Logf("%v: A owns every partition again; A: %v paused, %v waiting", elapsed(), gauge(a, "redrive_paused_partitions"), gauge(a, "redrive_waiting_records"))
	})

	// C joins with a slow handler and leaves past a 1ms grace while calls
	// are in flight: that work is abandoned, not committed, and redelivered
	// to A.
	var leftC time.Time
	phase("C leaves past a 1ms grace with calls in flight", func(t *testing.T) {
		joined := time.Now()
		c = start("C", 300*time.Millisecond, time.Millisecond)
		if !kafkatest.Eventually(30*time.Second, func() bool {
			all, _ := h.counts("C")
			return all >= 20 && h.inflightOf("C") > 0 && time.Since(joined) > 3*time.Second
		}) {
			all, _ := h.counts("C")
			t.Fatalf("C, 30s after joining: %d records handled, %d in flight; want 20 and some in flight", all, h.inflightOf("C"))
		}
		t.Logf("%v: C leaves with %d calls in flight; A: %v paused, %v waiting", elapsed(), h.inflightOf("C"),
			gauge(a, "redrive_paused_partitions"), gauge(a, "redrive_waiting_records"))
		leftC = time.Now()
		if err := c.stop(); err != nil {
			t.Fatalf("C's Run: %v", err)
		}
		stopTraffic()
	})

	// A alone again. The last batch needs A's main partitions and all its
	// tier partitions: none may be left paused. They are produced at once;
	// A takes C's partitions back when the group rebalances, and from then
	// on the batch must be through within the tier delay plus a few
	// seconds.
	left := time.Now()
	// Every other one fails once: 60 fresh failures in a row would be an
	// outage to the breaker, which holds them instead of using the tier.
	recs, final := rq.make(e, "final", 60, func(i int) string {
		if i%2 == 0 {
			return "transient-once"
		}
		return "ok"
	})
	e.Produce(recs...)
	var tookOver time.Time
	phase("A takes back every partition C had", func(t *testing.T) {
		if !kafkatest.Eventually(20*time.Second, func() bool { return ownsAll(assignment(e), "redrive-A", []string{e.P.Topic, tier}, parts) }) {
			t.Fatalf("A does not own every partition 20s after C left: %v", assignment(e))
		}
		tookOver = time.Now()
	})

	t.Run("a batch after the last leave ends within the tier delay through every tier partition", func(t *testing.T) {
		limit := tierWait + 6*time.Second
		if !kafkatest.Eventually(limit, func() bool { return len(term.missing(final)) == 0 }) {
			miss := term.missing(final)
			t.Errorf("%d of %d requests produced after the last leave have no outcome %v after A took every partition back (tier %v); A: %v paused, %v waiting: %v",
				len(miss), len(final), limit, tierWait, gauge(a, "redrive_paused_partitions"), gauge(a, "redrive_waiting_records"), head(miss))
		} else {
			t.Logf("%v: the %d requests produced after C left all reached results %v after it left, %v after A owned every partition again (tier %v)",
				elapsed(), len(final), time.Since(left).Round(time.Millisecond), time.Since(tookOver).Round(time.Millisecond), tierWait)
		}
		// Where the time went: first call after the takeover, tier call after
		// its due time, terminal record after the tier call.
		finalTierParts := map[int32]bool{}
		var firstLate, tierLate, writeLate time.Duration
		h.mu.Lock()
		term.mu.Lock()
		for _, id := range final {
			calls := h.calls[id]
			for _, cl := range calls {
				if cl.by != "A" {
					t.Errorf("%s handled by %s after B and C left", id, cl.by)
				}
				if cl.topic == tier {
					finalTierParts[cl.partition] = true
					tierLate = max(tierLate, cl.at.Sub(cl.due))
					if got := term.seen[id]; len(got) > 0 {
						writeLate = max(writeLate, got[0].at.Sub(cl.at))
					}
				}
			}
			if len(calls) > 0 {
				firstLate = max(firstLate, calls[0].at.Sub(tookOver))
			}
		}
		slowest, slowAt := "", time.Time{}
		for _, id := range final {
			if got := term.seen[id]; len(got) > 0 && got[0].at.After(slowAt) {
				slowest, slowAt = id, got[0].at
			}
		}
		var story []string
		for _, cl := range h.calls[slowest] {
			st := fmt.Sprintf("%s/%d by %s at %+v", cl.topic, cl.partition, cl.by, cl.at.Sub(tookOver).Round(time.Millisecond))
			if !cl.due.IsZero() {
				st += fmt.Sprintf(" (due %+v)", cl.due.Sub(tookOver).Round(time.Millisecond))
			}
			story = append(story, st)
		}
		t.Logf("slowest of the last batch, relative to the takeover: %s: calls %s; result seen at %+v", slowest, strings.Join(story, ", "), slowAt.Sub(tookOver).Round(time.Millisecond))
		term.mu.Unlock()
		h.mu.Unlock()
		t.Logf("last batch: first calls up to %v after the takeover, tier calls up to %v after due, results up to %v after the tier call",
			firstLate.Round(time.Millisecond), tierLate.Round(time.Millisecond), writeLate.Round(time.Millisecond))
		if len(finalTierParts) != parts {
			t.Errorf("the last batch went through tier partitions %v, want all %d", finalTierParts, parts)
		}
	})

	ids := rq.all()
	t.Run("every request reaches the terminal topic it must at least once", func(t *testing.T) {
		if !kafkatest.Eventually(20*time.Second, func() bool { return len(term.missing(ids)) == 0 }) {
			miss := term.missing(ids)
			t.Errorf("%d of %d requests never reached a terminal topic: %v", len(miss), len(ids), head(miss))
		}
		time.Sleep(time.Second) // late duplicates

		// Duplicates are allowed (at least once) and reported.
		term.mu.Lock()
		dups, nRes, nDLQ := 0, 0, 0
		var dupIDs []string
		for _, id := range ids {
			got := term.seen[id]
			for _, g := range got {
				if g.topic != rq.expect[id] {
					t.Errorf("%s (%s) ended in %s, want %s", id, rq.value[id], g.topic, rq.expect[id])
				}
			}
			if len(got) > 1 {
				dups += len(got) - 1
				dupIDs = append(dupIDs, id)
			}
			if rq.expect[id] == e.P.DLQ {
				nDLQ++
			} else {
				nRes++
			}
		}
		for id := range term.seen {
			if _, ok := rq.expect[id]; !ok {
				t.Errorf("terminal record for unknown id %q", id)
			}
		}
		term.mu.Unlock()
		sort.Strings(dupIDs)
		t.Logf("%d requests (%d for results, %d for the DLQ); %d duplicate terminal records, for %d requests %v",
			len(ids), nRes, nDLQ, dups, len(dupIDs), head(dupIDs))
	})

	t.Run("tier records are handled at or after their due time and every failed first call goes through the tier", func(t *testing.T) {
		h.mu.Lock()
		tierCalls, early := 0, 0
		for _, id := range ids {
			calls := h.calls[id]
			viaTier := false
			for _, cl := range calls {
				if cl.topic != tier {
					continue
				}
				tierCalls++
				viaTier = true
				if cl.due.IsZero() {
					t.Errorf("%s: tier call by %s without a due time", id, cl.by)
				} else if cl.at.Before(cl.due) {
					early++
					t.Errorf("%s: tier call by %s at %v, %v before its due time", id, cl.by, cl.at.Format(time.StampMilli), cl.due.Sub(cl.at))
				}
			}
			// A first call made by C shortly before its leave may have been
			// abandoned (its context cancelled before or after it answered,
			// its outcome not yet written); A redoes it and succeeds on the
			// main topic.
			abandonable := len(calls) > 0 && calls[0].by == "C" && calls[0].at.After(leftC.Add(-2*time.Second))
			if rq.value[id] == "transient-once" && len(calls) > 0 && !abandonable && !viaTier {
				t.Errorf("%s: transient-once request never handled from the tier (%d calls)", id, len(calls))
			}
		}
		h.mu.Unlock()
		allA, tierA := h.counts("A")
		allB, tierB := h.counts("B")
		allC, tierC := h.counts("C")
		t.Logf("handler calls: A %d (%d from the tier), B %d (%d), C %d (%d, %d cut short at its leave); %d tier calls, %d early",
			allA, tierA, allB, tierB, allC, tierC, h.abandonedOf("C"), tierCalls, early)
	})

	t.Run("nothing stays paused", func(t *testing.T) {
		if !kafkatest.Eventually(5*time.Second, func() bool {
			return gauge(a, "redrive_paused_partitions") == 0 && gauge(a, "redrive_waiting_records") == 0
		}) {
			t.Errorf("A still has %v tier partitions paused and %v records waiting", gauge(a, "redrive_paused_partitions"), gauge(a, "redrive_waiting_records"))
		}
		for name, p := range map[string]rbProc{"A": a, "B": b, "C": c} {
			if d := p.pauses.stuck(); d > time.Second {
				t.Errorf("%s had tier partitions paused with no record waiting for %v", name, d)
			}
		}
	})

	t.Run("the group lag on the main topic and the tier reaches 0", func(t *testing.T) {
		var lagErr string
		if !kafkatest.Eventually(15*time.Second, func() bool {
			lagErr = e.LagProblem([]string{e.P.Topic, tier}, parts)
			return lagErr == ""
		}) {
			t.Errorf("group %s: %s", e.P.GroupID(), lagErr)
		}
	})

	t.Run("A stops cleanly", func(t *testing.T) {
		if err := a.stop(); err != nil {
			t.Errorf("A's Run: %v", err)
		}
	})
	t.Logf("took %v", elapsed())
}

// assignment is who in the pipeline's group owns what, by client id
// ("redrive-<instance>"), as the broker describes it.
func assignment(e *pipetest.Env) map[string]map[string][]int32 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := e.Admin.DescribeGroups(ctx, e.P.GroupID())
	if err != nil {
		return nil
	}
	out := map[string]map[string][]int32{}
	for _, g := range gs {
		if g.Err != nil || g.State != "Stable" {
			return nil
		}
		for _, m := range g.Members {
			owned := map[string][]int32{}
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range c.Topics {
					owned[t.Topic] = append(owned[t.Topic], t.Partitions...)
				}
			}
			out[m.ClientID] = owned
		}
	}
	return out
}

// owns reports whether member owns every partition of topics alone.
func ownsAll(asg map[string]map[string][]int32, member string, topics []string, parts int) bool {
	if len(asg) != 1 {
		return false
	}
	for _, t := range topics {
		if len(asg[member][t]) != parts {
			return false
		}
	}
	return true
}

// head is the first few of ids, for messages.
func head(ids []string) []string {
	if len(ids) > 10 {
		return ids[:10]
	}
	return ids
}

// The client joins the group as soon as it exists: partitions may be
// assigned while the pipeline is still being built. The assignment waits
// for it, and the pipeline then handles records as usual.
func TestAssignedBeforeThePipelineIsBuilt(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 2)
	processor.SlowBuild(t, 3*time.Second)
	var calls atomic.Int64
	stop := e.Start(processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if calls.Add(1) == 1 {
			return processor.Outcome{Kind: processor.Transient, Code: "first"}
		}
		return processor.Outcome{Kind: processor.Success}
	}))
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("x")})
	deadline := time.Now().Add(30 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler called %d times, want 2 (a failure, then its retry from the tier)", n)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
