package processor_test

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// BenchmarkFlow runs the real processor with the HTTP handler against a
// local service (httptest, 127.0.0.1) scripted to fail in one way per
// scenario (flowScenarios), each twice: line=off (breaker and guard
// disabled) and line=defaults (the zero Breaker and Guard: what a user
// gets). It shows what flow control does for each kind of failure, and
// what it costs where it should do nothing.
//
// Every run: tiers 1s, 2s, 5s, max_attempts 4, jitter 10 % (the tiers are
// short so that a run is quick; they are not flow control), 6 partitions,
// handler concurrency 64 (the default). Requests carry an idempotency-key
// header (the request id, "r<i>"), which the HTTP handler sends as
// Idempotency-Key; the service keys its script on it and on how many calls
// of that id it has had. Paced scenarios offer their requests in batches
// every 100 ms; times in a scenario ("from 10 s to 30 s") are offsets from
// the first batch and scale with the offered duration, so that
// -bench.flowscale, which multiplies the offered counts for a quick trial,
// keeps each scenario's shape. Before the clock starts, one warm-up
// request per partition (answered 200, not counted) makes sure the
// processor consumes; the service has thus answered once already, as a
// service that was running has.
//
// Terminal outcomes are the result and dead-letter records the processor's
// client has had acknowledged (a kgo hook). Metrics:
//
//	offered, offered-records/s (0: produced at once), lead (if any)
//	results, dead-letters, dead-letters-exhausted, dead-letters-permanent
//	lost          offered − requests with a terminal outcome, once every
//	              request has one or the run stalled with the group's lag 0
//	held          instead of lost when the guard stopped the line: records
//	              without a terminal outcome when nothing moved for 5 s
//	unfinished    instead of lost when the cap (offered duration + 120 s)
//	              was hit with records still in flight
//	calls         HTTP requests the service got
//	refused       of them, answered 429 (when any)
//	learned-calls/s the rate the processor learned from the 429s, as
//	              the last status sample showed it (when any)
//	finish-s      first batch → the last terminal outcome acknowledged
//	              (only when every request has one)
//	healthy-s     until every request the script lets succeed at some
//	              point is in results (ten-percent: all but the 10 %;
//	              mix-40: all but the 400s; fail-twice-then-healthy and
//	              burst-then-healthy: the healthy ones, timed from their
//	              batch)
//	breaker-opens transitions into open seen by a 100 ms status sampler
//	              (a new open-since counts a reopening between samples)
//	guard-stopped 1 if a sample showed the line stopped by the guard
//	early-retries calls with Redrive-Attempt n+1 that reached the service
//	              less than tier n's delay after attempt n's failing call
//	              returned to the processor (must be 0)
//	duplicates    terminal outcome records beyond one per request (if any)
//	cpu-s/M       process CPU (processor, clients, the service) per
//	              million offered, over the run; peak-rss-MB as elsewhere
func BenchmarkFlow(b *testing.B) {
	for _, sc := range flowScenarios {
		b.Run(sc.name, func(b *testing.B) {
			for _, defaults := range []bool{false, true} {
				name := "line=off"
				if defaults {
					name = "line=defaults"
				}
				b.Run(name, func(b *testing.B) { runFlow(b, sc, defaults) })
			}
		})
	}
}

var benchFlowScale = flag.Float64("bench.flowscale", 1, "multiplies BenchmarkFlow's offered counts (event times scale with the offered duration) for a quick trial")

// flowTiers are BenchmarkFlow's tiers: short so that runs are quick.
var flowTiers = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}

// flowScenario is one way the service fails.
type flowScenario struct {
	name  string
	about string // what the service does, for the flags' help
	// n requests offered at rate per second in 100 ms batches (0: at
	// once); -bench.flow.<name>.n and .rate.
	n, rate int
	// lead requests are produced at once 1 s before the n
	// (-bench.flow.<name>.lead); the scenario's script tells them apart
	// by index (i < lead). Not scaled: they are the scenario itself.
	lead    int
	timeout time.Duration // the HTTP handler's
	// service returns the script of one run: the answer to a call
	// arriving at `at` for request i (id), its call-th call. d is the
	// offered duration (the n's batches), for times that scale with it.
	service func(d time.Duration, lead int) func(at time.Duration, i int, id string, call int) flowReply
	// healthy selects the requests healthy-s waits for; nil: none.
	healthy func(i, lead int, id string) bool
}

// flowReply is one answer of the scripted service.
type flowReply struct {
	status     int
	code       string        // Redrive-Error-Code; "": none (the handler's own http_<status>)
	retryAfter int           // Retry-After seconds; 0: none
	delay      time.Duration // answer this late (unless the caller hangs up first)
}

var flowOK = flowReply{status: http.StatusOK}

// flowService503 is an outage's answer (2captcha's "no slot available").
var flowService503 = flowReply{status: http.StatusServiceUnavailable, code: "ERROR_NO_SLOT_AVAILABLE"}

// flowHash is a request id's fixed random number: the same requests fail
// in every run.
func flowHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, id)
	return h.Sum64()
}

// flowMix is mix-40's answer class of a request: 0 503, 1 500, 2 429, 3
// 400, 4–9 fine; again: a transient one fails its second call too.
func flowMix(id string) (class int, again bool) {
	h := flowHash(id)
	return int(h % 100 / 10), (h/100)%4 == 0
}

// flowFailTwice answers the lead requests' first two calls 503, the rest 200.
func flowFailTwice(_ time.Duration, lead int) func(time.Duration, int, string, int) flowReply {
	return func(_ time.Duration, i int, _ string, call int) flowReply {
		if i < lead && call <= 2 {
			return flowReply{status: http.StatusServiceUnavailable}
		}
		return flowOK
	}
}

// flowAfterLead selects the requests after the lead (the healthy ones).
func flowAfterLead(i, lead int, _ string) bool { return i >= lead }

// flowRateLimit is the rate-limit-429 service's capacity: calls per second,
// and a tenth of a second's worth at once.
const flowRateLimit = 100

var flowScenarios = []*flowScenario{
	{
		name: "outage", about: "every call from a quarter to three quarters of the offered time (10 s to 30 s) is answered 503 ERROR_NO_SLOT_AVAILABLE",
		n: 4000, rate: 100, timeout: 10 * time.Second,
		service: func(d time.Duration, _ int) func(time.Duration, int, string, int) flowReply {
			return func(at time.Duration, _ int, _ string, _ int) flowReply {
				if at >= d/4 && at < d*3/4 {
					return flowService503
				}
				return flowOK
			}
		},
	},
	{
		name: "ten-percent", about: "10 % of the requests (by a hash of the id) always get 500, the rest 200",
		n: 4000, rate: 200, timeout: 10 * time.Second,
		service: func(time.Duration, int) func(time.Duration, int, string, int) flowReply {
			return func(_ time.Duration, _ int, id string, _ int) flowReply {
				if flowHash(id)%10 == 0 {
					return flowReply{status: http.StatusInternalServerError}
				}
				return flowOK
			}
		},
		healthy: func(_, _ int, id string) bool { return flowHash(id)%10 != 0 },
	},
	{
		name: "fail-once", about: "each request's first call gets 503, later calls 200",
		n: 4000, rate: 200, timeout: 10 * time.Second,
		service: func(time.Duration, int) func(time.Duration, int, string, int) flowReply {
			return func(_ time.Duration, _ int, _ string, call int) flowReply {
				if call == 1 {
					return flowReply{status: http.StatusServiceUnavailable}
				}
				return flowOK
			}
		},
	},
	{
		name: "fail-twice-then-healthy", about: "the lead requests' first two calls get 503; 1 s later the n healthy requests are produced at once",
		n: 2000, lead: 60, timeout: 10 * time.Second,
		service: flowFailTwice, healthy: flowAfterLead,
	},
	{
		// More bad requests than the concurrency (64): part of the burst
		// is fetched and not yet called when it opens the breaker.
		name: "burst-then-healthy", about: "as fail-twice-then-healthy with more lead requests than the concurrency",
		n: 2000, lead: 200, timeout: 10 * time.Second,
		service: flowFailTwice, healthy: flowAfterLead,
	},
	{
		name: "mix-40", about: "by id hash 10 % each get 503, 500, 429 (Retry-After: 1) and 400 ERROR_BAD_PARAMETERS on the first call; a transient failure fails the second call again one time in four; a 400 stays a 400; otherwise 200",
		n: 3000, rate: 200, timeout: 10 * time.Second,
		service: func(time.Duration, int) func(time.Duration, int, string, int) flowReply {
			return func(_ time.Duration, _ int, id string, call int) flowReply {
				class, again := flowMix(id)
				if class == 3 {
					return flowReply{status: http.StatusBadRequest, code: "ERROR_BAD_PARAMETERS"}
				}
				if class > 3 || call > 2 || (call == 2 && !again) {
					return flowOK
				}
				return []flowReply{
					{status: http.StatusServiceUnavailable},
					{status: http.StatusInternalServerError},
					{status: http.StatusTooManyRequests, retryAfter: 1},
				}[class]
			}
		},
		healthy: func(_, _ int, id string) bool { class, _ := flowMix(id); return class != 3 },
	},
	{
		name: "slowdown", about: "from a quarter to three quarters of the offered time (5 s to 15 s) every call takes 3 s, longer than the handler's 2 s timeout",
		n: 4000, rate: 200, timeout: 2 * time.Second,
		service: func(d time.Duration, _ int) func(time.Duration, int, string, int) flowReply {
			return func(at time.Duration, _ int, _ string, _ int) flowReply {
				if at >= d/4 && at < d*3/4 {
					return flowReply{status: http.StatusOK, delay: 3 * time.Second}
				}
				return flowOK
			}
		},
	},
	{
		name: "rate-limit-429", about: fmt.Sprintf("the service takes at most %d calls/s (a token bucket, burst %d) and answers 429 with Retry-After: 1 beyond", flowRateLimit, flowRateLimit/10),
		n: 4000, rate: 200, timeout: 10 * time.Second,
		service: func(time.Duration, int) func(time.Duration, int, string, int) flowReply {
			lim := rate.NewLimiter(flowRateLimit, flowRateLimit/10)
			return func(time.Duration, int, string, int) flowReply {
				if !lim.Allow() {
					return flowReply{status: http.StatusTooManyRequests, retryAfter: 1}
				}
				return flowOK
			}
		},
	},
	{
		name: "rotated-key", about: "from half the offered time on (10 s) every call gets 401 ERROR_WRONG_USER_KEY (permanent)",
		n: 4000, rate: 200, timeout: 10 * time.Second,
		service: func(d time.Duration, _ int) func(time.Duration, int, string, int) flowReply {
			return func(at time.Duration, _ int, _ string, _ int) flowReply {
				if at >= d/2 {
					return flowReply{status: http.StatusUnauthorized, code: "ERROR_WRONG_USER_KEY"}
				}
				return flowOK
			}
		},
	},
}

func init() {
	for _, sc := range flowScenarios {
		p := "bench.flow." + sc.name + "."
		flag.IntVar(&sc.n, p+"n", sc.n, "requests offered by BenchmarkFlow/"+sc.name+": "+sc.about)
		if sc.rate > 0 {
			flag.IntVar(&sc.rate, p+"rate", sc.rate, "requests/s offered by BenchmarkFlow/"+sc.name)
		}
		if sc.lead > 0 {
			flag.IntVar(&sc.lead, p+"lead", sc.lead, "failing requests produced 1 s ahead by BenchmarkFlow/"+sc.name)
		}
	}
}

// flowBatch is requests from..to-1, produced at `at`.
type flowBatch struct {
	at       time.Duration
	from, to int
}

// plan is the scenario's batches for n requests after the lead, when the
// n's batches start (main) and how long they are offered (d).
func (sc *flowScenario) plan(n int) (bs []flowBatch, main, d time.Duration) {
	const tick = 100 * time.Millisecond
	if sc.lead > 0 {
		bs = append(bs, flowBatch{0, 0, sc.lead})
		main = time.Second
	}
	if sc.rate <= 0 {
		return append(bs, flowBatch{main, sc.lead, sc.lead + n}), main, 0
	}
	per := max(1, sc.rate/10)
	k := 0
	for from := sc.lead; from < sc.lead+n; from += per {
		bs = append(bs, flowBatch{main + time.Duration(k)*tick, from, min(from+per, sc.lead+n)})
		k++
	}
	return bs, main, time.Duration(k) * tick
}

// flowCall is a call of one request: its attempt and when (since the
// first batch).
type flowCall struct {
	attempt int
	at      time.Duration
}

// flowRun is one run of BenchmarkFlow: the scripted service (ServeHTTP),
// the handler wrapper noting when failing calls returned, the kgo hook
// that sees terminal outcomes acknowledged, and the line sampler.
type flowRun struct {
	results, dlq string
	total        int
	script       func(at time.Duration, i int, id string, call int) flowReply
	start        atomic.Int64 // unix ns of the first batch; 0: not yet
	warm         atomic.Int64 // warm-up results acknowledged

	mu           sync.Mutex
	calls        int
	refused      int          // calls answered 429
	learned      float64      // the learned rate last sampled (LineStatus.LearnedRate)
	foreignCalls int          // calls without one of our ids
	arrivals     [][]flowCall // per request: calls as the service saw them
	failed       [][]flowCall // per request: failing calls as they returned to the processor
	resultAt     []time.Duration
	deadAt       []time.Duration // -1: none
	deadReason   []string
	terminal     int           // requests with a result or a dead letter
	acks         int           // terminal outcome records acknowledged
	foreign      int           // outcome records with a key not ours
	lastTerminal time.Duration // the last request to get its terminal outcome
	done         chan struct{}

	// The line as sampled every 100 ms.
	opens     int
	openSince time.Time
	guardSeen bool
	guardNow  bool
	lastLine  string
	lineLog   []string // changes of the line's state, for the log
}

var _ kgo.HookProduceRecordUnbuffered = (*flowRun)(nil)

func newFlowRun(results, dlq string, total int, script func(time.Duration, int, string, int) flowReply) *flowRun {
	f := &flowRun{results: results, dlq: dlq, total: total, script: script, done: make(chan struct{}),
		arrivals: make([][]flowCall, total), failed: make([][]flowCall, total),
		resultAt: make([]time.Duration, total), deadAt: make([]time.Duration, total), deadReason: make([]string, total)}
	for i := range total {
		f.resultAt[i], f.deadAt[i] = -1, -1
	}
	return f
}

func flowID(i int) string { return "r" + strconv.Itoa(i) }

// flowWarmUp starts the ids of the warm-up requests, which the service
// answers 200 and the run does not count.
const flowWarmUp = "warm-up-"

// warmUp writes one request to each of the main topic's partitions and
// waits for their results: a processor that has joined may still be
// setting up its fetches, and the scenario's clock must not start before
// it consumes (a lead batch would otherwise be polled together with the
// batch after it).
func (f *flowRun) warmUp(b *testing.B, e *pipetest.Env, partitions int32) {
	b.Helper()
	cl := e.Cluster.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	for p := range partitions {
		id := flowWarmUp + strconv.Itoa(int(p))
		rs = append(rs, &kgo.Record{Topic: e.P.Topic, Partition: p, Key: []byte(id), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { return f.warm.Load() >= int64(partitions) }) {
		b.Fatalf("warm-up: %d of %d results after 30s", f.warm.Load(), partitions)
	}
}

// index is the request number of id (or key); -1 when it is not one of ours.
func (f *flowRun) index(id string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "r"))
	if err != nil || !strings.HasPrefix(id, "r") || i < 0 || i >= f.total {
		return -1
	}
	return i
}

func (f *flowRun) since() time.Duration {
	s := f.start.Load()
	if s == 0 {
		return 0
	}
	return time.Since(time.Unix(0, s))
}

// ServeHTTP is the scripted service.
func (f *flowRun) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := f.since()
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get(httphandler.HeaderIdempotencyKey)
	if strings.HasPrefix(id, flowWarmUp) {
		w.WriteHeader(http.StatusOK)
		return
	}
	attempt, _ := strconv.Atoi(r.Header.Get(httphandler.HeaderAttempt))
	i := f.index(id)
	call := 0
	f.mu.Lock()
	f.calls++
	if i >= 0 {
		f.arrivals[i] = append(f.arrivals[i], flowCall{attempt, at})
		call = len(f.arrivals[i])
	} else {
		f.foreignCalls++
	}
	f.mu.Unlock()
	rep := f.script(at, i, id, call)
	if rep.status == http.StatusTooManyRequests {
		f.mu.Lock()
		f.refused++
		f.mu.Unlock()
	}
	if rep.delay > 0 {
		t := time.NewTimer(rep.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return // the handler timed out and hung up
		}
	}
	if rep.code != "" {
		w.Header().Set(httphandler.HeaderErrorCode, rep.code)
	}
	if rep.retryAfter > 0 {
		w.Header().Set(httphandler.HeaderRetryAfter, strconv.Itoa(rep.retryAfter))
	}
	w.WriteHeader(rep.status)
}

// handler is h, noting when each failing call returned: the processor
// decides its retry after that, so the next attempt may not reach the
// service before that time plus the tier's delay.
func (f *flowRun) handler(h processor.Handler) processor.Handler {
	return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		out := h.Handle(ctx, req)
		if out.Kind != processor.Success {
			at := f.since()
			if i := f.index(req.ID); i >= 0 {
				f.mu.Lock()
				f.failed[i] = append(f.failed[i], flowCall{req.Attempt, at})
				f.mu.Unlock()
			}
		}
		return out
	})
}

func (f *flowRun) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil || (r.Topic != f.results && r.Topic != f.dlq) {
		return
	}
	if strings.HasPrefix(string(r.Key), flowWarmUp) {
		if r.Topic == f.results {
			f.warm.Add(1)
		}
		return
	}
	at := f.since()
	i := f.index(string(r.Key))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks++
	if i < 0 {
		f.foreign++
		return
	}
	if f.resultAt[i] < 0 && f.deadAt[i] < 0 {
		f.terminal++
		f.lastTerminal = max(f.lastTerminal, at)
		if f.terminal == f.total {
			close(f.done)
		}
	}
	switch {
	case r.Topic == f.results && f.resultAt[i] < 0:
		f.resultAt[i] = at
	case r.Topic == f.dlq && f.deadAt[i] < 0:
		f.deadAt[i] = at
		for _, h := range r.Headers {
			if h.Key == retry.HeaderReason {
				f.deadReason[i] = string(h.Value)
			}
		}
	}
}

// watch samples the line every 100 ms until ctx ends.
func (f *flowRun) watch(ctx context.Context, pr *processor.Processor) {
	sampleStatus(ctx, pr, func(p processor.PipelineStatus) {
		l := p.Line
		at := f.since()
		var reasons []string
		guard := false
		for _, r := range l.Reasons {
			reasons = append(reasons, r.Reason)
			guard = guard || r.Reason == "guard"
		}
		key := fmt.Sprintf("%s, breaker %s", l.State, l.Breaker)
		if len(reasons) > 0 {
			key += " (" + strings.Join(reasons, ",") + ")"
		}
		f.mu.Lock()
		desc := key
		newOpen := l.Breaker == "open" && !l.BreakerSince.Equal(f.openSince)
		if newOpen {
			f.opens++
			f.openSince = l.BreakerSince
			desc += fmt.Sprintf(", open for %s: %s", l.OpenFor, l.Why)
		} else if l.Breaker == "half-open" && l.Why != "" {
			desc += ": " + l.Why
		}
		f.guardSeen = f.guardSeen || guard
		f.guardNow = guard
		if l.LearnedRate > 0 {
			f.learned = l.LearnedRate
		}
		if key != f.lastLine || newOpen {
			f.lineLog = append(f.lineLog, fmt.Sprintf("%6.1fs %s; inflight %d, waiting %d", at.Seconds(), desc, p.Inflight, p.Waiting))
			f.lastLine = key
		}
		f.mu.Unlock()
	})
}

// earlyRetries counts calls with attempt n+1 that reached the service less
// than tier n's delay after the last failing call of attempt n before
// them returned, and calls with attempt n+1 without any (unexplained).
func (f *flowRun) earlyRetries(tiers []time.Duration) (early, unexplained int, example string) {
	for i := range f.total {
		for _, c := range f.arrivals[i] {
			if c.attempt < 2 {
				continue
			}
			last := time.Duration(-1)
			for _, fc := range f.failed[i] {
				if fc.attempt == c.attempt-1 && fc.at <= c.at {
					last = max(last, fc.at)
				}
			}
			if last < 0 {
				unexplained++
				continue
			}
			if wait := tiers[min(c.attempt-2, len(tiers)-1)]; c.at-last < wait {
				early++
				if example == "" {
					example = fmt.Sprintf("%s attempt %d at %.3fs, %v after attempt %d failed (tier %v)", flowID(i), c.attempt, c.at.Seconds(), c.at-last, c.attempt-1, wait)
				}
			}
		}
	}
	return early, unexplained, example
}

// wait waits for every terminal outcome ("finished"); or, the line
// stopped by the guard (it stays stopped until an operator resumes it),
// until nothing moved for 5 s after the last batch ("held"); or until
// deadline ("capped").
func (f *flowRun) wait(start time.Time, offeredEnd time.Duration, deadline time.Time) string {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-f.done:
			return "finished"
		case <-tick.C:
		}
		f.mu.Lock()
		quiet := f.guardNow && time.Since(start) > max(f.lastTerminal, offeredEnd)+5*time.Second
		f.mu.Unlock()
		switch {
		case quiet:
			return "held"
		case time.Now().After(deadline):
			return "capped"
		}
	}
}

// runFlow is one run of BenchmarkFlow: scenario sc, the line at its
// defaults or off.
func runFlow(b *testing.B, sc *flowScenario, defaults bool) {
	n := max(1, int(math.Round(float64(sc.n)**benchFlowScale)))
	batches, main, d := sc.plan(n)
	total := sc.lead + n
	const partitions = 6
	e := newEnv(b, flowTiers, partitions)
	e.P.Schedule.MaxAttempts = retry.DefaultMaxAttempts
	e.P.Schedule.Jitter = retry.DefaultJitter
	if !defaults {
		// The same run without flow control: what the defaults change.
		e.P.Breaker = processor.Breaker{Disabled: true}
		e.P.Guard = processor.Guard{Disabled: true}
	}
	f := newFlowRun(e.P.Results, e.P.DLQ, total, sc.service(d, sc.lead))
	srv := httptest.NewServer(f)
	defer srv.Close()
	h, err := httphandler.New(httphandler.Options{URL: srv.URL, Timeout: sc.timeout})
	if err != nil {
		b.Fatal(err)
	}
	cfg := e.Config()
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithHooks(f))
	pr, stop := pipetest.RunProcessor(b, cfg, f.handler(h))
	if !kafkatest.Eventually(30*time.Second, func() bool {
		st := pr.Status()
		return len(st.Pipelines) > 0 && st.Pipelines[0].Joined && st.Pipelines[0].Partitions > 0
	}) {
		b.Fatal("the processor did not join within 30s")
	}
	f.warmUp(b, e, partitions)
	cl := e.Cluster.Client(b, kgo.ProducerLinger(time.Millisecond))
	val := []byte(`{"task":"flow"}`)
	var produceErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	b.ResetTimer()
	debug.FreeOSMemory()
	resetPeakRSS()
	cpu0 := cpuTime()
	start := time.Now()
	f.start.Store(start.UnixNano())
	go f.watch(ctx, pr)
	for _, bt := range batches {
		time.Sleep(time.Until(start.Add(bt.at)))
		for i := bt.from; i < bt.to; i++ {
			id := flowID(i)
			cl.Produce(ctx, &kgo.Record{Topic: e.P.Topic, Key: []byte(id), Value: val,
				Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErr.Store(err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatalf("flush: %v", err)
	}
	if err, _ := produceErr.Load().(error); err != nil {
		b.Fatalf("produce: %v", err)
	}
	offeredEnd := time.Since(start)

	end := f.wait(start, offeredEnd, start.Add(main+d+2*time.Minute))
	b.StopTimer()
	cpu := cpuTime() - cpu0
	rss := peakRSSMB()
	cancel()
	if end == "capped" && e.LagProblem(append([]string{e.P.Topic}, e.P.TierTopics()...), partitions) == "" {
		end = "lost" // consumed and committed, yet no outcome
	}
	if err := stop(); err != nil {
		b.Errorf("stop: %v", err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	var results, exhausted, permanent, otherDead, healthyMissing int
	healthy := time.Duration(-1)
	for i := range total {
		if f.resultAt[i] >= 0 {
			results++
		}
		if f.deadAt[i] >= 0 {
			switch f.deadReason[i] {
			case "exhausted":
				exhausted++
			case "permanent":
				permanent++
			default:
				otherDead++
			}
		}
		if sc.healthy != nil && sc.healthy(i, sc.lead, flowID(i)) {
			if f.resultAt[i] < 0 {
				healthyMissing++
			} else {
				healthy = max(healthy, f.resultAt[i]-main)
			}
		}
	}
	missing := total - f.terminal
	b.ReportMetric(float64(total), "offered")
	b.ReportMetric(float64(sc.rate), "offered-records/s")
	if sc.lead > 0 {
		b.ReportMetric(float64(sc.lead), "lead")
	}
	b.ReportMetric(float64(results), "results")
	b.ReportMetric(float64(exhausted+permanent+otherDead), "dead-letters")
	b.ReportMetric(float64(exhausted), "dead-letters-exhausted")
	b.ReportMetric(float64(permanent), "dead-letters-permanent")
	if otherDead > 0 {
		b.ReportMetric(float64(otherDead), "dead-letters-other")
	}
	switch end {
	case "finished":
		b.ReportMetric(0, "lost")
		b.ReportMetric(f.lastTerminal.Seconds(), "finish-s")
	case "held":
		b.ReportMetric(float64(missing), "held")
	case "capped":
		b.ReportMetric(float64(missing), "unfinished")
		b.Logf("%d of %d requests without a terminal outcome %v after the first batch (the cap)", missing, total, main+d+2*time.Minute)
	case "lost":
		b.ReportMetric(float64(missing), "lost")
		b.Errorf("%d of %d requests have neither a result nor a dead letter, and the group's lag is 0", missing, total)
	}
	b.ReportMetric(float64(f.calls), "calls")
	if f.refused > 0 {
		b.ReportMetric(float64(f.refused), "refused")
	}
	if f.learned > 0 {
		b.ReportMetric(f.learned, "learned-calls/s")
	}
	if sc.healthy != nil {
		if healthyMissing == 0 && healthy >= 0 {
			b.ReportMetric(healthy.Seconds(), "healthy-s")
		} else {
			b.Logf("%d healthy requests without a result", healthyMissing)
		}
	}
	b.ReportMetric(float64(f.opens), "breaker-opens")
	guard := 0.0
	if f.guardSeen {
		guard = 1
	}
	b.ReportMetric(guard, "guard-stopped")
	early, unexplained, example := f.earlyRetries(flowTiers)
	b.ReportMetric(float64(early), "early-retries")
	if dups := f.acks - f.terminal - f.foreign; dups > 0 {
		b.ReportMetric(float64(dups), "duplicates")
	}
	b.ReportMetric(cpu.Seconds()/float64(total)*1e6, "cpu-s/M")
	if rss > 0 {
		b.ReportMetric(rss, "peak-rss-MB")
	}
	if early > 0 {
		b.Errorf("%d retries reached the service before their tier's delay was over, e.g. %s", early, example)
	}
	if unexplained > 0 {
		b.Errorf("%d calls with attempt n+1 and no failing call of attempt n before them", unexplained)
	}
	if f.foreign > 0 || f.foreignCalls > 0 {
		b.Errorf("%d outcome records and %d calls with an id not offered", f.foreign, f.foreignCalls)
	}
	first := time.Duration(-1)
	for i := range total {
		if c := f.arrivals[i]; len(c) > 0 && (first < 0 || c[0].at < first) {
			first = c[0].at
		}
	}
	b.Logf("first call %.3fs after the first batch", first.Seconds())
	const maxLines = 60
	for i, s := range f.lineLog {
		if i == maxLines {
			b.Logf("… %d more line changes", len(f.lineLog)-maxLines)
			break
		}
		b.Logf("line %s", s)
	}
}
