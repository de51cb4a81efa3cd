package analyzer

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/dlq"
)

// worker is one pipeline's rule worker: it owns the queues of the DLQ
// partitions assigned to it. Rebalances happen only between polls
// (BlockRebalanceOnPoll); the mutex guards the queues against the
// rebalance callbacks, which run while the poll goroutine waits in
// AllowRebalance or PollRecords.
//
// A dead letter whose rule says "republish after D" waits in its queue
// while the records behind it are handled; the committed offset stays at
// the lowest one not finished, so a restart re-reads (and re-decides, the
// same way) everything from the oldest waiting record on.
type worker struct {
	a  *Analyzer
	p  *pipe
	cl *kgo.Client

	mu     sync.Mutex
	queues map[int32][]*held // polled, not yet committed past, in offset order
	next   map[int32]int64   // offset to commit: the lowest not finished
	paused map[int32]bool
	bytes  map[int32]int64 // bytes of the records a partition holds unfinished
}

// held is one polled dead letter. Once done it keeps only its offset; a
// dead letter that waits for its rule's after is a copy, so that it does
// not keep the fetch buffer it came in alive.
type held struct {
	off  int64
	size int64           // what it counts against maxHeldBytes until done
	d    *dlq.DeadLetter // nil when it does not decode: kept
	dec  dlq.Decision
	done bool
}

// maxHeld and maxHeldBytes bound what a partition holds unfinished (in
// practice: the dead letters waiting for their rule's after); at either
// bound the partition is paused until it holds less than half. A var for
// the tests.
const maxHeld = 10000

var maxHeldBytes int64 = 64 << 20

func (a *Analyzer) work(ctx context.Context, p *pipe) error {
	w := &worker{a: a, p: p, queues: map[int32][]*held{}, next: map[int32]int64{}, paused: map[int32]bool{}, bytes: map[int32]int64{}}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, a.o.ClientOpts...),
		kgo.ConsumerGroup(p.cfg.GroupID()),
		kgo.ConsumeTopics(p.cfg.DLQ),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(w.assigned),
		kgo.OnPartitionsRevoked(w.revoked),
		kgo.OnPartitionsLost(w.lost),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.FetchMaxWait(500*time.Millisecond),
		// One fetch stays well under what a partition may hold.
		kgo.FetchMaxBytes(int32(min(maxHeldBytes/2, 1<<30))), kgo.FetchMaxPartitionBytes(int32(min(maxHeldBytes/4, 1<<30))),
	)...)
	if err != nil {
		return fmt.Errorf("analyzer %s: %w", p.cfg.Name, err)
	}
	w.cl = cl
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.commit(cctx)
		cl.AllowRebalance() // else leaving the group waits for it forever
		cl.Close()
	}()
	name := "analyzer " + p.cfg.Name + " rules"
	for ctx.Err() == nil {
		a.beat(name)
		wait := w.handleDue(ctx)
		if wait > 2*time.Second || wait <= 0 {
			wait = 2 * time.Second
		}
		w.commit(ctx)
		cl.AllowRebalance()
		fs, closed := a.poll(ctx, cl, wait, 1000)
		if closed {
			return nil
		}
		now := a.o.Now()
		w.mu.Lock()
		fs.EachPartition(func(f kgo.FetchTopicPartition) {
			if _, ours := w.next[f.Partition]; !ours {
				return
			}
			for _, r := range f.Records {
				h := &held{off: r.Offset, size: recordBytes(r)}
				if d, err := dlq.Decode(r); err == nil {
					clampFuture(d, now) // clock.go: counted by the statistics reader
					h.d, h.dec = d, dlq.Decide(w.p.cfg.Rules, d, w.p.cfg.Topic)
					if h.dec.Action == dlq.ActionRepublish && !h.dec.Due(now) {
						h.d = detach(d) // it will wait: not on the fetch buffer
					}
				} else {
					h.dec = dlq.Decision{Action: dlq.ActionKeep} // never republished
				}
				w.queues[f.Partition] = append(w.queues[f.Partition], h)
				w.bytes[f.Partition] += h.size
			}
		})
		w.mu.Unlock()
	}
	return nil
}

// handleDue handles every held record that is due, moves each
// partition's commit point past its finished prefix, pauses partitions that
// hold too many waiting records, and returns how long until the next one
// is due (0: none waiting).
func (w *worker) handleDue(ctx context.Context) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.a.o.Now()
	var soonest time.Duration
	var oldest time.Time
	for part, q := range w.queues {
		for _, h := range q {
			if h.done || ctx.Err() != nil {
				continue
			}
			if h.dec.Action == dlq.ActionRepublish && !h.dec.Due(now) {
				if wait := h.dec.NotBefore.Sub(now); soonest == 0 || wait < soonest {
					soonest = wait
				}
				if oldest.IsZero() || h.d.Timestamp.Before(oldest) { // clamped to the time it was read
					oldest = h.d.Timestamp
				}
				continue
			}
			if w.act(ctx, h.d, h.dec) {
				h.done, h.d = true, nil // only its offset is needed now
				w.bytes[part] -= h.size
			}
		}
		i := 0
		for i < len(q) && q[i].done {
			w.next[part] = q[i].off + 1
			i++
		}
		clear(q[:i]) // a handled record (and the fetch buffer under it) is not kept alive by the array
		q = q[i:]
		w.queues[part] = q
		switch {
		case (len(q) >= maxHeld || w.bytes[part] >= maxHeldBytes) && !w.paused[part]:
			w.paused[part] = true
			w.cl.PauseFetchPartitions(map[string][]int32{w.p.cfg.DLQ: {part}})
			w.a.log.Info("rule worker: partition paused, it holds too much waiting", "pipeline", w.p.cfg.Name, "partition", part, "records", len(q), "bytes", w.bytes[part])
		case len(q) < maxHeld/2 && w.bytes[part] < maxHeldBytes/2 && w.paused[part]:
			delete(w.paused, part)
			w.cl.ResumeFetchPartitions(map[string][]int32{w.p.cfg.DLQ: {part}})
		}
	}
	var held int64
	for _, n := range w.bytes {
		held += n
	}
	w.a.m.heldBytes.WithLabelValues(w.p.cfg.Name).Set(float64(held))
	w.p.mu.Lock()
	w.p.oldestUnseen = oldest
	w.p.mu.Unlock()
	return soonest
}

// act carries out one decision. Republishing retries until the record is
// acknowledged or ctx ends (then false: the offset is not committed).
func (w *worker) act(ctx context.Context, d *dlq.DeadLetter, dec dlq.Decision) bool {
	if d == nil {
		return true // not a dead letter: counted as undecodable by the statistics reader, nothing to do
	}
	m := w.a.m
	name := w.p.cfg.Name
	switch dec.Action {
	case dlq.ActionRepublish:
		if d == nil {
			return true
		}
		rec, err := dlq.Republish(d, dec.Topic)
		if err != nil {
			// dlq.ErrTruncated, the only refusal: its value was cut to fit
			// the DLQ, and republishing would hand the handler a broken
			// request. Kept, counted, logged.
			m.actions.WithLabelValues(name, dec.Rule, "kept").Inc()
			w.a.log.Warn("not republishing", "pipeline", name, "id", d.ID, "rule", dec.Rule, "kept_bytes", len(d.Value), "original_bytes", d.Truncated, "err", err)
			return true
		}
		b := backoff.NewExponentialBackOff()
		b.MaxInterval = 10 * time.Second
		for {
			err := w.cl.ProduceSync(ctx, rec).FirstErr()
			if err == nil {
				m.actions.WithLabelValues(name, dec.Rule, "republished").Inc()
				w.a.log.Info("republished", "pipeline", name, "rule", dec.Rule, "id", d.ID, "to", dec.Topic, "redrives", d.Redrives+1)
				return true
			}
			if ctx.Err() != nil {
				return false
			}
			m.republishFailures.WithLabelValues(name).Inc()
			w.a.log.Error("republish failed; retrying, nothing committed past it", "pipeline", name, "id", d.ID, "to", dec.Topic, "err", err)
			select {
			case <-ctx.Done():
				return false
			case <-time.After(b.NextBackOff()):
			}
		}
	case dlq.ActionPark:
		m.actions.WithLabelValues(name, dec.Rule, "parked").Inc()
	case dlq.ActionDrop:
		m.actions.WithLabelValues(name, dec.Rule, "dropped").Inc()
	default:
		m.actions.WithLabelValues(name, ruleLabel(dec.Rule), "kept").Inc()
	}
	return true
}

func ruleLabel(r string) string {
	if r == "" {
		return "none"
	}
	return r
}

func (w *worker) commit(ctx context.Context) {
	w.mu.Lock()
	offs := map[string]map[int32]kgo.EpochOffset{}
	for part, off := range w.next {
		if off > 0 {
			if offs[w.p.cfg.DLQ] == nil {
				offs[w.p.cfg.DLQ] = map[int32]kgo.EpochOffset{}
			}
			offs[w.p.cfg.DLQ][part] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
	}
	w.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	w.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			w.a.log.Warn("commit failed; will retry", "pipeline", w.p.cfg.Name, "err", err)
		}
	})
}

func (w *worker) assigned(_ context.Context, cl *kgo.Client, tps map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, part := range tps[w.p.cfg.DLQ] {
		w.next[part] = 0
		delete(w.queues, part)
		delete(w.paused, part)
		delete(w.bytes, part)
	}
	cl.ResumeFetchPartitions(tps) // pauses survive rebalances in kgo
}

func (w *worker) revoked(ctx context.Context, cl *kgo.Client, tps map[string][]int32) {
	w.commit(ctx)
	w.drop(cl, tps)
}

func (w *worker) lost(_ context.Context, cl *kgo.Client, tps map[string][]int32) {
	w.drop(cl, tps)
}

func (w *worker) drop(cl *kgo.Client, tps map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, part := range tps[w.p.cfg.DLQ] {
		delete(w.next, part)
		delete(w.queues, part)
		delete(w.paused, part)
		delete(w.bytes, part)
	}
	cl.ResumeFetchPartitions(tps)
}

// recordBytes is what a polled record holds: key, value and headers.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value) + 64
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 16
	}
	return int64(n)
}

// detach copies d's key, value and user headers out of the fetch buffer
// they point into (the decoded strings are copies already).
func detach(d *dlq.DeadLetter) *dlq.DeadLetter {
	c := *d
	c.Key = bytes.Clone(d.Key)
	c.Value = bytes.Clone(d.Value)
	if d.UserHeaders != nil {
		c.UserHeaders = make([]kgo.RecordHeader, len(d.UserHeaders))
		for i, h := range d.UserHeaders {
			c.UserHeaders[i] = kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
	}
	return &c
}
