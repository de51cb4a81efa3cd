package processor

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Codes redrive itself writes to redrive-error-code.
const (
	CodeBadHeader        = "bad_header"
	CodeTTL              = "ttl"
	CodeNotReadyDeadline = "not_ready_deadline"
	CodeStateTooLarge    = "state_too_large"
	CodeBadState         = "bad_state"
	CodeRecordTooLarge   = "record_too_large"
	CodeHandlerPanic     = "handler_panic"
)

// Dead-letter reasons (redrive-reason).
const (
	reasonExhausted = "exhausted"
	reasonPermanent = "permanent"
	reasonInvalid   = "invalid"
	reasonExpired   = "expired"
)

// outKind names where an outcome record goes, for metrics and logs.
type outKind string

const (
	toRetry   outKind = "retry"
	toDLQ     outKind = "dlq"
	toResults outKind = "results"
)

// process handles w and returns its outcome record (nil: none to write)
// and where it goes; ok is false when the work was abandoned (partition
// revoked, shutdown past the grace): the record is then redelivered.
func (p *pipeline) process(w *work) (rec *kgo.Record, kind outKind, ok bool) {
	ctx := w.ps.ctx
	if ctx.Err() != nil {
		return nil, "", false
	}
	w.decode()
	now := time.Now()
	r := w.rec
	meta := w.meta
	tierLabel := "main"
	if w.ps.tier >= 0 {
		tierLabel = retry.FormatDelay(p.cfg.Schedule.Tiers[w.ps.tier])
	}
	// Identity and origin: kept from the headers, else this record.
	if meta.ID == "" {
		meta.ID = retry.RequestID(r)
	}
	if !meta.HasOrigin {
		meta.HasOrigin = true
		meta.OriginTopic, meta.OriginPartition, meta.OriginOffset, meta.OriginTimestamp = r.Topic, r.Partition, r.Offset, r.Timestamp
	}
	if meta.OriginTimestamp.IsZero() {
		meta.OriginTimestamp = r.Timestamp
	}

	if w.decodeErr != nil {
		p.m.outcomes.WithLabelValues(p.cfg.Name, "invalid", tierLabel, CodeBadHeader).Inc()
		fail(&meta, now, retry.ClassInvalid, CodeBadHeader, w.decodeErr.Error())
		return p.deadLetter(w, meta, reasonInvalid), toDLQ, true
	}
	if w.ps.tier >= 0 {
		if now.Before(meta.Due) {
			// A hop: due later than this tier's delay. Re-queue, no attempt spent.
			idx, _ := p.cfg.Schedule.TierForDelay(meta.Due.Sub(now))
			meta.Tier = retry.FormatDelay(p.cfg.Schedule.Tiers[idx])
			p.m.hops.WithLabelValues(p.cfg.Name, meta.Tier).Inc()
			return p.tierRecord(w, meta, idx), toRetry, true
		}
		if !meta.Due.IsZero() {
			p.hot.latenessFor(w.ps.tier, tierLabel).Observe(now.Sub(meta.Due).Seconds())
		}
	}
	if p.cfg.TTL > 0 && now.Sub(meta.OriginTimestamp) > p.cfg.TTL {
		p.m.outcomes.WithLabelValues(p.cfg.Name, "expired", tierLabel, CodeTTL).Inc()
		fail(&meta, now, retry.ClassExpired, CodeTTL, fmt.Sprintf("request older than ttl %s", p.cfg.TTL))
		return p.deadLetter(w, meta, reasonExpired), toDLQ, true
	}
	poll := meta.ErrorClass == retry.ClassNotReady
	if poll && !meta.NotReadySince.IsZero() && now.Sub(meta.NotReadySince) > p.cfg.NotReadyDeadline {
		p.m.outcomes.WithLabelValues(p.cfg.Name, "expired", tierLabel, CodeNotReadyDeadline).Inc()
		fail(&meta, now, retry.ClassExpired, CodeNotReadyDeadline, fmt.Sprintf("still not ready %s after the first not-ready answer (not_ready_deadline %s)", now.Sub(meta.NotReadySince).Round(time.Second), p.cfg.NotReadyDeadline))
		return p.deadLetter(w, meta, reasonExpired), toDLQ, true
	}

	attempt := meta.Attempt + 1
	if poll && meta.Attempt > 0 {
		attempt = meta.Attempt // a poll belongs to the attempt that was accepted
	}
	var state []byte
	if poll {
		state = meta.State
	}
	req := &Request{Record: userRecord(r, w.user), ID: meta.ID, Attempt: attempt, Polls: meta.Polls, State: state, Meta: meta}
	start := time.Now()
	out := p.call(ctx, req)
	if ctx.Err() != nil {
		return nil, "", false // revoked or past the grace: the next owner redoes it
	}
	now = time.Now()
	p.hot.handlerFor(out.Kind).Observe(now.Sub(start).Seconds())
	p.hot.outcomeFor(out.Kind, w.ps.tier, tierLabel, out.Code).Inc()

	meta.State = nil
	meta.Due, meta.Tier = time.Time{}, ""
	switch out.Kind {
	case Success:
		meta.Attempt = attempt
		if poll {
			meta.Polls++
		}
		if p.cfg.Results == "" {
			return nil, "", true
		}
		return p.resultRecord(w, meta, out.Result), toResults, true

	case NotReady:
		meta.Attempt = attempt
		if poll {
			meta.Polls++
		}
		if meta.NotReadySince.IsZero() {
			meta.NotReadySince = now
		}
		fail(&meta, now, retry.ClassNotReady, out.Code, errText(out, "not ready"))
		if len(out.State) > retry.MaxStateBytes {
			fail(&meta, now, retry.ClassPermanent, CodeStateTooLarge, fmt.Sprintf("handler state of %d bytes exceeds %d", len(out.State), retry.MaxStateBytes))
			return p.deadLetter(w, meta, reasonPermanent), toDLQ, true
		}
		if !utf8.Valid(out.State) {
			// Header values are UTF-8 text (the wire contract); binary state
			// would make the retry record invalid on its next read.
			fail(&meta, now, retry.ClassPermanent, CodeBadState, "handler state is not valid UTF-8 (encode binary state, e.g. base64)")
			return p.deadLetter(w, meta, reasonPermanent), toDLQ, true
		}
		meta.State = out.State
		idx, due := p.cfg.Schedule.Next(now, 0, out.MinDelay, nil)
		meta.Due, meta.Tier = due, retry.FormatDelay(p.cfg.Schedule.Tiers[idx])
		return p.tierRecord(w, meta, idx), toRetry, true

	case Transient:
		meta.Attempt = meta.Attempt + 1 // a failed poll is a failed attempt too
		meta.Polls += btoi(poll)
		meta.NotReadySince = time.Time{}
		fail(&meta, now, retry.ClassTransient, out.Code, errText(out, "transient failure"))
		if p.cfg.Schedule.Exhausted(meta.Attempt) {
			return p.deadLetter(w, meta, reasonExhausted), toDLQ, true
		}
		idx, due := p.cfg.Schedule.Next(now, meta.Attempt+1, out.MinDelay, nil)
		meta.Due, meta.Tier = due, retry.FormatDelay(p.cfg.Schedule.Tiers[idx])
		return p.tierRecord(w, meta, idx), toRetry, true

	case Invalid:
		meta.Attempt = attempt
		meta.Polls += btoi(poll)
		fail(&meta, now, retry.ClassInvalid, out.Code, errText(out, "invalid request"))
		return p.deadLetter(w, meta, reasonInvalid), toDLQ, true

	default: // Permanent, and anything unknown
		meta.Attempt = attempt
		meta.Polls += btoi(poll)
		fail(&meta, now, retry.ClassPermanent, out.Code, errText(out, "permanent failure"))
		return p.deadLetter(w, meta, reasonPermanent), toDLQ, true
	}
}

// call runs the handler, turning a panic into a permanent outcome.
func (p *pipeline) call(ctx context.Context, req *Request) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("handler panicked", "id", req.ID, "panic", v)
			out = Outcome{Kind: Permanent, Code: CodeHandlerPanic, Err: fmt.Errorf("handler panicked: %v", v)}
		}
	}()
	return p.h.Handle(ctx, req)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func errText(out Outcome, dflt string) string {
	if out.Err != nil {
		return out.Err.Error()
	}
	if out.Code != "" {
		return out.Code
	}
	return dflt
}

func fail(m *retry.Meta, now time.Time, class retry.Class, code, msg string) {
	if m.FirstErrorAt.IsZero() {
		m.FirstErrorAt = now
	}
	m.LastErrorAt = now
	m.ErrorClass, m.ErrorCode, m.Error = class, code, retry.TruncateUTF8(msg, retry.MaxErrorBytes)
}

// userRecord is r as handlers see it: the user's headers only.
func userRecord(r *kgo.Record, user []kgo.RecordHeader) *kgo.Record {
	c := *r
	c.Headers = user
	return &c
}

func (p *pipeline) tierRecord(w *work, meta retry.Meta, idx int) *kgo.Record {
	p.m.retries.WithLabelValues(p.cfg.Name, meta.Tier).Inc()
	meta.Reason, meta.Group, meta.Instance = "", "", ""
	return &kgo.Record{Topic: p.tiers[idx], Key: w.rec.Key, Value: w.rec.Value, Headers: retry.Encode(meta, w.user)}
}

func (p *pipeline) resultRecord(w *work, meta retry.Meta, result []byte) *kgo.Record {
	m := retry.Meta{ID: meta.ID, Attempt: meta.Attempt, Polls: meta.Polls, Redrives: meta.Redrives, HasOrigin: true,
		OriginTopic: meta.OriginTopic, OriginPartition: meta.OriginPartition, OriginOffset: meta.OriginOffset, OriginTimestamp: meta.OriginTimestamp}
	return &kgo.Record{Topic: p.cfg.Results, Key: w.rec.Key, Value: result, Headers: retry.Encode(m, w.user)}
}

// send produces w's outcome record without waiting; the acknowledgement
// finishes w. A failed produce goes on in write, off kgo's goroutine.
func (p *pipeline) send(ctx context.Context, w *work, rec *kgo.Record, kind outKind) {
	if kind == toDLQ {
		p.m.deadLetters.WithLabelValues(p.cfg.Name, reasonOf(rec), p.m.code(codeOf(rec))).Inc()
	}
	p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if err == nil {
			p.complete(w, true)
			return
		}
		go func() { p.complete(w, p.write(ctx, w, rec, kind, err)) }()
	})
}

// write retries a failed outcome write with backoff for as long as the
// partition is ours and the process runs, and reports true once the broker
// acknowledged it. A record too large for its topic is dead-lettered
// instead (the DLQ builder truncates the value to fit), so it is never
// dropped.
func (p *pipeline) write(ctx context.Context, w *work, rec *kgo.Record, kind outKind, err error) bool {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 10*time.Second
	failing := false
	defer func() {
		if failing {
			p.clearWriteErr()
		}
	}()
	for {
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if isTooLarge(err) && kind != toDLQ {
			p.log.Warn("outcome record too large for its topic; dead-lettering it", "topic", rec.Topic, "src", srcOf(w), "err", err)
			meta, _, _ := retry.Decode(rec.Headers)
			fail(&meta, time.Now(), retry.ClassPermanent, CodeRecordTooLarge, fmt.Sprintf("writing to %s: %v", rec.Topic, err))
			rec, kind = p.deadLetter(w, meta, reasonPermanent), toDLQ
			p.m.deadLetters.WithLabelValues(p.cfg.Name, reasonOf(rec), p.m.code(codeOf(rec))).Inc()
			err = p.cl.ProduceSync(ctx, rec).FirstErr()
			continue
		}
		if isTooLarge(err) && kind == toDLQ && len(rec.Value) > 0 {
			// The builder's estimate was not enough (the topic's limit may be
			// lower than configured): halve the value and say so.
			rec = p.shrink(rec)
			err = p.cl.ProduceSync(ctx, rec).FirstErr()
			continue
		}
		p.m.produceFails.WithLabelValues(p.cfg.Name, string(kind)).Inc()
		if !failing {
			failing = true
			p.setWriteErr(fmt.Errorf("writing to %s: %w", rec.Topic, err))
		}
		d := b.NextBackOff()
		p.log.Error("outcome write failed; retrying, offset not committed", "topic", rec.Topic, "src", srcOf(w), "err", err, "retry_in", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return false
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

func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func reasonOf(r *kgo.Record) string { return headerValue(r, retry.HeaderReason) }
func codeOf(r *kgo.Record) string   { return headerValue(r, retry.HeaderErrorCode) }
