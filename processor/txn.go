package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkaconn/txnoffsets"
)

// Exactly-once delivery (Pipeline.Delivery == ExactlyOnce).
//
// Records are handled concurrently as in at-least-once, but a worker does
// not produce the outcome: it holds it on the record's tracker entry
// (txnCommitter.finish) and moves on. The poll loop, between polls (franz-go's
// GroupTransactSession forbids polling while a transaction begins or
// ends), writes a transaction every CommitInterval or once MaxBatch
// outcomes are held (from beforePoll): per partition it takes the held outcomes
// from the lowest unfinished offset up to the first record still being
// handled (a commit covers a contiguous prefix), produces them and
// commits those offsets in the same transaction. Only its Begin and End
// stop polling: the poll loop begins it and hands its records to the
// producer (open), polls on while a goroutine waits for them to be
// acknowledged (the flush: half a transaction's time), and ends it at the
// first beforePoll after (end). At shutdown, drain and final write
// transactions start to end (cycle). Committed: the entries
// are finished. Aborted (a rebalance since it began, a zombie's stale
// generation, a failed write): the session rewinds consumption to the
// committed offsets, so every partition's state is started over (resetAll)
// and the records are handled again.
//
// Ownership of a held work: end settles the works of the transaction
// it writes (inTxn); a revoke (dropped) or resetAll settles the other held
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

// txnCommitter is exactly-once delivery (see above). Its transactions are
// written by the poll loop (beforePoll) and, at shutdown, by drain.
type txnCommitter struct {
	p    *pipeline
	sess *kgo.GroupTransactSession
	// nheld counts outcomes held for a transaction; kick and pollCancel
	// make the poll loop write one at once when MaxBatch are held.
	nheld      atomic.Int64
	kick       chan struct{}
	pollCancel atomic.Pointer[context.CancelFunc]
	// lastTxn is when the poll loop last wrote a transaction; open is
	// the transaction begun and not ended yet (poll loop only, or drain
	// and final once it has stopped).
	lastTxn time.Time
	open    *openTxn

	errMu sync.Mutex
	err   error // the last transaction failure (readiness)

	refusedMu sync.Mutex
	refused   map[srcKey]refusal // outcomes refused as too large
}

func newTxnCommitter(p *pipeline, opts []kgo.Opt) (committer, *kgo.Client, error) {
	c := &txnCommitter{p: p, kick: make(chan struct{}, 1), lastTxn: time.Now()}
	opts = append(opts, kgo.TransactionalID(TransactionalID(p.cfg.Name, p.pc.Instance)), kgo.TransactionTimeout(txnTimeout))
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, nil, err
	}
	c.sess = sess
	return c, sess.Client(), nil
}

// finish holds d's outcome for w until its transaction. The worker is
// done with w (the next record of its key may start), but w stays in
// flight, counted against MaxInflight, until its transaction commits or
// its partition is dropped (settle).
func (c *txnCommitter) finish(w *work, d decision) {
	p := c.p
	if d.to != "" {
		w.pooled = outRecs.Get().(*outRec)
		w.out, w.outTo = p.outcomeRecord(w.pooled, w, d)
		if r, ok := c.refusedBefore(w); ok {
			c.refit(w, r)
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
	n := c.nheld.Add(1)
	p.hot.txnHeld.Set(float64(n))
	p.nextInLaneLocked(w)
	p.mu.Unlock()
	p.wg.Done()
	if n >= c.batchAt() {
		c.kickNow()
	}
}

// loop: the poll loop writes the transactions (franz-go's
// GroupTransactSession forbids polling while one begins or ends).
func (c *txnCommitter) loop(context.Context) {}

// beforePoll ends the open transaction once its records are
// acknowledged, and begins one when CommitInterval has passed since the
// last or MaxBatch outcomes are held; the poll after it may wait until
// the next is due, or its records are acknowledged (kick).
func (c *txnCommitter) beforePoll() (time.Duration, <-chan struct{}, error) {
	interval := c.p.pc.CommitInterval
	if c.open != nil {
		select {
		case <-c.open.flushed:
		default:
			return interval, c.kick, nil
		}
		if err := c.end(); err != nil {
			return 0, nil, err
		}
		c.lastTxn = time.Now()
	}
	if time.Since(c.lastTxn) >= interval || c.nheld.Load() >= c.batchAt() {
		select {
		case <-c.kick:
		default:
		}
		if err := c.begin(); err != nil {
			return 0, nil, err
		}
		if c.open != nil {
			return interval, c.kick, nil
		}
		c.lastTxn = time.Now()
	}
	return max(time.Millisecond, interval-time.Since(c.lastTxn)), c.kick, nil
}

// pollContext lets kickNow cut a poll short. A poll that starts after
// the open transaction's records were acknowledged is cut at once: the
// kick that said so may have come before it could cancel the poll.
func (c *txnCommitter) pollContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	c.pollCancel.Store(&cancel)
	if o := c.open; o != nil {
		select {
		case <-o.flushed:
			cancel()
		default:
		}
	}
	return pctx, func() {
		c.pollCancel.Store(nil)
		cancel()
	}
}

// dropped: nothing is committed on a revoke. franz-go's session aborts a
// transaction across the rebalance, and calling End from this callback
// would deadlock; held outcomes of these partitions are dropped and their
// records redelivered.
func (c *txnCommitter) dropped(_ context.Context, states []*partState, _, _ bool) bool {
	p := c.p
	p.forget(states)
	var held []*work
	p.mu.Lock()
	for _, ps := range states {
		held = c.takeHeldLocked(ps, held)
	}
	p.mu.Unlock()
	c.settle(held, false)
	return false
}

// final writes the last transaction, after ending the open one.
func (c *txnCommitter) final() error { return c.cycle() }

func (c *txnCommitter) held() int64 { return c.nheld.Load() }

// batchAt is how many held outcomes make a transaction start before its
// interval: MaxBatch, or half of MaxInflight if that is less (held
// outcomes count against MaxInflight: at the bound nothing is polled until
// a transaction commits).
func (c *txnCommitter) batchAt() int64 {
	return int64(max(1, min(c.p.cfg.MaxBatch, c.p.cfg.MaxInflight/2)))
}

// kickNow makes the poll loop write a transaction now.
func (c *txnCommitter) kickNow() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
	if cancel := c.pollCancel.Load(); cancel != nil {
		(*cancel)()
	}
}

// settle ends held works: finished when their transaction committed.
func (c *txnCommitter) settle(ws []*work, finished bool) {
	if len(ws) == 0 {
		return
	}
	p := c.p
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
	n := c.nheld.Add(-int64(len(ws)))
	p.hot.txnHeld.Set(float64(n))
	p.mu.Unlock()
	p.signalCap()
}

// takeHeldLocked appends the held works of ps that no transaction is
// writing to ws (dropped and resetAll settle them). p.mu held.
func (c *txnCommitter) takeHeldLocked(ps *partState, ws []*work) []*work {
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
func (c *txnCommitter) collectLocked() txnBatch {
	b := txnBatch{offsets: map[string]map[int32]kgo.EpochOffset{}, parts: map[tp]*partState{}}
	for _, ps := range c.p.parts {
		if ps.gone || ps.revoking {
			continue
		}
		eo := b.collectPart(ps)
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

// collectPart adds ps's held prefix to b and returns the offset to commit
// for ps (-1: none). p.mu held.
func (b *txnBatch) collectPart(ps *partState) kgo.EpochOffset {
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
	if last != nil {
		return kgo.EpochOffset{Epoch: last.epoch, Offset: last.offset + 1}
	}
	if cp, ok := t.commitPoint(); ok {
		return cp // only markers finished since the last commit
	}
	return kgo.EpochOffset{Offset: -1}
}

// openTxn is a transaction begun and not ended: its batch, and the
// write of its records, done when flushed is closed.
type openTxn struct {
	b       txnBatch
	ctx     context.Context
	cancel  context.CancelFunc
	start   time.Time
	wr      txnWrite
	flushed chan struct{}
}

// cycle writes a transaction start to end (drain, final): the open one
// is ended first. It returns an error only when transactions cannot go
// on (the producer is fenced or failed for good): the pipeline then
// stops, and the process with it.
func (c *txnCommitter) cycle() error {
	if err := c.endOpen(); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	return c.endOpen()
}

// endOpen waits until the open transaction's records are flushed and
// ends it; with none open it does nothing.
func (c *txnCommitter) endOpen() error {
	if c.open == nil {
		return nil
	}
	<-c.open.flushed
	return c.end()
}

// begin takes the held prefix of every partition, begins a transaction
// and hands its records to the producer; a goroutine waits for them to be
// acknowledged, closes flushed and kicks the poll loop to end it. Nothing
// held: no transaction. An error stops the pipeline (see cycle).
func (c *txnCommitter) begin() error {
	p := c.p
	p.mu.Lock()
	b := c.collectLocked()
	p.mu.Unlock()
	if len(b.offsets) == 0 {
		return nil
	}
	// Never the run's context: cancelling End leaves the transaction in
	// an unknown state.
	ctx, cancel := context.WithTimeout(context.Background(), txnTimeout)
	start := time.Now()
	if err := c.sess.Begin(); err != nil {
		cancel()
		c.settle(b.works, false)
		return c.fatal(c.fencedHint(fmt.Errorf("begin transaction: %w", err)))
	}
	o := &openTxn{b: b, ctx: ctx, cancel: cancel, start: start, flushed: make(chan struct{})}
	flush := c.produce(ctx, b)
	c.open = o
	go func() {
		o.wr = flush()
		close(o.flushed)
		c.kickNow()
	}()
	return nil
}

// end commits the open transaction, whose records the producer has
// acknowledged (or failed), with its offsets; or aborts it. See cycle for
// the error.
func (c *txnCommitter) end() error {
	o := c.open
	c.open = nil
	defer o.cancel()
	b, wr := o.b, o.wr
	commitCtx := kgo.PreTxnCommitFnContext(o.ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		// franz-go fills req with the polled positions, which run ahead
		// of the records finished: commit exactly the held prefix.
		txnoffsets.CommitExactly(req, b.offsets, nil)
		return nil
	})
	committed, err := c.sess.End(commitCtx, kgo.TransactionEndTry(wr.err == nil))
	c.p.hot.txnSeconds.Observe(time.Since(o.start).Seconds())
	if committed {
		c.committed(b)
		return nil
	}
	return c.aborted(b, wr, err)
}

// txnWrite is how a transaction's outcome records were written.
type txnWrite struct {
	err  error
	big  []*work  // outcomes refused as too large
	gone []string // topics deleted and recreated (forgetRecreated, after End)
}

// produce hands b's outcome records to the producer in the open
// transaction; the function it returns waits until they are acknowledged
// (or failed) and says how they were written. It may run beside a poll,
// never beside Begin or End.
func (c *txnCommitter) produce(ctx context.Context, b txnBatch) func() txnWrite {
	// One promise for every record, no closure per record: it notes the
	// records refused as too large, matched to their works once the flush
	// is over (failures are rare; the map is built only then).
	var mu sync.Mutex
	var wr txnWrite
	var big []*kgo.Record
	var perr error
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if perr == nil {
			perr = fmt.Errorf("writing to %s: %w", r.Topic, err)
		}
		if isTooLarge(err) {
			big = append(big, r)
		}
		if errors.Is(err, kerr.UnknownTopicID) {
			wr.gone = append(wr.gone, r.Topic)
		}
	}
	for _, w := range b.works {
		if w.out != nil {
			c.p.cl.Produce(ctx, w.out, promise)
		}
	}
	return func() txnWrite {
		ferr := c.p.cl.Flush(ctx)
		mu.Lock()
		defer mu.Unlock()
		wr.err = errors.Join(perr, ferr)
		if len(big) > 0 {
			byRec := make(map[*kgo.Record]*work, len(b.works))
			for _, w := range b.works {
				if w.out != nil {
					byRec[w.out] = w
				}
			}
			for _, r := range big {
				if w := byRec[r]; w != nil {
					wr.big = append(wr.big, w)
				}
			}
		}
		return wr
	}
}

// committed finishes the works of b's committed transaction.
func (c *txnCommitter) committed(b txnBatch) {
	p := c.p
	p.m.txns.WithLabelValues(p.cfg.Name, "committed").Inc()
	p.mu.Lock()
	for tpk, ps := range b.parts {
		if !ps.gone {
			ps.committed = b.offsets[tpk.topic][tpk.partition].Offset
		}
	}
	p.mu.Unlock()
	// Committed: every outcome record of b was acknowledged (a failed
	// write aborts), so kgo is done with them.
	for _, w := range b.works {
		if w.pooled != nil {
			w.pooled.recycle()
			w.pooled = nil
		}
	}
	c.settle(b.works, true)
	c.setErr(nil)
}

// aborted starts every partition over after b's transaction aborted
// (endErr: End's error). Only a fenced producer stops the pipeline.
func (c *txnCommitter) aborted(b txnBatch, wr txnWrite, endErr error) error {
	p := c.p
	p.m.txns.WithLabelValues(p.cfg.Name, "aborted").Inc()
	why := errors.Join(wr.err, endErr)
	if why == nil {
		why = errors.New("the group rebalanced while it was written")
	}
	p.log.Warn("transaction aborted; handling its records again from the committed offsets",
		"outcomes", len(b.works), "records", len(b.recs), "err", why)
	c.noteRefused(wr.big)
	for _, topic := range wr.gone {
		p.forgetRecreated(topic, kerr.UnknownTopicID)
	}
	c.resetAll()
	c.settle(b.works, false)
	switch {
	case endErr != nil && isFenced(endErr):
		return c.fatal(c.fencedHint(endErr))
	case endErr != nil:
		// End's errors are not retryable in franz-go's words, but an
		// aborted transaction leaves the producer usable unless Begin says
		// otherwise: the next cycle finds out.
		c.setErr(fmt.Errorf("transaction failed: %w", endErr))
	case wr.err != nil:
		c.setErr(fmt.Errorf("transaction aborted: %w", wr.err))
	}
	return nil
}

// resetAll starts every owned partition over after an aborted
// transaction: the session rewound consumption to the committed offsets,
// so what was polled since is polled again. Each partition gets a fresh
// state; work of the old one is abandoned as in a revoke (its context is
// cancelled, its held outcomes are dropped, its waiting records forgotten).
func (c *txnCommitter) resetAll() {
	p := c.p
	var held []*work
	resume := map[string][]int32{}
	p.mu.Lock()
	for k, ps := range p.parts {
		if ps.gone {
			continue
		}
		ps.revoking = true
		ps.leaving.Store(true)
		if p.forgetLocked(ps) {
			resume[k.topic] = append(resume[k.topic], k.partition)
		}
		held = c.takeHeldLocked(ps, held)
		p.parts[k] = p.newPartState(k, ps.tier, ps.committed)
	}
	p.purgeGoneLocked()
	p.mu.Unlock()
	p.line.kick() // records of the old states waiting for the line leave
	c.settle(held, false)
	if len(resume) > 0 {
		p.cl.ResumeFetchPartitions(resume)
	}
}

// drain writes transactions every CommitInterval while in-flight work
// drains at shutdown (no poll runs any more). It returns when drained is
// closed, or false when graceOver fires first.
func (c *txnCommitter) drain(drained <-chan struct{}, graceOver <-chan time.Time) bool {
	t := time.NewTicker(c.p.pc.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-drained:
			return true
		case <-graceOver:
			return false
		case <-t.C:
		case <-c.kick:
		}
		if err := c.cycle(); err != nil {
			c.p.log.Error("transaction failed while draining", "err", err)
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
func (c *txnCommitter) fencedHint(err error) error {
	if !isFenced(err) {
		return err
	}
	return fmt.Errorf("transactional id %s is fenced: another live process uses it (give every process its own instance): %w",
		TransactionalID(c.p.cfg.Name, c.p.pc.Instance), err)
}

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// fatal reports an error that stops transactions for good.
func (c *txnCommitter) fatal(err error) error {
	c.p.log.Error("exactly-once: transactions cannot go on; stopping the pipeline (nothing uncommitted is lost: it is redelivered)", "err", err)
	c.setErr(err)
	return fmt.Errorf("pipeline %s: %w", c.p.cfg.Name, err)
}

func (c *txnCommitter) setErr(err error) {
	c.errMu.Lock()
	changed := (c.err == nil) != (err == nil)
	c.err = err
	c.errMu.Unlock()
	if changed {
		c.p.ready()
	}
}

// failure is the last transaction failure, nil after a commit.
func (c *txnCommitter) failure() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
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
func (c *txnCommitter) noteRefused(ws []*work) {
	if len(ws) == 0 {
		return
	}
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	if c.refused == nil || len(c.refused) > maxRefusals {
		c.refused = map[srcKey]refusal{}
	}
	for _, w := range ws {
		c.p.log.Warn("outcome record refused as too large for its topic inside a transaction; it is handled again and dead-lettered (a dead letter: cut to half its size)",
			"topic", w.out.Topic, "src", srcOf(w), "size", dlq.EncodedSize(w.out))
		c.refused[srcKey{w.ps.tp, w.rec.Offset}] = refusal{to: w.outTo, size: dlq.EncodedSize(w.out)}
	}
}

// refusedBefore reports (and forgets) the refusal of w's outcome.
func (c *txnCommitter) refusedBefore(w *work) (refusal, bool) {
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	k := srcKey{w.ps.tp, w.rec.Offset}
	r, ok := c.refused[k]
	if ok {
		delete(c.refused, k)
	}
	return r, ok
}

// refit replaces w's outcome record, refused before as too large: a retry,
// result or failover becomes a dead letter; a dead letter is cut to half
// the size refused.
func (c *txnCommitter) refit(w *work, r refusal) {
	p := c.p
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
