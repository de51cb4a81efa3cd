package processor_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/internal/promtest"
	"github.com/redrive/redrive/retry"
)

// A tier with a name of its own (the configuration's "1000ms", not the
// shortest form "1s") is that name everywhere: its topic, the redrive-tier
// header of the records written to it, the metrics and the status.
func TestTierNamesEverywhere(t *testing.T) {
	e := pipetest.New(t, "named", 1, retry.Schedule{
		Tiers: []time.Duration{time.Second, 2 * time.Second}, Names: []string{"1000ms", "2s"}, MaxAttempts: 3})
	if got := e.P.TierTopics(); got[0] != e.P.Topic+".retry.1000ms" || got[1] != e.P.Topic+".retry.2s" {
		t.Fatalf("TierTopics = %q", got)
	}
	reg := prometheus.NewRegistry()
	cfg := e.Config()
	cfg.Registerer = reg
	pr, _ := pipetest.RunProcessor(t, cfg, newScript())
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("transient:1"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("r1")}}})

	tier := e.CollectN(e.P.TierTopics()[0], 1, 30*time.Second, 0)
	if len(tier) != 1 {
		t.Fatalf("%d records in %s, want 1", len(tier), e.P.TierTopics()[0])
	}
	if v, _ := kafkatest.Header(tier[0], retry.HeaderTier); v != "1000ms" {
		t.Errorf("redrive-tier = %q, want 1000ms", v)
	}
	if res := e.CollectN(e.P.Results, 1, 30*time.Second, 0); len(res) != 1 {
		t.Fatalf("the retry did not succeed: %d results", len(res))
	}
	if n := promtest.Sum(t, reg, "redrive_retries_scheduled_total", map[string]string{"tier": "1000ms"}); n != 1 {
		t.Errorf("redrive_retries_scheduled_total{tier=1000ms} = %v, want 1", n)
	}
	if n := promtest.Sum(t, reg, "redrive_outcomes_total", map[string]string{"tier": "1000ms", "outcome": "success"}); n != 1 {
		t.Errorf("redrive_outcomes_total{tier=1000ms,outcome=success} = %v, want 1", n)
	}
	st := pr.Status()
	if len(st.Pipelines) != 1 || len(st.Pipelines[0].Tiers) != 2 {
		t.Fatalf("status: %+v", st)
	}
	for i, want := range []string{"1000ms", "2s"} {
		if ts := st.Pipelines[0].Tiers[i]; ts.Name != want || ts.Topic != e.P.TierTopics()[i] {
			t.Errorf("status tier %d = %q %q, want %q %q", i, ts.Name, ts.Topic, want, e.P.TierTopics()[i])
		}
	}
}
