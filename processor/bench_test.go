package processor_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// Run with: go test ./processor -run '^$' -bench . -benchtime 1x
// (make bench does, against the real broker, one benchmark per process so
// that peak RSS is each scenario's own; `go run ./bench` prints the table).
//
// Each broker benchmark moves its records once, whatever b.N is, and
// reports:
//
//	records/s       records over the time from the first record fetched to
//	                the last outcome acknowledged by the broker (both seen
//	                through kgo hooks, the same way for the ceiling and for
//	                redrive; group join and topic creation excluded)
//	wall-records/s  records over the time from starting the consumer
//	                (group join included) to the last acknowledgement
//	cpu-s/M         process CPU seconds (user+sys, getrusage) per million
//	                records, over the same wall window: the benchmark's own
//	                client CPU, not the broker's (a separate JVM)
//	peak-rss-MB     the process's VmHWM, reset after the preload (its
//	                garbage returned to the kernel first) where the kernel
//	                allows (/proc/self/clear_refs); per test process
//
// With -bench.delivery exactly-once the happy and failure paths run an
// exactly-once pipeline, and "the last outcome acknowledged" becomes the
// commit of the transaction that holds it (see eosMeter); they also report
// txns, aborted-txns, txn-ms (mean), outcomes/txn and committed-results
// (outcome records a read_committed consumer reads after the run; must be
// the records offered, each once).
//
// No figure is asserted: these are measurements, not tests.
var (
	benchRecords    = flag.Int("bench.records", 50000, "records per benchmark run (ceiling, happy, failure, scaling)")
	benchSlow       = flag.Int("bench.slowrecords", 30000, "records for the slow-handler benchmark")
	benchSlowDelay  = flag.Duration("bench.slowdelay", 200*time.Millisecond, "the slow handler's answer delay")
	benchSlowConc   = flag.Int("bench.slowconcurrency", 1000, "handler concurrency of the slow-handler benchmark")
	benchPacedRate  = flag.Int("bench.pacedrate", 10000, "records/s offered by the paced failure path")
	benchPacedRecs  = flag.Int("bench.pacedrecords", 50000, "records of the paced failure path")
	benchMaxWaiting = flag.Int("bench.maxwaiting", 0, "MaxWaiting for the failure path (0: default)")
	benchConc       = flag.Int("bench.concurrency", 256, "handler concurrency of the happy and failure paths (0: the default)")
	benchInflight   = flag.Int("bench.maxinflight", 0, "MaxInflight of the happy and failure paths (0: the default)")
	benchDelay      = flag.Duration("bench.handlerdelay", 0, "how long the failure paths' handler takes per call (0: no wait)")
	benchDelivery   = flag.String("bench.delivery", string(processor.AtLeastOnce), "Delivery of the happy and failure paths: at-least-once or exactly-once")
	benchMaxBatch   = flag.Int("bench.maxbatch", 0, "MaxBatch of an exactly-once happy or failure path (0: default)")
	benchCommitIvl  = flag.Duration("bench.commitinterval", 0, "CommitInterval of the happy and failure paths (0: the harness's, 200ms)")
)

const benchValueBytes = 200

func preload(b *testing.B, e *pipetest.Env, topic string, n int, value string) {
	b.Helper()
	val := make([]byte, benchValueBytes)
	copy(val, value)
	for i := range val[len(value):] {
		val[len(value)+i] = ' '
	}
	cl := e.Cluster.Client(b, kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100000))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var failed atomic.Value
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte("k" + strconv.Itoa(i)), Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatalf("preload flush: %v", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("preload: %v", err)
	}
}

// meter watches clients through kgo hooks: the first record fetched, and
// acknowledgements of records written to one topic. One meter may be shared
// by several clients (the scaling runs).
type meter struct {
	topic string
	n     int64
	// eos: exactly-once (eosMeter): the n-th acknowledgement only sets
	// written; the next transaction end closes done.
	eos     *eosMeter
	written atomic.Bool
	first   atomic.Int64 // unix ns of the first record fetched
	last    atomic.Int64 // unix ns of the n-th acknowledgement (exactly-once: its transaction's end)
	acked   atomic.Int64
	fails   atomic.Int64
	done    chan struct{}
	start   time.Time
	cpu0    time.Duration
}

var (
	_ kgo.HookFetchRecordBuffered     = (*meter)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*meter)(nil)
)

func newMeter(topic string, n int) *meter {
	return &meter{topic: topic, n: int64(n), done: make(chan struct{})}
}

func (m *meter) OnFetchRecordBuffered(*kgo.Record) {
	if m.first.Load() == 0 {
		m.first.CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (m *meter) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if r.Topic != m.topic {
		return
	}
	if err != nil {
		m.fails.Add(1)
		return
	}
	if m.acked.Add(1) == m.n {
		if m.eos != nil {
			m.written.Store(true)
			return
		}
		m.last.Store(time.Now().UnixNano())
		close(m.done)
	}
}

// begin starts the clock, the CPU count and the peak-RSS window.
func (m *meter) begin() {
	// The preload's garbage is the harness's, not the scenario's: return
	// it to the kernel before the peak is reset.
	debug.FreeOSMemory()
	resetPeakRSS()
	m.cpu0 = cpuTime()
	m.start = time.Now()
}

// wait blocks until n acknowledgements, failing b after timeout.
func (m *meter) wait(b *testing.B, timeout time.Duration) {
	b.Helper()
	select {
	case <-m.done:
	case <-time.After(timeout):
		b.Fatalf("%s: %d of %d outcomes acknowledged after %v", m.topic, m.acked.Load(), m.n, timeout)
	}
}

// report adds records/s, wall-records/s, cpu-s/M and peak-rss-MB.
func (m *meter) report(b *testing.B) {
	b.Helper()
	cpu := cpuTime() - m.cpu0
	last := time.Unix(0, m.last.Load())
	first := time.Unix(0, m.first.Load())
	n := float64(m.n)
	b.ReportMetric(n/last.Sub(first).Seconds(), "records/s")
	b.ReportMetric(n/last.Sub(m.start).Seconds(), "wall-records/s")
	b.ReportMetric(cpu.Seconds()/n*1e6, "cpu-s/M")
	if rss := peakRSSMB(); rss > 0 {
		b.ReportMetric(rss, "peak-rss-MB")
	}
	if f := m.fails.Load(); f > 0 {
		b.Logf("%d outcome writes failed (retried)", f)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetPeakRSS resets VmHWM to the current RSS (Linux ≥ 4.0); elsewhere
// the peak stays the process's since start.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMB is VmHWM from /proc/self/status, else getrusage's maxrss.
func peakRSSMB() float64 {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				if err == nil {
					return kb / 1024
				}
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return float64(ru.Maxrss) / 1024 // kB on Linux
	}
	return 0
}

// withMeter adds m's hooks to a processor's clients (and, exactly-once,
// the transaction hook and the registry eosMeter reads).
func withMeter(m *meter) func(*processor.Config) {
	return func(c *processor.Config) {
		c.ClientOpts = append(c.ClientOpts, kgo.WithHooks(m))
		if m.eos != nil {
			c.ClientOpts = append(c.ClientOpts, kgo.WithHooks(m.eos))
			c.Registerer = m.eos.reg
		}
		if *benchCommitIvl > 0 {
			c.CommitInterval = *benchCommitIvl
		}
	}
}

// eosMeter is the exactly-once side of a meter. An outcome acknowledged
// inside a transaction is not committed output: a read_committed consumer
// sees it only once its transaction commits. The processor writes a
// transaction's outcomes (the n-th acknowledgement happens in its Flush)
// before it ends it, so the end of the n-th outcome is the first
// successful EndTxn response after the n-th acknowledgement; that is when
// done closes. EndTxn also ends aborted transactions, which the hook
// cannot tell apart: report fails the run unless the processor's
// redrive_transactions_total says none aborted, and it checks with a
// read_committed consumer that the committed results are the n records
// offered, each once.
type eosMeter struct {
	m        *meter
	reg      *prometheus.Registry
	outcomes atomic.Int64 // records acknowledged, every topic (failure path: retries too)
	lastCall atomic.Int64 // unix ns: the last handler call returned
	// Per request key: how many the client sent and their total
	// end-to-end time (write to response read), for txnRequests.
	reqs, reqNanos [64]atomic.Int64
}

// txnRequests are the requests of a transaction whose mean time report
// adds, as <name>-ms (and <name>-n, how many).
var txnRequests = []struct {
	key  kmsg.Key
	name string
}{
	{kmsg.Produce, "produce"}, {kmsg.AddPartitionsToTxn, "addpartitions"}, {kmsg.AddOffsetsToTxn, "addoffsets"},
	{kmsg.TxnOffsetCommit, "txnoffsetcommit"}, {kmsg.EndTxn, "endtxn"},
}

var (
	_ kgo.HookBrokerE2E               = (*eosMeter)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*eosMeter)(nil)
)

// handler is h, noting when its last call returned (for tail-ms); h
// itself when at least once (x nil).
func (x *eosMeter) handler(h processor.Handler) processor.Handler {
	if x == nil {
		return h
	}
	return processor.HandlerFunc(func(ctx context.Context, r *processor.Request) processor.Outcome {
		o := h.Handle(ctx, r)
		x.lastCall.Store(time.Now().UnixNano())
		return o
	})
}

func (x *eosMeter) OnProduceRecordUnbuffered(_ *kgo.Record, err error) {
	if err == nil {
		x.outcomes.Add(1)
	}
}

// delivery sets e.P's Delivery (and MaxBatch) from -bench.delivery, and
// m's exactly-once side; nil when at least once.
func delivery(b *testing.B, e *pipetest.Env, m *meter) *eosMeter {
	b.Helper()
	switch d := processor.Delivery(*benchDelivery); d {
	case processor.AtLeastOnce:
		return nil
	case processor.ExactlyOnce:
		e.P.Delivery = d
		e.P.MaxBatch = *benchMaxBatch
		m.eos = &eosMeter{m: m, reg: prometheus.NewRegistry()}
		return m.eos
	default:
		b.Fatalf("-bench.delivery %q: want %s or %s", d, processor.AtLeastOnce, processor.ExactlyOnce)
		return nil
	}
}

func (x *eosMeter) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key >= 0 && int(key) < len(x.reqs) && e2e.Err() == nil {
		x.reqs[key].Add(1)
		x.reqNanos[key].Add(int64(e2e.DurationE2E()))
	}
	if key != int16(kmsg.EndTxn) || e2e.Err() != nil || !x.m.written.Load() {
		return
	}
	if x.m.last.CompareAndSwap(0, time.Now().UnixNano()) {
		close(x.m.done)
	}
}

// report adds txns (committed), aborted-txns, txn-ms (mean duration,
// begin to end), outcomes/txn (outcome records of every topic per
// committed transaction), tail-ms (from the last handler call to the
// commit of the last outcome: waiting for the transaction, and the
// transaction), the mean end-to-end time and count of each of
// txnRequests (the processor's client, the whole run: <name>-ms, <name>-n)
// and committed-results, and fails b on an
// aborted transaction or committed results other than the n offered.
// Nothing for at least once (x nil).
func (x *eosMeter) report(b *testing.B, e *pipetest.Env) {
	b.Helper()
	if x == nil {
		return
	}
	mfs, err := x.reg.Gather()
	if err != nil {
		b.Fatalf("gather metrics: %v", err)
	}
	var committed, aborted, secs, count float64
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			switch mf.GetName() {
			case "redrive_transactions_total":
				for _, l := range mt.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "committed" {
						committed += mt.GetCounter().GetValue()
					} else if l.GetName() == "result" && l.GetValue() == "aborted" {
						aborted += mt.GetCounter().GetValue()
					}
				}
			case "redrive_transaction_seconds":
				secs += mt.GetHistogram().GetSampleSum()
				count += float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	b.ReportMetric(committed, "txns")
	b.ReportMetric(aborted, "aborted-txns")
	if count > 0 {
		b.ReportMetric(secs/count*1000, "txn-ms")
	}
	if committed > 0 {
		b.ReportMetric(float64(x.outcomes.Load())/committed, "outcomes/txn")
	}
	if c := x.lastCall.Load(); c > 0 {
		b.ReportMetric(float64(x.m.last.Load()-c)/1e6, "tail-ms")
	}
	for _, r := range txnRequests {
		if n := x.reqs[r.key].Load(); n > 0 {
			b.ReportMetric(float64(n), r.name+"-n")
			b.ReportMetric(float64(x.reqNanos[r.key].Load())/float64(n)/1e6, r.name+"-ms")
		}
	}
	if aborted > 0 {
		b.Errorf("%.0f transactions aborted: the completion time (the first EndTxn after the last acknowledgement) may be an abort's", aborted)
	}
	got := committedResults(b, e, x.m.topic, int(x.m.n))
	b.ReportMetric(float64(got), "committed-results")
}

// committedResults reads topic from its start with a read_committed
// consumer until n records arrived (or 2 minutes passed), then 1 s more
// for extras, and returns how many it read. It fails b unless they are
// the n records offered (keys k0…k<n-1>), each once.
func committedResults(b *testing.B, e *pipetest.Env, topic string, n int) int {
	b.Helper()
	cl := e.Cluster.Client(b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	seen := make([]bool, n)
	got, dups, foreign := 0, 0, 0
	deadline := time.Now().Add(2 * time.Minute)
	var settle time.Time
	for {
		now := time.Now()
		if settle.IsZero() && got >= n {
			settle = now.Add(time.Second)
		}
		if !settle.IsZero() && !now.Before(settle) || now.After(deadline) {
			break
		}
		end := deadline
		if !settle.IsZero() {
			end = settle
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got++
			i, err := strconv.Atoi(strings.TrimPrefix(string(r.Key), "k"))
			switch {
			case err != nil || i < 0 || i >= n:
				foreign++
			case seen[i]:
				dups++
			default:
				seen[i] = true
			}
		})
	}
	if got != n || dups > 0 || foreign > 0 {
		b.Errorf("read_committed %s: %d records (%d duplicates, %d foreign keys), want the %d offered, each once", topic, got, dups, foreign, n)
	}
	return got
}

func BenchmarkCeiling(b *testing.B) {
	n := *benchRecords
	e := newEnv(b, []time.Duration{time.Second}, 6)
	preload(b, e, e.P.Topic, n, "ok")
	m := newMeter(e.P.Results, n)
	b.ResetTimer()
	m.begin()
	cl := e.Cluster.Client(b, kgo.ConsumerGroup(e.P.GroupID()+".ceiling"), kgo.ConsumeTopics(e.P.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ProducerLinger(2*time.Millisecond),
		kgo.WithHooks(m))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			var wg sync.WaitGroup
			fs.EachRecord(func(r *kgo.Record) {
				wg.Add(1)
				cl.Produce(ctx, &kgo.Record{Topic: e.P.Results, Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil && ctx.Err() == nil {
						b.Errorf("produce: %v", err)
					}
					wg.Done()
				})
			})
			wg.Wait()
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				b.Errorf("commit: %v", err)
				return
			}
		}
	}()
	m.wait(b, 10*time.Minute)
	b.StopTimer()
	m.report(b)
}

type noop struct{}

func (noop) Handle(context.Context, *processor.Request) processor.Outcome {
	return processor.Outcome{Kind: processor.Success}
}

// retryPathOnly turns the breaker off for a run in which every record
// fails once: to the breaker that is a failing service (flow control's
// own rows are BenchmarkFlow's); these rows measure the retry path.
func retryPathOnly(e *pipetest.Env) { e.P.Breaker = processor.Breaker{Disabled: true} }

func tune(e *pipetest.Env) {
	e.P.Concurrency = *benchConc
	e.P.MaxInflight = *benchInflight
}

func BenchmarkHappyPath(b *testing.B) {
	n := *benchRecords
	e := newEnv(b, []time.Duration{time.Second}, 6)
	tune(e)
	preload(b, e, e.P.Topic, n, "ok")
	m := newMeter(e.P.Results, n)
	eos := delivery(b, e, m)
	b.ResetTimer()
	m.begin()
	e.Start(eos.handler(noop{}), withMeter(m))
	m.wait(b, 10*time.Minute)
	b.StopTimer()
	m.report(b)
	eos.report(b, e)
}

// failOnce fails every request's first attempt and records lateness
// (handled-at minus redrive-due) of the second.
type failOnce struct {
	mu   sync.Mutex
	late []time.Duration
}

func (f *failOnce) Handle(ctx context.Context, r *processor.Request) processor.Outcome {
	if *benchDelay > 0 {
		select {
		case <-time.After(*benchDelay):
		case <-ctx.Done():
		}
	}
	if r.Attempt == 1 {
		return processor.Outcome{Kind: processor.Transient, Code: "http_503"}
	}
	l := time.Since(r.Meta.Due)
	f.mu.Lock()
	f.late = append(f.late, l)
	f.mu.Unlock()
	return processor.Outcome{Kind: processor.Success}
}

func (f *failOnce) report(b *testing.B) {
	b.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.late) == 0 {
		return
	}
	sort.Slice(f.late, func(i, j int) bool { return f.late[i] < f.late[j] })
	q := func(p float64) float64 { return float64(f.late[int(p*float64(len(f.late)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "late-p50-ms")
	b.ReportMetric(q(0.99), "late-p99-ms")
	b.ReportMetric(float64(f.late[len(f.late)-1].Microseconds())/1000, "late-max-ms")
	if f.late[0] < 0 {
		b.Errorf("a retry was handled %v before its due time", -f.late[0])
	}
}

func BenchmarkFailurePath(b *testing.B) {
	n := *benchRecords
	e := newEnv(b, []time.Duration{time.Second}, 6)
	tune(e)
	retryPathOnly(e)
	e.P.Schedule.Jitter = 0
	if *benchMaxWaiting > 0 {
		e.P.MaxWaiting = *benchMaxWaiting
	}
	preload(b, e, e.P.Topic, n, "fail-once")
	h := &failOnce{}
	m := newMeter(e.P.Results, n)
	eos := delivery(b, e, m)
	b.ResetTimer()
	m.begin()
	e.Start(eos.handler(h), withMeter(m))
	m.wait(b, 10*time.Minute)
	b.StopTimer()
	m.report(b)
	h.report(b)
	eos.report(b, e)
}

// BenchmarkFailurePaced offers fail-once records at -bench.pacedrate, below
// the processor's capacity, to a running processor: its lateness is the
// scheduler's (pause, resume, fetch), not a queue's.
func BenchmarkFailurePaced(b *testing.B) {
	n, rate := *benchPacedRecs, *benchPacedRate
	e := newEnv(b, []time.Duration{time.Second}, 6)
	tune(e)
	retryPathOnly(e)
	e.P.Schedule.Jitter = 0
	h := &failOnce{}
	m := newMeter(e.P.Results, n)
	e.Start(h, withMeter(m))
	time.Sleep(3 * time.Second) // joined
	cl := e.Cluster.Client(b, kgo.ProducerLinger(time.Millisecond))
	val := make([]byte, 200)
	copy(val, "fail-once")
	b.ResetTimer()
	m.begin()
	const tick = 10 * time.Millisecond
	per := max(1, rate/100)
	start := time.Now()
	for sent := 0; sent < n; {
		for i := 0; i < per && sent < n; i++ {
			cl.Produce(context.Background(), &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("k%d", sent)), Value: val}, nil)
			sent++
		}
		time.Sleep(time.Until(start.Add(time.Duration(sent/per) * tick)))
	}
	m.wait(b, 10*time.Minute)
	b.StopTimer()
	b.ReportMetric(float64(rate), "offered-records/s")
	m.report(b)
	h.report(b)
}

// BenchmarkSlowHandler runs the HTTP handler against a local server that
// answers 200 after -bench.slowdelay, with -bench.slowconcurrency handler
// calls at once: Little's law bounds it at concurrency/delay records/s.
// The handler's Options are the defaults (its own pooled client).
func BenchmarkSlowHandler(b *testing.B) {
	n, conc, delay := *benchSlow, *benchSlowConc, *benchSlowDelay
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(delay)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	h, err := httphandler.New(httphandler.Options{URL: srv.URL, Timeout: 30 * time.Second, Concurrency: *benchSlowConc})
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b, []time.Duration{time.Second}, 6)
	e.P.Concurrency = conc
	e.P.MaxInflight = 4 * conc
	preload(b, e, e.P.Topic, n, "slow")
	m := newMeter(e.P.Results, n)
	b.ResetTimer()
	m.begin()
	e.Start(h, withMeter(m))
	m.wait(b, 10*time.Minute)
	b.StopTimer()
	m.report(b)
	b.ReportMetric(float64(conc)/delay.Seconds(), "bound-records/s")
}

// BenchmarkScaling runs the happy and failure paths with 1, 2 and 4
// processor instances (processor.New each, one process, one group) on 12
// partitions. They share the process's cores.
func BenchmarkScaling(b *testing.B) {
	for _, path := range []string{"happy", "failure"} {
		for _, k := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/instances=%d", path, k), func(b *testing.B) {
				n := *benchRecords
				e := newEnv(b, []time.Duration{time.Second}, 12)
				tune(e)
				e.P.Schedule.Jitter = 0
				var h processor.Handler = noop{}
				fo := &failOnce{}
				value := "ok"
				if path == "failure" {
					h, value = fo, "fail-once"
					retryPathOnly(e)
				}
				preload(b, e, e.P.Topic, n, value)
				m := newMeter(e.P.Results, n)
				b.ResetTimer()
				m.begin()
				for i := range k {
					e.Start(h, withMeter(m), func(c *processor.Config) { c.Instance = fmt.Sprintf("bench-%d", i) })
				}
				m.wait(b, 10*time.Minute)
				b.StopTimer()
				m.report(b)
				fo.report(b)
				// Rebalances while the instances join must not duplicate:
				// a revoke waits for in-flight work and commits it.
				time.Sleep(500 * time.Millisecond)
				if extra := m.acked.Load() - m.n; extra > 0 {
					b.ReportMetric(float64(extra), "duplicates")
				}
			})
		}
	}
}

func BenchmarkHeaderCodec(b *testing.B) {
	m := retry.Meta{ID: "solve/3/12345", Attempt: 2, Due: time.Now(), Tier: "5s", HasOrigin: true, OriginTopic: "solve", OriginPartition: 3, OriginOffset: 12345,
		OriginTimestamp: time.Now(), FirstErrorAt: time.Now(), LastErrorAt: time.Now(), Error: "503 Service Unavailable", ErrorCode: "http_503", ErrorClass: retry.ClassTransient}
	user := []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "trace", Value: []byte("abc")}}
	b.ReportAllocs()
	for b.Loop() {
		hs := retry.Encode(m, user)
		if _, _, err := retry.Decode(hs); err != nil {
			b.Fatal(err)
		}
	}
}

// The outage benchmark's settings (BenchmarkOutage).
var (
	benchOutageRun  = flag.Duration("bench.outagerun", 100*time.Second, "how long the outage benchmark offers records")
	benchOutageLen  = flag.Duration("bench.outage", 60*time.Second, "the outage in the middle of the run: the handler answers 503 (Retry)")
	benchOutageRate = flag.Int("bench.outagerate", 2000, "records/s offered by the outage benchmark (in batches every 100 ms)")
	benchOpenFor    = flag.Duration("bench.openfor", 2*time.Second, "Breaker.OpenFor of the outage benchmark's breaker=on run")
	benchMaxOpen    = flag.Duration("bench.maxopen", 4*time.Second, "Breaker.MaxOpen of the outage benchmark's breaker=on run")
)

var errOutage = errors.New("503 Service Unavailable (benchmark outage)")

// outageRun is one run of BenchmarkOutage: the handler (503 during the
// outage, success otherwise), the kgo hook that sees the outcome records
// acknowledged, and the offered records. Times are offsets from the start
// of the offered load.
type outageRun struct {
	start          atomic.Int64 // unix ns: the first batch offered
	from, to       time.Duration
	firstOK        time.Duration // the first successful call after the outage; -1: none
	results, dlq   string
	n              int
	mu             sync.Mutex
	calls, wasted  int
	offeredAt      []time.Duration // per record k<i>
	resultAt       []time.Duration // first acknowledgement of its result; -1: none
	deadAt         []time.Duration // of its dead letter; -1: none
	unique, acks   int             // records with a final outcome; all final outcome acks
	foreign        int             // outcome acks whose key is not one of ours
	done           chan struct{}
	breakerSamples []breakerSample
}

type breakerSample struct {
	at    time.Duration
	state string // LineStatus.State
	open  bool   // LineStatus.Breaker == "open"
	since time.Time
}

var _ kgo.HookProduceRecordUnbuffered = (*outageRun)(nil)

func newOutageRun(results, dlq string, n int, from, to time.Duration) *outageRun {
	o := &outageRun{from: from, to: to, firstOK: -1, results: results, dlq: dlq, n: n, done: make(chan struct{}),
		offeredAt: make([]time.Duration, n), resultAt: make([]time.Duration, n), deadAt: make([]time.Duration, n)}
	for i := range n {
		o.resultAt[i], o.deadAt[i] = -1, -1
	}
	return o
}

func (o *outageRun) since() time.Duration { return time.Since(time.Unix(0, o.start.Load())) }

func (o *outageRun) Handle(context.Context, *processor.Request) processor.Outcome {
	at := o.since()
	down := at >= o.from && at < o.to
	o.mu.Lock()
	o.calls++
	if down {
		o.wasted++
	} else if at >= o.to && o.firstOK < 0 {
		o.firstOK = at
	}
	o.mu.Unlock()
	if down {
		return processor.Retry("http_503", errOutage)
	}
	return processor.Succeed(nil)
}

func (o *outageRun) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil || (r.Topic != o.results && r.Topic != o.dlq) {
		return
	}
	at := o.since()
	i, perr := strconv.Atoi(strings.TrimPrefix(string(r.Key), "k"))
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acks++
	if perr != nil || i < 0 || i >= o.n {
		o.foreign++
		return
	}
	if o.resultAt[i] < 0 && o.deadAt[i] < 0 {
		o.unique++
		if o.unique == o.n {
			close(o.done)
		}
	}
	if r.Topic == o.results && o.resultAt[i] < 0 {
		o.resultAt[i] = at
	} else if r.Topic == o.dlq && o.deadAt[i] < 0 {
		o.deadAt[i] = at
	}
}

// sampleStatus calls f with the first pipeline's status every 100 ms
// until ctx ends.
func sampleStatus(ctx context.Context, pr *processor.Processor, f func(processor.PipelineStatus)) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st := pr.Status(); len(st.Pipelines) > 0 {
			f(st.Pipelines[0])
		}
	}
}

// watch samples the line's state every 100 ms until ctx ends.
func (o *outageRun) watch(ctx context.Context, pr *processor.Processor) {
	sampleStatus(ctx, pr, func(p processor.PipelineStatus) {
		l := p.Line
		s := breakerSample{at: o.since(), state: l.State, open: l.Breaker == "open", since: l.BreakerSince}
		o.mu.Lock()
		o.breakerSamples = append(o.breakerSamples, s)
		o.mu.Unlock()
	})
}

// report adds the outage metrics:
//
//	offered, results, dead-letters, lost (offered − records with a result
//	or a dead letter; must be 0), duplicates (outcome acks beyond one per
//	record), calls, wasted-calls (handler calls during the outage);
//	first-success-s: from the end of the outage to the first handler call
//	  that succeeded;
//	full-rate-s: from the end of the outage to the start of the first
//	  100 ms interval of the offering grid (each starts with a batch
//	  offered) in which results were acknowledged at ≥ 90 % of the offered
//	  rate (the backlog's burst counts); absent if never (a 1 s window
//	  would be met early by a burst at its end);
//	backlog-s: from the end of the outage until every record offered
//	  before it had its final outcome (result or dead letter) acknowledged;
//	max-wait-s: the longest time from offering a record to its final
//	  outcome's acknowledgement;
//	drain-records/s: the records offered before the end of the outage
//	  whose final outcome came after it, over the time from the first
//	  success to backlog-s (the rate the held backlog drains at, to be
//	  set beside the happy path's);
//	reopens-after: breaker openings seen after the line ran again once
//	  the outage was over (a burst of failures on recovery);
//	breaker-open-after-s (from the start of the outage), closed-after-s
//	  (from its end, until the line was running again), breaker-opens and
//	  stopped-s (time the line was seen stopped), from 100 ms status samples.
func (o *outageRun) report(b *testing.B, rate float64) {
	b.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var results, dead, drained int
	var resAt []time.Duration
	backlog, maxWait := time.Duration(0), time.Duration(0)
	for i := range o.n {
		final := time.Duration(-1)
		if a := o.resultAt[i]; a >= 0 {
			results++
			resAt = append(resAt, a)
			final = a
		}
		if a := o.deadAt[i]; a >= 0 {
			dead++
			if final < 0 || a < final {
				final = a
			}
		}
		if final < 0 {
			continue
		}
		maxWait = max(maxWait, final-o.offeredAt[i])
		if o.offeredAt[i] < o.to {
			backlog = max(backlog, final-o.to)
			if final >= o.to {
				drained++
			}
		}
	}
	lost := o.n - o.unique
	b.ReportMetric(float64(o.n), "offered")
	b.ReportMetric(rate, "offered-records/s")
	b.ReportMetric(float64(results), "results")
	b.ReportMetric(float64(dead), "dead-letters")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(o.acks-o.unique-o.foreign), "duplicates")
	b.ReportMetric(float64(o.calls), "calls")
	b.ReportMetric(float64(o.wasted), "wasted-calls")
	b.ReportMetric(backlog.Seconds(), "backlog-s")
	b.ReportMetric(maxWait.Seconds(), "max-wait-s")
	if lost > 0 {
		b.Errorf("%d of %d offered records have neither a result nor a dead letter", lost, o.n)
	}
	if o.foreign > 0 {
		b.Errorf("%d outcome records with a key not offered by the benchmark", o.foreign)
	}

	if o.firstOK >= 0 {
		b.ReportMetric((o.firstOK - o.to).Seconds(), "first-success-s")
		if d := backlog - (o.firstOK - o.to); d > 0 && drained > 0 {
			b.ReportMetric(float64(drained)/d.Seconds(), "drain-records/s")
		}
	}
	// Results per 100 ms interval of the offering grid (each interval
	// starts with a batch offered).
	const step = 100 * time.Millisecond
	bins := map[time.Duration]int{}
	for _, a := range resAt {
		bins[a/step]++
	}
	need := 0.9 * rate * step.Seconds()
	full := false
	for k := o.to / step; len(resAt) > 0 && k <= resAt[len(resAt)-1]/step; k++ {
		if float64(bins[k]) >= need {
			b.ReportMetric((k*step - o.to).Seconds(), "full-rate-s")
			full = true
			break
		}
	}
	if !full {
		b.Logf("results never reached 90%% of %.0f rec/s in a 100 ms interval after the outage", rate)
	}

	var opens int
	var prevSince time.Time
	openAfter, closedAfter, stopped := time.Duration(-1), time.Duration(-1), time.Duration(0)
	for _, s := range o.breakerSamples {
		if s.state == "stopped" {
			stopped += 100 * time.Millisecond
		}
		if s.open && !s.since.Equal(prevSince) {
			opens++
			prevSince = s.since
		}
		if s.open && openAfter < 0 && s.at >= o.from {
			openAfter = s.at - o.from
		}
		if s.at >= o.to && closedAfter < 0 && s.state == "running" {
			closedAfter = s.at - o.to
		}
	}
	reopens, running := 0, false
	prevSince = time.Time{}
	for _, s := range o.breakerSamples {
		if s.at < o.to {
			continue
		}
		running = running || s.state == "running"
		if running && s.open && !s.since.Equal(prevSince) {
			reopens++
			prevSince = s.since
		}
	}
	if opens > 0 {
		b.ReportMetric(float64(reopens), "reopens-after")
		b.ReportMetric(float64(opens), "breaker-opens")
		b.ReportMetric(openAfter.Seconds(), "breaker-open-after-s")
		b.ReportMetric(stopped.Seconds(), "stopped-s")
		if closedAfter >= 0 {
			b.ReportMetric(closedAfter.Seconds(), "closed-after-s")
		}
	}
}

// BenchmarkOutage offers records at -bench.outagerate for -bench.outagerun
// (every 100 ms a batch) to a running processor whose in-process handler
// answers Retry("http_503") during -bench.outage in the middle of the run
// and succeeds otherwise; once with the circuit breaker off and once on
// (OpenFor -bench.openfor, MaxOpen -bench.maxopen, the rest default).
// Both runs have tiers 1s and 5s, 3 attempts, no jitter: a record's
// attempts span 6 s, far less than the outage, so without the breaker
// every record whose first attempt falls in the outage's first 14 s is
// dead-lettered (exhausted). The metrics are outageRun.report's.
func BenchmarkOutage(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "breaker=off"
		if on {
			name = "breaker=on"
		}
		b.Run(name, func(b *testing.B) {
			run, outage := *benchOutageRun, *benchOutageLen
			const tick = 100 * time.Millisecond
			per := max(1, *benchOutageRate/10)
			ticks := int(run / tick)
			n, rate := ticks*per, float64(per)*float64(time.Second/tick)
			from := (run - outage) / 2
			e := newEnv(b, []time.Duration{time.Second, 5 * time.Second}, 6)
			tune(e)
			e.P.Schedule.Jitter = 0
			// off: the baseline the breaker's row is measured against.
			e.P.Breaker = processor.Breaker{Disabled: true}
			if on {
				e.P.Breaker = processor.Breaker{OpenFor: *benchOpenFor, MaxOpen: *benchMaxOpen}
			}
			o := newOutageRun(e.P.Results, e.P.DLQ, n, from, from+outage)
			cfg := e.Config()
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithHooks(o))
			pr, stop := pipetest.RunProcessor(b, cfg, o)
			if !kafkatest.Eventually(30*time.Second, func() bool {
				st := pr.Status()
				return len(st.Pipelines) > 0 && st.Pipelines[0].Joined && st.Pipelines[0].Partitions > 0
			}) {
				b.Fatal("the processor did not join within 30s")
			}
			cl := e.Cluster.Client(b, kgo.ProducerLinger(time.Millisecond))
			val := make([]byte, benchValueBytes)
			copy(val, "outage")
			var produceErr atomic.Value
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			b.ResetTimer()
			cpu0 := cpuTime()
			resetPeakRSS()
			start := time.Now()
			o.start.Store(start.UnixNano())
			go o.watch(ctx, pr)
			for k := range ticks {
				time.Sleep(time.Until(start.Add(time.Duration(k) * tick)))
				at := time.Since(start)
				for j := range per {
					i := k*per + j
					o.mu.Lock()
					o.offeredAt[i] = at
					o.mu.Unlock()
					cl.Produce(ctx, &kgo.Record{Topic: e.P.Topic, Key: []byte("k" + strconv.Itoa(i)), Value: val}, func(_ *kgo.Record, err error) {
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
			select {
			case <-o.done:
			case <-time.After(2*time.Minute + *benchMaxOpen):
				b.Errorf("outcomes still missing 2m after the last record was offered")
			}
			b.StopTimer()
			time.Sleep(500 * time.Millisecond) // duplicates, if any
			cancel()
			if err := stop(); err != nil {
				b.Errorf("stop: %v", err)
			}
			o.report(b, rate)
			b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(n)*1e6, "cpu-s/M")
			if rss := peakRSSMB(); rss > 0 {
				b.ReportMetric(rss, "peak-rss-MB")
			}
		})
	}
}
