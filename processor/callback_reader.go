package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/topicread"
)

// The callbacks reader: a pipeline with Callbacks follows its callbacks
// topic (internal/topicread) into its store (callback_store.go), and its start
// waits a little for the reader to read what the topic already holds.

// callbackCatchUp bounds how long a starting pipeline waits for its
// callbacks reader to read what is already in the topic before it polls:
// records redelivered after a restart then find their callbacks.
const callbackCatchUp = 20 * time.Second

// callbackFetchBytes bounds one fetch of the callbacks reader (a larger
// record still comes, alone).
const callbackFetchBytes = 4 << 20

// callbackRetry is how often the callbacks reader tries again to list
// the offsets of a callbacks topic it could not list at start.
const callbackRetry = 2 * time.Second

// callbackPartitionsCheck is how often the callbacks reader looks for
// partitions added to the callbacks topic since it started.
const callbackPartitionsCheck = 30 * time.Second

// awaitCallbacks waits (beating) until the callbacks reader caught up,
// callbackCatchUp passed or ctx ended.
func (p *pipeline) awaitCallbacks(ctx context.Context) {
	if p.cbs == nil {
		return
	}
	start := time.Now()
	limit := time.NewTimer(callbackCatchUp)
	defer limit.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.beat()
		select {
		case <-p.cbs.caughtUp:
			p.log.Info("callbacks read", "topic", p.cbs.cfg.Topic, "held", p.cbs.store.len(), "took", time.Since(start).Round(time.Millisecond))
			return
		case <-limit.C:
			p.log.Warn("callbacks topic not read to its end in time; starting anyway (records whose callback is read later are matched then)", "topic", p.cbs.cfg.Topic, "after", callbackCatchUp)
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readCallbacks follows the callbacks topic (every partition, no consumer
// group; partitions added later from their first record) from
// Wait+CallbackMargin before start into the store, and dispatches a
// waiting record when its callback arrives. It returns when ctx ends.
//
// It lists where to start itself (callbackStarts) rather than leaving it
// to a by-time reset offset: franz-go replaces a by-time answer of "none"
// with the end offset listed a moment later, and a callback written in
// between would never be read.
func (p *pipeline) readCallbacks(ctx context.Context, start time.Time) {
	c := p.cbs
	defer c.caught()
	f, err := p.openCallbacks(ctx, start)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Error("callbacks reader: kafka client; callbacks are not read, submitted jobs are polled after the wait", "topic", c.cfg.Topic, "err", err)
		}
		return
	}
	defer f.Close()
	var lastErr time.Time
	for {
		if f.CaughtUp() {
			c.caught()
		}
		b, err := f.Poll(ctx)
		if err != nil {
			return
		}
		for _, e := range b.Errs {
			if time.Since(lastErr) >= time.Minute {
				lastErr = time.Now()
				p.log.Error("callbacks fetch failed (logged once a minute)", "topic", e.Topic, "partition", e.Partition, "err", e.Err)
			}
		}
		now := time.Now()
		for _, r := range b.Records {
			p.onCallbackRecord(r, now)
		}
		if len(b.Added) > 0 {
			p.log.Info("callbacks topic has new partitions: reading them from their start", "topic", c.cfg.Topic, "partitions", len(b.Added))
		}
		c.store.sweep(now)
	}
}

// openCallbacks lists where the callbacks reader starts (callbackStarts,
// tried again every callbackRetry while the topic cannot be listed) and
// opens its follower.
func (p *pipeline) openCallbacks(ctx context.Context, start time.Time) (*topicread.Follower, error) {
	c := p.cbs
	from := start.Add(-c.cfg.Wait - CallbackMargin).UnixMilli()
	adm := kadm.NewClient(p.cl)
	list := func(ctx context.Context) (topicread.Start, error) {
		starts, behind, err := callbackStarts(ctx, adm, c.cfg.Topic, from)
		return topicread.Start{From: starts, Ends: behind}, err
	}
	warned := false
	unlisted := func(err error) {
		// The topic is missing (the probe says so) or the broker is away:
		// the pipeline does not wait for it, and this tries again.
		c.caught()
		if !warned {
			warned = true
			p.log.Warn("callbacks topic: cannot list its offsets; callbacks are read once it can (submitted jobs are polled after the wait meanwhile)", "topic", c.cfg.Topic, "err", err)
		}
	}
	conn := append([]kgo.Opt{kgo.SeedBrokers(p.pc.Brokers...), kgo.ClientID("redrive-" + p.pc.Instance)}, p.pc.ClientOpts...)
	return topicread.Open(ctx, c.cfg.Topic, conn, list,
		topicread.RetryList(callbackRetry, unlisted),
		topicread.ReadCommitted(),
		topicread.FetchMaxWait(200*time.Millisecond),
		// What a fetch buffers counts beside the store: anyone who
		// reaches the intake writes this topic.
		topicread.FetchMaxBytes(callbackFetchBytes),
		topicread.PollWait(time.Second),
		topicread.MaxRecords(1000),
		topicread.CheckEvery(callbackPartitionsCheck),
	)
}

// callbackStarts lists, per partition of topic, the offset to read
// callbacks from so that none stamped at or after from (a millisecond
// timestamp) is missed, and (behind) the partitions with records to
// read, with their end offset now. The end offsets (last stable, as a
// read_committed reader sees them) are listed first and a partition
// starts at the smaller of its end and its by-time answer: a record
// written after the first listing is read even when the by-time listing
// was answered by an end offset listed after it.
func callbackStarts(ctx context.Context, adm *kadm.Client, topic string, from int64) (starts, behind map[int32]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	var byTime kadm.ListedOffsets
	if err == nil {
		byTime, err = adm.ListOffsetsAfterMilli(ctx, from, topic)
		if err == nil {
			err = byTime.Error()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	starts, behind = map[int32]int64{}, map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		at := e.Offset
		if s, ok := byTime.Lookup(topic, e.Partition); ok && s.Offset >= 0 && s.Offset < at {
			at = s.Offset
		}
		starts[e.Partition] = at
		if at < e.Offset {
			behind[e.Partition] = e.Offset
		}
	})
	if len(starts) == 0 {
		return nil, nil, fmt.Errorf("topic %s: no partitions listed", topic)
	}
	return starts, behind, nil
}
