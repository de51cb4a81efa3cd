package processor_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// A burst of bad requests larger than the concurrency, then healthy
// traffic, at the defaults: the burst opens the breaker (it looks like an
// outage), and the healthy requests pay for that one open_for at most.
// The probes after open_for are the newest records, not the rest of the
// burst held when it opened; once they close it, the held burst goes on
// through its tiers without opening it again. Every bad request gets its
// result through the tiers, none is dead-lettered, no retry comes early.
// The subtests run at once, each with its own broker, so that together
// they cost about one open_for: t.Parallel would run only -parallel
// (GOMAXPROCS) of them at a time.
func TestBurstLargerThanConcurrencyCostsHealthyOneOpenFor(t *testing.T) {
	var wg sync.WaitGroup
	for _, conc := range []int{1, 8, 32, 256} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(fmt.Sprintf("concurrency-%d", conc), func(t *testing.T) { burstThenHealthy(t, conc) })
		}()
	}
	wg.Wait()
}

func burstThenHealthy(t *testing.T, conc int) {
	const bad, healthy = 100, 2000
	tiers := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}
	e := pipetest.New(t, "burst", 3, retry.Schedule{Tiers: tiers, MaxAttempts: 4})
	e.P.Concurrency = conc
	reg := prometheus.NewRegistry()
	s := newScript()
	e.Start(s, func(c *processor.Config) { c.Registerer = reg })

	req := func(id, script string) *kgo.Record {
		return &kgo.Record{Topic: e.P.Topic, Key: []byte(id), Value: []byte(script), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}
	}
	var recs []*kgo.Record
	for i := range bad {
		recs = append(recs, req(fmt.Sprintf("bad-%d", i), "transient:2")) // 503 twice, then success
	}
	e.Produce(recs...)
	time.Sleep(2 * time.Second)
	recs = recs[:0]
	for i := range healthy {
		recs = append(recs, req(fmt.Sprintf("ok-%d", i), "ok"))
	}
	produced := time.Now()
	e.Produce(recs...)

	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(got[e.P.Results]) >= bad+healthy },
		2*processor.DefaultBreakerOpenFor+30*time.Second, 2*time.Second)
	opened := counterWith(t, reg, "redrive_breaker_transitions_total", "to", "open")

	bound := processor.DefaultBreakerOpenFor + 15*time.Second
	results := map[string]*kgo.Record{}
	for _, r := range got[e.P.Results] {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		results[id] = r
	}
	// A result's timestamp is the time of its decision (the handler's
	// answer), just before it is written.
	var late, missing, worst = 0, 0, time.Duration(0)
	for i := range healthy {
		r := results[fmt.Sprintf("ok-%d", i)]
		if r == nil {
			missing++
			continue
		}
		d := r.Timestamp.Sub(produced)
		worst = max(worst, d)
		if d > bound {
			late++
		}
	}
	if missing > 0 || late > 0 {
		t.Errorf("healthy requests: %d of %d without a result, %d with it later than open_for + 15 s (%v) after they were produced; breaker opened %v times",
			missing, healthy, late, bound, opened)
	}
	for _, r := range got[e.P.DLQ] {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		t.Errorf("%s dead-lettered (%s): every request here succeeds in time", id, reason)
	}
	badMissing, direct := 0, 0
	for i := range bad {
		r := results[fmt.Sprintf("bad-%d", i)]
		if r == nil {
			badMissing++
			continue
		}
		// A failure while the breaker is not closed spends no attempt; the
		// ones after it closed do: each ends from a tier.
		if a, _ := kafkatest.Header(r, retry.HeaderAttempt); a == "1" {
			direct++
		}
	}
	if badMissing > 0 || direct > 0 {
		t.Errorf("bad requests: %d of %d without a result (they succeed on their third call), %d with a result on their first attempt (not through a tier)", badMissing, bad, direct)
	}
	checkNoEarlyRetry(t, s, tiers)
	t.Logf("concurrency %d: %d of %d healthy results, the last %v after they were produced (bound %v); breaker opened %v times", conc, healthy-missing, healthy, worst.Round(time.Millisecond), bound, opened)
}

// checkNoEarlyRetry fails t for a call of attempt n+1 that started less
// than its tier's delay after the start of the call of attempt n (calls
// repeating an attempt, held by the line, have no delay to keep).
func checkNoEarlyRetry(t *testing.T, s *script, tiers []time.Duration) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	early := 0
	for id, calls := range s.calls {
		calls = append([]call(nil), calls...)
		sort.Slice(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
		for i := 1; i < len(calls); i++ {
			prev, c := calls[i-1], calls[i]
			if c.attempt <= prev.attempt {
				continue
			}
			if delay := tiers[c.attempt-2]; c.at.Sub(prev.at) < delay {
				if early++; early <= 5 {
					t.Errorf("%s: attempt %d called %v after attempt %d, before its tier's %v", id, c.attempt, c.at.Sub(prev.at), prev.attempt, delay)
				}
			}
		}
	}
	if early > 5 {
		t.Errorf("%d early retries in all", early)
	}
}

// counterWith is the sum of a counter's series in reg whose label is value.
func counterWith(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
