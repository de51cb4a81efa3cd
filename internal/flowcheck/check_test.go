package flowcheck

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// tiny is a scenario of two requests for the checker's own tests: one
// transient:1, one ok; tiers 1s, 2s; three attempts; one replica.
func tiny() *Scenario {
	return &Scenario{
		Concurrency: 4, Partitions: 1, Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3,
		Consume: "group", Delivery: "at-least-once", Replicas: 1,
		Requests: []Request{transient(1), {Class: "ok", Steps: []Step{{Kind: OK}}}},
	}
}

// clean is tiny's run as it should go.
func clean() Run {
	sc := tiny()
	sc.Requests[0].ID, sc.Requests[1].ID = "r0", "r1"
	return Run{
		Scenario: sc, Probes: 5, Bound: 10 * time.Second, End: 20 * time.Second,
		Calls: []Call{
			{ID: "r0", Attempt: 1, At: ms(10), End: ms(20), Kind: Transient, Cause: "script"},
			{ID: "r0", Attempt: 2, At: ms(1100), End: ms(1110), Kind: OK, Cause: "script"},
			{ID: "r1", Attempt: 1, At: ms(10), End: ms(15), Kind: OK, Cause: "script"},
		},
		Outcomes: []Outcome{{ID: "r0", At: ms(1200)}, {ID: "r1", At: ms(100)}},
	}
}

func invariants(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestCheckCleanRunPasses(t *testing.T) {
	if vs := Check(clean()); len(vs) > 0 {
		t.Fatalf("a clean run broke %v:\n%s", invariants(vs), Summary(vs, 3))
	}
}

// The bound holds for the requests the breaker-off run finished, not for
// those it dead-lettered.
func TestCheckBoundsOnlyWhatTheBaselineFinished(t *testing.T) {
	r := clean()
	r.Outcomes[0].At = 11 * time.Second
	r.Succeeded = map[string]bool{"r1": true}
	if vs := Check(r); len(vs) > 0 {
		t.Fatalf("r0 not finished by the baseline: %s", Summary(vs, 3))
	}
}

// Each invariant, broken on purpose, is reported, and only it.
func TestCheckFindsEachBrokenInvariant(t *testing.T) {
	for _, c := range []struct {
		want    string
		breakIt func(r *Run)
	}{
		{Lost, func(r *Run) { r.Outcomes = r.Outcomes[:1] }},
		{WrittenTwice, func(r *Run) { r.Outcomes = append(r.Outcomes, Outcome{ID: "r1", At: ms(300)}) }},
		{EarlyRetry, func(r *Run) { r.Calls[1].At, r.Calls[1].End = ms(900), ms(910) }},
		{BeforeRetryAfter, func(r *Run) {
			r.Calls[0].Kind, r.Calls[0].RetryAfter = Throttle, 2
			r.Calls[1].Attempt = 1 // a 429 keeps its attempt: called again too soon
		}},
		{EarlyPoll, func(r *Run) {
			r.Calls[0].Kind = NotReady
			r.Calls[1].Attempt, r.Calls[1].State, r.Calls[1].At, r.Calls[1].End = 1, "job", ms(500), ms(510)
		}},
		{SkippedAttempt, func(r *Run) { r.Calls[1].Attempt = 3 }},
		{CallAfterSuccess, func(r *Run) {
			r.Calls = append(r.Calls, Call{ID: "r1", Attempt: 1, At: ms(2000), End: ms(2001), Kind: OK, Cause: "script"})
		}},
		{ResultUnanswered, func(r *Run) { r.Calls[1].Kind = Transient; r.Outcomes[0].At = ms(1105) }},
		{UnearnedDead, func(r *Run) { r.Outcomes[0] = Outcome{ID: "r0", DeadLetter: true, Reason: "exhausted", At: ms(1200)} }},
		{UnearnedDead, func(r *Run) { r.Outcomes[1] = Outcome{ID: "r1", DeadLetter: true, Reason: "crashed", At: ms(100)} }},
		{Late, func(r *Run) { r.Outcomes[0].At = 11 * time.Second }},
		{Late, func(r *Run) { r.Outcomes[0].At = 11 * time.Second; r.Succeeded = map[string]bool{"r0": true} }},
		{ExtraCalls, func(r *Run) {
			for i := range 20 {
				at := ms(3000 + 10*i)
				r.Calls = append(r.Calls, Call{ID: "r0", Attempt: 2, At: at, End: at, Kind: Transient, Cause: "script"})
			}
			r.Calls[1].At, r.Calls[1].End = ms(4000), ms(4001) // the 200 last
			r.Outcomes[0].At = ms(4100)
		}},
		{Foreign, func(r *Run) { r.ForeignCalls = 1 }},
	} {
		t.Run(c.want, func(t *testing.T) {
			r := clean()
			c.breakIt(&r)
			vs := Check(r)
			if got := invariants(vs); !slices.Equal(got, []string{c.want}) {
				t.Fatalf("broke %v, want only %s:\n%s", got, c.want, Summary(vs, 3))
			}
		})
	}
}

// An exhausted dead letter is earned by max_attempts failed attempts; the
// 429s of an attempt do not fail it.
func TestCheckExhaustedNeedsFailedAttempts(t *testing.T) {
	r := clean()
	r.Calls = []Call{
		{ID: "r0", Attempt: 1, At: ms(0), End: ms(1), Kind: Transient},
		{ID: "r0", Attempt: 2, At: ms(1100), End: ms(1101), Kind: Transient},
		{ID: "r0", Attempt: 3, At: ms(3200), End: ms(3201), Kind: Throttle},
		{ID: "r1", Attempt: 1, At: ms(10), End: ms(15), Kind: OK},
	}
	r.Outcomes[0] = Outcome{ID: "r0", DeadLetter: true, Reason: "exhausted", At: ms(3300)}
	if got := invariants(Check(r)); !slices.Equal(got, []string{UnearnedDead}) {
		t.Fatalf("with the last attempt only throttled: %v, want %s", got, UnearnedDead)
	}
	r.Calls[2].Kind = Transient
	if vs := Check(r); len(vs) > 0 {
		t.Fatalf("three failed attempts: %s", Summary(vs, 3))
	}
}

// Where a rebalance may hand a record to another replica, a second
// handling is no violation, an outcome written twice neither
// (at-least-once), and a retry is measured from the first failure.
func TestCheckAllowsRepeatsAcrossRebalances(t *testing.T) {
	r := clean()
	r.Scenario.Replicas = 2
	r.Calls = append(r.Calls,
		Call{ID: "r0", Attempt: 1, At: ms(900), End: ms(905), Kind: Transient}, // redelivered
		Call{ID: "r1", Attempt: 1, At: ms(500), End: ms(505), Kind: OK})
	r.Outcomes = append(r.Outcomes, Outcome{ID: "r1", At: ms(600)})
	if vs := Check(r); len(vs) > 0 {
		t.Fatalf("repeats across a rebalance: %s", Summary(vs, 3))
	}
	r.Scenario.Delivery = "exactly-once"
	if got := invariants(Check(r)); !slices.Equal(got, []string{WrittenTwice}) {
		t.Fatalf("exactly-once with a second result: %v, want %s", got, WrittenTwice)
	}
}

func TestGenerateIsDeterministicAndCoversTheSpace(t *testing.T) {
	if a, b := Generate(42).String(), Generate(42).String(); a != b {
		t.Fatalf("seed 42 drew two scenarios:\n%s\n%s", a, b)
	}
	seen := map[string]bool{}
	for seed := range uint64(500) {
		s := Generate(seed)
		if s.Concurrency < 1 || s.Concurrency > 256 || s.Partitions < 1 || s.Partitions > 12 ||
			len(s.Tiers) < 1 || len(s.Tiers) > 3 || len(s.Requests) == 0 || len(s.Requests) > maxRequests+100 {
			t.Fatalf("seed %d out of range: %s", seed, s)
		}
		if s.Consume == "share" && s.Delivery == "exactly-once" {
			t.Fatalf("seed %d: share with exactly-once, which the processor refuses", seed)
		}
		seen["consume "+s.Consume] = true
		seen["delivery "+s.Delivery] = true
		seen["replicas "+string(rune('0'+s.Replicas))] = true
		seen["kill"] = seen["kill"] || len(s.Kills) > 0
		seen["outage"] = seen["outage"] || s.Outage.To > 0
		seen["limit"] = seen["limit"] || s.RateLimit > 0
		seen["concurrency 1"] = seen["concurrency 1"] || s.Concurrency == 1
		seen["concurrency > 200"] = seen["concurrency > 200"] || s.Concurrency > 200
		for _, b := range s.Bursts {
			if b.Profile == "bad" && b.To-b.From > s.Concurrency {
				seen["a bad burst larger than the concurrency"] = true
			}
			if b.To-b.From < s.Concurrency {
				seen["a burst smaller than the concurrency"] = true
			}
		}
		for _, q := range s.Requests {
			seen[strings.SplitN(q.Class, ":", 2)[0]] = true
			if strings.HasSuffix(q.Class, ":ra6") {
				seen["Retry-After longer than the tiers"] = true
			}
		}
	}
	for _, want := range []string{"consume group", "consume share", "delivery at-least-once", "delivery exactly-once",
		"replicas 1", "replicas 2", "replicas 3", "kill", "outage", "limit", "concurrency 1", "concurrency > 200",
		"a bad burst larger than the concurrency", "a burst smaller than the concurrency",
		"ok", "transient", "permanent", "always", "429x1", "429x2", "notready", "slow-once", "crash",
		"Retry-After longer than the tiers"} {
		if !seen[want] {
			t.Errorf("500 seeds never drew %s", want)
		}
	}
}

// Gaps are measured by the replicas' wall clock where a run stepped it: a
// retry 1.09 s after its failure by the service's clock is early when the
// wall clock stepped back 500 ms between, and on time when it stepped
// forward 500 ms; a step just after the answer, before the processor read
// its clock for it, is counted in the processor's favour.
func TestCheckTimingByTheSteppedWallClock(t *testing.T) {
	back := clean()
	back.ClockSteps = []ClockStep{{At: ms(500), By: ms(-500)}}
	if got := invariants(Check(back)); !slices.Equal(got, []string{EarlyRetry}) {
		t.Errorf("a retry 590 ms after its failure by the wall clock: got %v, want early-retry", got)
	}
	fwd := clean()
	fwd.Calls[1].At, fwd.Calls[1].End = ms(600), ms(610)
	fwd.ClockSteps = []ClockStep{{At: ms(500), By: ms(500)}}
	if vs := Check(fwd); len(vs) > 0 {
		t.Errorf("a retry 1.08 s after its failure by the wall clock broke %s", Summary(vs, 3))
	}
	late := clean()
	late.ClockSteps = []ClockStep{{At: ms(21), By: ms(-500)}}
	if vs := Check(late); len(vs) > 0 {
		t.Errorf("a step back 1 ms after the answer, before the processor's read: %s", Summary(vs, 3))
	}
}
