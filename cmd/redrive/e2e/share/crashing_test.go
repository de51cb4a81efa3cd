package share

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// crashRequests are the good records produced around the poison one.
const crashRequests = 500

// TestShareCrashingRecordDeadLettered: a record whose handling ends the
// process (the handler exits on it) among 500 good ones, a share pipeline
// at the defaults, its one replica restarted each time it dies. The
// process dies MaxDeliveries times, no more: the record's next delivery
// dead-letters it "crashed" without calling the handler. Every other
// record gets its result, those acquired with it (up to Concurrency, held
// each time the process died) included: none is dead-lettered for it. A
// record has a second result only if it was acquired with the poison
// one: what a replica finished before is accepted at the broker.
func TestShareCrashingRecordDeadLettered(t *testing.T) {
	// One partition: a replica started while its dead predecessor is still
	// a member shares it at once. With as many partitions as members the
	// share group gives each its own, and the dead one's sits unread until
	// its session times out (45 s at the broker's defaults, its minimum).
	e := pipetest.New(t, "share-poison", 1, schedule)
	e.P.Consume = processor.ConsumeShare
	var recs []*kgo.Record
	for i := range crashRequests {
		if i == crashRequests/2 {
			recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte("poison"), Value: []byte("poison")})
		}
		id := fmt.Appendf(nil, "req-%d", i)
		recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: id, Value: id})
	}
	e.Produce(recs...)
	offsets := map[string]int64{}
	var poisonAt int64
	for _, r := range recs {
		offsets[string(r.Key)] = r.Offset
		if string(r.Key) == "poison" {
			poisonAt = r.Offset
		}
	}
	batch := e.P.WithDefaults().Concurrency
	ta := follow(t, e.Cluster, e.P.Results, e.P.DLQ)
	// Done once every record, the poison one too, has a result or a dead
	// letter.
	done := func() bool { return ta.seen() >= crashRequests+1 }

	maxDel := e.P.WithDefaults().MaxDeliveries
	deaths := 0
	var runs []*replica
	logs := func() string {
		var s []string
		for _, r := range runs {
			s = append(s, r.tail())
		}
		return strings.Join(s, "\n")
	}
	began := time.Now()
	deadline := began.Add(3 * time.Minute)
	for !done() {
		if deaths > maxDel+1 {
			t.Fatalf("the process died %d times and the poison record is not dead-lettered (MaxDeliveries %d):\n%s", deaths, maxDel, logs())
		}
		r := startReplica(t, childSpec{Brokers: e.Cluster.Brokers, Pipeline: e.P, Instance: "poison-" + strconv.Itoa(len(runs)),
			SessionTimeout: killSession, Handler: "poison"})
		runs = append(runs, r)
		for !r.exited() && !done() {
			if time.Now().After(deadline) {
				t.Fatalf("after %d deaths: %d of %d records have a result or a dead letter after 3 minutes:\n%s", deaths, ta.seen(), crashRequests+1, logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r.exited() {
			deaths++
			var exit *exec.ExitError
			if !r.out.poisoned.Load() || !errors.As(r.err, &exit) || exit.ExitCode() != 3 {
				t.Fatalf("run %d ended (%v) but not by the handler's exit on the poison record:\n%s", len(runs), r.err, r.tail())
			}
			t.Logf("run %d died on the poison record at %s (%d results, %d dead letters so far)",
				len(runs), time.Since(began).Round(100*time.Millisecond), ta.distinct(e.P.Results), ta.distinct(e.P.DLQ))
		}
	}
	// A death after the dead letter would mean the record came back.
	time.Sleep(3 * time.Second)
	last := runs[len(runs)-1]
	if last.exited() {
		deaths++
		t.Errorf("the last run ended after the dead letter (%v): the poison record was handled again:\n%s", last.err, last.tail())
	}
	if deaths != maxDel {
		t.Errorf("the process died %d times, want MaxDeliveries = %d", deaths, maxDel)
	}

	var poison *kgo.Record
	var innocent []string
	for _, r := range ta.records(e.P.DLQ) {
		if string(r.Key) == "poison" && poison == nil {
			poison = r
			continue
		}
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		deliveries, _ := kafkatest.Header(r, "redrive-deliveries")
		innocent = append(innocent, fmt.Sprintf("%s (%s, deliveries %q)", r.Key, reason, deliveries))
	}
	if len(innocent) > 0 {
		t.Errorf("%d records dead-lettered besides the poison one: %s", len(innocent), strings.Join(innocent, ", "))
	}
	if poison == nil {
		t.Fatalf("no dead letter for the poison record:\n%s", logs())
	}
	if reason, _ := kafkatest.Header(poison, retry.HeaderReason); reason != "crashed" {
		t.Errorf("the poison record's redrive-reason is %q, want crashed", reason)
	}
	if code, _ := kafkatest.Header(poison, retry.HeaderErrorCode); code != processor.CodeCrashed {
		t.Errorf("the poison record's redrive-error-code is %q, want %s", code, processor.CodeCrashed)
	}
	// redrive-deliveries: the share group's delivery count when it was
	// dead-lettered, one past MaxDeliveries.
	if d, ok := kafkatest.Header(poison, "redrive-deliveries"); !ok {
		t.Logf("the dead letter has no redrive-deliveries header (not written by this build)")
	} else if d != strconv.Itoa(maxDel+1) {
		t.Errorf("redrive-deliveries %q, want %d", d, maxDel+1)
	}

	counts := ta.counts(e.P.Results)
	if counts["poison"] > 0 {
		t.Errorf("the poison record has a result")
	}
	missing, dups := 0, 0
	for i := range crashRequests {
		id := fmt.Sprintf("req-%d", i)
		if counts[id] == 0 {
			missing++
		}
		dups += max(0, counts[id]-1)
	}
	if missing > 0 {
		t.Errorf("%d of %d good records have no result", missing, crashRequests)
	}
	// A record is acquired again after a death only if the dead process
	// had it and had not accepted it; every batch before the one the
	// poison record came in was accepted at the broker before that
	// batch's poll. So a record with two results was acquired with the
	// poison record: no further from it than a batch.
	var far []string
	for i := range crashRequests {
		id := fmt.Sprintf("req-%d", i)
		if counts[id] > 1 && abs(offsets[id]-poisonAt) >= int64(batch) {
			far = append(far, id)
		}
	}
	if len(far) > 0 {
		t.Errorf("%d records have more than one result though they are more than a batch (%d) from the poison record: accepted, but not at the broker when the process died: %s",
			len(far), batch, strings.Join(far, " "))
	}
	t.Logf("%d deaths; %d results for %d good records (%d duplicates: records finished but not yet acknowledged at a death)",
		deaths, len(ta.records(e.P.Results)), crashRequests, dups)
}

func abs(n int64) int64 { return max(n, -n) }
