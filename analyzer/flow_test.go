package analyzer_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/topics"
)

// TestFlowFromOffsets checks GET /api/pipelines against offsets set by
// hand: End is what was written, Waiting is End minus the processors'
// group's commits (the log start where it committed none), and rates are
// end-offset deltas over time.
func TestFlowFromOffsets(t *testing.T) {
	c := kafkatest.New(t)
	main := kafkatest.Topic(t, "flow")
	tier, results, dlqT := main+".retry.1s", main+".results", main+".dlq"
	for _, n := range []string{main, tier, results, dlqT} {
		c.CreateTopic(t, n, 2, nil)
	}
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(topic string, n int) {
		t.Helper()
		var rs []*kgo.Record
		for i := 0; i < n; i++ {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("x")})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(main, 10)
	produce(tier, 4)
	produce(results, 6)
	produce(dlqT, 2)
	// The processors committed 3 + 3 of main, nothing of the tier.
	adm := kadm.NewClient(cl)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: main, Partition: 0, At: 3, LeaderEpoch: -1})
	os.Add(kadm.Offset{Topic: main, Partition: 1, At: 3, LeaderEpoch: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := adm.CommitAllOffsets(ctx, "redrive.flow", os)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	srv := serveFlow(t, c, analyzer.Pipeline{Name: "flow", Topic: main, DLQ: dlqT, Results: results,
		Tiers: []analyzer.Tier{{Name: "1s", Topic: tier}}})

	get := func() analyzer.Flow {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/pipelines")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var fr analyzer.FlowResponse
		if err := json.NewDecoder(resp.Body).Decode(&fr); err != nil || len(fr.Pipelines) != 1 {
			t.Fatalf("GET /api/pipelines: %v %+v", err, fr)
		}
		return fr.Pipelines[0]
	}
	var f analyzer.Flow
	deadline := time.Now().Add(20 * time.Second)
	for f = get(); f.SampledAt == "" || f.DLQ.End != 2; f = get() {
		if time.Now().After(deadline) {
			t.Fatalf("no sample within 20s: %+v", f)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if f.Error != "" {
		t.Errorf("error %q", f.Error)
	}
	if f.Group != "redrive.flow" || f.Main.Topic != main || f.Main.End != 10 || f.Main.Committed != 6 || f.Main.Waiting != 4 {
		t.Errorf("main = %+v, want end 10, committed 6, waiting 4 in group redrive.flow", f.Main)
	}
	if len(f.Tiers) != 1 || f.Tiers[0].Name != "1s" || f.Tiers[0].End != 4 || f.Tiers[0].Waiting != 4 {
		t.Errorf("tiers = %+v, want 1s with 4 written, 4 waiting (nothing committed)", f.Tiers)
	}
	if f.Results == nil || f.Results.End != 6 || f.Results.Group != "" || f.Results.Waiting != 0 {
		t.Errorf("results = %+v, want 6 written, no group", f.Results)
	}
	if f.DLQ.Group != "redrive.flow.analyzer" {
		t.Errorf("dlq group %q", f.DLQ.Group)
	}

	// Writing more shows as a rate of the main topic over the window.
	produce(main, 40)
	deadline = time.Now().Add(20 * time.Second)
	for f = get(); f.Main.End != 50 || f.Main.InPerSecond <= 0; f = get() {
		if time.Now().After(deadline) {
			t.Fatalf("no main-topic rate within 20s of writing 40: %+v", f.Main)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if max := 40 / f.WindowSeconds; f.Main.InPerSecond > max+1e-9 || f.WindowSeconds <= 0 {
		t.Errorf("main rate %v/s over %vs, want at most 40 records over the window (%v/s)", f.Main.InPerSecond, f.WindowSeconds, max)
	}
	if f.Main.Waiting != 44 || f.Tiers[0].InPerSecond != 0 {
		t.Errorf("main waiting %d (want 44), tier rate %v (want 0)", f.Main.Waiting, f.Tiers[0].InPerSecond)
	}
}

// TestFlowShareGroup: a pipeline with consume: share shows its main
// topic's share group, and what waits is what lies after the group's
// share-partition start offsets (every record before them is
// acknowledged).
func TestFlowShareGroup(t *testing.T) {
	c := kafkatest.New(t)
	main := kafkatest.Topic(t, "flowshare")
	tier, dlqT := main+".retry.1s", main+".dlq"
	for _, n := range []string{main, tier, dlqT} {
		c.CreateTopic(t, n, 2, nil)
	}
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	for i := range 10 {
		rs = append(rs, &kgo.Record{Topic: main, Partition: int32(i % 2), Value: []byte("x")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	group := topics.ShareGroupID(main)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: main, Partition: 0, At: 4, LeaderEpoch: -1})
	os.Add(kadm.Offset{Topic: main, Partition: 1, At: 2, LeaderEpoch: -1})
	resps, err := kadm.NewClient(cl).AlterShareGroupOffsets(ctx, group, os)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("set the share group's start offsets: %v", err)
	}
	srv := serveFlow(t, c, analyzer.Pipeline{Name: main, Topic: main, DLQ: dlqT, Share: true,
		Tiers: []analyzer.Tier{{Name: "1s", Topic: tier}}})
	var f analyzer.Flow
	ok := kafkatest.Eventually(20*time.Second, func() bool {
		resp, err := http.Get(srv.URL + "/api/pipelines")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var fr analyzer.FlowResponse
		if json.NewDecoder(resp.Body).Decode(&fr) != nil || len(fr.Pipelines) != 1 {
			return false
		}
		f = fr.Pipelines[0]
		return f.SampledAt != "" && f.Main.End == 10
	})
	if !ok {
		t.Fatalf("no sample within 20s: %+v", f)
	}
	if f.Error != "" || !f.Main.Share || f.Main.Group != group || f.Main.Committed != 6 || f.Main.Waiting != 4 {
		t.Errorf("main = %+v (error %q), want share group %s, committed 6, waiting 4", f.Main, f.Error, group)
	}
	if len(f.Tiers) != 1 || f.Tiers[0].Group != "redrive."+main || f.Tiers[0].Share {
		t.Errorf("tiers = %+v, want the consumer group redrive.%s", f.Tiers, main)
	}
}

// serveFlow runs an analyzer of pipes on c, sampling the flow every
// 200ms, and serves its API until the test ends.
func serveFlow(t *testing.T, c *kafkatest.Cluster, pipes ...analyzer.Pipeline) *httptest.Server {
	t.Helper()
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Pipelines:  pipes,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		FlowEvery:  200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	srv := httptest.NewServer(a.Handler(""))
	t.Cleanup(func() { srv.Close(); stop(); <-done })
	return srv
}
