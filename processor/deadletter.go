package processor

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// deadLetter builds w's dead letter. TODO: the dlq package's builder
// (redaction, truncation to fit, compatibility headers).
func (p *pipeline) deadLetter(w *work, meta retry.Meta, reason string) *kgo.Record {
	meta.Reason, meta.Group, meta.Instance = reason, p.cfg.GroupID(), p.pc.Instance
	meta.State, meta.Due, meta.Tier = nil, time.Time{}, ""
	return &kgo.Record{Topic: p.cfg.DLQ, Key: w.rec.Key, Value: w.rec.Value, Headers: retry.Encode(meta, w.user)}
}

// shrink halves a dead letter's value, marking the original size.
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
