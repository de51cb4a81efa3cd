package analyzer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
)

// TestWaitingDeadLettersBoundedByBytes: dead letters waiting for a rule's
// after are held by the rule worker; what a partition holds is bounded by
// bytes (the partition is paused), not only by the 10,000-record count,
// so 100 KB dead letters waiting an hour cannot take the process's memory.
func TestWaitingDeadLettersBoundedByBytes(t *testing.T) {
	const limit = 1 << 20
	old := analyzer.SetMaxHeldBytes(limit)
	t.Cleanup(func() { analyzer.SetMaxHeldBytes(old) })

	e := newEnv(t)
	cl := e.c.Client(t, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const n, size = 40, 100_000 // 4 MB waiting in all
	for i := 0; i < n; i++ {
		e.bigDeadLetter(cl, "w"+strings.Repeat("x", i%3)+string(rune('a'+i%26)), bigValue(size))
	}
	reg := prometheus.NewRegistry()
	rules := []dlq.Rule{{Name: "later", Action: dlq.ActionRepublish, After: time.Hour}}
	base, _ := e.serve(analyzer.Options{Pipelines: e.pipelines(rules), Registerer: reg}, "")
	waitStats(t, base, n)

	held := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "redrive_analyzer_held_bytes" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return 0
	}
	// One fetch may come on top of the bound: at most limit/4 per
	// partition, and at least one record.
	const bound = limit + limit/4 + size + 1024
	var max float64
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if h := held(); h > max {
			max = h
		}
		time.Sleep(20 * time.Millisecond)
	}
	if max == 0 {
		t.Fatal("the rule worker holds nothing: the waiting dead letters were never read")
	}
	if max > bound {
		t.Errorf("the rule worker held %.0f bytes of waiting dead letters, want at most %d (the partition is paused at %d)", max, bound, limit)
	}
	t.Logf("held at most %.0f bytes of %d waiting", max, n*size)
}
