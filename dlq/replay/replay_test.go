package replay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/replay"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// fill writes dead letters to the DLQ: for each code one, the truncated
// ones cut to fit, then a record that is not a dead letter.
func fill(t *testing.T, c *kafkatest.Cluster, dlqTopic, main string, codes []string, truncated map[int]bool) {
	t.Helper()
	var rs []*kgo.Record
	for i, code := range codes {
		m := retry.Meta{ID: fmt.Sprintf("id-%d", i), Attempt: 3, HasOrigin: true, OriginTopic: main, ErrorCode: code,
			ErrorClass: retry.ClassTransient, Error: "failed", Reason: string(dlq.ReasonExhausted)}
		o := dlq.BuildOptions{Topic: dlqTopic}
		value := []byte(fmt.Sprintf("v-%d", i))
		if truncated[i] {
			o.MaxRecordBytes, value = 1500, []byte(strings.Repeat("x", 4000))
		}
		r := dlq.Build(&kgo.Record{Key: []byte(fmt.Sprintf("k-%d", i)), Value: value}, m, nil, o)
		r.Partition = 0 // one partition: the order read is the order written
		rs = append(rs, r)
	}
	rs = append(rs, &kgo.Record{Topic: dlqTopic, Partition: 0, Value: []byte("not a dead letter")})
	if err := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	c := kafkatest.New(t)
	main := kafkatest.Topic(t, "replay")
	dlqTopic := main + ".dlq"
	c.CreateTopic(t, main, 1, nil)
	c.CreateTopic(t, dlqTopic, 1, nil)
	// Truncated first: it matches, is refused, and does not use up the limit.
	fill(t, c, dlqTopic, main, []string{"http_503", "http_503", "timeout", "http_502", "http_503"}, map[int]bool{0: true})
	cl := c.Client(t)
	ctx := context.Background()
	flt, err := dlq.ParseFilter(map[string][]string{"code": {"http_5*"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	var results []string
	report := func(r replay.Result) error {
		switch {
		case errors.Is(r.Err, dlq.ErrTruncated):
			results = append(results, "truncated "+r.DeadLetter.ID)
		case r.Err != nil:
			if !errors.Is(r.Err, dlq.ErrNotDeadLetter) {
				t.Errorf("undecodable record reported with %v", r.Err)
			}
			results = append(results, "undecodable")
		default:
			results = append(results, "selected "+r.DeadLetter.ID)
		}
		return nil
	}
	got, err := replay.Run(ctx, replay.Options{Client: cl, DLQ: dlqTopic, To: main, Filter: flt, DryRun: true, Report: report})
	want := replay.Counts{Scanned: 6, Undecodable: 1, Matched: 4, Truncated: 1, Selected: 3}
	if err != nil || got != want {
		t.Errorf("dry run: %+v, %v; want %+v", got, err, want)
	}
	if w := []string{"truncated id-0", "selected id-1", "selected id-3", "selected id-4", "undecodable"}; !slices.Equal(results, w) {
		t.Errorf("reported %q, want %q", results, w)
	}

	results = nil
	got, err = replay.Run(ctx, replay.Options{Client: cl, DLQ: dlqTopic, To: main, Filter: flt, Limit: 2, Report: report})
	want = replay.Counts{Scanned: 4, Matched: 3, Truncated: 1, Selected: 2, Sent: 2, Republished: 2, Limited: true}
	if err != nil || got != want {
		t.Errorf("limit 2: %+v, %v; want %+v", got, err, want)
	}
	out := c.Collect(t, main, 2, 10*time.Second)
	var ids []string
	for _, r := range out {
		m, _, _ := retry.Decode(r.Headers)
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"id-1", "id-3"}) {
		t.Errorf("republished %v, want id-1 id-3 (the truncated id-0 never, and not counted against the limit)", ids)
	}

	// A topic that takes no record this large: the write fails, Run says so.
	small := main + ".small"
	mb := "100"
	c.CreateTopic(t, small, 1, map[string]*string{"max.message.bytes": &mb})
	got, err = replay.Run(ctx, replay.Options{Client: c.Client(t, kgo.RecordDeliveryTimeout(10*time.Second)), DLQ: dlqTopic, To: small, Filter: flt})
	if !errors.Is(err, replay.ErrWrite) || got.Failed != 3 || got.Republished != 0 || !strings.Contains(err.Error(), "republish "+dlqTopic+"/0/1 to "+small) {
		t.Errorf("write failure: %+v, %v", got, err)
	}

	for _, o := range []replay.Options{
		{Client: cl, DLQ: dlqTopic, To: dlqTopic},
		{Client: cl, DLQ: dlqTopic},
		{Client: cl, DLQ: dlqTopic, To: main, Filter: dlq.Filter{Reasons: []string{"tired"}}},
	} {
		if _, err := replay.Run(ctx, o); err == nil {
			t.Errorf("Run(%+v) = nil error", o)
		}
	}
	if _, err := replay.Run(ctx, replay.Options{Client: cl, DLQ: dlqTopic, To: dlqTopic}); !errors.Is(err, replay.ErrLoop) {
		t.Errorf("to the DLQ: %v, want ErrLoop", err)
	}
}

// A replayed crashed request reaches the main topic without its delivery
// count: it starts fresh, like its attempts.
func TestRunCrashedStartsFresh(t *testing.T) {
	c := kafkatest.New(t)
	main := kafkatest.Topic(t, "replay-crashed")
	dlqTopic := main + ".dlq"
	c.CreateTopic(t, main, 1, nil)
	c.CreateTopic(t, dlqTopic, 1, nil)
	m := retry.Meta{ID: "id-c", HasOrigin: true, OriginTopic: main, OriginOffset: 5, Reason: string(dlq.ReasonCrashed), Deliveries: 4}
	r := dlq.Build(&kgo.Record{Key: []byte("k"), Value: []byte("v")}, m, nil, dlq.BuildOptions{Topic: dlqTopic})
	cl := c.Client(t)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	flt, err := dlq.ParseFilter(map[string][]string{"reason": {"crashed"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := replay.Run(ctx, replay.Options{Client: cl, DLQ: dlqTopic, To: main, Filter: flt})
	if err != nil || got.Republished != 1 {
		t.Fatalf("Run: %+v, %v; want 1 republished", got, err)
	}
	out := c.Collect(t, main, 1, 10*time.Second)
	for _, h := range out[0].Headers {
		if h.Key == retry.HeaderDeliveries {
			t.Errorf("republished record carries %s=%q", h.Key, h.Value)
		}
	}
	rm, _, err := retry.Decode(out[0].Headers)
	if err != nil || rm.ID != "id-c" || rm.Redrives != 1 || rm.Deliveries != 0 || rm.Reason != "" {
		t.Errorf("republished meta %+v, %v", rm, err)
	}
}
