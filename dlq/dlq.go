package dlq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Reason says why a record was dead-lettered (redrive-reason).
type Reason string

const (
	ReasonExhausted Reason = "exhausted" // max_attempts transient failures
	ReasonPermanent Reason = "permanent" // the handler said it will never work
	ReasonInvalid   Reason = "invalid"   // the record itself is unusable
	ReasonExpired   Reason = "expired"   // past ttl or not_ready_deadline
)

// Reasons lists every reason.
var Reasons = []Reason{ReasonExhausted, ReasonPermanent, ReasonInvalid, ReasonExpired}

// ParseReason checks s is a reason.
func ParseReason(s string) (Reason, error) {
	for _, r := range Reasons {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown dead-letter reason %q (want exhausted, permanent, invalid or expired)", s)
}

// Redacted replaces the value of a redacted header.
const Redacted = "[redacted]"

// DefaultMaxRecordBytes is Kafka's default max.message.bytes.
const DefaultMaxRecordBytes = 1048588

// Compatibility header styles.
const (
	StyleRedrive = ""
	StyleSpring  = "spring"
	StyleConnect = "connect"
)

// BuildOptions configure a pipeline's dead letters.
type BuildOptions struct {
	Topic         string   // the DLQ topic
	RedactHeaders []string // user header names, case-insensitive
	Group         string   // redrive-group
	Instance      string   // redrive-instance
	HeaderStyle   string   // "", "spring" or "connect"
	// MaxRecordBytes is the DLQ's max.message.bytes (default 1048588).
	MaxRecordBytes int
}

// Build makes the dead letter of src. meta must carry the reason, error,
// code, class and attempt counts; user are src's user headers. Key and value
// are src's (the value cut to fit when needed, marked redrive-truncated).
func Build(src *kgo.Record, meta retry.Meta, user []kgo.RecordHeader, o BuildOptions) *kgo.Record {
	meta.Group, meta.Instance = o.Group, o.Instance
	meta.State, meta.Due, meta.Tier, meta.NotReadySince = nil, time.Time{}, "", time.Time{}
	hs := redact(user, o.RedactHeaders)
	hs = append(hs, compat(meta, o.HeaderStyle)...)
	r := &kgo.Record{Topic: o.Topic, Key: src.Key, Value: src.Value, Headers: retry.Encode(meta, hs)}
	limit := o.MaxRecordBytes
	if limit <= 0 {
		limit = DefaultMaxRecordBytes
	}
	return fit(r, meta, hs, limit)
}

func redact(user []kgo.RecordHeader, names []string) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, len(user))
	copy(out, user)
	if len(names) == 0 {
		return out
	}
	for i, h := range out {
		for _, n := range names {
			if strings.EqualFold(h.Key, n) {
				out[i].Value = []byte(Redacted)
				break
			}
		}
	}
	return out
}

// Spring Kafka's and Kafka Connect's dead-letter header names.
const (
	SpringOriginalTopic     = "kafka_dlt-original-topic"
	SpringOriginalPartition = "kafka_dlt-original-partition"
	SpringOriginalOffset    = "kafka_dlt-original-offset"
	SpringOriginalTimestamp = "kafka_dlt-original-timestamp"
	SpringExceptionMessage  = "kafka_dlt-exception-message"
	SpringExceptionFQCN     = "kafka_dlt-exception-fqcn"
	ConnectTopic            = "__connect.errors.topic"
	ConnectPartition        = "__connect.errors.partition"
	ConnectOffset           = "__connect.errors.offset"
	ConnectClassName        = "__connect.errors.exception.class.name"
	ConnectMessage          = "__connect.errors.exception.message"
)

func compat(m retry.Meta, style string) []kgo.RecordHeader {
	h := func(k string, v []byte) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: v} }
	class := "redrive." + string(m.ErrorClass)
	switch style {
	case StyleSpring:
		return []kgo.RecordHeader{
			h(SpringOriginalTopic, []byte(m.OriginTopic)),
			h(SpringOriginalPartition, binary.BigEndian.AppendUint32(nil, uint32(m.OriginPartition))),
			h(SpringOriginalOffset, binary.BigEndian.AppendUint64(nil, uint64(m.OriginOffset))),
			h(SpringOriginalTimestamp, binary.BigEndian.AppendUint64(nil, uint64(m.OriginTimestamp.UnixMilli()))),
			h(SpringExceptionMessage, []byte(retry.TruncateUTF8(m.Error, retry.MaxErrorBytes))),
			h(SpringExceptionFQCN, []byte(class)),
		}
	case StyleConnect:
		return []kgo.RecordHeader{
			h(ConnectTopic, []byte(m.OriginTopic)),
			h(ConnectPartition, []byte(strconv.Itoa(int(m.OriginPartition)))),
			h(ConnectOffset, []byte(strconv.FormatInt(m.OriginOffset, 10))),
			h(ConnectClassName, []byte(class)),
			h(ConnectMessage, []byte(retry.TruncateUTF8(m.Error, retry.MaxErrorBytes))),
		}
	}
	return nil
}

// EncodedSize is a conservative bound on r's size inside a record batch:
// the v2 batch header plus the record with its varint lengths.
func EncodedSize(r *kgo.Record) int {
	const batchOverhead = 61 + 64       // batch header + margin
	n := 21 + len(r.Key) + len(r.Value) // attributes, deltas, lengths as varints ≤ 5 each
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n + batchOverhead
}

// fit cuts the value, then the largest user headers, until r fits limit.
// redrive's own headers are never cut.
func fit(r *kgo.Record, meta retry.Meta, user []kgo.RecordHeader, limit int) *kgo.Record {
	size := EncodedSize(r)
	if size <= limit {
		return r
	}
	meta.Truncated = int64(len(r.Value))
	over := size - limit + 32 // room for the redrive-truncated header
	keep := len(r.Value) - over
	if keep < 0 {
		keep = 0
	}
	r.Value = r.Value[:keep:keep]
	r.Headers = retry.Encode(meta, user)
	for EncodedSize(r) > limit {
		big := -1
		for i, h := range user {
			if len(h.Value) > 0 && (big < 0 || len(h.Value) > len(user[big].Value)) {
				big = i
			}
		}
		if big < 0 {
			break // only redrive's headers and the key are left
		}
		cut := EncodedSize(r) - limit
		v := user[big].Value
		n := len(v) - cut - 16
		if n < 0 {
			n = 0
		}
		user[big].Value = v[:n:n]
		r.Headers = retry.Encode(meta, user)
	}
	return r
}

// Shrink halves a dead letter's value and marks its original size in
// redrive-truncated (kept from an earlier cut): the fallback when the broker
// still says the record built by Build is too large (its limit was lowered
// after start, or the batch overhead was larger than estimated). r is not
// changed.
func Shrink(r *kgo.Record) *kgo.Record {
	c := *r
	// r is Build's own record, so its headers decode; a malformed one would
	// only lose the original size.
	meta, user, _ := retry.Decode(r.Headers)
	if meta.Truncated == 0 {
		meta.Truncated = int64(len(r.Value))
	}
	c.Value = r.Value[: len(r.Value)/2 : len(r.Value)/2]
	c.Headers = retry.Encode(meta, user)
	return &c
}

// ErrNotDeadLetter is returned by Decode for a record without redrive-reason.
var ErrNotDeadLetter = errors.New("not a redrive dead letter")

// DeadLetter is a decoded DLQ record.
type DeadLetter struct {
	// Where the dead letter itself is.
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time // when it was dead-lettered

	Key, Value  []byte
	UserHeaders []kgo.RecordHeader

	ID              string
	Reason          Reason
	Error           string
	Code            string
	Class           retry.Class
	Attempt         int
	Polls           int
	OriginTopic     string
	OriginPartition int32
	OriginOffset    int64
	OriginTimestamp time.Time
	FirstErrorAt    time.Time
	LastErrorAt     time.Time
	Redrives        int
	Group           string
	Instance        string
	Truncated       int64 // original value size when the value was cut; 0 if whole

	// Meta is every redrive-* header as decoded.
	Meta retry.Meta
}

// Decode reads a DLQ record. A record that is not a valid dead letter gets
// an error wrapping ErrNotDeadLetter or retry.ErrBadHeader, together with
// what could be decoded, so that tools can still show it.
func Decode(r *kgo.Record) (*DeadLetter, error) {
	m, user, err := retry.Decode(r.Headers)
	d := &DeadLetter{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
		Key: r.Key, Value: r.Value, UserHeaders: user,
		ID: m.ID, Reason: Reason(m.Reason), Error: m.Error, Code: m.ErrorCode, Class: m.ErrorClass,
		Attempt: m.Attempt, Polls: m.Polls, OriginTopic: m.OriginTopic, OriginPartition: m.OriginPartition,
		OriginOffset: m.OriginOffset, OriginTimestamp: m.OriginTimestamp, FirstErrorAt: m.FirstErrorAt,
		LastErrorAt: m.LastErrorAt, Redrives: m.Redrives, Group: m.Group, Instance: m.Instance,
		Truncated: m.Truncated, Meta: m,
	}
	if err != nil {
		return d, fmt.Errorf("dead letter %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if m.Reason == "" {
		return d, fmt.Errorf("%s/%d/%d: %w: no %s header", r.Topic, r.Partition, r.Offset, ErrNotDeadLetter, retry.HeaderReason)
	}
	if _, perr := ParseReason(m.Reason); perr != nil {
		return d, fmt.Errorf("%s/%d/%d: %w: %v", r.Topic, r.Partition, r.Offset, retry.ErrBadHeader, perr)
	}
	return d, nil
}

// ErrTruncated is Republish's error for a dead letter whose value was cut
// to fit the DLQ (redrive-truncated): republishing it would hand the
// handler a broken request, so nothing republishes it — not `redrive
// replay`, not POST /api/replay, not a rule.
var ErrTruncated = errors.New("its value was cut to fit the DLQ: not republished")

// Republish builds the record that brings d back to topic: the original
// key, value and user headers (a redacted header stays "[redacted]": do not
// redact headers the handler needs), the same redrive-id and origin,
// redrive-redrives + 1, and no attempt, error or compatibility headers, so
// the request gets the full schedule again.
//
// A truncated dead letter (d.Truncated > 0) gets no record and an error
// wrapping ErrTruncated that says how much of the value is left. This is
// the one place that refuses them.
func Republish(d *DeadLetter, topic string) (*kgo.Record, error) {
	if d.Truncated > 0 {
		return nil, fmt.Errorf("dead letter %s/%d/%d: %w (%d of %d bytes kept)", d.Topic, d.Partition, d.Offset, ErrTruncated, len(d.Value), d.Truncated)
	}
	m := retry.Meta{ID: d.ID, Redrives: d.Redrives + 1}
	if d.OriginTopic != "" {
		m.HasOrigin = true
		m.OriginTopic, m.OriginPartition, m.OriginOffset, m.OriginTimestamp = d.OriginTopic, d.OriginPartition, d.OriginOffset, d.OriginTimestamp
	}
	var user []kgo.RecordHeader
	for _, h := range d.UserHeaders {
		if strings.HasPrefix(h.Key, "kafka_dlt-") || strings.HasPrefix(h.Key, "__connect.errors.") {
			continue
		}
		user = append(user, h)
	}
	return &kgo.Record{Topic: topic, Key: d.Key, Value: d.Value, Headers: retry.Encode(m, user)}, nil
}
