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
	todo := make(map[int32]int64, len(bounds)) // partition → end
	at := make(map[int32]kgo.Offset, len(bounds))
	for p, b := range bounds {
		if b.End > b.Start {
			todo[p] = b.End
			at[p] = kgo.NewOffset().At(b.Start)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	rc, err := kgo.NewClient(append(baseOpts(cl),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		// Retention may remove records between listing and fetching: go on
		// from what is left.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A transactional writer's commit markers take offsets; seeing them
		// is how Scan knows a partition ending in one is done.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("%s: consumer: %w", topic, err)
	}
	defer rc.Close()
	done := func(p int32) {
		delete(todo, p)
		rc.PauseFetchPartitions(map[string][]int32{topic: {p}})
	}
	for len(todo) > 0 {
		fs := rc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: scan stopped with %d partitions unfinished: %w", topic, len(todo), err)
		}
		for _, f := range fs {
			for _, t := range f.Topics {
				for _, fp := range t.Partitions {
					end, ok := todo[fp.Partition]
					if fp.Err != nil {
						if err := fetchErr(topic, fp); err != nil {
							return err
						}
						var dl *kgo.ErrDataLoss
						if ok && errors.As(fp.Err, &dl) && dl.ResetTo >= end {
							done(fp.Partition) // everything up to end is gone
							continue
						}
					}
					if !ok {
						continue // done already; a fetch was under way
					}
					for _, r := range fp.Records {
						if r.Offset >= end {
							done(fp.Partition)
							break
						}
						if err := ctx.Err(); err != nil {
							return fmt.Errorf("%s: scan stopped with %d partitions unfinished: %w", topic, len(todo), err)
						}
						if !r.Attrs.IsControl() {
							if err := fn(r); err != nil {
								return err
							}
						}
						if r.Offset+1 >= end {
							done(fp.Partition)
							break
						}
					}
				}
			}
		}
	}
	return nil
}

// fetchErr is the error a fetch error stops reading with, or nil for one
// that is only news: data loss (records removed by retention or a log
// truncation; the client goes on from where it reset to).
func fetchErr(topic string, fp kgo.FetchPartition) error {
	var dl *kgo.ErrDataLoss
	if errors.As(fp.Err, &dl) {
		return nil
	}
	if fp.Partition < 0 {
		return fmt.Errorf("%s: fetch: %w", topic, fp.Err)
	}
	return fmt.Errorf("%s/%d: fetch: %w", topic, fp.Partition, fp.Err)
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
	at := make(map[int32]kgo.Offset, len(from))
	for p, o := range from {
		at[p] = kgo.NewOffset().At(o)
	}
	rc, err := kgo.NewClient(append(baseOpts(cl),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// watchPartitions sees a new partition within MetadataMinAge, and
		// it joins the next fetch request, after the broker answers the
		// one waiting for data.
		kgo.MetadataMinAge(time.Second),
		kgo.FetchMaxWait(time.Second),
	)...)
	if err != nil {
		return fmt.Errorf("%s: consumer: %w", topic, err)
	}
	defer rc.Close()

	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchPartitions(ctx, rc, topic, from, FollowCheckInterval)
	}()
	defer func() { cancel(); <-watched }()

	for {
		fs := rc.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for _, f := range fs {
			for _, t := range f.Topics {
				for _, fp := range t.Partitions {
					if fp.Err != nil {
						if err := fetchErr(topic, fp); err != nil {
							return err
						}
					}
					for _, r := range fp.Records {
						if r.Attrs.IsControl() {
							continue
						}
						if err := fn(r); err != nil {
							return err
						}
					}
				}
			}
		}
	}
}

// watchPartitions adds partitions that appear in topic to rc, from their
// start, until ctx is done. It asks rc, whose cached metadata is at most
// MetadataMinAge old. Errors are left for the next look.
func watchPartitions(ctx context.Context, rc *kgo.Client, topic string, known map[int32]int64, every time.Duration) {
	seen := make(map[int32]bool, len(known))
	for p := range known {
		seen[p] = true
	}
	adm := kadm.NewClient(rc)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tds, err := adm.ListTopics(ctx, topic)
		if err != nil {
			continue
		}
		td, ok := tds[topic]
		if !ok || td.Err != nil {
			continue
		}
		add := map[int32]kgo.Offset{}
		for p := range td.Partitions {
			if !seen[p] {
				seen[p] = true
				add[p] = kgo.NewOffset().AtStart()
			}
		}
		if len(add) > 0 {
			rc.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: add})
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
