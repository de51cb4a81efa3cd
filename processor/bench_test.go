package processor_test

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// Run with: go test ./processor -run '^$' -bench . -benchtime 1x
// (make bench does, against the real broker). Each benchmark moves
// -bench.records records of 200 bytes through a 6-partition topic once and
// reports records/s; compare them side by side with BenchmarkCeiling, raw
// franz-go consume→produce on the same broker.
var (
	benchRecords    = flag.Int("bench.records", 50000, "records per benchmark run")
	benchMaxWaiting = flag.Int("bench.maxwaiting", 0, "MaxWaiting for the failure path (0: default)")
)

func preload(b *testing.B, e *env, topic string, n int, value string) {
	b.Helper()
	val := make([]byte, 200)
	copy(val, value)
	for i := range val[len(value):] {
		val[len(value)+i] = ' '
	}
	const batch = 5000
	for i := 0; i < n; i += batch {
		var rs []*kgo.Record
		for j := i; j < i+batch && j < n; j++ {
			rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", j)), Value: val})
		}
		e.produce(rs...)
	}
}

// waitCount polls topic until n records arrived; returns when the first
// and the last arrived (broker append times).
func waitCount(b *testing.B, e *env, topic string, n int, timeout time.Duration) (first, last time.Time) {
	b.Helper()
	cl := e.c.Client(b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	got := 0
	deadline := time.Now().Add(timeout)
	for got < n {
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d records after %v", topic, got, n, timeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			if first.IsZero() || r.Timestamp.Before(first) {
				first = r.Timestamp
			}
			if r.Timestamp.After(last) {
				last = r.Timestamp
			}
			got++
		})
	}
	return first, last
}

func BenchmarkCeiling(b *testing.B) {
	n := *benchRecords
	e := newEnv(b, []time.Duration{time.Second}, 6)
	preload(b, e, e.p.Topic, n, "ok")
	b.ResetTimer()
	start := time.Now()
	cl := e.c.Client(b, kgo.ConsumerGroup(e.p.GroupID()+".ceiling"), kgo.ConsumeTopics(e.p.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ProducerLinger(2*time.Millisecond))
	var done atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for done.Load() < int64(n) {
		fs := cl.PollFetches(ctx)
		var wg sync.WaitGroup
		fs.EachRecord(func(r *kgo.Record) {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: e.p.Results, Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Errorf("produce: %v", err)
				}
				done.Add(1)
				wg.Done()
			})
		})
		wg.Wait()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatalf("commit: %v", err)
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
}

type noop struct{}

func (noop) Handle(context.Context, *processor.Request) processor.Outcome {
	return processor.Outcome{Kind: processor.Success}
}

func BenchmarkHappyPath(b *testing.B) {
	n := *benchRecords
	e := newEnv(b, []time.Duration{time.Second}, 6)
	e.p.Concurrency = 256
	preload(b, e, e.p.Topic, n, "ok")
	b.ResetTimer()
	start := time.Now()
	e.start(noop{})
	waitCount(b, e, e.p.Results, n, 10*time.Minute)
	el := time.Since(start)
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
}

// failOnce fails every request's first attempt and records lateness.
type failOnce struct {
	mu   sync.Mutex
	late []time.Duration
}

func (f *failOnce) Handle(_ context.Context, r *processor.Request) processor.Outcome {
	if r.Attempt == 1 {
		return processor.Outcome{Kind: processor.Transient, Code: "http_503"}
	}
	f.mu.Lock()
	f.late = append(f.late, time.Since(r.Meta.Due))
	f.mu.Unlock()
	return processor.Outcome{Kind: processor.Success}
}

func BenchmarkFailurePath(b *testing.B) {
	n := *benchRecords
	e := newEnv(b, []time.Duration{time.Second}, 6)
	e.p.Concurrency = 256
	e.p.Schedule.Jitter = 0
	if *benchMaxWaiting > 0 {
		e.p.MaxWaiting = *benchMaxWaiting
	}
	preload(b, e, e.p.Topic, n, "fail-once")
	h := &failOnce{}
	b.ResetTimer()
	start := time.Now()
	e.start(h)
	waitCount(b, e, e.p.Results, n, 10*time.Minute)
	el := time.Since(start)
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
	h.mu.Lock()
	defer h.mu.Unlock()
	sort.Slice(h.late, func(i, j int) bool { return h.late[i] < h.late[j] })
	q := func(p float64) float64 { return float64(h.late[int(p*float64(len(h.late)-1))].Milliseconds()) }
	b.ReportMetric(q(0.5), "late-p50-ms")
	b.ReportMetric(q(0.99), "late-p99-ms")
	b.ReportMetric(float64(h.late[len(h.late)-1].Milliseconds()), "late-max-ms")
	if h.late[0] < 0 {
		b.Errorf("a retry was handled %v before its due time", -h.late[0])
	}
}

func BenchmarkHeaderCodec(b *testing.B) {
	m := retry.Meta{ID: "solve/3/12345", Attempt: 2, Due: time.Now(), Tier: "5s", HasOrigin: true, OriginTopic: "solve", OriginPartition: 3, OriginOffset: 12345,
		OriginTimestamp: time.Now(), FirstErrorAt: time.Now(), LastErrorAt: time.Now(), Error: "503 Service Unavailable", ErrorCode: "http_503", ErrorClass: retry.ClassTransient}
	user := []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "trace", Value: []byte("abc")}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		hs := retry.Encode(m, user)
		if _, _, err := retry.Decode(hs); err != nil {
			b.Fatal(err)
		}
	}
}
