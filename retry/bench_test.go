package retry_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// typicalRetry is a record on its way to the second tier: 14 redrive
// headers and the producer's 3.
func typicalRetry() (retry.Meta, []kgo.RecordHeader) {
	t0 := time.UnixMilli(1_740_830_400_000)
	m := retry.Meta{
		ID: "order-7f3a9c2e", Attempt: 2, Polls: 1, Due: t0.Add(30 * time.Second), Tier: "30s",
		HasOrigin: true, OriginTopic: "solve.requests", OriginPartition: 3, OriginOffset: 918273, OriginTimestamp: t0.Add(-10 * time.Second),
		FirstErrorAt: t0.Add(-5 * time.Second), LastErrorAt: t0,
		Error:     "POST http://solver.internal:8080/solve: 503 Service Unavailable: ERROR_NO_SLOT_AVAILABLE",
		ErrorCode: "ERROR_NO_SLOT_AVAILABLE", ErrorClass: retry.ClassTransient,
	}
	user := []kgo.RecordHeader{
		{Key: "content-type", Value: []byte("application/json")},
		{Key: "idempotency-key", Value: []byte("order-7f3a9c2e")},
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}
	return m, user
}

var (
	sinkHeaders []kgo.RecordHeader
	sinkMeta    retry.Meta
	sinkInt     int
	sinkTime    time.Time
)

func BenchmarkEncode(b *testing.B) {
	m, user := typicalRetry()
	b.ReportAllocs()
	for b.Loop() {
		sinkHeaders = retry.Encode(m, user)
	}
}

func BenchmarkDecode(b *testing.B) {
	hs := retry.Encode(typicalRetry())
	if n := len(hs); n != 17 {
		b.Fatalf("%d headers, want 14 redrive + 3 user", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		m, user, err := retry.Decode(hs)
		if err != nil {
			b.Fatal(err)
		}
		sinkMeta, sinkHeaders = m, user
	}
}

func BenchmarkTierForDelay(b *testing.B) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute, 30 * time.Minute, time.Hour}, MaxAttempts: 6}
	delays := []time.Duration{0, 3 * time.Second, 20 * time.Second, 4 * time.Minute, 45 * time.Minute, 2 * time.Hour}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		idx, _ := s.TierForDelay(delays[i%len(delays)])
		sinkInt += idx
		i++
	}
}

func BenchmarkNext(b *testing.B) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 4, Jitter: 0.1}
	rnd := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var idx int
		idx, sinkTime = s.Next(now, 2+i%3, time.Duration(i%40)*time.Second, rnd)
		sinkInt += idx
		i++
	}
}
