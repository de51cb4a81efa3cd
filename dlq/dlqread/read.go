package dlqread

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/topicread"
)

// ErrNoTopic is wrapped by the error about a topic that does not exist.
var ErrNoTopic = errors.New("topic does not exist")

// Bounds are a partition's retained records: offsets Start (the earliest
// retained) to End (the high watermark, one past the last), End excluded.
type Bounds struct {
	Start, End int64
}

// Len is how many offsets the partition spans (control records and
// compacted gaps included).
func (b Bounds) Len() int64 { return max(0, b.End-b.Start) }

// Offsets lists every partition of topic with its earliest retained and its
// end offset (kadm ListStartOffsets, ListEndOffsets). A missing topic is an
// error wrapping ErrNoTopic; every per-partition error of either listing is
// an error, all of them joined, each naming its partition.
func Offsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]Bounds, error) {
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("%s: list start offsets: %w", topic, err)
	}
	ss, err := partitionOffsets(starts, topic, "start")
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("%s: list end offsets: %w", topic, err)
	}
	es, err := partitionOffsets(ends, topic, "end")
	if err != nil {
		return nil, err
	}
	out := make(map[int32]Bounds, len(es))
	var errs []error
	for p, e := range es {
		s, ok := ss[p]
		if !ok {
			// Partitions added between the two listings: read from the start.
			s = 0
		}
		out[p] = Bounds{Start: min(s, e), End: e}
	}
	for p := range ss {
		if _, ok := es[p]; !ok {
			errs = append(errs, fmt.Errorf("%s/%d: a start offset but no end offset listed", topic, p))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func partitionOffsets(l kadm.ListedOffsets, topic, what string) (map[int32]int64, error) {
	ps := l[topic]
	if o, ok := ps[-1]; ok && o.Err != nil {
		// kadm's entry for a topic the metadata did not return.
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("%s: %w", topic, ErrNoTopic)
		}
		return nil, fmt.Errorf("%s: list %s offsets: %w", topic, what, o.Err)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s: list %s offsets: the broker returned no partitions", topic, what)
	}
	out := make(map[int32]int64, len(ps))
	var errs []error
	for _, p := range sortedPartitions(ps) {
		o := ps[p]
		switch {
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("%s/%d: list %s offset: %w", topic, p, what, o.Err))
		case o.Offset < 0:
			errs = append(errs, fmt.Errorf("%s/%d: list %s offset: the broker returned %d", topic, p, what, o.Offset))
		default:
			out[p] = o.Offset
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func sortedPartitions(ps map[int32]kadm.ListedOffset) []int32 {
	out := make([]int32, 0, len(ps))
	for p := range ps {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Scan reads every partition of topic from its earliest retained offset up
// to the end offsets listed when Scan starts, calls fn for each record in
// offset order within a partition (partitions interleaved), and returns
// once every partition has reached its end. Records written after the start
// are not read, so Scan ends even while the topic grows. An empty topic
// returns nil at once; a missing topic is an error wrapping ErrNoTopic.
//
// fn runs on Scan's goroutine; an error from it stops Scan, which returns
// that error unchanged. ctx ending stops Scan with ctx's error.
//
// Scan consumes with a client of its own, made from cl's options (brokers,
// TLS, SASL, client id, hooks: pass a client whose hooks can serve a second
// client, which kprom's cannot) without cl's consumer, group and producer
// options. cl itself only lists offsets.
func Scan(ctx context.Context, cl *kgo.Client, topic string, fn func(*kgo.Record) error) error {
	bounds, err := Offsets(ctx, cl, topic)
	if err != nil {
		return err
	}
	return ScanBounds(ctx, cl, topic, bounds, fn)
}

// ScanBounds is Scan over given bounds (from Offsets): for each partition,
// the records from Start up to End, End excluded. A partition whose Start
// is no longer retained is read from its earliest retained offset.
func ScanBounds(ctx context.Context, cl *kgo.Client, topic string, bounds map[int32]Bounds, fn func(*kgo.Record) error) error {
	f, err := topicread.Open(ctx, topic, baseOpts(cl), topicread.Fixed(StartOf(bounds)), topicread.UpToEnds(), topicread.MaxRecords(0))
	if err != nil {
		return err
	}
	defer f.Close()
	stopped := func(err error) error {
		return fmt.Errorf("%s: scan stopped with %d partitions unfinished: %w", topic, f.Behind(), err)
	}
	for !f.CaughtUp() {
		b, err := f.Poll(ctx)
		if err != nil {
			return stopped(err)
		}
		for _, e := range b.Errs {
			if err := fetchErr(topic, e); err != nil {
				return err
			}
		}
		for _, r := range b.Records {
			if err := ctx.Err(); err != nil {
				return stopped(err)
			}
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetchErr is the error a fetch error stops reading with, or nil for one
// that is only news: data loss (records removed by retention or a log
// truncation; the client goes on from where it reset to).
func fetchErr(topic string, e kgo.FetchError) error {
	var dl *kgo.ErrDataLoss
	if errors.As(e.Err, &dl) {
		return nil
	}
	if e.Partition < 0 {
		return fmt.Errorf("%s: fetch: %w", topic, e.Err)
	}
	return fmt.Errorf("%s/%d: fetch: %w", topic, e.Partition, e.Err)
}

// Tail follows topic: it calls fn for each record written after Tail
// started (fromEnd) or for every retained record and then each new one
// (!fromEnd), until ctx is done, and returns nil then. Errors are as Scan's:
// a missing topic, a per-partition listing error, a fetch error, fn's error.
func Tail(ctx context.Context, cl *kgo.Client, topic string, fromEnd bool, fn func(*kgo.Record) error) error {
	bounds, err := Offsets(ctx, cl, topic)
	if err != nil {
		return err
	}
	from := make(map[int32]int64, len(bounds))
	for p, b := range bounds {
		from[p] = b.Start
		if fromEnd {
			from[p] = b.End
		}
	}
	return Follow(ctx, cl, topic, from, fn)
}

// FollowCheckInterval is how often Follow looks for partitions added to the
// topic; a new partition is read from its start.
var FollowCheckInterval = 30 * time.Second

// Follow is Tail from given offsets: each partition in from from its
// offset, every other partition (added later, too) from its start. It
// returns nil when ctx is done. The client is made as Scan's is.
func Follow(ctx context.Context, cl *kgo.Client, topic string, from map[int32]int64, fn func(*kgo.Record) error) error {
	f, err := topicread.Open(ctx, topic, baseOpts(cl), topicread.Fixed(topicread.Start{From: from}),
		topicread.CheckEvery(FollowCheckInterval),
		// A partition found new joins the next fetch request, once the
		// broker answered the one waiting for data.
		topicread.FetchMaxWait(time.Second),
		topicread.MaxRecords(0),
	)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		b, err := f.Poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", topic, err)
		}
		for _, e := range b.Errs {
			if err := fetchErr(topic, e); err != nil {
				return err
			}
		}
		for _, r := range b.Records {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
}

// baseOpts are cl's options without its consumer, group and producer
// options: how to reach and authenticate to the cluster.
func baseOpts(cl *kgo.Client) []kgo.Opt {
	var out []kgo.Opt
	for _, o := range cl.Opts() {
		switch o.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt, kgo.ProducerOpt:
			continue
		}
		out = append(out, o)
	}
	return out
}

// StartOf is where a reader of bounds starts and what it catches up to:
// every partition from its earliest retained offset to its end.
func StartOf(bounds map[int32]Bounds) topicread.Start {
	s := topicread.Start{From: make(map[int32]int64, len(bounds)), Ends: make(map[int32]int64, len(bounds))}
	for part, b := range bounds {
		s.From[part], s.Ends[part] = b.Start, b.End
	}
	return s
}
