package topicread_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/topicread"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records to partition part, valued tag-part-i.
func produce(t *testing.T, cl *kgo.Client, topic string, part int32, n int, tag string) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: part, Value: fmt.Appendf(nil, "%s-%d-%d", tag, part, i)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func manual(c *kafkatest.Cluster, t *testing.T, opts ...kgo.Opt) *kgo.Client {
	return c.Client(t, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

// ends lists every partition from its earliest retained offset to its end.
func ends(adm *kadm.Client, topic string) topicread.Lister {
	return func(ctx context.Context) (topicread.Start, error) {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return topicread.Start{}, err
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return topicread.Start{}, err
		}
		s := topicread.Start{From: map[int32]int64{}, Ends: map[int32]int64{}}
		starts.Each(func(o kadm.ListedOffset) { s.From[o.Partition] = o.Offset })
		ends.Each(func(o kadm.ListedOffset) { s.Ends[o.Partition] = o.Offset })
		return s, nil
	}
}

// pollUntil polls f until done says so or 30s passed, and returns what it read.
func pollUntil(t *testing.T, ctx context.Context, f *topicread.Follower, done func(got map[string]bool, b topicread.Batch) bool) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		b, err := f.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		for _, e := range b.Errs {
			t.Errorf("fetch error: %v", e.Err)
		}
		for _, r := range b.Records {
			if got[string(r.Value)] {
				t.Errorf("%s read twice", r.Value)
			}
			got[string(r.Value)] = true
		}
		if done(got, b) {
			return got
		}
	}
	t.Fatalf("not done within 30s; read %v", got)
	return nil
}

// The Follower reads each partition from its From, has caught up once
// every record before the ends listed at start was returned (not before),
// then goes on with what comes later, and reads a partition added to the
// topic from its start.
func TestFollowCatchesUpAndAddsPartitions(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "follow")
	c.CreateTopic(t, topic, 2, nil)
	cl := manual(c, t)
	produce(t, cl, topic, 0, 5, "old")
	produce(t, cl, topic, 1, 3, "old")

	start := topicread.Start{From: map[int32]int64{0: 2, 1: 0}, Ends: map[int32]int64{0: 5, 1: 3}}
	f, err := topicread.Open(ctx, topic, []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, topicread.Fixed(start),
		topicread.CheckEvery(100*time.Millisecond), topicread.MaxRecords(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.CaughtUp() || f.Behind() != 2 {
		t.Fatalf("at start: caught up %v, %d behind; want 2 partitions behind", f.CaughtUp(), f.Behind())
	}
	got := pollUntil(t, ctx, f, func(got map[string]bool, _ topicread.Batch) bool {
		if f.CaughtUp() != (len(got) == 6) {
			t.Errorf("caught up %v after %d of the 6 records before the ends", f.CaughtUp(), len(got))
		}
		return f.CaughtUp()
	})
	if got["old-0-0"] || got["old-0-1"] {
		t.Errorf("read %v: records before From", got)
	}

	produce(t, cl, topic, 0, 1, "new")
	if r, err := c.Admin(t).CreatePartitions(ctx, 1, topic); err != nil || r[topic].Err != nil {
		t.Fatalf("add a partition: %v %v", err, r)
	}
	for { // the producer learns of the new partition with fresh metadata
		err := manual(c, t).ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 2, Value: []byte("p2-2-0")}).FirstErr()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var added []int32
	pollUntil(t, ctx, f, func(got map[string]bool, b topicread.Batch) bool {
		added = append(added, b.Added...)
		return got["new-0-0"] && got["p2-2-0"]
	})
	if len(added) != 1 || added[0] != 2 {
		t.Errorf("added %v, want partition 2 once", added)
	}
}

// A partition whose last offset is a transaction's commit marker catches
// up (the marker is never returned), following or bounded,
// read_committed or not; aborted records are not returned under
// ReadCommitted.
func TestCatchUpOverTransactionMarkers(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "txn")
	c.CreateTopic(t, topic, 1, nil)
	tx := manual(c, t, kgo.TransactionalID("topicread-test-"+topic))
	write := func(commit kgo.TransactionEndTry, tag string) {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			tx.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", tag, i)}, nil)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	write(kgo.TryCommit, "committed")
	write(kgo.TryAbort, "aborted")
	write(kgo.TryCommit, "last")
	conn := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	// The broker writes the marker after EndTransaction returns.
	adm := c.Admin(t)
	if !kafkatest.Eventually(20*time.Second, func() bool {
		e, err := adm.ListEndOffsets(ctx, topic)
		o, _ := e.Lookup(topic, 0)
		return err == nil && o.Offset == 9
	}) {
		t.Fatal("the last commit marker never came")
	}

	for _, m := range []struct {
		bounded, committed bool
	}{{false, false}, {false, true}, {true, false}, {true, true}} {
		var opts []topicread.Opt
		if m.bounded {
			opts = append(opts, topicread.UpToEnds())
		}
		if m.committed {
			opts = append(opts, topicread.ReadCommitted())
		}
		f, err := topicread.Open(ctx, topic, conn, ends(adm, topic), opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := pollUntil(t, ctx, f, func(map[string]bool, topicread.Batch) bool { return f.CaughtUp() })
		f.Close()
		want := 6
		if m.committed {
			want = 4
		}
		if len(got) != want || got["aborted-0"] == m.committed {
			t.Errorf("%+v: read %v, want %d records", m, got, want)
		}
	}
}

// A bounded scan returns nothing at or past the ends, even what was written
// meanwhile, and stops; with nothing to read it has caught up at once.
func TestUpToEnds(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "bounded")
	c.CreateTopic(t, topic, 3, nil)
	cl := manual(c, t)
	produce(t, cl, topic, 0, 4, "old")
	produce(t, cl, topic, 1, 4, "old") // partition 2 stays empty
	adm := c.Admin(t)
	conn := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}

	f, err := topicread.Open(ctx, topic, conn, ends(adm, topic), topicread.UpToEnds(), topicread.MaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	produce(t, cl, topic, 0, 2, "new")
	produce(t, cl, topic, 2, 2, "new")
	got := pollUntil(t, ctx, f, func(map[string]bool, topicread.Batch) bool { return f.CaughtUp() })
	if len(got) != 8 {
		t.Errorf("read %v, want the 8 records before the ends", got)
	}
	for v := range got {
		if v[:3] != "old" {
			t.Errorf("read %s, written past the end", v)
		}
	}

	empty := kafkatest.Topic(t, "bounded.empty")
	c.CreateTopic(t, empty, 2, nil)
	e, err := topicread.Open(ctx, empty, conn, ends(adm, empty), topicread.UpToEnds())
	if err != nil {
		t.Fatal(err)
	}
	if b, err := e.Poll(ctx); !e.CaughtUp() || err != nil || len(b.Records) != 0 {
		t.Errorf("empty topic: caught up %v, poll %v %v", e.CaughtUp(), b, err)
	}
	e.Close()
	if _, err := e.Poll(ctx); !errors.Is(err, topicread.ErrClosed) {
		t.Errorf("Poll after Close: %v, want ErrClosed", err)
	}
}

// Records deleted before they were read: a partition whose log now starts
// at or past its end has caught up (at the next check), and one that
// still has records before its end goes on from its new start.
func TestCatchUpAfterDeleteRecords(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "deleted")
	c.CreateTopic(t, topic, 2, nil)
	cl := manual(c, t)
	produce(t, cl, topic, 0, 5, "r")
	produce(t, cl, topic, 1, 5, "r")
	adm := c.Admin(t)
	start, err := ends(adm, topic)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	del, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {
		0: {Topic: topic, Partition: 0, At: 5},
		1: {Topic: topic, Partition: 1, At: 3},
	}})
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		t.Fatal(err)
	}

	f, err := topicread.Open(ctx, topic, []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, topicread.Fixed(start),
		topicread.CheckEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := pollUntil(t, ctx, f, func(map[string]bool, topicread.Batch) bool { return f.CaughtUp() })
	if len(got) != 2 || !got["r-1-3"] || !got["r-1-4"] {
		t.Errorf("read %v, want the 2 records left in partition 1", got)
	}
}

// Open retries a failing listing (a topic created late) and reports each
// failure; ctx ending stops it with ctx's error.
func TestOpenRetriesListing(t *testing.T) {
	c := kafkatest.New(t)
	ctx := ctxT(t)
	topic := kafkatest.Topic(t, "late")
	adm := c.Admin(t)
	conn := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	reported := 0
	// A fresh admin per listing: a cached one knows the topic as missing
	// for up to 5s after it was created.
	fresh := func(ctx context.Context) (topicread.Start, error) { return ends(c.Admin(t), topic)(ctx) }
	f, err := topicread.Open(ctx, topic, conn, fresh, topicread.RetryList(50*time.Millisecond, func(error) {
		if reported++; reported == 2 {
			c.CreateTopic(t, topic, 1, nil)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if reported < 2 {
		t.Errorf("%d failures reported, want 2 or more", reported)
	}

	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = topicread.Open(cctx, topic+".never", conn, ends(adm, topic+".never"), topicread.RetryList(50*time.Millisecond, nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ctx ended while retrying: %v, want ctx's error", err)
	}
	if _, err := topicread.Open(ctx, topic+".never", conn, ends(adm, topic+".never")); err == nil {
		t.Errorf("without RetryList a failing listing is no error")
	}
}
