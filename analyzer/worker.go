package analyzer

import (
	"bytes"
	"context"
	"errors"
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
// same way) everything from the oldest waiting record on. At least once,
// what was handled behind it is handled again then; exactly once (txn.go)
// the commit's metadata names it, and it is not.
type worker struct {
	a  *Analyzer
	p  *pipe
	cl *kgo.Client
	// s is the transact session of an exactly-once pipeline (txn.go); cl
	// is then s.Client(). Nil: at least once, commits with
	// CommitOffsetsSync.
	s *kgo.GroupTransactSession

	mu     sync.Mutex
	queues map[int32][]*held // polled, not yet committed past, in offset order
	next   map[int32]int64   // offset to commit: the lowest not finished
	paused map[int32]bool
	bytes  map[int32]int64 // bytes of the records a partition holds unfinished

	tx txState // exactly once only (txn.go)
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

// work runs p's rule worker until ctx is done. An exactly-once worker
// whose transaction could not be ended (franz-go: no such error is
// retryable) starts again with a new client, from the committed offsets.
func (a *Analyzer) work(ctx context.Context, p *pipe) error {
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 30 * time.Second
	for {
		w := &worker{a: a, p: p, queues: map[int32][]*held{}, next: map[int32]int64{}, paused: map[int32]bool{}, bytes: map[int32]int64{}}
		if err := w.open(); err != nil {
			return fmt.Errorf("analyzer %s: %w", p.cfg.Name, err)
		}
		err := w.run(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fmt.Errorf("analyzer %s: %w", p.cfg.Name, err)
		}
		wait := b.NextBackOff()
		a.log.Error("rule worker: transaction failed; starting again from the committed offsets", "pipeline", p.cfg.Name, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// open creates the worker's client: a GroupTransactSession for an
// exactly-once pipeline.
func (w *worker) open() error {
	a, p := w.a, w.p
	opts := append(append([]kgo.Opt{}, a.o.ClientOpts...),
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
	)
	if a.o.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(a.o.SessionTimeout))
	}
	if !p.cfg.ExactlyOnce {
		cl, err := kgo.NewClient(opts...)
		w.cl = cl
		return err
	}
	w.tx.init()
	s, err := kgo.NewGroupTransactSession(append(opts,
		kgo.TransactionalID(p.cfg.TransactionalID(a.o.Instance)),
		kgo.TransactionTimeout(txnTimeout),
	)...)
	if err != nil {
		return err
	}
	w.s, w.cl = s, s.Client()
	return nil
}

// run polls, decides and acts until ctx is done (nil) or, exactly once,
// a transaction cannot be ended (its error). It closes the client.
func (w *worker) run(ctx context.Context) error {
	a := w.a
	defer w.close()
	if w.s != nil {
		w.fence(ctx)
	}
	name := "analyzer " + w.p.cfg.Name + " rules"
	for ctx.Err() == nil {
		a.beat(name)
		var wait time.Duration
		var more bool
		if w.s != nil {
			var err error
			if wait, more, err = w.transact(ctx); err != nil {
				return err
			}
		} else {
			wait, _ = w.handleDue(ctx)
			w.commit(ctx)
		}
		switch {
		case more: // a transaction's worth left: poll only what is buffered
			wait = 10 * time.Millisecond
		case wait > 2*time.Second || wait <= 0:
			wait = 2 * time.Second
		}
		w.cl.AllowRebalance()
		fs, closed, fatal := a.poll(ctx, w.cl, wait, 1000, w.p.cfg.GroupID())
		if fatal != nil {
			return fatal
		}
		if closed {
			return nil
		}
		if w.s != nil {
			ok, err := w.ready(ctx, fs)
			if err != nil {
				return err
			}
			if !ok {
				continue // rewound: what was polled comes again
			}
		}
		w.admit(fs)
	}
	return nil
}

// close commits (at least once; an exactly-once worker committed with its
// last transaction), lets the group rebalance and closes the client.
func (w *worker) close() {
	if w.s == nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.commit(cctx)
	}
	w.cl.AllowRebalance() // else leaving the group waits for it forever
	w.cl.Close()
}

// admit decides every polled record of a partition the worker owns and
// holds it in its partition's queue.
func (w *worker) admit(fs kgo.Fetches) {
	now := w.a.o.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	fs.EachPartition(func(f kgo.FetchTopicPartition) {
		if _, ours := w.next[f.Partition]; !ours {
			return
		}
		for _, r := range f.Records {
			if w.s != nil && w.tx.finished(f.Partition, r.Offset) {
				// Republished (or handled) by a committed transaction
				// past its committed offset: only its offset is needed.
				w.queues[f.Partition] = append(w.queues[f.Partition], &held{off: r.Offset, done: true})
				continue
			}
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
}

// handleDue handles every held record that is due, moves each
// partition's commit point past its finished prefix, pauses partitions that
// hold too many waiting records, and returns how long until the next one
// is due (0: none waiting). Exactly once, "handled" is planned for the
// transaction (plan): at most maxTxnRecords republishes or maxTxnBytes
// (more: some due ones were left for the next), and no more runs of finished records past
// a waiting one than the commit's metadata takes (maxRuns).
func (w *worker) handleDue(ctx context.Context) (soonest time.Duration, more bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.a.o.Now()
	var oldest time.Time
	full := false
	for part, q := range w.queues {
		runs := 0
		if w.s != nil {
			runs = countRuns(q)
		}
		lead := true // every record before this one is finished
		for i, h := range q {
			if h.done || ctx.Err() != nil || full {
				lead = lead && h.done
				continue
			}
			if h.dec.Action == dlq.ActionRepublish && !h.dec.Due(now) {
				if wait := h.dec.NotBefore.Sub(now); soonest == 0 || wait < soonest {
					soonest = wait
				}
				if oldest.IsZero() || h.d.Timestamp.Before(oldest) { // clamped to the time it was read
					oldest = h.d.Timestamp
				}
				lead = false
				continue
			}
			if w.s != nil {
				delta := runDelta(q, i, lead)
				if delta > 0 && runs >= maxRuns {
					lead = false // it waits until the commit point moves
					continue
				}
				w.plan(h)
				runs += delta
				if w.tx.full() {
					full, more = true, true
				}
			} else if !w.act(ctx, h.d, h.dec) {
				lead = false
				continue
			}
			h.done, h.d = true, nil // only its offset is needed now
			w.bytes[part] -= h.size
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
	return soonest, more
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
	default:
		rule, action := done(dec)
		m.actions.WithLabelValues(name, rule, action).Inc()
	}
	return true
}

// done is the rule and action label of a decision carried out without a
// write: park, drop, keep.
func done(dec dlq.Decision) (rule, action string) {
	switch dec.Action {
	case dlq.ActionPark:
		return dec.Rule, "parked"
	case dlq.ActionDrop:
		return dec.Rule, "dropped"
	}
	return ruleLabel(dec.Rule), "kept"
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
		w.tx.forget(part)
	}
	cl.ResumeFetchPartitions(tps) // pauses survive rebalances in kgo
}

// revoked commits what is finished (at least once). Exactly once it must
// not end a transaction here (the session's callback holds the lock End
// needs): there is none open between polls, and the session aborts the
// next one, so the worker rewinds after this poll (txn.go, ready).
func (w *worker) revoked(ctx context.Context, cl *kgo.Client, tps map[string][]int32) {
	if w.s == nil {
		w.commit(ctx)
	} else if len(tps) > 0 {
		w.rebalanced()
	}
	w.drop(cl, tps)
}

func (w *worker) lost(_ context.Context, cl *kgo.Client, tps map[string][]int32) {
	if w.s != nil {
		w.rebalanced()
	}
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
		w.tx.forget(part)
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
