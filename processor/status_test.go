package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// TestStatusShowsLiveState runs a processor whose handler holds some
// records and sends others to a 30 s tier, and checks GET /api/pipelines
// (Status) reports them: in flight, waiting per tier, the handler's p99;
// and that consumer lag is published within 15 s of start.
func TestStatusShowsLiveState(t *testing.T) {
	e := newEnv(t, []time.Duration{30 * time.Second}, 2)
	release := make(chan struct{})
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if strings.HasPrefix(string(req.Record.Key), "hold") {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return processor.Outcome{Kind: processor.Success}
		}
		time.Sleep(20 * time.Millisecond)
		return processor.Outcome{Kind: processor.Transient, Code: "busy", Err: fmt.Errorf("busy")}
	})
	reg := prometheus.NewRegistry()
	pr, err := processor.New(processor.Config{
		Brokers: e.Cluster.Brokers, Pipelines: []processor.Pipeline{e.P}, SessionTimeout: 6 * time.Second,
		ShutdownGrace: 2 * time.Second, CommitInterval: 200 * time.Millisecond, Registerer: reg, Instance: "status-test",
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pr.StatusHandler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	defer func() {
		close(release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Before any record: the pipeline is there, all zero.
	s := pr.Status()
	if s.Instance != "status-test" || len(s.Pipelines) != 1 || s.Pipelines[0].Name != e.P.Name || len(s.Pipelines[0].Tiers) != 1 ||
		s.Pipelines[0].Tiers[0].Name != "30s" || s.Pipelines[0].Tiers[0].Topic != e.P.TierTopics()[0] || s.Pipelines[0].Inflight != 0 {
		t.Fatalf("Status at start = %+v", s)
	}

	start := time.Now()
	var rs []*kgo.Record
	for i := 0; i < 3; i++ {
		rs = append(rs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("hold-%d", i)), Value: []byte("x")})
	}
	for i := 0; i < 4; i++ {
		rs = append(rs, &kgo.Record{Topic: e.P.Topic, Key: []byte(fmt.Sprintf("retry-%d", i)), Value: []byte("x")})
	}
	e.Produce(rs...)

	var got processor.Status
	ok := kafkatest.Eventually(30*time.Second, func() bool {
		resp, err := http.Get(srv.URL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		got = processor.Status{}
		if json.NewDecoder(resp.Body).Decode(&got) != nil || len(got.Pipelines) != 1 {
			return false
		}
		p := got.Pipelines[0]
		return p.Joined && p.Inflight == 3 && p.Waiting == 4 && p.Tiers[0].Waiting == 4 && p.HandlerCalls >= 4
	})
	if !ok {
		t.Fatalf("GET /api/pipelines never showed 3 in flight, 4 waiting in tier 30s, 4 handler calls: %+v", got)
	}
	p := got.Pipelines[0]
	// The transient calls took at least 20 ms: the p99 is at least the
	// bucket below it. The upper bound is loose: a loaded machine's sleeps
	// overshoot (a 25 ms bound failed under CPU load).
	if p.HandlerP99Seconds < 0.01 || p.HandlerP99Seconds > 1 {
		t.Errorf("handler p99 = %v s, want 10 ms to 1 s for 20 ms calls", p.HandlerP99Seconds)
	}
	if p.Partitions != 4 || p.Group != "redrive."+e.P.Name || p.DLQ != e.P.DLQ {
		t.Errorf("partitions %d (want 4: main and tier, 2 each), group %q, dlq %q", p.Partitions, p.Group, p.DLQ)
	}

	// The held records are not committed: the lag loop reports them on the
	// main topic well within 15 s of start.
	if !kafkatest.Eventually(15*time.Second-time.Since(start), func() bool {
		v, _ := gaugeValue(t, reg, "redrive_consumer_lag")
		return v >= 3
	}) {
		v, _ := gaugeValue(t, reg, "redrive_consumer_lag")
		t.Errorf("redrive_consumer_lag = %v 15 s after start, want >= 3 (the held records)", v)
	}
}
