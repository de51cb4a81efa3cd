package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/dlq"
)

// Exactly-once delivery (Pipeline.Delivery == ExactlyOnce).
//
// Records are handled concurrently as in at-least-once, but a worker does
// not produce the outcome: it holds it on the record's tracker entry
// (hold) and moves on. The poll loop, between polls (franz-go's
// GroupTransactSession forbids polling while a transaction begins or
// ends), writes a transaction every CommitInterval or once MaxBatch
// outcomes are held (txnCycle): per partition it takes the held outcomes
// from the lowest unfinished offset up to the first record still being
// handled (a commit covers a contiguous prefix), produces them and
// commits those offsets in the same transaction. Committed: the entries
// are finished. Aborted (a rebalance since it began, a zombie's stale
// generation, a failed write): the session rewinds consumption to the
// committed offsets, so every partition's state is started over (resetAll)
// and the records are handled again.
//
// Ownership of a held work: txnCycle settles the works of the transaction
// it writes (inTxn); a revoke (drop) or resetAll settles the other held
// works of the partitions it drops. Each held work is settled once.

// txnTimeout is an exactly-once pipeline's transaction timeout. A
// transaction spans only the write of held outcomes and the offset commit,
// never a handler call, so it is bounded by the record delivery timeout
// (20 s) plus the commit, not by the handler's timeout or the shutdown
// grace; it stays under the default session timeout (45 s). A process
// killed inside a transaction blocks read_committed readers of its output
// partitions until its successor (the same transactional id) starts, or
// this long.
const txnTimeout = 30 * time.Second

// TransactionalID is the transactional id of pipeline's producer in the
// process named instance: "redrive.<pipeline>.<instance>". A restarted
// process with the same instance fences its predecessor at once; two live
// processes must not share an instance.
func TransactionalID(pipeline, instance string) string {
	return "redrive." + pipeline + "." + instance
}

// hold keeps d's outcome for w until its transaction. The worker is done
// with w (the next record of its key may start), but w stays in flight,
// counted against MaxInflight, until its transaction commits or its
// partition is dropped (settle).
func (p *pipeline) hold(w *work, d decision) {
	if d.to != "" {
		w.out, w.outTo = p.outcomeRecord(w, d)
		if r, ok := p.refusedBefore(w); ok {
			p.refit(w, r)
		}
	}
	p.mu.Lock()
	if w.ps.gone {
		p.mu.Unlock()
		w.out = nil
		p.complete(w, false)
		return
	}
	w.e.held = w
	n := p.held.Add(1)
	p.hot.txnHeld.Set(float64(n))
	p.nextInLaneLocked(w)
	p.mu.Unlock()
	p.wg.Done()
	if n >= p.batchAt() {
		p.kickTxn()
	}
}

// batchAt is how many held outcomes make a transaction start before its
// interval: MaxBatch, or half of MaxInflight if that is less (held
// outcomes count against MaxInflight: at the bound nothing is polled until
// a transaction commits).
func (p *pipeline) batchAt() int64 {
	return int64(max(1, min(p.cfg.MaxBatch, p.cfg.MaxInflight/2)))
}

// kickTxn makes the poll loop write a transaction now.
func (p *pipeline) kickTxn() {
	select {
	case p.txnKick <- struct{}{}:
	default:
	}
	if c := p.pollCancel.Load(); c != nil {
		(*c)()
	}
}

// settle ends held works: finished when their transaction committed.
func (p *pipeline) settle(ws []*work, finished bool) {
	if len(ws) == 0 {
		return
	}
	for _, w := range ws {
		if w.cb != nil || w.via != viaNone || w.polledJob != "" {
			p.finishJob(w, finished)
		}
	}
	p.mu.Lock()
	for _, w := range ws {
		w.e.held, w.out, w.inTxn = nil, nil, false
		p.releaseLocked(w, finished)
	}
	n := p.held.Add(-int64(len(ws)))
	p.hot.txnHeld.Set(float64(n))
	p.mu.Unlock()
	p.signalCap()
}

// takeHeldLocked appends the held works of ps that no transaction is
// writing to ws (drop and resetAll settle them). p.mu held.
func (p *pipeline) takeHeldLocked(ps *partState, ws []*work) []*work {
	t := ps.offsets
	for _, e := range t.q.items() {
		if e.held != nil && !e.held.inTxn {
			ws = append(ws, e.held)
		}
	}
	return ws
}

// txnBatch is what one transaction writes.
type txnBatch struct {
	recs    []*kgo.Record
	works   []*work
	offsets map[string]map[int32]kgo.EpochOffset
	parts   map[tp]*partState
}

// collectLocked takes, per owned partition, the held outcomes from the
// lowest unfinished offset up to the first record without one. p.mu held.
func (p *pipeline) collectLocked() txnBatch {
	b := txnBatch{offsets: map[string]map[int32]kgo.EpochOffset{}, parts: map[tp]*partState{}}
	for _, ps := range p.parts {
		if ps.gone || ps.revoking {
			continue
		}
		t := ps.offsets
		var last *entry
		for _, e := range t.q.items() {
			if e.done { // a transaction marker (admit)
				last = e
				continue
			}
			w := e.held
			if w == nil || w.inTxn {
				break
			}
			w.inTxn = true
			if w.out != nil {
				b.recs = append(b.recs, w.out)
			}
			b.works = append(b.works, w)
			last = e
		}
		eo := kgo.EpochOffset{Offset: -1}
		if last != nil {
			eo = kgo.EpochOffset{Epoch: last.epoch, Offset: last.offset + 1}
		} else if cp, ok := t.commitPoint(); ok {
			eo = cp // only markers finished since the last commit
		}
		if eo.Offset <= ps.committed {
			continue
		}
		if b.offsets[ps.tp.topic] == nil {
			b.offsets[ps.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		b.offsets[ps.tp.topic][ps.tp.partition] = eo
		b.parts[ps.tp] = ps
	}
	return b
}

// txnCycle writes the held prefix of every partition and commits its
// offsets in one transaction. It returns an error only when transactions
// cannot go on (the producer is fenced or failed for good): the pipeline
// then stops, and the process with it.
func (p *pipeline) txnCycle() error {
	p.mu.Lock()
	b := p.collectLocked()
	p.mu.Unlock()
	if len(b.offsets) == 0 {
		return nil
	}
	// Never the run's context: cancelling End leaves the transaction in
	// an unknown state.
	ctx, cancel := context.WithTimeout(context.Background(), txnTimeout)
	defer cancel()
	start := time.Now()
	if err := p.sess.Begin(); err != nil {
		p.settle(b.works, false)
		return p.txnFatal(p.fencedHint(fmt.Errorf("begin transaction: %w", err)))
	}
	var mu sync.Mutex
	var perr error
	var big []*work   // outcomes refused as too large
	var gone []string // topics deleted and recreated (forgetRecreated, after End)
	for _, w := range b.works {
		if w.out == nil {
			continue
		}
		p.cl.Produce(ctx, w.out, func(r *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if perr == nil {
					perr = fmt.Errorf("writing to %s: %w", r.Topic, err)
				}
				if isTooLarge(err) {
					big = append(big, w)
				}
				if errors.Is(err, kerr.UnknownTopicID) {
					gone = append(gone, r.Topic)
				}
				mu.Unlock()
			}
		})
	}
	ferr := p.cl.Flush(ctx)
	mu.Lock()
	werr := errors.Join(perr, ferr)
	mu.Unlock()
	commitCtx := kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		commitOnly(req, b.offsets)
		return nil
	})
	committed, err := p.sess.End(commitCtx, kgo.TransactionEndTry(werr == nil))
	p.hot.txnSeconds.Observe(time.Since(start).Seconds())
	if committed {
		p.m.txns.WithLabelValues(p.cfg.Name, "committed").Inc()
		p.mu.Lock()
		for tpk, ps := range b.parts {
			if !ps.gone {
				ps.committed = b.offsets[tpk.topic][tpk.partition].Offset
			}
		}
		p.mu.Unlock()
		p.settle(b.works, true)
		p.setTxnErr(nil)
		return nil
	}
	p.m.txns.WithLabelValues(p.cfg.Name, "aborted").Inc()
	why := errors.Join(werr, err)
	if why == nil {
		why = errors.New("the group rebalanced while it was written")
	}
	p.log.Warn("transaction aborted; handling its records again from the committed offsets",
		"outcomes", len(b.works), "records", len(b.recs), "err", why)
	mu.Lock()
	p.noteRefused(big)
	for _, topic := range gone {
		p.forgetRecreated(topic, kerr.UnknownTopicID)
	}
	mu.Unlock()
	p.resetAll()
	p.settle(b.works, false)
	if err != nil {
		if isFenced(err) {
			return p.txnFatal(p.fencedHint(err))
		}
		// End's errors are not retryable in franz-go's words, but an
		// aborted transaction leaves the producer usable unless Begin says
		// otherwise: the next cycle finds out.
		p.setTxnErr(fmt.Errorf("transaction failed: %w", err))
		return nil
	}
	if werr != nil {
		p.setTxnErr(fmt.Errorf("transaction aborted: %w", werr))
	}
	return nil
}

// commitOnly makes req commit exactly offsets: franz-go fills it with the
// polled positions, which run ahead of the records finished.
func commitOnly(req *kmsg.TxnOffsetCommitRequest, offsets map[string]map[int32]kgo.EpochOffset) {
	ids := map[string][16]byte{}
	for _, t := range req.Topics {
		ids[t.Topic] = t.TopicID
	}
	req.Topics = req.Topics[:0]
	for topic, parts := range offsets {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, ids[topic]
		for part, eo := range parts {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = part, eo.Offset, eo.Epoch
			rp.Metadata = &req.MemberID
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
}

// resetAll starts every owned partition over after an aborted
// transaction: the session rewound consumption to the committed offsets,
// so what was polled since is polled again. Each partition gets a fresh
// state; work of the old one is abandoned as in a revoke (its context is
// cancelled, its held outcomes are dropped, its waiting records forgotten).
func (p *pipeline) resetAll() {
	var held []*work
	resume := map[string][]int32{}
	p.mu.Lock()
	for k, ps := range p.parts {
		if ps.gone {
			continue
		}
		ps.revoking, ps.gone = true, true
		ps.leaving.Store(true)
		ps.cancel()
		p.waiting -= ps.waiting
		if ps.paused {
			p.m.pausedParts.WithLabelValues(p.cfg.Name).Dec()
			resume[k.topic] = append(resume[k.topic], k.partition)
		}
		held = p.takeHeldLocked(ps, held)
		ctx, cancel := context.WithCancel(p.hctx)
		p.parts[k] = &partState{tp: k, tier: ps.tier, offsets: newOffsetTracker(), ctx: ctx, cancel: cancel, committed: ps.committed}
	}
	for _, w := range p.jobs {
		if w.ps.gone {
			p.unindexLocked(w)
		}
	}
	p.sched.purge(func(w *work) bool { return w.ps.gone })
	p.hot.waiting.Set(float64(p.waiting))
	p.mu.Unlock()
	p.line.kick() // records of the old states waiting for the line leave
	p.settle(held, false)
	if len(resume) > 0 {
		p.cl.ResumeFetchPartitions(resume)
	}
}

// drainTxns writes transactions every CommitInterval while in-flight work
// drains at shutdown (no poll runs any more). It returns when drained is
// closed, or false when graceOver fires first.
func (p *pipeline) drainTxns(drained <-chan struct{}, graceOver <-chan time.Time) bool {
	t := time.NewTicker(p.pc.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-drained:
			return true
		case <-graceOver:
			return false
		case <-t.C:
		case <-p.txnKick:
		}
		if err := p.txnCycle(); err != nil {
			p.log.Error("transaction failed while draining", "err", err)
			select {
			case <-drained:
				return true
			case <-graceOver:
				return false
			}
		}
	}
}

// fencedHint says what a fenced producer means, when err is one.
func (p *pipeline) fencedHint(err error) error {
	if !isFenced(err) {
		return err
	}
	return fmt.Errorf("transactional id %s is fenced: another live process uses it (give every process its own instance): %w",
		TransactionalID(p.cfg.Name, p.pc.Instance), err)
}

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// txnFatal reports an error that stops transactions for good.
func (p *pipeline) txnFatal(err error) error {
	p.log.Error("exactly-once: transactions cannot go on; stopping the pipeline (nothing uncommitted is lost: it is redelivered)", "err", err)
	p.setTxnErr(err)
	return fmt.Errorf("pipeline %s: %w", p.cfg.Name, err)
}

func (p *pipeline) setTxnErr(err error) {
	p.txnErrMu.Lock()
	changed := (p.txnErr == nil) != (err == nil)
	p.txnErr = err
	p.txnErrMu.Unlock()
	if changed {
		p.ready()
	}
}

// txnFailure is the last transaction failure, nil after a commit.
func (p *pipeline) txnFailure() error {
	p.txnErrMu.Lock()
	defer p.txnErrMu.Unlock()
	return p.txnErr
}

// refusal is an outcome record the broker refused as too large in an
// aborted transaction: when its consumed record is handled again, its
// outcome is dead-lettered instead (or, a dead letter, cut to half).
type refusal struct {
	to   outKind
	size int
}

type srcKey struct {
	tp     tp
	offset int64
}

// maxRefusals bounds the refusals remembered (each is forgotten when used).
const maxRefusals = 10000

// noteRefused remembers the outcomes in ws as refused.
func (p *pipeline) noteRefused(ws []*work) {
	if len(ws) == 0 {
		return
	}
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	if p.refused == nil || len(p.refused) > maxRefusals {
		p.refused = map[srcKey]refusal{}
	}
	for _, w := range ws {
		p.log.Warn("outcome record refused as too large for its topic inside a transaction; it is handled again and dead-lettered (a dead letter: cut to half its size)",
			"topic", w.out.Topic, "src", srcOf(w), "size", dlq.EncodedSize(w.out))
		p.refused[srcKey{w.ps.tp, w.rec.Offset}] = refusal{to: w.outTo, size: dlq.EncodedSize(w.out)}
	}
}

// refusedBefore reports (and forgets) the refusal of w's outcome.
func (p *pipeline) refusedBefore(w *work) (refusal, bool) {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	k := srcKey{w.ps.tp, w.rec.Offset}
	r, ok := p.refused[k]
	if ok {
		delete(p.refused, k)
	}
	return r, ok
}

// refit replaces w's outcome record, refused before as too large: a retry,
// result or failover becomes a dead letter; a dead letter is cut to half
// the size refused.
func (p *pipeline) refit(w *work, r refusal) {
	if w.outTo == toDLQ {
		if r.to == toDLQ {
			w.out = p.out.deadLetter(w.rec, w.user, w.meta, r.size/2)
		}
		return // else a new dead letter, built to fit as always
	}
	{
		d := tooLarge(w.meta, time.Now(), fmt.Sprintf("writing to %s: %v", w.out.Topic, kerr.MessageTooLarge))
		w.meta = d.meta
		w.out, w.outTo = p.out.deadLetter(w.rec, w.user, d.meta, 0), toDLQ
		p.countDeadLetter(d.meta)
	}
}
