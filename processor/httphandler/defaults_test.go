package httphandler_test

import (
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/internal/promtest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// The line at the shipped defaults against services whose requests fail
// for their own reasons: the breaker judges the service, so a few bad
// requests never stop the others. Tiers are short so the runs are quick
// (the schedule is not flow control).

// shortTiers: three attempts 1s and 2s apart.
var shortTiers = retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3}

// share reports whether id falls in the given percent of ids, always the
// same ones.
func share(id string, percent uint32) bool {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()%100 < percent
}

// watchBreaker samples the pipeline's line every 50ms until the test ends
// and counts the times it saw the breaker open.
func watchBreaker(t *testing.T, pr *processor.Processor) *atomic.Int64 {
	var opened atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		was := false
		for {
			open := pr.Status().Pipelines[0].Line.Breaker == "open"
			if open && !was {
				opened.Add(1)
			}
			was = open
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return &opened
}

// TestDefaultsTenPercentAlwaysFail: the service answers 500 to 10% of the
// requests, always the same ones, and at once to the others. At the
// defaults every healthy request ends in results and every failing one in
// the DLQ as exhausted after its attempts; the breaker never opens (the
// retries' failures are their requests' own, not counted).
func TestDefaultsTenPercentAlwaysFail(t *testing.T) {
	t.Parallel()
	const n = 2000
	e := pipetest.New(t, "tenpct", 4, shortTiers)
	s := newScriptedSolver(t, func(id string, _ time.Time) (int, string) {
		if share(id, 10) {
			return http.StatusInternalServerError, `{"status":0,"request":"ERROR_INTERNAL"}`
		}
		return solved(id)
	})
	cfg := e.Config()
	reg := cfg.Registerer.(*prometheus.Registry)
	pr, _ := pipetest.RunProcessor(t, cfg, captchaHandler(t, s.URL, httphandler.Codes{}))
	opened := watchBreaker(t, pr)
	recs := requests(e.P.Topic, "ten", n)
	bad := 0
	for _, r := range recs {
		if id, _ := kafkatest.Header(r, "idempotency-key"); share(id, 10) {
			bad++
		}
	}
	<-producePaced(t, e, recs, 10*time.Second)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n
	}, 90*time.Second, time.Second)
	results, dead := idsOf(got[e.P.Results]), got[e.P.DLQ]
	t.Logf("%d requests, %d failing: %d results, %d dead letters, breaker opened %d times; breaker calls: %v counted failures, %v not counted (repeats)",
		n, bad, len(results), len(dead), opened.Load(),
		promtest.Sum(t, reg, "redrive_breaker_calls_total", map[string]string{"counted": "yes", "outcome": "failure"}),
		promtest.Sum(t, reg, "redrive_breaker_calls_total", map[string]string{"counted": "no", "outcome": "repeat"}))
	if len(results) != n-bad {
		t.Errorf("%d of %d healthy requests in results", len(results), n-bad)
	}
	if len(dead) != bad {
		t.Errorf("%d dead letters, want the %d failing requests", len(dead), bad)
	}
	for _, r := range dead {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		attempt, _ := kafkatest.Header(r, retry.HeaderAttempt)
		if !share(id, 10) || reason != "exhausted" || attempt != "3" {
			t.Errorf("dead letter %s: reason %s after %s attempts (failing request: %v), want exhausted after 3", id, reason, attempt, share(id, 10))
		}
	}
	if o := opened.Load(); o != 0 {
		t.Errorf("the breaker opened %d times on requests failing for their own reasons", o)
	}
	if v := promtest.Sum(t, reg, "redrive_breaker_calls_total", map[string]string{"counted": "no", "outcome": "repeat"}); v < float64(bad) {
		t.Errorf("%v retries not counted as repeats, want at least %d (each failing request's second and third call)", v, bad)
	}
}

// TestDefaultsFailTwiceThenHealthy: 60 requests fail twice, then 2,000
// succeed at once. The 60 fresh failures in a row open the breaker; its
// half-open probes are fresh requests, which succeed, so every one of the
// 2,000 is handled within open_for + 30s; the 60 end in results, and no
// retry was called before it was due.
//
// The 60 first calls are answered together, once all have arrived (the
// default concurrency, 64, holds them): on a loaded machine the 60 records
// come in several fetches, and a breaker opened by the first of them would
// otherwise find the rest, never called, at the head of the partitions
// when it probes (a scenario of its own: fresh probes that fail for their
// own reasons).
func TestDefaultsFailTwiceThenHealthy(t *testing.T) {
	t.Parallel()
	const bad, good = 60, 2000
	e := pipetest.New(t, "failtwice", 4, shortTiers)
	var calls sync.Map // id → number of calls answered
	var firstBad sync.WaitGroup
	firstBad.Add(bad)
	allIn := make(chan struct{})
	go func() { firstBad.Wait(); close(allIn) }()
	s := newScriptedSolver(t, func(id string, _ time.Time) (int, string) {
		v, _ := calls.LoadOrStore(id, new(atomic.Int32))
		k := v.(*atomic.Int32).Add(1)
		if id[:3] == "bad" && k == 1 {
			firstBad.Done()
			select {
			case <-allIn:
			case <-time.After(20 * time.Second):
				t.Errorf("the 60 first calls did not all arrive within 20s: the default concurrency should hold them")
			}
		}
		if id[:3] == "bad" && k <= 2 {
			return http.StatusServiceUnavailable, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`
		}
		return solved(id)
	})
	pr, _ := pipetest.RunProcessor(t, e.Config(), captchaHandler(t, s.URL, httphandler.Codes{}))
	opened := watchBreaker(t, pr)
	e.Produce(requests(e.P.Topic, "bad", bad)...)
	if !kafkatest.Eventually(30*time.Second, func() bool { return opened.Load() > 0 }) {
		t.Fatalf("60 fresh failures did not open the breaker: %+v", pr.Status().Pipelines[0].Line)
	}
	start := time.Now()
	e.Produce(requests(e.P.Topic, "good", good)...)
	limit := processor.DefaultBreakerOpenFor + 30*time.Second
	got := e.Collect([]string{e.P.Results}, func(got kafkatest.Got) bool {
		return len(idsOf(got[e.P.Results])) >= bad+good
	}, limit+30*time.Second, time.Second)
	results := idsOf(got[e.P.Results])
	var lastGood time.Duration
	for _, c := range s.log() {
		if c.id[:4] == "good" && c.status == http.StatusOK {
			lastGood = max(lastGood, c.at.Sub(start))
		}
	}
	t.Logf("%d results of %d; the last healthy request answered %v after it was produced (limit %v); breaker opened %d times",
		len(results), bad+good, lastGood.Round(time.Millisecond), limit, opened.Load())
	goodDone := 0
	for id := range results {
		if id[:4] == "good" {
			goodDone++
		}
	}
	if goodDone != good {
		t.Errorf("%d of %d healthy requests handled", goodDone, good)
	}
	if lastGood > limit {
		t.Errorf("the healthy requests took %v, want within open_for + 30s (%v)", lastGood, limit)
	}
	if len(results) != bad+good {
		t.Errorf("%d of %d requests in results", len(results), bad+good)
	}
	noEarlyRetry(t, s.log(), shortTiers)
}

// noEarlyRetry fails t for a request whose attempt n+1 was called less than
// the tier's delay after its attempt n failed. Calls of one attempt repeat
// when the line held the record (no attempt spent).
func noEarlyRetry(t *testing.T, calls []lineCall, sched retry.Schedule) {
	t.Helper()
	last := map[string]lineCall{} // the last failed call of each request
	early := 0
	for _, c := range calls {
		if p, ok := last[c.id]; ok && c.attempt > p.attempt {
			tier := sched.Tiers[min(p.attempt, len(sched.Tiers))-1]
			if c.at.Sub(p.at) < tier {
				early++
				if early <= 5 {
					t.Errorf("%s: attempt %d called %v after attempt %d failed, before its tier's %v", c.id, c.attempt, c.at.Sub(p.at), p.attempt, tier)
				}
			}
		}
		if c.status != http.StatusOK {
			last[c.id] = c
		}
	}
	if early > 5 {
		t.Errorf("%d retries early in all", early)
	}
}

// TestDefaultsRateLimited429: the service takes 50 calls/s and answers 429
// with Retry-After: 1 beyond. At the defaults the records wait in their
// workers and are called again with the same attempt: every request ends
// in results on its first attempt, nothing is dead-lettered, the breaker
// never opens.
func TestDefaultsRateLimited429(t *testing.T) {
	t.Parallel()
	const n = 600
	e := pipetest.New(t, "ratelimited", 4, shortTiers)
	lim := rate.NewLimiter(50, 5)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if !lim.Allow() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"status":0,"request":"ERROR_TOO_MUCH_REQUESTS"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":1,"request":"ok"}`))
	}))
	t.Cleanup(srv.Close)
	cfg := e.Config()
	reg := cfg.Registerer.(*prometheus.Registry)
	pr, _ := pipetest.RunProcessor(t, cfg, captchaHandler(t, srv.URL, httphandler.Codes{}))
	opened := watchBreaker(t, pr)
	<-producePaced(t, e, requests(e.P.Topic, "rl", n), 3*time.Second)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n
	}, 90*time.Second, time.Second)
	waits := promtest.Sum(t, reg, "redrive_throttle_waits_total", nil)
	t.Logf("%d results, %d dead letters, %d calls, %v throttle waits, breaker opened %d times",
		len(got[e.P.Results]), len(got[e.P.DLQ]), calls.Load(), waits, opened.Load())
	if r := idsOf(got[e.P.Results]); len(r) != n || len(got[e.P.DLQ]) != 0 {
		t.Errorf("%d of %d requests in results, %d dead letters; want all in results", len(r), n, len(got[e.P.DLQ]))
	}
	for _, r := range got[e.P.Results] {
		if a, _ := kafkatest.Header(r, retry.HeaderAttempt); a != "1" {
			t.Errorf("a result after attempt %s: a 429 spent an attempt", a)
			break
		}
	}
	if waits == 0 {
		t.Error("no throttle wait: the service never refused, the test proves nothing")
	}
	if o := opened.Load(); o != 0 {
		t.Errorf("the breaker opened %d times on 429s", o)
	}
}
