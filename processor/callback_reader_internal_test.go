package processor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
)

// callbackStarts starts each partition where no callback stamped at or
// after from is missed: at the first such record, at the end when every
// record is older, at 0 on an empty partition; behind names only the
// partitions with records to read. A missing topic is an error (the
// reader tries again), never a start past records written meanwhile.
func TestCallbackStarts(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "cbstarts")
	c.CreateTopic(t, topic, 3, nil)
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from := time.Now().Add(-time.Minute)
	produce := func(part int32, at time.Time, n int) {
		for i := 0; i < n; i++ {
			r := &kgo.Record{Topic: topic, Partition: part, Value: []byte("cb"), Timestamp: at}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
	}
	// Partition 0: 3 old records, then 2 within the window. Partition 1:
	// 4 old records only. Partition 2: empty.
	produce(0, from.Add(-time.Hour), 3)
	produce(0, from.Add(time.Second), 2)
	produce(1, from.Add(-time.Hour), 4)

	starts, behind, err := callbackStarts(ctx, c.Admin(t), topic, from.UnixMilli())
	if err != nil {
		t.Fatalf("callbackStarts: %v", err)
	}
	if want := map[int32]int64{0: 3, 1: 4, 2: 0}; !sameOffsets(starts, want) {
		t.Errorf("starts %v, want %v", starts, want)
	}
	if want := map[int32]int64{0: 5}; !sameOffsets(behind, want) {
		t.Errorf("behind %v, want %v", behind, want)
	}

	if _, _, err := callbackStarts(ctx, c.Admin(t), topic+".missing", from.UnixMilli()); err == nil {
		t.Errorf("callbackStarts of a missing topic: no error")
	}
}

func sameOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
