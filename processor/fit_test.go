package processor_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// noise is n bytes that do not compress, so that size limits really bite.
func noise(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

func idHeader(id string) kgo.RecordHeader {
	return kgo.RecordHeader{Key: "idempotency-key", Value: []byte(id)}
}

// fitHandler: "fail…" is permanent, "retry" is transient on the first
// attempt, "result" succeeds with a 20 KB result, anything else succeeds.
func fitHandler(_ context.Context, req *processor.Request) processor.Outcome {
	v := string(req.Record.Value)
	switch {
	case strings.HasPrefix(v, "fail"):
		return processor.Fail("nope", nil)
	case v == "retry" && req.Attempt == 1:
		return processor.Retry("http_503", nil)
	case v == "result":
		return processor.Succeed(noise(20_000))
	}
	return processor.Succeed([]byte("done"))
}

// waitCommitted waits until the group committed offset want on topic/0.
func waitCommitted(t *testing.T, e *pipetest.Env, topic string, want int64) {
	t.Helper()
	if !kafkatest.Eventually(60*time.Second, func() bool { return committed(e, topic, 0) == want }) {
		t.Fatalf("%s/0 committed at %d, want %d: the partition stopped", topic, committed(e, topic, 0), want)
	}
}

// A record is only written when it fits the smaller of
// its topic's max.message.bytes and the producer's batch limit. Records
// whose user headers, key or value alone are over that limit — and the
// retry and results records of requests with large headers — all become
// dead letters that are written, cut to fit and marked, and the partition
// goes on to the next record. Here the producer's limit (40,000) is the
// smaller one: the DLQ takes 60,000.
func TestEveryDeadLetterFitsTheProducerLimit(t *testing.T) {
	const producerMax, dlqMax = 40_000, "60000"
	e := newEnv(t, []time.Duration{time.Second}, 1)
	dlqTopic := e.P.DLQ + ".fit"
	v := dlqMax
	e.Cluster.CreateTopic(t, dlqTopic, 1, map[string]*string{"max.message.bytes": &v})
	e.P.DLQ = dlqTopic
	e.Start(processor.HandlerFunc(fitHandler), func(c *processor.Config) {
		c.ClientOpts = append(c.ClientOpts, kgo.ProducerBatchMaxBytes(producerMax))
	})
	bigKey := noise(100_000)
	bigValue := append([]byte("fail"), noise(100_000)...)
	recs := []*kgo.Record{
		{Value: []byte("fail"), Headers: []kgo.RecordHeader{idHeader("headers"), {Key: "x-a", Value: noise(50_000)}, {Key: "x-b", Value: noise(30_000)}, {Key: "x-small", Value: []byte("s")}}},
		{Key: bigKey, Value: []byte("fail"), Headers: []kgo.RecordHeader{idHeader("key")}},
		{Value: bigValue, Headers: []kgo.RecordHeader{idHeader("value")}},
		{Value: []byte("ok"), Headers: []kgo.RecordHeader{idHeader("malformed"), {Key: "x-a", Value: noise(100_000)}, {Key: retry.HeaderAttempt, Value: []byte("x")}}},
		{Value: []byte("retry"), Headers: []kgo.RecordHeader{idHeader("tier"), {Key: "x-a", Value: noise(50_000)}}},
		{Value: []byte("result"), Headers: []kgo.RecordHeader{idHeader("results"), {Key: "x-a", Value: noise(45_000)}}},
		{Value: []byte("ok"), Headers: []kgo.RecordHeader{idHeader("normal")}},
	}
	for _, r := range recs {
		r.Topic = e.P.Topic
	}
	e.Produce(recs...)

	dead := e.CollectN(dlqTopic, 6, 60*time.Second, 0)
	if len(dead) != 6 {
		t.Fatalf("%d dead letters, want 6", len(dead))
	}
	byID := map[string]*dlq.DeadLetter{}
	for _, r := range dead {
		if n := dlq.EncodedSize(r); n > producerMax {
			t.Errorf("dead letter of %d bytes over the producer's %d", n, producerMax)
		}
		d, err := dlq.Decode(r)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if d.OriginTopic != e.P.Topic || d.Class == "" || d.Code == "" || d.Group != e.P.GroupID() {
			t.Errorf("%s: redrive headers lost: %+v", d.ID, d.Meta)
		}
		byID[d.ID] = d
	}
	check := func(id string, reason dlq.Reason, code string, f func(d *dlq.DeadLetter) string) {
		d := byID[id]
		if d == nil {
			t.Errorf("no dead letter for %s", id)
			return
		}
		if d.Reason != reason || d.Code != code {
			t.Errorf("%s: reason %s code %s, want %s %s", id, d.Reason, d.Code, reason, code)
		}
		if msg := f(d); msg != "" {
			t.Errorf("%s: %s", id, msg)
		}
		if _, err := dlq.Republish(d, e.P.Topic); err == nil {
			t.Errorf("%s: a cut dead letter can be republished", id)
		}
	}
	headersCut := func(d *dlq.DeadLetter) string {
		if !strings.Contains(d.TruncatedHeaders, "x-a=") {
			return "redrive-truncated-headers " + d.TruncatedHeaders + " does not name x-a"
		}
		return ""
	}
	check("headers", dlq.ReasonPermanent, "nope", func(d *dlq.DeadLetter) string {
		for _, h := range d.UserHeaders {
			if h.Key == "x-small" && string(h.Value) != "s" {
				return "the small header was cut"
			}
		}
		return headersCut(d)
	})
	check("key", dlq.ReasonPermanent, "nope", func(d *dlq.DeadLetter) string {
		if d.TruncatedKey != 100_000 || !bytes.HasPrefix(bigKey, d.Key) || len(d.Key) < 30_000 {
			return "key not cut to a marked prefix"
		}
		return ""
	})
	check("value", dlq.ReasonPermanent, "nope", func(d *dlq.DeadLetter) string {
		if d.Truncated != int64(len(bigValue)) || !bytes.HasPrefix(bigValue, d.Value) || len(d.Value) < 30_000 || d.TruncatedKey != 0 || d.TruncatedHeaders != "" {
			return "value not cut to a marked prefix (and only the value)"
		}
		return ""
	})
	check("malformed", dlq.ReasonInvalid, processor.CodeBadHeader, func(d *dlq.DeadLetter) string {
		if !strings.Contains(d.Error, retry.HeaderAttempt) {
			return "error does not name the malformed header: " + d.Error
		}
		return headersCut(d)
	})
	check("tier", dlq.ReasonPermanent, processor.CodeRecordTooLarge, func(d *dlq.DeadLetter) string {
		if d.Attempt != 1 {
			return "not the failed attempt's counts"
		}
		return headersCut(d)
	})
	check("results", dlq.ReasonPermanent, processor.CodeRecordTooLarge, headersCut)

	if got := e.CollectN(e.P.Results, 1, 30*time.Second, 0); len(got) != 1 {
		t.Errorf("%d results, want the normal record's", len(got))
	} else if id, _ := kafkatest.Header(got[0], retry.HeaderID); id != "normal" {
		t.Errorf("result for %s, want normal", id)
	}
	if tier := e.CollectN(e.P.TierTopics()[0], 1, time.Second, 0); len(tier) != 0 {
		t.Errorf("%d records on the tier, want 0 (too large: dead-lettered)", len(tier))
	}
	waitCommitted(t, e, e.P.Topic, int64(len(recs)))
}

// The probe with every limit at its default: about 1 MB of user
// headers and a malformed redrive-attempt made a dead letter of ~1,002,448
// bytes, within the DLQ's max.message.bytes (1,048,588) but over the
// producer's batch limit (1,000,012), retried forever.
func TestMegabyteOfHeadersWithMalformedAttempt(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.Start(processor.HandlerFunc(fitHandler))
	cl := e.Cluster.Client(t, kgo.ProducerBatchMaxBytes(dlq.DefaultMaxRecordBytes))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := []*kgo.Record{
		{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{
			idHeader("mb"), {Key: "x-a", Value: noise(600_000)}, {Key: "x-b", Value: noise(400_000)}, {Key: retry.HeaderAttempt, Value: []byte("two")}}},
		{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{idHeader("after")}},
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	dead := e.CollectN(e.P.DLQ, 1, 60*time.Second, 0)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if n := dlq.EncodedSize(dead[0]); n > dlq.DefaultProducerBatchBytes {
		t.Errorf("dead letter of %d bytes", n)
	} else {
		t.Logf("dead letter of %d bytes (EncodedSize), limit %d", n, dlq.DefaultProducerBatchBytes)
	}
	d, err := dlq.Decode(dead[0])
	if err != nil || d.Reason != dlq.ReasonInvalid || d.Code != processor.CodeBadHeader || d.TruncatedHeaders == "" {
		t.Errorf("dead letter %+v (%v): want invalid bad_header with headers cut", d.Meta, err)
	}
	waitCommitted(t, e, e.P.Topic, 2)
}

// When the broker refuses a dead letter that fits the limit learned at
// start (the DLQ's max.message.bytes was lowered after it), the write path
// rebuilds it at half its size until it is taken, instead of retrying the
// same record forever.
// Exactly-once: the refusal aborts the transaction; the record is handled
// again and its dead letter cut to half, until one is taken.
func TestRefusedDeadLetterIsHalvedUntilWritten(t *testing.T) {
	for _, mode := range []processor.Delivery{processor.AtLeastOnce, processor.ExactlyOnce} {
		t.Run(string(mode), func(t *testing.T) { testRefusedDeadLetterIsHalved(t, mode) })
	}
}

func testRefusedDeadLetterIsHalved(t *testing.T, mode processor.Delivery) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	e.P.Delivery = mode
	e.Start(processor.HandlerFunc(fitHandler))
	e.Produce(&kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{idHeader("first")}})
	if got := e.CollectN(e.P.Results, 1, 30*time.Second, 0); len(got) != 1 {
		t.Fatalf("the processor did not start: %d results", len(got))
	}
	// Started: it learned the DLQ's limit (Kafka's default). Now lower it.
	v := "20000"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := e.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, e.P.DLQ)
	if err == nil {
		_, err = resp.On(e.P.DLQ, nil)
	}
	if err != nil {
		t.Fatalf("alter %s: %v", e.P.DLQ, err)
	}
	e.Produce(
		&kgo.Record{Topic: e.P.Topic, Value: []byte("fail"), Headers: []kgo.RecordHeader{idHeader("big"), {Key: "x-a", Value: noise(100_000)}}},
		&kgo.Record{Topic: e.P.Topic, Value: []byte("ok"), Headers: []kgo.RecordHeader{idHeader("after")}},
	)
	dead := e.CollectN(e.P.DLQ, 1, 60*time.Second, 0)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d, err := dlq.Decode(dead[0])
	if err != nil || d.ID != "big" || !strings.HasPrefix(d.TruncatedHeaders, "x-a=100000") || dlq.EncodedSize(dead[0]) > 20_000 {
		t.Errorf("dead letter %+v (%v), %d bytes: want big, x-a cut, at most 20000 bytes", d.Meta, err, dlq.EncodedSize(dead[0]))
	}
	waitCommitted(t, e, e.P.Topic, 3)
}
