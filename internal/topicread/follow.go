package topicread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrClosed is what Poll returns once the Follower is closed.
var ErrClosed = errors.New("topicread: follower closed")

// Start is where a Follower starts and what it catches up to.
type Start struct {
	// From is, per partition, the offset of the first record to read.
	From map[int32]int64
	// Ends is, per partition of From, the end offset (one past the last
	// record) listed at start. The Follower has caught up once it read
	// every partition whose end is past its From up to its end; a
	// partition missing here has nothing to catch up.
	Ends map[int32]int64
}

// A Lister lists where to start; the caller chooses the offsets (earliest,
// by time, its own).
type Lister func(ctx context.Context) (Start, error)

// Fixed is the Lister of offsets the caller already has.
func Fixed(s Start) Lister {
	return func(context.Context) (Start, error) { return s, nil }
}

// Batch is what one Poll returns.
type Batch struct {
	// Records in offset order within a partition, partitions interleaved;
	// never a control record.
	Records []*kgo.Record
	// Errs are the poll's fetch errors (a cancelled or timed-out poll is
	// none): kgo keeps retrying the partition, and the caller decides
	// whether one stops it.
	Errs []kgo.FetchError
	// Added are the partitions found new by this Poll, now read from
	// their start.
	Added []int32
}

// checkTimeout bounds one listing of the topic's partitions.
const checkTimeout = 10 * time.Second

// Follower reads one topic (see the package doc). Made by Open; for one
// goroutine.
type Follower struct {
	topic string
	cfg   config
	cl    *kgo.Client // nil: nothing to read (UpToEnds)
	left  progress
	known map[int32]bool // partitions read or skipped; a new one is added
	next  time.Time      // of the next partition check
	shut  bool           // Close was called
}

// Open lists where to start with list (see RetryList), then makes the
// client that reads topic from there: conn are the options that reach the
// cluster (brokers, TLS, SASL, client id, hooks), given before the
// Follower's own consumer options (which also set kgo.MetadataMinAge to
// 1s: see consumerOpts). With UpToEnds and nothing to read it
// makes no client, and the Follower has caught up.
//
// The error is the Lister's, ctx's when ctx ended while retrying, or the
// client's.
func Open(ctx context.Context, topic string, conn []kgo.Opt, list Lister, opts ...Opt) (*Follower, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	start, err := cfg.listStart(ctx, list)
	if err != nil {
		return nil, err
	}
	f := &Follower{topic: topic, cfg: cfg, left: newProgress(start), known: map[int32]bool{},
		next: time.Now().Add(cfg.checkEvery)}
	at := make(map[int32]kgo.Offset, len(start.From))
	for part, off := range start.From {
		f.known[part] = true
		if _, behind := f.left.end(part); behind || !cfg.upToEnds {
			at[part] = kgo.NewOffset().At(off)
		}
	}
	if cfg.upToEnds && len(f.left) == 0 {
		return f, nil
	}
	f.cl, err = kgo.NewClient(append(slices.Clip(conn), cfg.consumerOpts(topic, at)...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: consumer: %w", topic, err)
	}
	return f, nil
}

// consumerOpts are the options of the Follower's own consumer, after the
// connection options.
func (c *config) consumerOpts(topic string, at map[int32]kgo.Offset) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		// Retention may remove records between listing and fetching: go
		// on from what is left.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A transaction's marker can be a partition's last offset: seeing
		// it is how a partition ending in one reaches its end. Poll drops
		// them.
		kgo.KeepControlRecords(),
		// The partition check and the consumer both ask the client's
		// metadata: a partition the check finds joins the fetches within
		// about a second instead of kgo's 5s twice over.
		kgo.MetadataMinAge(time.Second),
	}
	if c.committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if c.fetchWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(c.fetchWait))
	}
	if c.fetchBytes > 0 {
		opts = append(opts, kgo.FetchMaxBytes(c.fetchBytes))
	}
	return opts
}

// CaughtUp reports whether the records Poll returned so far reach every
// end of Start.Ends (true at once when there is nothing to catch up).
func (f *Follower) CaughtUp() bool { return len(f.left) == 0 }

// Behind is how many partitions have not reached their end yet.
func (f *Follower) Behind() int { return len(f.left) }

// Close closes the Follower's client. Poll returns ErrClosed after it.
func (f *Follower) Close() {
	f.shut = true
	if f.cl != nil {
		f.cl.Close()
	}
}

// Poll waits at most PollWait for records and returns them, with the
// poll's fetch errors and the partitions it added. It returns ctx's error
// once ctx ended (the poll's records are dropped: the caller stops) and
// ErrClosed after Close.
func (f *Follower) Poll(ctx context.Context) (Batch, error) {
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	if f.shut {
		return Batch{}, ErrClosed
	}
	if f.cl == nil {
		return Batch{}, nil // nothing to read: caught up
	}
	var b Batch
	wait := f.cfg.pollWait
	if f.cfg.checkEvery > 0 {
		if !time.Now().Before(f.next) {
			b.Added = f.check(ctx)
			f.next = time.Now().Add(f.cfg.checkEvery)
		}
		wait = min(wait, time.Until(f.next))
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	fs := f.cl.PollRecords(pctx, f.cfg.maxRecords)
	cancel()
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	if fs.IsClientClosed() {
		return Batch{}, ErrClosed
	}
	fs.EachPartition(func(fp kgo.FetchTopicPartition) { f.take(fp, &b) })
	return b, nil
}

// take adds what fp holds to b and notes how far fp's partition is read.
func (f *Follower) take(fp kgo.FetchTopicPartition, b *Batch) {
	if fp.Err != nil && !errors.Is(fp.Err, context.Canceled) && !errors.Is(fp.Err, context.DeadlineExceeded) {
		b.Errs = append(b.Errs, kgo.FetchError{Topic: fp.Topic, Partition: fp.Partition, Err: fp.Err})
		var dl *kgo.ErrDataLoss
		if errors.As(fp.Err, &dl) {
			f.advance(fp.Partition, dl.ResetTo) // the client goes on from there
		}
	}
	for _, r := range fp.Records {
		if f.cfg.upToEnds {
			// Past the end (nothing before r is left), or the partition
			// reached it while a fetch was under way.
			if end, behind := f.left.end(r.Partition); !behind || r.Offset >= end {
				f.advance(r.Partition, r.Offset)
				break
			}
		}
		if !r.Attrs.IsControl() {
			b.Records = append(b.Records, r)
		}
		f.advance(r.Partition, r.Offset+1)
	}
}

// advance notes that nothing before next is left to read in part; a
// bounded scan stops fetching a partition that reached its end.
func (f *Follower) advance(part int32, next int64) {
	if f.left.advance(part, next) && f.cfg.upToEnds {
		f.cl.PauseFetchPartitions(map[string][]int32{f.topic: {part}})
	}
}

// check lists the start offsets of every partition of the topic: a
// partition not known yet is added from its start (not by a bounded
// scan), and a partition whose log starts at or past its end has nothing
// left to read up to it (deleted while it was read). A failed listing, or
// a partition's, is tried again at the next check.
func (f *Follower) check(ctx context.Context) (added []int32) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	starts, err := kadm.NewClient(f.cl).ListStartOffsets(ctx, f.topic)
	if err != nil {
		return nil
	}
	add := map[int32]kgo.Offset{}
	starts.Each(func(o kadm.ListedOffset) {
		switch {
		case o.Err != nil || o.Topic != f.topic || o.Partition < 0:
		case f.known[o.Partition]:
			f.advance(o.Partition, o.Offset)
		case !f.cfg.upToEnds:
			f.known[o.Partition] = true
			add[o.Partition] = kgo.NewOffset().AtStart()
			added = append(added, o.Partition)
		}
	})
	if len(add) > 0 {
		slices.Sort(added)
		f.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{f.topic: add})
	}
	return added
}
