package processor

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// outputs is what building a record's outcome record needs of its
// pipeline: the topics, the dead-letter options and the size each topic
// takes. build is a pure function of it, the consumed record and the
// decision, so that the size rule can be fuzzed without a broker.
type outputs struct {
	tiers    []string
	results  string
	failover string           // breaker.failover_to
	dead     dlq.BuildOptions // MaxRecordBytes is set per build
	// limit is the size (dlq.EncodedSize) a record for topic must fit:
	// the smaller of the topic's max.message.bytes and the producer's
	// batch limit.
	limit func(topic string) int
}

// build is the outcome record of d for the consumed record src (user: its
// user headers), and the decision it carries out: d itself, or — when the
// retry or results record is larger than its topic takes — a permanent
// dead letter with code record_too_large, which the dlq builder cuts to
// fit. No record build returns is larger than its topic's limit (a dead
// letter is cut to fit any limit of at least dlq.MinRecordBytes).
//
// The record and its headers are built in or (a dead letter, which the
// dlq package builds, excepted).
func (o *outputs) build(or *outRec, src *kgo.Record, user []kgo.RecordHeader, d decision, now time.Time) (*kgo.Record, decision) {
	r := &or.rec
	// The record's timestamp is now, the decision's time: the producer
	// would otherwise read the clock again for it.
	switch d.to {
	case toRetry:
		*r = kgo.Record{Topic: o.tiers[d.tier], Key: src.Key, Value: src.Value, Timestamp: now}
	case toResults:
		*r = kgo.Record{Topic: o.results, Key: src.Key, Value: d.result, Timestamp: now}
	case toFailover:
		// Forwarded unchanged: key, value, user headers, redrive-* headers
		// (redrive-failovers one more).
		*r = kgo.Record{Topic: o.failover, Key: src.Key, Value: src.Value, Timestamp: now}
	default:
		return o.deadLetter(src, user, d.meta, 0), d
	}
	r.Headers = retry.EncodeTo(or.hs[:0], or.vals[:0], d.meta, user)
	if size, limit := dlq.EncodedSize(r), o.limit(r.Topic); size > limit {
		d = tooLarge(d.meta, now, fmt.Sprintf("%s record of %d bytes is larger than %s takes (%d bytes)", d.to, size, r.Topic, limit))
		return o.deadLetter(src, user, d.meta, 0), d
	}
	return r, d
}

// tooLarge is the dead-letter decision for an outcome record (headers
// meta) that its topic refuses or would refuse.
func tooLarge(meta retry.Meta, now time.Time, msg string) decision {
	fail(&meta, now, retry.ClassPermanent, CodeRecordTooLarge, msg)
	return dead(meta, reasonPermanent, "")
}

// deadLetter builds src's dead letter with the dlq package; meta carries
// the reason. User headers are redacted as configured, compatibility
// headers added, and value, user headers, key (in that order) cut to fit
// limit, or the DLQ's limit when limit is 0 (marked redrive-truncated,
// redrive-truncated-headers, redrive-truncated-key).
func (o *outputs) deadLetter(src *kgo.Record, user []kgo.RecordHeader, meta retry.Meta, limit int) *kgo.Record {
	opts := o.dead
	opts.MaxRecordBytes = limit
	if limit <= 0 {
		opts.MaxRecordBytes = o.limit(opts.Topic)
	}
	return dlq.Build(src, meta, user, opts)
}
