package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// Outcome records: built from a decision (outputs.build, deadletter.go),
// produced without waiting (send, at-least-once) or held for a transaction
// (txn.go), and written until acknowledged (write).

// send produces d's outcome record without waiting; the acknowledgement
// finishes w. A failed produce goes on in write, off kgo's goroutine. A
// retry or results record too large for its topic is dead-lettered
// (outputs.build) before it is sent.
func (p *pipeline) send(ctx context.Context, w *work, d decision) {
	or := outRecs.Get().(*outRec)
	rec, to := p.outcomeRecord(or, w, d)
	// kgo cancels the record with its Context (the partition's), and
	// hands it back to the promise, which finds w and to there: one
	// promise for every record, no closure per record. The ackCtx is
	// the record's own, never pooled: kgo may read a record's Context on
	// a goroutine of its own (waiting for a new topic's partitions) with
	// no ordering to the promise.
	rec.Context = &ackCtx{Context: ctx, w: w, to: to, or: or}
	p.cl.Produce(ctx, rec, p.sentFn)
}

// outRec is an outcome record with room for the headers it usually has
// (retry.EncodeTo writes them into hs and vals): taken from a pool
// (outRecs), so an outcome record costs one small allocation (its
// ackCtx) instead of four.
type outRec struct {
	rec  kgo.Record
	hs   [14]kgo.RecordHeader // a retry record's redrive-* headers
	vals [256]byte
}

// outRecs holds outcome records whose acknowledgement has been handled.
// At about 1 KiB each, one fresh per record was 40 % of the happy path's
// allocated bytes and what drove its GC cycles.
var outRecs = sync.Pool{New: func() any { return new(outRec) }}

// recycle puts or back for another outcome record. Only once kgo is done
// with it: its promise was called with success and is done with it
// (send), or its transaction committed (txn.go). A failed record goes on
// in write, or is dropped with its aborted transaction: never pooled. The
// headers are cleared so that a pooled record keeps no consumed record's
// bytes (user header values point into the fetch buffer).
func (or *outRec) recycle() {
	or.rec = kgo.Record{}
	clear(or.hs[:])
	outRecs.Put(or)
}

// ackCtx is an outcome record's Context: the partition's context, and
// the work and kind of record the promise finishes; or is the pooled
// record it belongs to (the record acknowledged may be another: a dead
// letter is built by the dlq package).
type ackCtx struct {
	context.Context
	w  *work
	to outKind
	or *outRec
}

// sent is the promise of every record send produces.
func (p *pipeline) sent(r *kgo.Record, err error) {
	ack := r.Context.(*ackCtx)
	w, to := ack.w, ack.to
	if err == nil {
		if to == toRetry {
			// Its tier partition learns of it under the same lock
			// (fetchorder.go).
			p.completeWith(w, true, r)
		} else {
			p.finishSent(w, to)
		}
		ack.or.recycle()
		return
	}
	go func() {
		if written, ok := p.write(ack.Context, w, to, r, err); ok {
			p.finishSent(w, written)
		} else {
			p.complete(w, false)
		}
	}()
}

// outcomeRecord builds d's outcome record for w in or and counts it (a retry or
// a dead letter); a retry or results record too large for its topic is a
// dead letter instead. w.meta becomes the outcome record's headers.
func (p *pipeline) outcomeRecord(or *outRec, w *work, d decision) (*kgo.Record, outKind) {
	// w.at: the clock read when the decision was made (process); a
	// second read per record costs more than the microseconds since.
	at := w.at
	if at.IsZero() {
		at = p.clk.Now()
	}
	rec, out := p.out.build(or, w.rec, w.user, d, at)
	if out.to != d.to {
		// The error names the topic and both sizes (outputs.build).
		p.log.Warn("outcome record larger than its topic takes; dead-lettering it", "src", srcOf(w), "err", out.meta.Error)
	}
	switch out.to {
	case toRetry:
		p.m.retries.WithLabelValues(p.cfg.Name, out.meta.Tier).Inc()
	case toDLQ:
		p.countDeadLetter(out.meta)
	}
	// The consumed record's headers are not needed any more: w keeps the
	// outcome record's for write, and the callback stays small (a decision
	// captured in it would cost ~450 bytes per record).
	w.meta = out.meta
	return rec, out.to
}

// finishSent completes w whose outcome record (to) was acknowledged.
func (p *pipeline) finishSent(w *work, to outKind) {
	if to == toFailover {
		p.m.failovers.WithLabelValues(p.cfg.Name).Inc()
	}
	p.complete(w, true)
}

func (p *pipeline) countDeadLetter(meta retry.Meta) {
	p.m.deadLetters.WithLabelValues(p.cfg.Name, meta.Reason, p.m.code(meta.ErrorCode)).Inc()
}

// maxShrinks bounds how often write rebuilds a dead letter the broker
// refuses as too large at half its size: 10 halvings take the default
// limit below dlq.MinRecordBytes.
const maxShrinks = 10

// write retries a failed outcome write with backoff for as long as the
// partition is ours and the process runs, and reports true once the broker
// acknowledged it, with the kind of record it wrote. A record too large for its topic is dead-lettered
// instead (the DLQ builder cuts it to fit), so it is never dropped. A dead
// letter refused as too large although it fits the limit redrive learned
// (the topic's limit was lowered, or a broker counts differently) is
// rebuilt at half its size, at most maxShrinks times; only then does the
// write wait and retry like any other failure.
func (p *pipeline) write(ctx context.Context, w *work, to outKind, rec *kgo.Record, err error) (written outKind, ok bool) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 10*time.Second
	failing := false
	defer func() {
		if failing {
			p.clearWriteErr()
		}
	}()
	shrinks := 0
	for {
		if err == nil {
			return to, true
		}
		if ctx.Err() != nil {
			return to, false
		}
		if isTooLarge(err) && to != toDLQ {
			p.log.Warn("outcome record too large for its topic; dead-lettering it", "topic", rec.Topic, "src", srcOf(w), "err", err)
			// w.meta: the outcome record's headers (send).
			d := tooLarge(w.meta, time.Now(), fmt.Sprintf("writing to %s: %v", rec.Topic, err))
			w.meta = d.meta
			rec, to = p.out.deadLetter(w.rec, w.user, d.meta, 0), toDLQ
			p.countDeadLetter(d.meta)
			err = p.cl.ProduceSync(ctx, rec).FirstErr()
			continue
		}
		if isTooLarge(err) && to == toDLQ && shrinks < maxShrinks {
			// The limit learned at start is wrong: rebuild the dead letter
			// from the consumed record (w.meta: the decision's headers, so
			// the marks keep the sizes as consumed) at half its size.
			shrinks++
			size := dlq.EncodedSize(rec)
			p.log.Error("dead letter refused as too large although it fits the limit learned at start; the DLQ's max.message.bytes or the producer's batch limit is lower: cutting it to half its size",
				"topic", rec.Topic, "src", srcOf(w), "size", size, "limit", p.limit(rec.Topic), "target", size/2, "try", shrinks, "of", maxShrinks, "err", err)
			rec = p.out.deadLetter(w.rec, w.user, w.meta, size/2)
			err = p.cl.ProduceSync(ctx, rec).FirstErr()
			continue
		}
		p.m.produceFails.WithLabelValues(p.cfg.Name, string(to)).Inc()
		p.forgetRecreated(rec.Topic, err)
		if !failing {
			failing = true
			p.setWriteErr(writeErr(rec.Topic, p.pc.Principal, err))
		}
		wait := b.NextBackOff()
		p.log.Error("outcome write failed; retrying, offset not committed", "topic", rec.Topic, "src", srcOf(w), "err", err, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return to, false
		}
		err = p.cl.ProduceSync(ctx, rec).FirstErr()
	}
}

func isTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

func srcOf(w *work) string {
	return fmt.Sprintf("%s/%d/%d", w.rec.Topic, w.rec.Partition, w.rec.Offset)
}
