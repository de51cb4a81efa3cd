package processor

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// deadLetter builds w's dead letter with the dlq package: user headers
// redacted as configured, compatibility headers added, the value cut to fit
// the DLQ's max.message.bytes (marked redrive-truncated).
func (p *pipeline) deadLetter(w *work, meta retry.Meta, reason string) *kgo.Record {
	meta.Reason = reason
	return dlq.Build(w.rec, meta, w.user, dlq.BuildOptions{
		Topic:          p.cfg.DLQ,
		RedactHeaders:  p.cfg.RedactHeaders,
		Group:          p.cfg.GroupID(),
		Instance:       p.pc.Instance,
		HeaderStyle:    p.cfg.DLQHeaderStyle,
		MaxRecordBytes: int(p.dlqMaxBytes.Load()),
	})
}

// shrink halves a dead letter's value, marking the original size: the
// fallback when the broker still says the record is too large (its limit
// was lowered after start, or the batch overhead was larger than estimated).
func (p *pipeline) shrink(r *kgo.Record) *kgo.Record {
	c := *r
	orig := len(r.Value)
	if v := headerValue(r, retry.HeaderTruncated); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			orig = n
		}
	}
	c.Value = r.Value[:len(r.Value)/2]
	meta, user, _ := retry.Decode(r.Headers)
	meta.Truncated = int64(orig)
	c.Headers = retry.Encode(meta, user)
	return &c
}
