package httphandler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// The tests of the line against a real broker and a scripted
// solver speaking a CAPTCHA API's JSON: {"status":1,"request":"<answer>"}
// on success, {"status":0,"request":"ERROR_..."} on failure.

// lineCall is one call the scripted solver received.
type lineCall struct {
	at      time.Time
	id      string
	attempt int
	status  int
}

// scriptedSolver answers each call with answer(id, now) and logs it.
type scriptedSolver struct {
	mu     sync.Mutex
	calls  []lineCall
	answer func(id string, now time.Time) (status int, body string)
	URL    string
}

func newScriptedSolver(t *testing.T, answer func(id string, now time.Time) (int, string)) *scriptedSolver {
	s := &scriptedSolver{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		id := r.Header.Get(httphandler.HeaderIdempotencyKey)
		attempt, _ := strconv.Atoi(r.Header.Get(httphandler.HeaderAttempt))
		s.mu.Lock()
		answer := s.answer
		s.mu.Unlock()
		status, body := answer(id, now)
		s.mu.Lock()
		s.calls = append(s.calls, lineCall{at: now, id: id, attempt: attempt, status: status})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/in.php"
	return s
}

func (s *scriptedSolver) setAnswer(a func(id string, now time.Time) (int, string)) {
	s.mu.Lock()
	s.answer = a
	s.mu.Unlock()
}

func (s *scriptedSolver) log() []lineCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func solved(id string) (int, string) {
	return http.StatusOK, `{"status":1,"request":"answer-` + id + `"}`
}

// captchaHandler is the HTTP handler in JSON mode for the scripted solver.
func captchaHandler(t *testing.T, url string, codes httphandler.Codes) *httphandler.Handler {
	t.Helper()
	h, err := httphandler.New(httphandler.Options{URL: url, Timeout: 10 * time.Second, Codes: codes,
		JSON: &httphandler.JSONRule{OKField: "status", OKValue: float64(1), CodeField: "request"}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// requests are n records with ids prefix-0000…, a key, a value and user headers.
func requests(topic, prefix string, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		recs[i] = &kgo.Record{Topic: topic, Key: []byte("k-" + id), Value: []byte(`{"captcha":"` + id + `"}`), Headers: []kgo.RecordHeader{
			{Key: "idempotency-key", Value: []byte(id)}, {Key: "trace-id", Value: []byte("t-" + id)}}}
	}
	return recs
}

// producePaced writes recs evenly over d (in 100 ms steps) and returns at once.
func producePaced(t *testing.T, e *pipetest.Env, recs []*kgo.Record, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	steps := int(d / (100 * time.Millisecond))
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range steps {
			lo, hi := i*len(recs)/steps, (i+1)*len(recs)/steps
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := e.Client.ProduceSync(ctx, recs[lo:hi]...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
			}
			cancel()
			<-tick.C
		}
	}()
	return done
}

func idsOf(recs []*kgo.Record) map[string]int {
	ids := map[string]int{}
	for _, r := range recs {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		ids[id]++
	}
	return ids
}

func flowEnv(t *testing.T, base string, parts int32) *pipetest.Env {
	e := pipetest.New(t, base, parts, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3})
	e.P.Concurrency = 16
	// Open periods of 3s, so a test waits seconds, not minutes; how the
	// breaker counts and probes is the shipped default.
	e.P.Breaker = processor.Breaker{OpenFor: 3 * time.Second, MaxOpen: 3 * time.Second}
	return e
}

// TestOutageBreaker: the solver answers 503 to every call for 20 s in the
// middle of 3,000 requests (tiers 1s, 2s; 3 attempts). With the breaker
// (short open times, and the shipped defaults): no dead letter, every
// request ends in results, few calls during the outage, calls resume soon
// after recovery. With the breaker disabled the same run dead-letters
// requests as exhausted: the test can fail.
func TestOutageBreaker(t *testing.T) {
	for _, mode := range []string{"breaker", "defaults", "disabled"} {
		on := mode != "disabled"
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const n, span, outFrom, outFor = 3000, 30 * time.Second, 5 * time.Second, 20 * time.Second
			e := flowEnv(t, "outage", 4)
			switch mode {
			case "defaults":
				e.P.Breaker = processor.Breaker{}
			case "disabled":
				e.P.Breaker = processor.Breaker{Disabled: true}
			}
			var begin time.Time
			down := func(now time.Time) bool {
				return now.After(begin.Add(outFrom)) && now.Before(begin.Add(outFrom+outFor))
			}
			s := newScriptedSolver(t, func(id string, now time.Time) (int, string) {
				if down(now) {
					return http.StatusServiceUnavailable, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`
				}
				return solved(id)
			})
			pr, _ := pipetest.RunProcessor(t, e.Config(), captchaHandler(t, s.URL, httphandler.Codes{}))
			begin = time.Now()
			produced := producePaced(t, e, requests(e.P.Topic, "o", n), span)
			var sawOpen atomic.Bool
			watchDone := make(chan struct{})
			stopWatch := make(chan struct{})
			go func() {
				defer close(watchDone)
				for {
					if l := pr.Status().Pipelines[0].Line; l.Breaker == "open" && l.State == "stopped" {
						sawOpen.Store(true)
					}
					select {
					case <-stopWatch:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
			got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
				return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n
			}, 120*time.Second, 2*time.Second)
			<-produced
			close(stopWatch)
			<-watchDone
			results, dead := idsOf(got[e.P.Results]), got[e.P.DLQ]
			calls := s.log()
			recovered := begin.Add(outFrom + outFor)
			var during, firstAfter int
			var resumedAt time.Time
			for _, c := range calls {
				switch {
				case down(c.at):
					during++
				case c.at.After(recovered) && c.status == http.StatusOK && resumedAt.IsZero():
					resumedAt = c.at
					firstAfter++
				}
			}
			t.Logf("breaker %v: %d results (%d ids), %d dead letters, %d solver calls, %d during the 20s outage, first success %v after recovery",
				on, len(got[e.P.Results]), len(results), len(dead), len(calls), during, resumedAt.Sub(recovered).Round(time.Millisecond))
			if !on {
				if len(dead) == 0 {
					t.Fatal("without the breaker, a 20s outage with 3 attempts over 3s dead-lettered nothing: the scenario does not test the breaker")
				}
				for _, r := range dead {
					if v, _ := kafkatest.Header(r, retry.HeaderReason); v != "exhausted" {
						t.Fatalf("dead letter reason %q, want exhausted", v)
					}
				}
				return
			}
			if !sawOpen.Load() {
				t.Error("the breaker never showed open in the status")
			}
			if len(dead) != 0 {
				v, _ := kafkatest.Header(dead[0], retry.HeaderError)
				t.Errorf("%d dead letters with the breaker on; first: %s", len(dead), v)
			}
			if len(results) != n {
				t.Errorf("%d of %d requests in results", len(results), n)
			}
			for id, c := range results {
				if c != 1 {
					t.Errorf("%s: %d results", id, c)
				}
			}
			// Before it opens: at most `consecutive` failures answered and
			// `concurrency` calls in flight; while open: two rounds of
			// `probes` per open period (fresh requests, then those that
			// failed before).
			b := e.P.Breaker.WithDefaults()
			periods := int(outFor/b.OpenFor + 1)
			bound := b.Consecutive + e.P.Concurrency + 2*b.Probes*periods
			if during > bound {
				t.Errorf("%d solver calls during the outage, want at most consecutive %d + concurrency %d + 2 × probes %d × %d open periods = %d",
					during, b.Consecutive, e.P.Concurrency, b.Probes, periods, bound)
			}
			// It half-opens at most max_open after it last opened, at
			// most open_for after recovery while the open time had not
			// doubled to more than that.
			if limit := min(b.MaxOpen, 2*b.OpenFor) + time.Second; resumedAt.IsZero() || resumedAt.Sub(recovered) > limit {
				t.Errorf("calls resumed %v after recovery, want within %v", resumedAt.Sub(recovered), limit)
			}
		})
	}
}

// TestFailoverWhileOpen: with failover_to, main-topic records polled while
// the breaker is open go to the other pipeline's topic unchanged
// (redrive-failovers 1); none is lost and none both forwarded and handled.
func TestFailoverWhileOpen(t *testing.T) {
	const n = 600
	e := flowEnv(t, "failover", 2)
	other := e.P.Topic + ".b"
	e.CreateTopics(2, other)
	e.P.Breaker.FailoverTo = other
	e.P.Breaker.OpenFor, e.P.Breaker.MaxOpen = 2*time.Second, 2*time.Second
	var begin time.Time
	down := func(now time.Time) bool {
		return now.After(begin.Add(2*time.Second)) && now.Before(begin.Add(9*time.Second))
	}
	s := newScriptedSolver(t, func(id string, now time.Time) (int, string) {
		if down(now) {
			return http.StatusBadGateway, `{"status":0,"request":"ERROR_BAD_GATEWAY"}`
		}
		return solved(id)
	})
	pipetest.RunProcessor(t, e.Config(), captchaHandler(t, s.URL, httphandler.Codes{}))
	recs := requests(e.P.Topic, "f", n)
	want := map[string]*kgo.Record{}
	for _, r := range recs {
		want[string(r.Headers[0].Value)] = r
	}
	begin = time.Now()
	produced := producePaced(t, e, recs, 12*time.Second)
	got := e.Collect([]string{e.P.Results, e.P.DLQ, other}, func(got kafkatest.Got) bool {
		return len(got[e.P.Results])+len(got[other]) >= n
	}, 90*time.Second, 2*time.Second)
	<-produced
	results, forwarded := idsOf(got[e.P.Results]), idsOf(got[other])
	t.Logf("%d handled, %d forwarded, %d dead letters", len(results), len(forwarded), len(got[e.P.DLQ]))
	if len(forwarded) == 0 {
		t.Fatal("nothing was forwarded during a 7s outage")
	}
	if len(got[e.P.DLQ]) != 0 {
		t.Errorf("%d dead letters", len(got[e.P.DLQ]))
	}
	for id := range want {
		switch {
		case results[id] > 0 && forwarded[id] > 0:
			t.Errorf("%s: both handled and forwarded", id)
		case results[id]+forwarded[id] == 0:
			t.Errorf("%s: lost (neither handled nor forwarded)", id)
		case results[id]+forwarded[id] > 1:
			t.Errorf("%s: %d results, %d forwards", id, results[id], forwarded[id])
		}
	}
	for _, r := range got[other] {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		w := want[id]
		if w == nil {
			t.Errorf("forwarded record with unknown id %q", id)
			continue
		}
		if string(r.Key) != string(w.Key) || string(r.Value) != string(w.Value) {
			t.Errorf("%s: forwarded key/value %q/%q, want %q/%q", id, r.Key, r.Value, w.Key, w.Value)
		}
		for _, h := range w.Headers {
			if v, ok := kafkatest.Header(r, h.Key); !ok || v != string(h.Value) {
				t.Errorf("%s: forwarded header %s = %q, want %q", id, h.Key, v, h.Value)
			}
		}
		if v, _ := kafkatest.Header(r, retry.HeaderFailovers); v != "1" {
			t.Errorf("%s: redrive-failovers %q, want 1", id, v)
		}
		if v, _ := kafkatest.Header(r, retry.HeaderOriginTopic); v != e.P.Topic {
			t.Errorf("%s: redrive-origin-topic %q, want %s", id, v, e.P.Topic)
		}
	}
}

// TestRateLimit50: at rate_limit 50/s no one-second window of the solver's
// log holds more than 55 calls, and nothing is dead-lettered.
func TestRateLimit50(t *testing.T) {
	const n = 300
	e := flowEnv(t, "ratelimit", 4)
	e.P.RateLimit = 50
	s := newScriptedSolver(t, func(id string, _ time.Time) (int, string) { return solved(id) })
	pipetest.RunProcessor(t, e.Config(), captchaHandler(t, s.URL, httphandler.Codes{}))
	e.Produce(requests(e.P.Topic, "r", n)...)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(got[e.P.Results]) >= n }, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) != 0 || len(idsOf(got[e.P.Results])) != n {
		t.Fatalf("%d results, %d dead letters; want %d, 0", len(got[e.P.Results]), len(got[e.P.DLQ]), n)
	}
	calls := s.log()
	worst := 0
	for i, c := range calls {
		j := i
		for j < len(calls) && calls[j].at.Sub(c.at) < time.Second {
			j++
		}
		worst = max(worst, j-i)
	}
	span := calls[len(calls)-1].at.Sub(calls[0].at)
	t.Logf("%d calls over %v (%.1f/s); busiest 1s window: %d calls", len(calls), span.Round(time.Millisecond), float64(len(calls)-1)/span.Seconds(), worst)
	if worst > 55 {
		t.Errorf("a 1s window held %d calls at rate_limit 50/s, want at most 55", worst)
	}
	if worst < 40 {
		t.Errorf("the busiest 1s window held only %d calls at rate_limit 50/s: the limit is not 50/s", worst)
	}
}

// TestPauseCodeZeroBalance: after one ERROR_ZERO_BALANCE (pause 2s) no call
// starts for the pause (±200 ms), then the request succeeds with its
// attempt count unchanged.
func TestPauseCodeZeroBalance(t *testing.T) {
	const n, pause = 40, 2 * time.Second
	e := flowEnv(t, "pausecode", 2)
	var mu sync.Mutex
	var pausedAt time.Time
	s := newScriptedSolver(t, func(id string, now time.Time) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(id, "-0010") && pausedAt.IsZero() {
			pausedAt = now
			return http.StatusOK, `{"status":0,"request":"ERROR_ZERO_BALANCE"}`
		}
		return solved(id)
	})
	e.P.Concurrency = 1 // calls one after another, so the pause is the only gap
	pipetest.RunProcessor(t, e.Config(), captchaHandler(t, s.URL, httphandler.Codes{Pause: map[string]time.Duration{"ERROR_ZERO_BALANCE": pause}}))
	e.Produce(requests(e.P.Topic, "z", n)...)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(got[e.P.Results]) >= n }, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) != 0 || len(idsOf(got[e.P.Results])) != n {
		t.Fatalf("%d results, %d dead letters; want %d, 0", len(got[e.P.Results]), len(got[e.P.DLQ]), n)
	}
	mu.Lock()
	at := pausedAt
	mu.Unlock()
	if at.IsZero() {
		t.Fatal("the solver never answered ERROR_ZERO_BALANCE")
	}
	var next time.Time
	var zcalls []lineCall
	for _, c := range s.log() {
		if c.at.After(at) && next.IsZero() {
			next = c.at
		}
		if strings.HasSuffix(c.id, "-0010") {
			zcalls = append(zcalls, c)
		}
	}
	gap := next.Sub(at)
	t.Logf("pause answered at %s; next call %v later", at.Format("15:04:05.000"), gap.Round(time.Millisecond))
	if gap < pause-200*time.Millisecond || gap > pause+500*time.Millisecond {
		t.Errorf("next call %v after the pause code, want %v (-200ms, +500ms)", gap, pause)
	}
	if len(zcalls) != 2 || zcalls[0].attempt != 1 || zcalls[1].attempt != 1 {
		t.Errorf("calls of the paused request: %+v, want two, both attempt 1", zcalls)
	}
	for _, r := range got[e.P.Results] {
		if id, _ := kafkatest.Header(r, retry.HeaderID); strings.HasSuffix(id, "-0010") {
			if v, _ := kafkatest.Header(r, retry.HeaderAttempt); v != "1" {
				t.Errorf("result of the paused request: redrive-attempt %q, want 1", v)
			}
		}
	}
}

// TestGuardWrongKey: a solver answering 400 ERROR_WRONG_USER_KEY to
// everything costs at most min_calls (the default 50) + concurrency dead
// letters; the line
// is stopped; resume (POST with the token) restarts it and the rest is
// handled once the key is fixed.
func TestGuardWrongKey(t *testing.T) {
	const n, token = 500, "test-token"
	e := flowEnv(t, "guard", 2)
	e.P.Concurrency = 8
	s := newScriptedSolver(t, func(string, time.Time) (int, string) {
		return http.StatusBadRequest, `{"status":0,"request":"ERROR_WRONG_USER_KEY"}`
	})
	pr, _ := pipetest.RunProcessor(t, e.Config(), captchaHandler(t, s.URL, httphandler.Codes{}))
	api := httptest.NewServer(pr.PipelinesHandler(token))
	t.Cleanup(api.Close)
	e.Produce(requests(e.P.Topic, "g", n)...)
	if !kafkatest.Eventually(30*time.Second, func() bool { return pr.Status().Pipelines[0].Line.State == "stopped" }) {
		t.Fatal("the line never stopped")
	}
	time.Sleep(2 * time.Second) // let in-flight work finish and anything more come out
	line := pr.Status().Pipelines[0].Line
	dead := e.CollectN(e.P.DLQ, 1, 10*time.Second, 2*time.Second)
	callsStopped := len(s.log())
	t.Logf("stopped: %+v; %d dead letters, %d calls", line, len(dead), callsStopped)
	if len(line.Reasons) != 1 || line.Reasons[0].Reason != "guard" || !strings.Contains(line.Reasons[0].Detail, "ERROR_WRONG_USER_KEY") {
		t.Errorf("line %+v, want stopped by the guard naming the code", line)
	}
	if max := processor.DefaultGuardMinCalls + e.P.Concurrency; len(dead) > max {
		t.Errorf("%d dead letters, want at most min_calls + concurrency = %d", len(dead), max)
	}
	time.Sleep(time.Second)
	if c := len(s.log()); c != callsStopped {
		t.Errorf("%d calls while stopped by the guard", c-callsStopped)
	}
	// Resume: without the token refused; with it, the line runs.
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/api/pipelines/"+e.P.Name+"/resume", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post("wrong"); c != http.StatusUnauthorized {
		t.Errorf("resume with a wrong token: %d, want 401", c)
	}
	if pr.Status().Pipelines[0].Line.State != "stopped" {
		t.Error("a refused resume restarted the line")
	}
	s.setAnswer(func(id string, _ time.Time) (int, string) { return solved(id) }) // the key is fixed
	if c := post(token); c != http.StatusOK {
		t.Fatalf("resume: %d", c)
	}
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n
	}, 60*time.Second, time.Second)
	if r, d := len(idsOf(got[e.P.Results])), len(got[e.P.DLQ]); r+d != n || d != len(dead) {
		t.Errorf("after resume: %d results + %d dead letters, want %d with no new dead letter (%d before)", r, d, n, len(dead))
	}
}

// TestBreakerRebalanceAndShutdownWhileOpen: two processors share the group;
// the breaker opens in both, a third joins (rebalance) and the first stops
// (shutdown while open); after the solver recovers nothing is lost and
// nothing stays paused: records produced afterwards are handled, from the
// main topic and the tiers.
func TestBreakerRebalanceAndShutdownWhileOpen(t *testing.T) {
	const n = 400
	e := flowEnv(t, "openrebalance", 4)
	e.P.Breaker.OpenFor, e.P.Breaker.MaxOpen = time.Second, 2*time.Second
	var downMu sync.Mutex
	isDown := true
	// Down from the start; after recovery every request's first call
	// fails once (transient), so the tiers are used too.
	firstSeen := map[string]bool{}
	s := newScriptedSolver(t, func(id string, _ time.Time) (int, string) {
		downMu.Lock()
		defer downMu.Unlock()
		if isDown {
			return http.StatusServiceUnavailable, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`
		}
		if strings.HasPrefix(id, "late") && !firstSeen[id] {
			firstSeen[id] = true
			return http.StatusServiceUnavailable, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`
		}
		return solved(id)
	})
	h := captchaHandler(t, s.URL, httphandler.Codes{})
	cfg := func(inst string) processor.Config { c := e.Config(); c.Instance = inst; return c }
	pr1, stop1 := pipetest.RunProcessor(t, cfg("one"), h)
	pr2, _ := pipetest.RunProcessor(t, cfg("two"), h)
	e.Produce(requests(e.P.Topic, "early", n)...)
	open := func(pr *processor.Processor) bool { return pr.Status().Pipelines[0].Line.Breaker == "open" }
	if !kafkatest.Eventually(30*time.Second, func() bool { return open(pr1) || open(pr2) }) {
		t.Fatal("no breaker opened")
	}
	pr3, _ := pipetest.RunProcessor(t, cfg("three"), h) // rebalance while open
	time.Sleep(3 * time.Second)
	if err := stop1(); err != nil { // shutdown while open
		t.Errorf("stop while open: %v", err)
	}
	downMu.Lock()
	isDown = false
	downMu.Unlock()
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(idsOf(got[e.P.Results])) >= n }, 90*time.Second, 0)
	if r := idsOf(got[e.P.Results]); len(r) != n || len(got[e.P.DLQ]) != 0 {
		t.Fatalf("after recovery: %d of %d requests in results, %d dead letters", len(r), n, len(got[e.P.DLQ]))
	}
	// Nothing stays paused: new requests, each failing once, go through
	// the main topic and the 1s tier.
	e.Produce(requests(e.P.Topic, "late", 100)...)
	got = e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(idsOf(got[e.P.Results])) >= n+100 }, 60*time.Second, time.Second)
	if r := idsOf(got[e.P.Results]); len(r) != n+100 || len(got[e.P.DLQ]) != 0 {
		t.Fatalf("after the breaker closed: %d of %d requests in results, %d dead letters", len(r), n+100, len(got[e.P.DLQ]))
	}
	// The late requests' first failures may open a breaker again (10 in a
	// row); it closes on the next successful calls. Requests that succeed
	// at once, on every partition, give each processor those calls.
	e.Produce(requests(e.P.Topic, "final", 40)...)
	closed := func(pr *processor.Processor) bool {
		l := pr.Status().Pipelines[0].Line
		return l.State == "running" && l.Breaker == "closed"
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { return closed(pr2) && closed(pr3) }) {
		for _, pr := range []*processor.Processor{pr2, pr3} {
			t.Errorf("%s: line %+v after recovery, want running and closed", pr.Status().Instance, pr.Status().Pipelines[0].Line)
		}
	}
}
