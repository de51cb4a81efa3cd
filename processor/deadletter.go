package processor

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// deadLetter builds w's dead letter with the dlq package; meta carries the
// reason. User headers are redacted as configured, compatibility headers
// added, the value cut to fit the DLQ's max.message.bytes (marked
// redrive-truncated).
func (p *pipeline) deadLetter(w *work, meta retry.Meta) *kgo.Record {
	return dlq.Build(w.rec, meta, w.user, dlq.BuildOptions{
		Topic:          p.cfg.DLQ,
		RedactHeaders:  p.cfg.RedactHeaders,
		Group:          p.cfg.GroupID(),
		Instance:       p.pc.Instance,
		HeaderStyle:    p.cfg.DLQHeaderStyle,
		MaxRecordBytes: int(p.dlqMaxBytes.Load()),
	})
}
