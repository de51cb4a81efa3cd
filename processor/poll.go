package processor

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The poll loop: records come in as the in-flight bound has room.

// fetchPartitionBytes is the most a fetch takes from one partition.
const fetchPartitionBytes = 256 << 10

// pollWait bounds one poll, so the loop beats at least this often when idle.
const pollWait = 2 * time.Second

// metadataMaxAge is how often the pipeline's client refreshes metadata at
// the latest: new partitions of the main topic and tiers are consumed
// (and the group rebalanced to spread them) within about this long.
const metadataMaxAge = 15 * time.Second

// pollLoop polls records into the pipeline until ctx ends, as many as
// the in-flight bound has room for; at the bound it waits for room.
func (p *pipeline) pollLoop(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// At the bound the loop looks this often whether to hold the main
	// topic for due tier records (fetchorder.go).
	var check <-chan time.Time
	if len(p.tiers) > 0 {
		t := time.NewTicker(holdCheck)
		defer t.Stop()
		check = t.C
	}
	for ctx.Err() == nil {
		p.beat()
		// Exactly-once writes its transactions here, never while a poll
		// runs (franz-go's GroupTransactSession).
		wait, kick, err := p.commits.beforePoll()
		if err != nil {
			return err
		}
		n := p.space()
		p.atBound.Store(n == 0)
		if n == 0 { // at the bound: stop fetching until work finishes
			p.waitForSpace(ctx, wait, kick, tick.C, check)
			continue
		}
		if err := p.pollOnce(ctx, n, wait); err != nil {
			return err
		}
	}
	return nil
}

// waitForSpace waits at the in-flight bound until work finishes (capCh),
// the committer wants the loop (kick, or wait is over: only a committer
// with a kick channel writes from the loop), or a tick. At saturation the
// loop waits here once per finished record: no timer without a kick.
func (p *pipeline) waitForSpace(ctx context.Context, wait time.Duration, kick <-chan struct{}, tick, check <-chan time.Time) {
	var due <-chan time.Time
	if kick != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		due = t.C
	}
	select {
	case <-p.capCh:
	case <-tick:
	case <-check:
	case <-due:
	case <-kick:
	case <-ctx.Done():
	}
}

// pollOnce polls up to n records, waiting at most wait (so an idle loop
// still beats: liveness), and admits them. An error stops the pipeline.
func (p *pipeline) pollOnce(ctx context.Context, n int, wait time.Duration) error {
	pctx, cancel := p.commits.pollContext(ctx, wait)
	fs := p.cl.PollRecords(pctx, n)
	cancel()
	if fs.IsClientClosed() {
		return errors.New("kafka client closed")
	}
	var fatal error
	fs.EachError(func(topic string, part int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if f := fatalPollErr(p.cfg.GroupID(), topic, p.pc.Principal, err); f != nil {
			fatal = f
			return
		}
		p.log.Error("fetch failed", "topic", topic, "partition", part, "err", err)
	})
	if fatal != nil {
		return fatal
	}
	now := p.clk.Now()
	fs.EachPartition(func(f kgo.FetchTopicPartition) {
		if len(f.Records) > 0 {
			// What can be fetched ends at the last stable offset:
			// records of an open transaction past it are not (yet).
			end := f.HighWatermark
			if f.LastStableOffset >= 0 && f.LastStableOffset < end {
				end = f.LastStableOffset
			}
			p.admit(f.Topic, f.Partition, f.Records, end, now)
		}
	})
	return nil
}

// admit takes polled records in: main-topic records are dispatched at once,
// tier records when due (the waiting room). end is where the partition's
// fetchable records end (a tier's pending records, fetchorder.go).
func (p *pipeline) admit(topic string, part int32, recs []*kgo.Record, end int64, now time.Time) {
	data := len(recs)
	if recs[len(recs)-1].Attrs.IsControl() || recs[0].Attrs.IsControl() {
		data = 0
		for _, r := range recs {
			if !r.Attrs.IsControl() {
				data++
			}
		}
	}
	p.hot.consumedFor(topic).Add(float64(data))
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.parts[tp{topic, part}]
	if ps == nil || ps.revoking || ps.gone {
		// Not ours (any more): the next owner reads them from the committed offset.
		return
	}
	for _, r := range recs {
		if r.Attrs.IsControl() {
			// A transaction marker: finished as it comes.
			ps.offsets.finish(ps.offsets.add(r))
			continue
		}
		w := &work{rec: r, ps: ps, e: ps.offsets.add(r), size: int64(len(r.Key) + len(r.Value))}
		p.noteOversize(w)
		if ps.tier < 0 {
			p.dispatchLocked(w)
			continue
		}
		p.admitTierLocked(w, now)
	}
	if ps.tier >= 0 {
		p.noteTierFetch(ps, recs[len(recs)-1].Offset+1, end, now)
	}
	p.hot.waiting.Set(float64(p.waiting))
}

// noteOversize logs a record larger than MaxInflightBytes: it is admitted
// (the bound is checked before a poll, so it never deadlocks) but nothing
// more is polled until it is finished, so throughput drops to that one
// record meanwhile. p.mu held.
func (p *pipeline) noteOversize(w *work) {
	if w.size <= p.cfg.MaxInflightBytes {
		return
	}
	p.log.Warn("record larger than max_inflight_bytes: handled with no more records fetched until it is finished",
		"src", srcOf(w), "bytes", w.size, "max_inflight_bytes", p.cfg.MaxInflightBytes)
}
