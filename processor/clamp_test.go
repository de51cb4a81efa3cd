package processor_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// Times from records that drive waits and ages are
// clamped to now when they lie in the future, and counted in
// redrive_future_times_clamped_total{time}.

// clampedCount is redrive_future_times_clamped_total{time=label} in reg.
func clampedCount(t *testing.T, reg *prometheus.Registry, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "redrive_future_times_clamped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "time" && l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("redrive_future_times_clamped_total{time=%q} not exported", label)
	return 0
}

// A request whose record timestamp is in the future still expires by ttl:
// before, its age was negative until that time came, and a not-ready
// request was polled for that long.
func TestFutureOriginTimestampStillExpires(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.TTL = 3 * time.Second
	e.P.NotReadyDeadline = time.Hour
	reg := prometheus.NewRegistry()
	s := newScript()
	e.Start(s, func(c *processor.Config) { c.Registerer = reg })
	// 50 minutes: within what a broker accepts by default
	// (log.message.timestamp.after.max.ms, 1h since Kafka 4.0).
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("notready:1000000"), Timestamp: time.Now().Add(50 * time.Minute),
		Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("future")}}})
	dead := e.CollectN(e.P.DLQ, 1, 30*time.Second, 0)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want the request expired by its ttl of 3s", len(dead))
	}
	if c, _ := kafkatest.Header(dead[0], retry.HeaderErrorCode); c != processor.CodeTTL {
		t.Errorf("code %q, want %s", c, processor.CodeTTL)
	}
	ts, _ := kafkatest.Header(dead[0], retry.HeaderOriginTimestamp)
	if ms, _ := strconv.ParseInt(ts, 10, 64); time.UnixMilli(ms).After(time.Now()) {
		t.Errorf("redrive-origin-timestamp %s is still in the future", ts)
	}
	if n := clampedCount(t, reg, "origin_timestamp"); n < 1 {
		t.Errorf("origin_timestamp clamps counted: %v, want at least 1", n)
	}
}

// A not-ready request whose redrive-not-ready-since is in the future still
// stops at not_ready_deadline, and a tier record whose record timestamp is
// in the future is not held until then (with its partition's commit
// point): it is looked at after its tier's delay and hops.
func TestFutureTierTimesAreClamped(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.NotReadyDeadline = 2 * time.Second
	reg := prometheus.NewRegistry()
	s := newScript()
	e.Start(s, func(c *processor.Config) { c.Registerer = reg })
	now := time.Now()
	tier := e.P.TierTopics()[0]
	polling := retry.Meta{ID: "polling", Attempt: 1, Tier: "1s", Due: now, HasOrigin: true, OriginTopic: e.P.Topic, OriginTimestamp: now,
		ErrorClass: retry.ClassNotReady, ErrorCode: "CAPCHA_NOT_READY", State: []byte("task-1"), NotReadySince: now.AddDate(100, 0, 0)}
	held := retry.Meta{ID: "held", Attempt: 1, Tier: "1s", Due: now.Add(30 * time.Minute), HasOrigin: true, OriginTopic: e.P.Topic, OriginTimestamp: now,
		ErrorClass: retry.ClassTransient, ErrorCode: "http_503"}
	e.Produce(
		&kgo.Record{Topic: tier, Value: []byte("notready:1000000"), Headers: retry.Encode(polling, nil)},
		&kgo.Record{Topic: tier, Value: []byte("ok"), Timestamp: now.Add(50 * time.Minute), Headers: retry.Encode(held, nil)},
	)
	dead := e.CollectN(e.P.DLQ, 1, 20*time.Second, 0)
	if len(dead) != 1 {
		t.Errorf("%d dead letters, want the poll stopped by not_ready_deadline", len(dead))
	} else if c, _ := kafkatest.Header(dead[0], retry.HeaderErrorCode); c != processor.CodeNotReadyDeadline {
		t.Errorf("code %q, want %s", c, processor.CodeNotReadyDeadline)
	}
	// "held" hops (it is due in 30 minutes) once the tier's delay has
	// passed since it was first seen, not 50 minutes after.
	got := e.Collect([]string{tier}, func(g kafkatest.Got) bool {
		n := 0
		for _, r := range g[tier] {
			if id, _ := kafkatest.Header(r, retry.HeaderID); id == "held" {
				n++
			}
		}
		return n >= 2
	}, 20*time.Second, 0)
	n := 0
	for _, r := range got[tier] {
		if id, _ := kafkatest.Header(r, retry.HeaderID); id == "held" {
			n++
		}
	}
	if n < 2 {
		t.Fatalf("the record with a future timestamp was not looked at: %d copies in the tier, want a hop", n)
	}
	if v := clampedCount(t, reg, "not_ready_since"); v < 1 {
		t.Errorf("not_ready_since clamps counted: %v, want at least 1", v)
	}
	if v := clampedCount(t, reg, "record_timestamp"); v < 1 {
		t.Errorf("record_timestamp clamps counted: %v, want at least 1", v)
	}
}
