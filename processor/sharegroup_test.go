package processor_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// consume: share. The main topic is read by a share group; these run at
// the shipped defaults (breaker, guard, scope pipeline, control topic).

// shareSchedule is a short schedule for share-mode tests.
var shareSchedule = retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 3}

// TestShareReplicasHandleEveryRecord: three replicas of a share pipeline
// over a 2-partition topic handle every request; those failing once come
// back through the tier (read by the consumer group), those failing for
// good are dead-lettered, and none is lost.
func TestShareReplicasHandleEveryRecord(t *testing.T) {
	e := pipetest.New(t, "share-every", 2, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	const n = 600
	var mu sync.Mutex
	calls := map[string]int{}
	callsBy := map[string]int{}
	h := func(replica string) processor.Handler {
		return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
			id := string(req.Record.Key)
			mu.Lock()
			calls[id]++
			callsBy[replica]++
			mu.Unlock()
			i, _ := strconv.Atoi(id)
			switch {
			case i%10 == 0:
				return processor.Fail("bad_request", fmt.Errorf("request %d is bad", i))
			case i%7 == 0 && req.Attempt == 1:
				return processor.Retry("busy", fmt.Errorf("busy"))
			}
			return processor.Succeed([]byte(id))
		})
	}
	var recs []*kgo.Record
	for i := 1; i <= n; i++ {
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(strconv.Itoa(i)), Value: []byte("v")})
	}
	// Written before any replica starts: a new share group starts at the
	// earliest record.
	e.Produce(recs...)
	for _, name := range []string{"a", "b", "c"} {
		cfg := e.Config()
		cfg.Instance = name
		pipetest.Run(t, cfg, h(name))
	}
	bad := n / 10
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.Results]) >= n-bad && len(g[e.P.DLQ]) >= bad
	}, 90*time.Second, 2*time.Second)
	results := map[string]int{}
	for _, r := range got[e.P.Results] {
		results[string(r.Key)]++
	}
	for i := 1; i <= n; i++ {
		id := strconv.Itoa(i)
		if i%10 == 0 {
			continue
		}
		if results[id] == 0 {
			t.Errorf("request %s has no result", id)
		}
	}
	if len(got[e.P.DLQ]) != bad {
		t.Errorf("%d dead letters, want %d", len(got[e.P.DLQ]), bad)
	}
	if len(got[e.P.Results]) != n-bad {
		t.Errorf("%d results, want %d (duplicates without a crash)", len(got[e.P.Results]), n-bad)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("calls by replica: %v", callsBy)
	for _, name := range []string{"a", "b", "c"} {
		if callsBy[name] == 0 {
			t.Errorf("replica %s made no call: the share group did not spread the records", name)
		}
	}
}

// TestShareCrashLoopRecordDeadLettered: a record whose handling never
// ends in an outcome (here: the processor stops past its grace each time
// it holds it, so the record is released) is delivered again and again;
// past max_deliveries it is dead-lettered "crashed" with its delivery
// count, and the others are handled.
func TestShareCrashLoopRecordDeadLettered(t *testing.T) {
	e := pipetest.New(t, "share-crash", 1, shareSchedule)
	e.P.Consume = processor.ConsumeShare
	held := make(chan struct{}, 16)
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if string(req.Record.Key) == "poison" {
			held <- struct{}{}
			<-ctx.Done() // until the grace is over
			return processor.Retry("gone", ctx.Err())
		}
		return processor.Succeed(nil)
	})
	e.Produce(&kgo.Record{Topic: e.P.Topic, Key: []byte("poison"), Value: []byte("x")})
	for i := range processor.DefaultMaxDeliveries {
		stop := e.Start(h, func(c *processor.Config) { c.ShutdownGrace = 100 * time.Millisecond })
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d: the poison record was not handed to the handler", i+1)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	var ok []*kgo.Record
	for i := range 20 {
		ok = append(ok, &kgo.Record{Topic: e.P.Topic, Key: []byte("ok" + strconv.Itoa(i)), Value: []byte("x")})
	}
	e.Produce(ok...)
	e.Start(h)
	got := e.Collect([]string{e.P.Results, e.P.DLQ}, func(g kafkatest.Got) bool {
		return len(g[e.P.DLQ]) >= 1 && len(g[e.P.Results]) >= len(ok)
	}, 60*time.Second, time.Second)
	if len(got[e.P.DLQ]) != 1 {
		t.Fatalf("%d dead letters, want the poison record", len(got[e.P.DLQ]))
	}
	dl := got[e.P.DLQ][0]
	if r, _ := kafkatest.Header(dl, "redrive-reason"); r != "crashed" {
		t.Errorf("reason %q, want crashed", r)
	}
	if len(got[e.P.Results]) != len(ok) {
		t.Errorf("%d results, want %d", len(got[e.P.Results]), len(ok))
	}
	select {
	case <-held:
		t.Errorf("the poison record was handled a %dth time", processor.DefaultMaxDeliveries+1)
	default:
	}
}
