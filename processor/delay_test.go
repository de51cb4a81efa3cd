package processor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// A waiting retry never blocks other work: while a 5m tier holds records
// (its partitions paused at MaxWaiting), main-topic records flow.
func TestDelayDoesNotBlockMainTopic(t *testing.T) {
	e := newEnv(t, []time.Duration{5 * time.Minute}, 2)
	e.P.MaxWaiting = 5
	reg := prometheus.NewRegistry()
	s := newScript()
	e.Start(s, func(c *processor.Config) { c.Registerer = reg })

	// 16 failures: a burst of breaker.consecutive (20) fresh failures in a
	// row is an outage to the breaker, which would hold them instead.
	const slow = 16
	var waiting []*kgo.Record
	for i := 0; i < slow; i++ {
		waiting = append(waiting, &kgo.Record{Topic: e.P.Topic, Value: []byte("transient:1"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(fmt.Sprintf("slow-%d", i))}}})
	}
	e.Produce(waiting...)
	// Wait until they are all in the 5m tier and held.
	tier := e.P.TierTopics()[0]
	inTier := e.CollectN(tier, slow, 30*time.Second, 0)
	if len(inTier) != slow {
		t.Fatalf("%d records reached %s, want %d", len(inTier), tier, slow)
	}
	// The test reader saw them; now wait until the processor holds them
	// and has paused the tier partitions (MaxWaiting=5).
	if !kafkatest.Eventually(30*time.Second, func() bool { v, ok := gaugeValue(t, reg, "redrive_paused_partitions"); return ok && v >= 1 }) {
		t.Fatalf("redrive_paused_partitions never reached 1 with %d retries waiting on 2 partitions and MaxWaiting=5", slow)
	}
	start := time.Now()
	var fast []*kgo.Record
	for i := 0; i < 2000; i++ {
		fast = append(fast, &kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(fmt.Sprintf("fast-%d", i))}}})
	}
	e.Produce(fast...)
	res := e.CollectN(e.P.Results, 2000, 90*time.Second, 0)
	took := time.Since(start)
	if len(res) != 2000 {
		t.Fatalf("%d of 2000 main-topic records handled while the 5m tier waits", len(res))
	}
	t.Logf("2000 main-topic records handled in %v while %d retries wait in the 5m tier", took.Round(time.Millisecond), slow)
	s.mu.Lock()
	for i := 0; i < slow; i++ {
		if n := len(s.calls[fmt.Sprintf("slow-%d", i)]); n != 1 {
			t.Errorf("slow-%d handled %d times, want 1 (its retry is not due for 5m)", i, n)
		}
	}
	s.mu.Unlock()
	if paused := gaugeSum(t, reg, "redrive_paused_partitions"); paused < 1 {
		t.Errorf("redrive_paused_partitions = %v, want at least 1 (MaxWaiting=5, %d waiting on 2 partitions)", paused, slow)
	}
}

// gaugeSum is the sum of a gauge's series in reg.
func gaugeSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, ok := gaugeValue(t, reg, name)
	if !ok {
		t.Fatalf("metric %s not found", name)
	}
	return v
}
