package processor_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/flowcheck"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// flowCheckSeeds are the seeds `make test` runs: one replica each, no
// kills, group and share, both deliveries, wall-clock steps. 36, 93 and
// 109 found a call before redrive-due when the wall clock steps back.
// The seeds with kills and several replicas (5, 33, 42, 1018) passed in
// most runs but one run of a set with them failed a seed not identified;
// they run with `make flowcheck` until that is found. docs/testing.md
// lists the seeds that still fail.
var flowCheckSeeds = []uint64{1, 36, 56, 93, 109}

// TestFlowCheck is the randomized checker of the invariants (package
// internal/flowcheck): each seed draws a scenario, runs it twice at once on
// topics of its own — at the shipped defaults, and with the breaker off
// for the latency baseline — through the HTTP handler to a scripted
// service on 127.0.0.1, and checks both runs against the service's call
// log and the outcome records. Time constants of the defaults are divided
// by flowcheck.TimeScale (10): breaker window and open_for 3 s, max_open
// 30 s, guard window 6 s, handler timeout 3 s, status interval 500 ms.
//
// FLOWCHECK_SEED=7 (or 7,8,9) runs those seeds; FLOWCHECK_SEEDS=N runs N
// seeds from FLOWCHECK_FIRST (default: drawn from the clock, printed);
// otherwise flowCheckSeeds.
func TestFlowCheck(t *testing.T) {
	for _, seed := range flowCheckSeedList(t) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			runFlowCheckSeed(t, seed)
		})
	}
}

// flowCheckSeedList reads the seeds from the environment.
func flowCheckSeedList(t *testing.T) []uint64 {
	if s := os.Getenv("FLOWCHECK_SEED"); s != "" {
		var seeds []uint64
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("FLOWCHECK_SEED=%q: want seeds separated by commas", s)
			}
			seeds = append(seeds, n)
		}
		return seeds
	}
	if s := os.Getenv("FLOWCHECK_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FLOWCHECK_SEEDS=%q: want a number of seeds", s)
		}
		first := uint64(time.Now().UnixNano()%1_000_000) * 1000
		if f := os.Getenv("FLOWCHECK_FIRST"); f != "" {
			if first, err = strconv.ParseUint(f, 10, 64); err != nil {
				t.Fatalf("FLOWCHECK_FIRST=%q: want a seed", f)
			}
		}
		t.Logf("flowcheck: %d seeds from %d (FLOWCHECK_FIRST=%d repeats them)", n, first, first)
		seeds := make([]uint64, n)
		for i := range seeds {
			seeds[i] = first + uint64(i)
		}
		return seeds
	}
	return flowCheckSeeds
}

// flowCheckReplay is the one-line command that runs seed again.
func flowCheckReplay(seed uint64) string {
	env := ""
	if b := os.Getenv("REDRIVE_TEST_BROKERS"); b != "" {
		env = "REDRIVE_TEST_BROKERS=" + b + " "
	}
	return fmt.Sprintf("%sFLOWCHECK_SEED=%d go test -count=1 -run 'TestFlowCheck' ./processor/", env, seed)
}

// runFlowCheckSeed runs seed's scenario twice at once (breaker off, then
// the defaults) and reports what each broke.
func runFlowCheckSeed(t *testing.T, seed uint64) {
	sc := flowcheck.Generate(seed)
	t.Logf("scenario %d: %s", seed, sc)
	base := newFlowCheckRun(t, sc, false)
	run := newFlowCheckRun(t, sc, true)
	baseEnd := make(chan time.Duration, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		last := base.drive(nil)
		baseEnd <- last
	}()
	go func() {
		defer wg.Done()
		run.drive(baseEnd)
	}()
	wg.Wait()
	if run.bound == 0 {
		run.setBound(<-baseEnd) // it finished before the baseline did
	}

	baseVs := base.check(0, "")
	run.succeeded = base.results()
	runVs := run.check(max(run.bound, 0), run.boundWhy)
	for _, r := range []struct {
		name string
		f    *flowCheckRun
		vs   []flowcheck.Violation
	}{{"breaker off", base, baseVs}, {"defaults", run, runVs}} {
		t.Logf("seed %d, %s: %d calls, %d outcome records, %d breaker openings, %d violations; ended at %v",
			seed, r.name, len(r.f.calls), len(r.f.outs), r.f.openCount(), len(r.vs), r.f.end)
		if os.Getenv("FLOWCHECK_VERBOSE") != "" {
			for _, line := range flowcheck.Stories(r.f.run(0, "")) {
				t.Logf("seed %d, %s: %s", seed, r.name, line)
			}
		}
		if len(r.vs) > 0 {
			t.Errorf("flowcheck seed %d (%s) broke invariants:\n%s\nscenario: %s\nreplay: %s\nevery request's calls and the replicas' whole log: %s\nthe log's end:\n%s",
				seed, r.name, flowcheck.Summary(r.vs, 3), sc, flowCheckReplay(seed), r.f.dump(seed, r.vs), r.f.logTail(30))
		}
	}
	for _, f := range []*flowCheckRun{base, run} {
		for _, e := range f.errs {
			t.Errorf("flowcheck seed %d: %s\nreplay: %s", seed, e, flowCheckReplay(seed))
		}
	}
}

// flowCheckRun is one run of a scenario: its topics, service, replicas,
// the outcome reader and the line sampler.
type flowCheckRun struct {
	t        *testing.T
	sc       *flowcheck.Scenario
	defaults bool
	e        *pipetest.Env
	svc      *flowcheck.Service
	clk      *processor.SteppedClock // every replica's wall clock, where the scenario steps it
	url      string                  // the service's
	reader   *kgo.Client
	producer *kgo.Client

	// logs is every replica's log: the line's changes, rebalances.
	logMu sync.Mutex
	logs  bytes.Buffer

	mu       sync.Mutex
	replicas map[int]*flowCheckReplica // by slot
	started  int
	closed   bool            // the run is over: no replica starts again
	crashing map[string]bool // replicas a crash is stopping
	opens    map[time.Time]bool
	outs     []flowcheck.Outcome
	foreign  int
	has      map[string]bool
	warm     int
	errs     []string

	// After drive.
	calls        []flowcheck.Call
	steps        []flowcheck.ClockStep
	foreignCalls int
	end          time.Duration
	bound        time.Duration
	boundWhy     string
	succeeded    map[string]bool // the baseline's results
}

type flowCheckReplica struct {
	name   string
	pr     *processor.Processor
	cancel context.CancelFunc
	done   chan error
}

// newFlowCheckRun makes sc's topics, service and handler and starts its
// replicas (on the test's goroutine: these may fail the test).
func newFlowCheckRun(t *testing.T, sc *flowcheck.Scenario, defaults bool) *flowCheckRun {
	t.Helper()
	e := pipetest.New(t, "flowcheck", sc.Partitions, retry.Schedule{Tiers: sc.Tiers, MaxAttempts: sc.MaxAttempts, Jitter: retry.DefaultJitter})
	e.P.Concurrency = sc.Concurrency
	e.P.Consume = processor.Consume(sc.Consume)
	e.P.Delivery = processor.Delivery(sc.Delivery)
	// The shipped defaults with their time constants scaled.
	e.P.Breaker = processor.Breaker{
		Window:  flowcheck.Scaled(processor.DefaultBreakerWindow),
		OpenFor: flowcheck.Scaled(processor.DefaultBreakerOpenFor),
		MaxOpen: flowcheck.Scaled(processor.DefaultBreakerMaxOpen),
	}
	e.P.Guard = processor.Guard{Window: flowcheck.Scaled(processor.DefaultGuardWindow)}
	if !defaults {
		// The latency baseline: the same run without the breaker.
		e.P.Breaker = processor.Breaker{Disabled: true}
	}
	f := &flowCheckRun{t: t, sc: sc, defaults: defaults, e: e, svc: flowcheck.NewService(sc),
		replicas: map[int]*flowCheckReplica{}, crashing: map[string]bool{}, opens: map[time.Time]bool{}, has: map[string]bool{}}
	f.svc.Crash = f.crash
	if sc.SteppedClock() {
		// One clock for every replica of the run, as machines' clocks
		// would step.
		f.clk = &processor.SteppedClock{}
		f.svc.StepClock = f.clk.Step
	}
	srv := httptest.NewServer(f.svc)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	f.producer = e.Cluster.Client(t, kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	level := kgo.ReadUncommitted()
	if sc.Delivery == string(processor.ExactlyOnce) {
		level = kgo.ReadCommitted() // what an exactly-once pipeline promises
	}
	f.reader = e.Cluster.Client(t, kgo.ConsumeTopics(e.P.Results, e.P.DLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(100*time.Millisecond))
	for slot := range sc.Replicas {
		if err := f.startReplica(slot); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(f.stopAll)
	return f
}

// crash stops the replica named (a crash loop's call killed it) and
// starts a new one in its place 300 ms later.
func (f *flowCheckRun) crash(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	slot := -1
	for s, r := range f.replicas {
		if r.name == name {
			slot = s
		}
	}
	if slot < 0 || f.crashing[name] {
		return
	}
	f.crashing[name] = true
	go func() {
		f.stopReplica(slot)
		time.Sleep(300 * time.Millisecond)
		if err := f.startReplica(slot); err != nil {
			f.fail("%v", err)
		}
	}()
}

// startReplica runs a new replica in slot.
func (f *flowCheckRun) startReplica(slot int) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.started++
	name := fmt.Sprintf("replica-%d", f.started)
	f.mu.Unlock()
	cfg := f.e.Config()
	cfg.Instance = name
	cfg.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &f.logs, mu: &f.logMu}, nil)).With("replica", name)
	cfg.Control.StatusInterval = flowcheck.Scaled(control.DefaultStatusInterval)
	if f.clk != nil {
		processor.WithClock(f.clk)(&cfg)
	}
	if f.sc.SlowSuspectPoll {
		// A share fetch lands while the suspects run.
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithHooks(&slowSuspectPoll{topic: f.e.P.Topic}))
	}
	if len(f.sc.Kills) > 0 || f.sc.Crashes() {
		// A kill gives no grace: in-flight calls are abandoned, their
		// records redelivered.
		cfg.ShutdownGrace = time.Millisecond
	}
	h, err := httphandler.New(httphandler.Options{URL: f.url, Timeout: f.sc.Timeout, Concurrency: f.sc.Concurrency,
		Headers: map[string]string{flowcheck.HeaderReplica: name}})
	if err != nil {
		return err
	}
	pr, err := processor.New(cfg, h)
	if err != nil {
		return fmt.Errorf("replica %s: processor.New: %w", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &flowCheckReplica{name: name, pr: pr, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- pr.Run(ctx) }()
	go sampleStatus(ctx, pr, func(p processor.PipelineStatus) {
		if p.Line.Breaker == "open" {
			f.mu.Lock()
			f.opens[p.Line.BreakerSince] = true
			f.mu.Unlock()
		}
	})
	f.mu.Lock()
	f.replicas[slot] = r
	f.mu.Unlock()
	return nil
}

// stopReplica cancels the replica in slot and waits for Run to return.
func (f *flowCheckRun) stopReplica(slot int) {
	f.mu.Lock()
	r := f.replicas[slot]
	delete(f.replicas, slot)
	f.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			f.fail("replica %s: Run: %v", r.name, err)
		}
	case <-time.After(60 * time.Second):
		f.fail("replica %s did not stop within 60s", r.name)
	}
}

func (f *flowCheckRun) stopAll() {
	f.mu.Lock()
	f.closed = true
	var slots []int
	for s := range f.replicas {
		slots = append(slots, s)
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Add(1)
		go func() { defer wg.Done(); f.stopReplica(s) }()
	}
	wg.Wait()
}

// logTail is the last n lines of the replicas' log that are not about
// single records.
func (f *flowCheckRun) logTail(n int) string {
	f.logMu.Lock()
	lines := strings.Split(strings.TrimSpace(f.logs.String()), "\n")
	f.logMu.Unlock()
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// dump writes the run's violations, every request's story and the
// replicas' log to a file kept after the test, for the one who debugs it;
// it returns the file's name.
func (f *flowCheckRun) dump(seed uint64, vs []flowcheck.Violation) string {
	name := "breaker-off"
	if f.defaults {
		name = "defaults"
	}
	fh, err := os.CreateTemp("", fmt.Sprintf("flowcheck-seed-%d-%s-*.log", seed, name))
	if err != nil {
		return err.Error()
	}
	defer fh.Close()
	fmt.Fprintf(fh, "seed %d, %s: %s\n\n", seed, name, f.sc)
	for _, v := range vs {
		fmt.Fprintln(fh, v)
	}
	fmt.Fprintln(fh)
	for _, line := range flowcheck.Stories(f.run(0, "")) {
		fmt.Fprintln(fh, line)
	}
	fmt.Fprintln(fh)
	f.logMu.Lock()
	_, _ = fh.Write(f.logs.Bytes())
	f.logMu.Unlock()
	return fh.Name()
}

func (f *flowCheckRun) fail(format string, args ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *flowCheckRun) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.opens)
}

// read follows the results and the DLQ until ctx ends.
func (f *flowCheckRun) read(ctx context.Context) {
	for ctx.Err() == nil {
		fs := f.reader.PollFetches(ctx)
		at := f.svc.Since()
		fs.EachRecord(func(r *kgo.Record) {
			id, _ := kafkatest.Header(r, retry.HeaderID)
			f.mu.Lock()
			defer f.mu.Unlock()
			if strings.HasPrefix(id, flowcheck.WarmUp) {
				f.warm++
				return
			}
			if !f.known(id) {
				f.foreign++
				return
			}
			o := flowcheck.Outcome{ID: id, DeadLetter: r.Topic == f.e.P.DLQ, At: at}
			if o.DeadLetter {
				o.Reason, _ = kafkatest.Header(r, retry.HeaderReason)
			}
			f.outs = append(f.outs, o)
			f.has[id] = true
		})
	}
}

func (f *flowCheckRun) known(id string) bool {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "r"))
	return err == nil && strings.HasPrefix(id, "r") && i >= 0 && i < len(f.sc.Requests)
}

// settled waits until every replica has joined and the partitions they
// own have stayed the same for a second: the run starts after the
// replicas' first rebalances, not in one.
func (f *flowCheckRun) settled() bool {
	last, same := -1, 0
	ok := kafkatest.Eventually(60*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		sum := 0
		for _, r := range f.replicas {
			st := r.pr.Status()
			if len(st.Pipelines) == 0 || !st.Pipelines[0].Joined {
				last, same = -1, 0
				return false
			}
			sum += st.Pipelines[0].Partitions
		}
		if sum == last && sum > 0 {
			same++
		} else {
			last, same = sum, 0
		}
		return same >= 20 // 50 ms apart
	})
	if !ok {
		f.fail("the replicas did not settle within 60s")
	}
	return ok
}

// warmUp writes a request to every partition and waits for their
// outcomes: the replicas consume before the clock starts.
func (f *flowCheckRun) warmUp(ctx context.Context) bool {
	var rs []*kgo.Record
	for p := range f.sc.Partitions {
		id := flowcheck.WarmUp + strconv.Itoa(int(p))
		rs = append(rs, flowCheckRecord(f.e.P.Topic, id, p))
	}
	if err := f.producer.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		f.fail("warm-up: %v", err)
		return false
	}
	if !kafkatest.Eventually(60*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.warm >= int(f.sc.Partitions)
	}) {
		f.fail("warm-up: %d of %d outcomes within 60s", f.warm, f.sc.Partitions)
		return false
	}
	return true
}

func flowCheckRecord(topic, id string, partition int32) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte(id), Value: []byte(`{"id":"` + id + `"}`),
		Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}
}

// flowCheckCap is how long a run may go on after its last burst at most.
const flowCheckCap = 120 * time.Second

// drive runs the scenario: warm-up, the bursts and kills on their
// clock, then waits until every request has an outcome (and 2 s more for
// duplicates), or until its deadline. baseline, when given, brings the
// baseline's last result and sets the deadline to the bound + 5 s. It
// returns its own last result's time.
func (f *flowCheckRun) drive(baseline <-chan time.Duration) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.read(ctx)
	defer func() {
		f.stopAll()
		f.calls, f.foreignCalls = f.svc.Calls()
		f.steps = f.svc.Steps()
		f.end = f.svc.Since()
	}()
	if !f.settled() || !f.warmUp(ctx) {
		return 0
	}
	f.svc.Start()
	start := time.Now()
	for _, k := range f.sc.Kills {
		go func() {
			time.Sleep(time.Until(start.Add(k.At)))
			f.stopReplica(k.Replica)
			time.Sleep(k.RestartAfter)
			if err := f.startReplica(k.Replica); err != nil {
				f.fail("%v", err)
			}
		}()
	}
	for _, c := range f.sc.ClockSteps {
		go func() {
			select {
			case <-time.After(time.Until(start.Add(c.At))):
				f.svc.Step(c.By)
			case <-ctx.Done():
			}
		}()
	}
	part := int32(0)
	for _, b := range f.sc.Bursts {
		time.Sleep(time.Until(start.Add(b.At)))
		var rs []*kgo.Record
		for _, q := range f.sc.Requests[b.From:b.To] {
			rs = append(rs, flowCheckRecord(f.e.P.Topic, q.ID, part))
			part = (part + 1) % f.sc.Partitions
		}
		if err := f.producer.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			f.fail("produce: %v", err)
			return 0
		}
	}
	last := f.sc.Bursts[len(f.sc.Bursts)-1].At
	deadline := start.Add(last + flowCheckCap)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var settle time.Time
	for {
		if baseline != nil {
			select {
			case b := <-baseline:
				baseline = nil
				f.setBound(b)
				if f.bound > 0 {
					if d := start.Add(max(last, f.bound) + 5*time.Second); d.Before(deadline) {
						deadline = d
					}
				}
			default:
			}
		}
		f.mu.Lock()
		all := len(f.has) == len(f.sc.Requests)
		f.mu.Unlock()
		now := time.Now()
		if all && settle.IsZero() {
			settle = now.Add(2 * time.Second)
		}
		if !settle.IsZero() && now.After(settle) || now.After(deadline) {
			break
		}
		<-tick.C
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var lastResult time.Duration
	for _, o := range f.outs {
		if !o.DeadLetter {
			lastResult = max(lastResult, o.At)
		}
	}
	return lastResult
}

// setBound sets the latency bound from the baseline's last result b: b ×
// 1.25 + open_for + 5 s. It stays 0 (not checked) when b is: the baseline
// did not run.
func (f *flowCheckRun) setBound(b time.Duration) {
	f.bound = -1
	if b <= 0 {
		return
	}
	openFor := flowcheck.Scaled(processor.DefaultBreakerOpenFor)
	f.bound = b*5/4 + openFor + 5*time.Second
	f.boundWhy = fmt.Sprintf("the breaker-off run's last result %v × 1.25 + open_for %v + 5s", b.Round(time.Millisecond), openFor)
}

// results are the requests with a result.
func (f *flowCheckRun) results() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := map[string]bool{}
	for _, o := range f.outs {
		if !o.DeadLetter {
			ids[o.ID] = true
		}
	}
	return ids
}

// check judges the run; bound 0: no latency bound (the baseline).
func (f *flowCheckRun) check(bound time.Duration, why string) []flowcheck.Violation {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 && f.end == 0 {
		return nil // it did not run: the errors say why
	}
	return flowcheck.Check(f.run(bound, why))
}

// run is what the run left, for flowcheck (f.mu held or the run over).
func (f *flowCheckRun) run(bound time.Duration, why string) flowcheck.Run {
	return flowcheck.Run{
		Scenario: f.sc, Calls: f.calls, Outcomes: f.outs,
		ForeignCalls: f.foreignCalls, ForeignOutcomes: f.foreign,
		Opens: len(f.opens), Probes: processor.DefaultBreakerProbes,
		Bound: bound, BoundWhy: why, End: f.end, Succeeded: f.succeeded,
		ClockSteps: f.steps,
	}
}
