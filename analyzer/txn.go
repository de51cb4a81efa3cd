package analyzer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkaconn/txnoffsets"
)

// The rule worker of an exactly-once pipeline (Pipeline.ExactlyOnce).
//
// Each turn of the poll loop is one Kafka transaction, begun and ended
// between two polls (no rebalance callback runs then: BlockRebalanceOnPoll):
// handleDue plans what is due (plan), transact writes the republished
// records and commits each partition's commit point, then End. franz-go's
// GroupTransactSession aborts the transaction if the group rebalanced since
// the last End, and after any abort rewinds consumption to the committed
// offsets; the worker then forgets everything it holds (reset) and decides
// the redelivered records again. Nothing is lost and, to a read_committed
// reader, nothing is republished twice.
//
// The commit point is the lowest unfinished offset, but records past it
// may be finished already (handled behind a dead letter waiting for its
// rule's after). Their offsets go with the commit, as runs in its
// metadata (encodeFinished), so that a worker reading the partition from
// that commit (after a restart, a rebalance or an abort) takes them as
// finished instead of republishing them again (txState.finished). The
// metadata holds at most maxRuns runs; a due record that would start
// another waits until the commit point moves.
//
// franz-go's End would commit the polled head; kgo.PreTxnCommitFnContext
// replaces that with the worker's own commit points (offsets). The worker
// never commits with CommitOffsetsSync, and never ends a transaction in a
// rebalance callback (that deadlocks the session).

const (
	// txnTimeout is the transactions' timeout: a transaction spans one
	// turn's writes and commit, never a wait.
	txnTimeout = 30 * time.Second
	// endTimeout bounds End; past it the client is closed and made again.
	endTimeout = 30 * time.Second
	// maxTxnRecords and maxTxnBytes bound one transaction's republishes,
	// so that it ends well within txnTimeout.
	maxTxnRecords = 1000
	maxTxnBytes   = 32 << 20
	// maxRuns bounds the runs of finished records past the commit point
	// that a commit's metadata names: at most 64 × 28 bytes, well within
	// the broker's offset.metadata.max.bytes (default 4096).
	maxRuns = 64
	// finishedPrefix starts a commit's metadata written by the worker;
	// other metadata (another client's) names no finished record.
	finishedPrefix = "redrive.finished.1:"
)

// txState is an exactly-once worker's transaction state, guarded by
// worker.mu (batch and counts are only touched by the poll goroutine).
type txState struct {
	batch  []pending        // this transaction's republishes
	bytes  int64            // what they hold (recordBytes of the dead letters)
	counts [][2]string      // rule, action of what it finished without a write
	skip   map[int32][]span // finished past the committed offset, read from its metadata
	loaded map[int32]bool   // skip read since the partition was assigned or rewound
	last   map[int32]point  // committed, as far as the worker knows
	flag   bool             // revoked or lost: rewind after this poll
	fails  backoff.BackOff  // pause after a failed republish or read
}

// pending is one republish of the open transaction.
type pending struct {
	rec      *kgo.Record
	id, rule string
	redrives int
}

// span is a run of finished offsets, from and to included.
type span struct{ from, to int64 }

// point is a partition's commit: the lowest unfinished offset and the
// finished runs past it.
type point struct {
	off  int64
	meta string
}

func (t *txState) init() {
	t.skip, t.loaded, t.last = map[int32][]span{}, map[int32]bool{}, map[int32]point{}
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 10 * time.Second
	t.fails = b
}

// forget drops what t knows of part: it was assigned, revoked, or rewound.
func (t *txState) forget(part int32) {
	delete(t.skip, part)
	delete(t.loaded, part)
	delete(t.last, part)
}

// finished reports whether off, polled from part in offset order, was
// finished by a committed transaction past its committed offset.
func (t *txState) finished(part int32, off int64) bool {
	sp := t.skip[part]
	for len(sp) > 0 && sp[0].to < off {
		sp = sp[1:]
	}
	if len(sp) == 0 {
		delete(t.skip, part)
		return false
	}
	t.skip[part] = sp
	return sp[0].from <= off
}

// rebalanced notes a revoke or a loss (from the rebalance callbacks).
func (w *worker) rebalanced() {
	w.mu.Lock()
	w.tx.flag = true
	w.mu.Unlock()
}

// fence initializes the transactional producer, which aborts a
// transaction a previous run with the same id left open (kill -9): until
// then it holds the committed offsets, and the group's first fetch waits.
func (w *worker) fence(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, _, err := w.cl.ProducerID(fctx); err != nil && ctx.Err() == nil {
		w.a.log.Warn("rule worker: cannot initialize the transactional producer yet; a transaction a previous run left open holds the DLQ's offsets until it times out", "pipeline", w.p.cfg.Name, "timeout", txnTimeout, "err", err)
	}
}

// plan carries out a due decision inside the transaction: a republish
// goes to the batch; the rest is counted when the transaction commits.
// Under w.mu.
func (w *worker) plan(h *held) {
	d, dec := h.d, h.dec
	if d == nil {
		return // not a dead letter: nothing to do (see act)
	}
	if dec.Action != dlq.ActionRepublish {
		rule, action := done(dec)
		w.tx.counts = append(w.tx.counts, [2]string{rule, action})
		return
	}
	rec, err := dlq.Republish(d, dec.Topic)
	if err != nil { // dlq.ErrTruncated: kept, as act keeps it
		w.tx.counts = append(w.tx.counts, [2]string{dec.Rule, "kept"})
		w.a.log.Warn("not republishing", "pipeline", w.p.cfg.Name, "id", d.ID, "rule", dec.Rule, "kept_bytes", len(d.Value), "original_bytes", d.Truncated, "err", err)
		return
	}
	w.tx.batch = append(w.tx.batch, pending{rec: rec, id: d.ID, rule: dec.Rule, redrives: d.Redrives + 1})
	w.tx.bytes += h.size
}

// full reports whether the open transaction's batch is at its bound.
func (t *txState) full() bool { return len(t.batch) >= maxTxnRecords || t.bytes >= maxTxnBytes }

// transact runs one turn: handleDue, then, if anything was planned or a
// commit point moved, one transaction with the batch and the commit
// points. An aborted transaction resets the worker (its records come
// again); err is an End that failed (the client must be made again).
func (w *worker) transact(ctx context.Context) (wait time.Duration, more bool, err error) {
	wait, more = w.handleDue(ctx)
	w.mu.Lock()
	points := w.points()
	batch, counts := w.tx.batch, w.tx.counts
	w.tx.batch, w.tx.counts, w.tx.bytes = nil, nil, 0
	moved := false
	for part, pt := range points {
		if last, ok := w.tx.last[part]; !ok || last != pt {
			moved = true
		}
	}
	w.mu.Unlock()
	if len(batch) == 0 && !moved {
		w.count(counts)
		return wait, more, nil
	}

	if err := w.s.Begin(); err != nil {
		return 0, false, fmt.Errorf("beginning a transaction: %w", err)
	}
	var (
		pmu    sync.Mutex
		failed error
		wg     sync.WaitGroup
	)
	wg.Add(len(batch))
	for _, b := range batch {
		w.s.Produce(ctx, b.rec, func(_ *kgo.Record, err error) {
			if err != nil {
				pmu.Lock()
				if failed == nil {
					failed = err
				}
				pmu.Unlock()
			}
			wg.Done()
		})
	}
	if ferr := w.cl.Flush(ctx); ferr != nil {
		pmu.Lock()
		if failed == nil {
			failed = ferr
		}
		pmu.Unlock()
	} else {
		wg.Wait()
	}
	pmu.Lock()
	commit := failed == nil
	pmu.Unlock()

	ectx, cancel := context.WithTimeout(context.Background(), endTimeout) // not ctx: a cancelled End leaves the client in doubt
	defer cancel()
	ectx = kgo.PreTxnCommitFnContext(ectx, func(req *kmsg.TxnOffsetCommitRequest) error {
		w.offsets(req, points)
		return nil
	})
	committed, err := w.s.End(ectx, kgo.TransactionEndTry(commit))
	wg.Wait() // an abort fails what was still buffered
	m, name := w.a.m, w.p.cfg.Name
	if committed {
		m.transactions.WithLabelValues(name, "committed").Inc()
		w.mu.Lock()
		maps.Copy(w.tx.last, points)
		w.mu.Unlock()
		w.tx.fails.Reset()
		w.count(counts)
		for _, b := range batch {
			m.actions.WithLabelValues(name, b.rule, "republished").Inc()
			w.a.log.Info("republished", "pipeline", name, "rule", b.rule, "id", b.id, "to", b.rec.Topic, "redrives", b.redrives)
		}
		return wait, more, nil
	}
	m.transactions.WithLabelValues(name, "aborted").Inc()
	w.mu.Lock()
	w.reset()
	w.mu.Unlock()
	if err != nil {
		return 0, false, fmt.Errorf("ending the transaction: %w", err)
	}
	switch {
	case ctx.Err() != nil:
	case !commit:
		m.republishFailures.WithLabelValues(name).Inc()
		pause := w.tx.fails.NextBackOff()
		w.a.log.Error("republish failed; transaction aborted, redone from the committed offsets", "pipeline", name, "records", len(batch), "err", failed, "in", pause)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	default:
		w.a.log.Info("rule worker: transaction aborted (the group rebalanced); redone from the committed offsets", "pipeline", name, "records", len(batch))
	}
	return 0, false, nil
}

// count adds what a committed transaction finished without a write.
func (w *worker) count(counts [][2]string) {
	for _, c := range counts {
		w.a.m.actions.WithLabelValues(w.p.cfg.Name, c[0], c[1]).Inc()
	}
}

// points is each owned partition's commit point. Under w.mu.
func (w *worker) points() map[int32]point {
	out := make(map[int32]point, len(w.next))
	for part, next := range w.next {
		if pt, ok := commitPoint(w.queues[part], next); ok {
			out[part] = pt
		}
	}
	return out
}

// commitPoint is the commit of a partition holding q (offset order) whose
// finished prefix ended at next (0: none yet): the first unfinished offset
// with the finished runs past it; false when there is nothing to commit.
func commitPoint(q []*held, next int64) (point, bool) {
	i := 0
	for i < len(q) && q[i].done {
		i++
	}
	switch {
	case i < len(q):
		return point{off: q[i].off, meta: encodeFinished(q[i:])}, true
	case len(q) > 0:
		return point{off: q[len(q)-1].off + 1}, true
	case next > 0:
		return point{off: next}, true
	}
	return point{}, false
}

// offsets replaces the offsets franz-go's End would commit (the polled
// head) with the worker's commit points, each with its finished runs as
// metadata.
func (w *worker) offsets(req *kmsg.TxnOffsetCommitRequest, points map[int32]point) {
	parts := make(map[int32]kgo.EpochOffset, len(points))
	for part, pt := range points {
		parts[part] = kgo.EpochOffset{Epoch: -1, Offset: pt.off}
	}
	txnoffsets.CommitExactly(req, map[string]map[int32]kgo.EpochOffset{w.p.cfg.DLQ: parts},
		func(_ string, part int32) string { return points[part].meta })
}

// ready runs after each poll. After a revoke or a loss it rewinds (false:
// what was polled comes again). It reads the commit's metadata of each
// partition polled for the first time since it was assigned or rewound;
// when that fails it rewinds too, after a pause.
func (w *worker) ready(ctx context.Context, fs kgo.Fetches) (bool, error) {
	w.mu.Lock()
	flag := w.tx.flag
	var need []int32
	fs.EachPartition(func(f kgo.FetchTopicPartition) {
		if _, ours := w.next[f.Partition]; ours && len(f.Records) > 0 && !w.tx.loaded[f.Partition] {
			need = append(need, f.Partition)
		}
	})
	w.mu.Unlock()
	if flag {
		return false, w.rewind()
	}
	if len(need) == 0 {
		return true, nil
	}
	got, err := w.readCommits(ctx, need)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		pause := w.tx.fails.NextBackOff()
		w.a.log.Warn("rule worker: cannot read the committed offsets; reading again from them", "pipeline", w.p.cfg.Name, "err", err, "in", pause)
		if err := w.rewind(); err != nil {
			return false, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for part, c := range got {
		if _, ours := w.next[part]; !ours {
			continue
		}
		w.tx.loaded[part] = true
		if c.skip != nil {
			w.tx.skip[part] = c.skip
		}
		if c.committed {
			w.tx.last[part] = c.point
		}
	}
	return true, nil
}

// committedState is what readCommits learnt of one partition.
type committedState struct {
	point
	committed bool
	skip      []span
}

// readCommits reads the group's committed offsets and their metadata for
// parts (stable: no transaction pending on them).
func (w *worker) readCommits(ctx context.Context, parts []int32) (map[int32]committedState, error) {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(w.cl).FetchOffsets(kadm.RequireStable(fctx), w.p.cfg.GroupID())
	if err != nil {
		return nil, err
	}
	out := make(map[int32]committedState, len(parts))
	for _, part := range parts {
		var c committedState
		o, ok := resp.Lookup(w.p.cfg.DLQ, part)
		if ok && o.Err != nil {
			return nil, fmt.Errorf("partition %d: %w", part, o.Err)
		}
		if ok && o.At >= 0 {
			c.point, c.committed = point{off: o.At, meta: o.Metadata}, true
			skip, err := decodeFinished(o.Metadata, o.At)
			if err != nil {
				w.a.log.Warn("rule worker: the committed offset's metadata does not read; no record past it is taken as finished", "pipeline", w.p.cfg.Name, "partition", part, "offset", o.At, "err", err)
			}
			c.skip = skip
		}
		out[part] = c
	}
	return out, nil
}

// rewind ends the session without a transaction open: franz-go rewinds
// consumption to the committed offsets, and the worker forgets what it
// holds.
func (w *worker) rewind() error {
	ectx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	_, err := w.s.End(ectx, kgo.TryAbort)
	w.mu.Lock()
	w.reset()
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rewinding to the committed offsets: %w", err)
	}
	return nil
}

// reset forgets every held record: consumption was rewound to the
// committed offsets, so they come again. Under w.mu.
func (w *worker) reset() {
	for part := range w.next {
		w.next[part] = 0
		delete(w.queues, part)
		delete(w.bytes, part)
		w.tx.forget(part)
		if w.paused[part] {
			delete(w.paused, part)
			w.cl.ResumeFetchPartitions(map[string][]int32{w.p.cfg.DLQ: {part}})
		}
	}
	w.tx.batch, w.tx.counts, w.tx.bytes, w.tx.flag = nil, nil, 0, false
}

// countRuns is the number of runs of finished records in q past its
// finished prefix.
func countRuns(q []*held) int {
	n, lead := 0, true
	for i, h := range q {
		if !h.done {
			lead = false
			continue
		}
		if !lead && !q[i-1].done {
			n++
		}
	}
	return n
}

// runDelta is how countRuns(q) changes when q[i] (unfinished) is
// finished; lead: every record before it is finished.
func runDelta(q []*held, i int, lead bool) int {
	right := i+1 < len(q) && q[i+1].done
	if lead {
		if right {
			return -1 // the run behind it joins the finished prefix
		}
		return 0
	}
	left := i > 0 && q[i-1].done
	d := 1
	if left {
		d--
	}
	if right {
		d--
	}
	return d
}

// encodeFinished is the metadata of a commit at q[0].off (unfinished):
// each run of finished records in q as "<from − previous>+<to − from>" in
// base 36, previous being q[0].off for the first run and the end of the
// one before for the others; "" when none.
func encodeFinished(q []*held) string {
	var b strings.Builder
	prev := q[0].off
	for i := 1; i < len(q); i++ {
		if !q[i].done {
			continue
		}
		j := i
		for j+1 < len(q) && q[j+1].done {
			j++
		}
		if b.Len() == 0 {
			b.WriteString(finishedPrefix)
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(q[i].off-prev, 36))
		b.WriteByte('+')
		b.WriteString(strconv.FormatInt(q[j].off-q[i].off, 36))
		prev = q[j].off
		i = j
	}
	return b.String()
}

var errMetadata = errors.New("not a list of finished runs")

// decodeFinished reads encodeFinished's metadata of a commit at
// committed; metadata without finishedPrefix names nothing.
func decodeFinished(meta string, committed int64) ([]span, error) {
	rest, ok := strings.CutPrefix(meta, finishedPrefix)
	if !ok {
		return nil, nil
	}
	var out []span
	prev := committed
	for _, f := range strings.Split(rest, ",") {
		a, b, ok := strings.Cut(f, "+")
		if !ok {
			return nil, fmt.Errorf("%w: %q", errMetadata, f)
		}
		gap, err1 := strconv.ParseInt(a, 36, 64)
		n, err2 := strconv.ParseInt(b, 36, 64)
		if err1 != nil || err2 != nil || gap <= 0 || n < 0 {
			return nil, fmt.Errorf("%w: %q", errMetadata, f)
		}
		from := prev + gap
		to := from + n
		if from < prev || to < from { // overflow
			return nil, fmt.Errorf("%w: %q", errMetadata, f)
		}
		out = append(out, span{from, to})
		prev = to
	}
	return out, nil
}
