package processor_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/internal/promtest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// paceService is a service on 127.0.0.1 for the HTTP handler: answer says
// the status and Retry-After (seconds, 0: none) of a request's call-th
// call (from 1), keyed by its Idempotency-Key.
type paceService struct {
	answer func(id string, call int) (status, retryAfter int)

	mu      sync.Mutex
	calls   map[string]int
	total   int
	refused int // answered 429
}

func newPaceService(t *testing.T, answer func(id string, call int) (int, int)) (*paceService, string) {
	s := &paceService{answer: answer, calls: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *paceService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get(httphandler.HeaderIdempotencyKey)
	s.mu.Lock()
	s.calls[id]++
	call := s.calls[id]
	s.total++
	status, after := s.answer(id, call)
	if status == http.StatusTooManyRequests {
		s.refused++
	}
	s.mu.Unlock()
	if after > 0 {
		w.Header().Set(httphandler.HeaderRetryAfter, strconv.Itoa(after))
	}
	w.WriteHeader(status)
}

func (s *paceService) counts() (total, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.refused
}

// paceHandler is the HTTP handler for url, noting the lateness of each
// retry's first call: the call's time minus the retry's redrive-due.
type paceHandler struct {
	h processor.Handler

	mu   sync.Mutex
	seen map[string]bool
	late []time.Duration
}

func newPaceHandler(t *testing.T, url string) *paceHandler {
	t.Helper()
	h, err := httphandler.New(httphandler.Options{URL: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &paceHandler{h: h, seen: map[string]bool{}}
}

func (p *paceHandler) Handle(ctx context.Context, req *processor.Request) processor.Outcome {
	if req.Attempt > 1 && !req.Meta.Due.IsZero() {
		at := time.Now()
		k := req.ID + "/" + strconv.Itoa(req.Attempt)
		p.mu.Lock()
		if !p.seen[k] {
			p.seen[k] = true
			p.late = append(p.late, at.Sub(req.Meta.Due))
		}
		p.mu.Unlock()
	}
	return p.h.Handle(ctx, req)
}

// lateness is the retries' lateness, sorted.
func (p *paceHandler) lateness() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := slices.Clone(p.late)
	slices.Sort(l)
	return l
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func paceHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, id)
	return h.Sum64()
}

// paceRequests are n records with ids prefix-0000…, sent as Idempotency-Key.
func paceRequests(topic, prefix string, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(id), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}
	}
	return recs
}

// offer produces recs at perSecond in 100 ms batches and returns at once.
func offer(t *testing.T, e *pipetest.Env, recs []*kgo.Record, perSecond int) <-chan struct{} {
	done := make(chan struct{})
	per := max(1, perSecond/10)
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for lo := 0; lo < len(recs); lo += per {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := e.Client.ProduceSync(ctx, recs[lo:min(lo+per, len(recs))]...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
			}
			cancel()
			<-tick.C
		}
	}()
	return done
}

// attempts checks the results: every request once, none dead-lettered,
// and the attempt each ended on (want); it returns how many were checked.
func checkResults(t *testing.T, e *pipetest.Env, got kafkatest.Got, n int, want func(id string) int) {
	t.Helper()
	if d := got[e.P.DLQ]; len(d) > 0 {
		reason, _ := kafkatest.Header(d[0], retry.HeaderReason)
		t.Errorf("%d dead letters (the first: %s), want none", len(d), reason)
	}
	ids := map[string]bool{}
	wrong := 0
	for _, r := range got[e.P.Results] {
		id := string(r.Key)
		ids[id] = true
		a, _ := kafkatest.Header(r, retry.HeaderAttempt)
		if w := want(id); a != strconv.Itoa(w) {
			wrong++
			if wrong <= 3 {
				t.Errorf("%s: result after attempt %s, want %d (a 429 spends no attempt)", id, a, w)
			}
		}
	}
	if wrong > 3 {
		t.Errorf("%d results after the wrong attempt in all", wrong)
	}
	if len(ids) != n {
		t.Errorf("%d of %d requests have a result", len(ids), n)
	}
}

// TestThrottledAmongRetriesKeepsRetriesOnTime: 10 % of requests are
// answered 429 (Retry-After: 2) once and another 10 % fail transiently
// once, at concurrency 32. The 429s are waited out off the workers, so
// the retries are called on time: when a 429 held its worker for 2-3 s,
// the retries' lateness was above 1 s at p99; without the 429s it is
// about 50 ms. The bound, 500 ms, is far from both: it leaves a slow
// -race machine its margin and still fails when workers wait out 429s.
// No 429 spends an attempt, nothing is dead-lettered.
func TestThrottledAmongRetriesKeepsRetriesOnTime(t *testing.T) {
	t.Parallel()
	const n = 600
	class := func(id string) uint64 { return paceHash(id) % 10 } // 0: 429 once, 1: 503 once
	svc, url := newPaceService(t, func(id string, call int) (int, int) {
		switch {
		case call == 1 && class(id) == 0:
			return http.StatusTooManyRequests, 2
		case call == 1 && class(id) == 1:
			return http.StatusServiceUnavailable, 0
		}
		return http.StatusOK, 0
	})
	e := pipetest.New(t, "pace", 4, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3})
	e.P.Concurrency = 32
	h := newPaceHandler(t, url)
	cfg := e.Config()
	pr, _ := pipetest.RunProcessor(t, cfg, h)
	// At once: the 429s come together, more than the workers, and the
	// retries come due while they wait.
	e.Produce(paceRequests(e.P.Topic, "p", n)...)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n
	}, 90*time.Second, time.Second)
	checkResults(t, e, got, n, func(id string) int {
		if class(id) == 1 {
			return 2
		}
		return 1
	})
	late := h.lateness()
	calls, refused := svc.counts()
	waits := promtest.Sum(t, cfg.Registerer.(*prometheus.Registry), "redrive_throttle_waits_total", nil)
	t.Logf("%d retries: lateness p50 %v p99 %v max %v; %d calls, %d answered 429, %v throttle waits, learned rate %.1f/s",
		len(late), quantile(late, 0.5), quantile(late, 0.99), quantile(late, 1), calls, refused, waits, pr.Status().Pipelines[0].Line.LearnedRate)
	if len(late) < n/20 || refused < n/20 {
		t.Fatalf("%d retries, %d 429s: the test proves nothing", len(late), refused)
	}
	if p99 := quantile(late, 0.99); p99 > 500*time.Millisecond {
		t.Errorf("retry lateness p99 %v, want under 500ms: the 429s took workers from due retries", p99)
	}
}

// TestRateLimitedProviderIsPaced: a provider takes 100 calls/s (a token
// bucket) and answers 429 with Retry-After: 1 beyond; 4,000 requests are
// offered at 200/s, no rate_limit set. The pipeline learns the rate from
// the 429s: every request gets its result on its first attempt, nothing
// is dead-lettered, at most 10 % of the calls are refused (unpaced, a
// third were), and all is done within 1.2 × the provider's bound (40 s)
// + 10 s.
func TestRateLimitedProviderIsPaced(t *testing.T) {
	t.Parallel()
	const (
		n        = 4000
		capacity = 100
	)
	lim := rate.NewLimiter(capacity, capacity/10)
	svc, url := newPaceService(t, func(string, int) (int, int) {
		if !lim.Allow() {
			return http.StatusTooManyRequests, 1
		}
		return http.StatusOK, 0
	})
	e := pipetest.New(t, "ratelimited", 6, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3})
	h := newPaceHandler(t, url)
	cfg := e.Config()
	pr, _ := pipetest.RunProcessor(t, cfg, h)
	// Offered to a running processor: a backlog from before it consumed
	// would be another scenario (a burst at start). A request a partition
	// shows it consumes.
	warm := paceRequests(e.P.Topic, "warm", 6)
	for i, r := range warm {
		r.Partition = int32(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(ctx, warm...).FirstErr(); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	if got := e.CollectN(e.P.Results, len(warm), 60*time.Second, 0); len(got) < len(warm) {
		t.Fatalf("warm-up: %d of %d results", len(got), len(warm))
	}
	start := time.Now()
	offer(t, e, paceRequests(e.P.Topic, "r", n), 2*capacity)
	bound := time.Duration(1.2*float64(n/capacity))*time.Second + 10*time.Second
	var learned float64
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		if l := pr.Status().Pipelines[0].Line.LearnedRate; l > 0 {
			learned = l
		}
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n+len(warm)
	}, bound, 0)
	got[e.P.Results] = slices.DeleteFunc(got[e.P.Results], func(r *kgo.Record) bool { return strings.HasPrefix(string(r.Key), "warm-") })
	took := time.Since(start)
	calls, refused := svc.counts()
	t.Logf("%d results, %d dead letters in %v; %d calls, %d refused (%.1f %%); learned rate %.1f/s, metric %.1f",
		len(got[e.P.Results]), len(got[e.P.DLQ]), took.Round(100*time.Millisecond), calls, refused, 100*float64(refused)/float64(max(calls, 1)),
		learned, promtest.Sum(t, cfg.Registerer.(*prometheus.Registry), "redrive_learned_rate", nil))
	checkResults(t, e, got, n, func(string) int { return 1 })
	if took > bound {
		t.Errorf("done in %v, want within %v", took, bound)
	}
	if float64(refused) > 0.1*float64(calls) {
		t.Errorf("%d of %d calls refused, want at most 10 %%", refused, calls)
	}
	if learned == 0 {
		t.Error("no learned rate in the status")
	}
}

// TestSingleRequest429sDoNotSlowTheCalls: a provider with no rate limit
// answers a tenth of the requests 429 once (Retry-After 0, 1 or 2 s: the
// request's own throttle, whatever the call rate); 800 requests offered
// at 20/s. Those 429s do not follow the rate, so the learned rate must
// not hold the calls below the offer: all done within the offer's 40 s +
// the longest wait (2 s and half again) + 7 s. A rate low enough that a
// check of a decrease sees few 429s (a limit ratcheted down by them took
// the calls to a few a second).
func TestSingleRequest429sDoNotSlowTheCalls(t *testing.T) {
	t.Parallel()
	const (
		n         = 800
		perSecond = 20
	)
	svc, url := newPaceService(t, func(id string, call int) (int, int) {
		i, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
		if i%10 == 3 && call == 1 {
			return http.StatusTooManyRequests, i / 10 % 3
		}
		return http.StatusOK, 0
	})
	e := pipetest.New(t, "single429", 6, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3})
	pr, _ := pipetest.RunProcessor(t, e.Config(), newPaceHandler(t, url))
	warm := paceRequests(e.P.Topic, "warm", 6)
	for i, r := range warm {
		r.Partition = int32(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(ctx, warm...).FirstErr(); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	if got := e.CollectN(e.P.Results, len(warm), 60*time.Second, 0); len(got) < len(warm) {
		t.Fatalf("warm-up: %d of %d results", len(got), len(warm))
	}
	start := time.Now()
	offer(t, e, paceRequests(e.P.Topic, "r", n), perSecond)
	bound := time.Duration(n/perSecond)*time.Second + 3*time.Second + 7*time.Second
	var lowest float64
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool {
		if l := pr.Status().Pipelines[0].Line.LearnedRate; l > 0 && (lowest == 0 || l < lowest) {
			lowest = l
		}
		return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n+len(warm)
	}, bound, 0)
	got[e.P.Results] = slices.DeleteFunc(got[e.P.Results], func(r *kgo.Record) bool { return strings.HasPrefix(string(r.Key), "warm-") })
	took := time.Since(start)
	calls, refused := svc.counts()
	t.Logf("%d results, %d dead letters in %v; %d calls, %d refused; the lowest learned rate %.1f/s",
		len(got[e.P.Results]), len(got[e.P.DLQ]), took.Round(100*time.Millisecond), calls, refused, lowest)
	checkResults(t, e, got, n, func(string) int { return 1 })
	if took > bound {
		t.Errorf("done in %v, want within %v (the offer's time, the Retry-Afters and a few seconds)", took, bound)
	}
}

// throttleFirst answers every request's first call 429 with a Retry-After
// of wait (processor.Throttled), later calls success, noting who called.
type throttleFirst struct {
	wait time.Duration

	mu    sync.Mutex
	calls map[string][]string  // by request id: the processors that called
	first map[string]time.Time // by processor: its first call
}

func (h *throttleFirst) as(name string) processor.Handler {
	return processor.HandlerFunc(func(_ context.Context, req *processor.Request) processor.Outcome {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls[req.ID] = append(h.calls[req.ID], name)
		if _, ok := h.first[name]; !ok {
			h.first[name] = time.Now()
		}
		if len(h.calls[req.ID]) == 1 {
			return processor.Throttled("http_429", nil, h.wait)
		}
		return processor.Succeed(nil)
	})
}

func (h *throttleFirst) called() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// A record waiting out a 429 holds no worker and is in flight: a shutdown
// takes it out of its wait at once (it does not wait out the Retry-After
// nor the shutdown grace), leaves it uncommitted, and the next run calls
// it again with the same attempt.
func TestThrottledRecordAtShutdownIsRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []time.Duration{time.Second}, 1)
	h := &throttleFirst{wait: 5 * time.Second, calls: map[string][]string{}, first: map[string]time.Time{}}
	stop := e.Start(h.as("first"))
	e.Produce(paceRequests(e.P.Topic, "s", 5)...)
	if !kafkatest.Eventually(30*time.Second, func() bool { return h.called() == 5 }) {
		t.Fatalf("%d of 5 requests called", h.called())
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("shutdown took %v with records waiting out a 429: it waited for them", took)
	}
	e.Start(h.as("second"))
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(got[e.P.Results])+len(got[e.P.DLQ]) >= 5 }, 30*time.Second, time.Second)
	checkResults(t, e, got, 5, func(string) int { return 1 })
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, by := range h.calls {
		if !slices.Equal(by, []string{"first", "second"}) {
			t.Errorf("%s called by %v, want first (429) then second", id, by)
		}
	}
}

// Records waiting out a 429 on a partition revoked (a second processor
// joins) are taken out of their wait at once and redelivered: the new
// owner calls them before any Retry-After could be over (the revoke did
// not wait for them: it would have, up to 5 s, for records in flight),
// every request ends once, with the attempt it started with, and none is
// called by the processor that lost its partition once the other has
// called it.
func TestThrottledRecordOfRevokedPartitionIsRedelivered(t *testing.T) {
	t.Parallel()
	const n = 40
	e := newEnv(t, []time.Duration{time.Second}, 4)
	h := &throttleFirst{wait: 5 * time.Second, calls: map[string][]string{}, first: map[string]time.Time{}}
	e.Start(h.as("a"), func(c *processor.Config) { c.Instance = "a" })
	e.Produce(paceRequests(e.P.Topic, "v", n)...)
	if !kafkatest.Eventually(30*time.Second, func() bool { return h.called() == n }) {
		t.Fatalf("%d of %d requests called", h.called(), n)
	}
	e.Start(h.as("b"), func(c *processor.Config) { c.Instance = "b" })
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(got kafkatest.Got) bool { return len(got[e.P.Results])+len(got[e.P.DLQ]) >= n }, 60*time.Second, 2*time.Second)
	checkResults(t, e, got, n, func(string) int { return 1 })
	if r := len(got[e.P.Results]); r != n {
		t.Errorf("%d results for %d requests", r, n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	moved := 0
	for id, by := range h.calls {
		if i := slices.Index(by, "b"); i >= 0 {
			moved++
			if slices.Contains(by[i:], "a") {
				t.Errorf("%s called by %v: a called it after b", id, by)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no request moved to b: the test proves nothing")
	}
	after := h.first["b"].Sub(h.first["a"])
	t.Logf("%d of %d requests moved to b; b's first call %v after a's first", moved, n, after.Round(time.Millisecond))
	if after >= h.wait {
		t.Errorf("b called first %v after a throttled the requests, not before their Retry-After of %v: the revoke waited for them", after, h.wait)
	}
}
