package analyzer_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

var benchDeadLetters = flag.Int("bench.deadletters", 100000, "dead letters in the DLQ the analyzer rebuilds its statistics from")

// BenchmarkRebuild fills a 6-partition DLQ with -bench.deadletters dead
// letters (built by dlq.Build: 200-byte values, the full redrive header set,
// 8 error codes and 3 reasons), then starts an analyzer and times it from
// Run to GET /api/stats reporting the pipeline ready with every dead letter
// counted. Reports records/s of the rebuild and of the fill (produce).
// Run with -benchtime 1x (make bench does, against the real broker).
func BenchmarkRebuild(b *testing.B) {
	n := *benchDeadLetters
	c := kafkatest.New(b)
	base := kafkatest.Topic(b, "anbench")
	dlqTopic := base + ".dlq"
	c.CreateTopic(b, base, 6, nil)
	c.CreateTopic(b, dlqTopic, 6, nil)

	cl := c.Client(b, kgo.ProducerLinger(10*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200000))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	value := make([]byte, 200)
	for i := range value {
		value[i] = 'v'
	}
	codes := []string{"http_503", "http_500", "timeout", "connect", "ERROR_NO_SLOT_AVAILABLE", "http_429", "bad_request", "http_404"}
	reasons := []string{"exhausted", "permanent", "invalid"}
	t0 := time.Now().Add(-time.Hour)
	user := []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}
	var failed atomic.Value
	fillStart := time.Now()
	for i := 0; i < n; i++ {
		code := codes[i%len(codes)]
		src := &kgo.Record{Topic: base, Partition: int32(i % 6), Offset: int64(i / 6), Key: []byte("key-" + strconv.Itoa(i)), Value: value, Timestamp: t0}
		m := retry.Meta{ID: fmt.Sprintf("%s/%d/%d", base, i%6, i/6), Attempt: 3, HasOrigin: true, OriginTopic: base, OriginPartition: int32(i % 6),
			OriginOffset: int64(i / 6), OriginTimestamp: t0, FirstErrorAt: t0, LastErrorAt: t0.Add(time.Minute),
			ErrorClass: retry.ClassTransient, ErrorCode: code, Error: "POST http://solver:8080/solve: " + code, Reason: reasons[i%len(reasons)]}
		r := dlq.Build(src, m, user, dlq.BuildOptions{Topic: dlqTopic, Group: "redrive." + base, Instance: "bench"})
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatalf("flush: %v", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("produce: %v", err)
	}
	fill := time.Since(fillStart)

	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Pipelines:  []analyzer.Pipeline{{Name: base, Topic: base, DLQ: dlqTopic}},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler(""))
	defer srv.Close()
	b.ResetTimer()
	start := time.Now()
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() {
		rcancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}()
	var total int64
	for {
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("statistics not ready after 10m (%d of %d counted)", total, n)
		}
		var sr analyzer.StatsResponse
		resp, err := http.Get(srv.URL + "/api/stats")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&sr)
			resp.Body.Close()
		}
		if err == nil && len(sr.Pipelines) == 1 {
			total = sr.Pipelines[0].Stats.Total
			if sr.Pipelines[0].Ready {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	if total != int64(n) {
		b.Errorf("ready with %d dead letters counted, want %d", total, n)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
	b.ReportMetric(float64(n)/fill.Seconds(), "fill-records/s")
	b.ReportMetric(float64(n), "dead-letters")
}
