package dlq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	// ReasonCrashed: a share group delivered the record more than
	// max_deliveries times, each delivery before ending without an outcome
	// because its handling killed the process (redrive-deliveries holds
	// the delivery count).
	ReasonCrashed Reason = "crashed"
)

// Reasons lists every reason.
var Reasons = []Reason{ReasonExhausted, ReasonPermanent, ReasonInvalid, ReasonExpired, ReasonCrashed}

// ParseReason checks s is a reason.
func ParseReason(s string) (Reason, error) {
	for _, r := range Reasons {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown dead-letter reason %q (want %s)", s, reasonList())
}

// reasonList is Reasons as a message lists them: "exhausted, permanent,
// invalid, expired or crashed".
func reasonList() string {
	words := make([]string, len(Reasons))
	for i, r := range Reasons {
		words[i] = string(r)
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Redacted replaces the value of a redacted header.
const Redacted = "[redacted]"

// DefaultMaxRecordBytes is Kafka's default max.message.bytes.
const DefaultMaxRecordBytes = 1048588

// DefaultProducerBatchBytes is franz-go's default ProducerBatchMaxBytes:
// the producer refuses a record whose batch would be larger. It is smaller
// than Kafka's default max.message.bytes, so it is the limit that usually
// bites.
const DefaultProducerBatchBytes = 1000012

// MinRecordBytes is the smallest limit Build promises to fit: every dead
// letter fits any limit of at least this many bytes (EncodedSize), with
// redrive's headers kept (the longest of their texts cut if they alone are
// too large). Below it Build still cuts everything it may, but the result
// can be larger than the limit.
const MinRecordBytes = 4096

// MaxTruncatedHeadersBytes bounds redrive-truncated-headers.
const MaxTruncatedHeadersBytes = 1024

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
	// MaxRecordBytes is the size (EncodedSize) a dead letter must fit:
	// the smaller of the DLQ's max.message.bytes and the producer's batch
	// limit (kgo.ProducerBatchMaxBytes). Default: the smaller of their
	// defaults, DefaultProducerBatchBytes.
	MaxRecordBytes int
}

// Build makes the dead letter of src. meta must carry the reason, error,
// code, class and attempt counts; user are src's user headers. Key, value
// and user headers are src's, cut when needed so that the record fits
// o.MaxRecordBytes (see fit): every dead letter can be written.
func Build(src *kgo.Record, meta retry.Meta, user []kgo.RecordHeader, o BuildOptions) *kgo.Record {
	meta.Group, meta.Instance = o.Group, o.Instance
	meta.State, meta.Due, meta.Tier, meta.NotReadySince = nil, time.Time{}, "", time.Time{}
	// The marks say what this dead letter lost; a source record's own
	// claims are not carried over.
	meta.Truncated, meta.TruncatedKey, meta.TruncatedHeaders = 0, 0, ""
	// Header values are UTF-8 text: a handler's code is not checked
	// anywhere else, and a dead letter must decode.
	for _, f := range []*string{&meta.ID, &meta.ErrorCode, &meta.Group, &meta.Instance, &meta.OriginTopic} {
		*f = strings.ToValidUTF8(*f, "\uFFFD")
	}
	limit := o.MaxRecordBytes
	if limit <= 0 {
		limit = min(DefaultMaxRecordBytes, DefaultProducerBatchBytes)
	}
	f := fitter{topic: o.Topic, key: src.Key, value: src.Value, meta: meta, user: redact(user, o.RedactHeaders), style: o.HeaderStyle}
	return f.fit(limit)
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

// batchOverhead is what a record batch (v2) adds to its records: the
// 61-byte batch header (base offset to record count), and the 4-byte
// length before it in a produce request. franz-go counts these 65 bytes
// against ProducerBatchMaxBytes; the broker counts 61 of them against
// max.message.bytes.
const batchOverhead = 65

// EncodedSize is a conservative bound on the size of r as the one record
// of a record batch (v2), as the producer (ProducerBatchMaxBytes) and the
// broker (max.message.bytes) count it: the batch overhead, then the record
// with every length as a varint, the timestamp and offset deltas counted
// at their largest (10 and 5 bytes). A record whose EncodedSize is at most
// both limits is accepted (compression only ever makes it smaller: the
// producer sends a batch uncompressed when compression would grow it).
func EncodedSize(r *kgo.Record) int {
	body := recordBody(len(r.Key), len(r.Value), len(r.Headers))
	for _, h := range r.Headers {
		body += headerSize(h)
	}
	return batchOverhead + varintLen(body) + body
}

// recordBody is a record's size without its headers' own bytes and
// without its length prefix.
func recordBody(key, value, headers int) int {
	return 1 + // attributes
		10 + 5 + // timestamp delta (varlong), offset delta (varint), at most
		varintLen(key) + key + varintLen(value) + value + varintLen(headers)
}

func headerSize(h kgo.RecordHeader) int {
	return varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
}

// varintLen is the length of n as a zigzag varint, Kafka's encoding of
// lengths in a record.
func varintLen(n int) int {
	u := uint64(n) << 1
	if n < 0 {
		u = ^u
	}
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

// fitter builds a dead letter and cuts it to fit a limit.
type fitter struct {
	topic      string
	key, value []byte
	meta       retry.Meta
	user       []kgo.RecordHeader // redacted; compatibility headers are added from meta
	style      string
	cuts       []cut // for redrive-truncated-headers, in the order cut
}

// cut is one header cut or dropped: its name and its value's size before.
type cut struct {
	name string
	size int
}

func (f *fitter) record() *kgo.Record {
	f.meta.TruncatedHeaders = formatCuts(f.cuts)
	user := append(f.user[:len(f.user):len(f.user)], compat(f.meta, f.style)...)
	return &kgo.Record{Topic: f.topic, Key: f.key, Value: f.value, Headers: retry.Encode(f.meta, user)}
}

// fit cuts the dead letter until its EncodedSize is at most limit, in this
// order, each step only when the ones before were not enough:
//
//  1. the value: its start is kept; redrive-truncated holds its size;
//  2. user headers, largest first: a value is cut to its start when that
//     is enough, else the header is dropped whole; each is listed in
//     redrive-truncated-headers with its value's original size;
//  3. the key: its start is kept; redrive-truncated-key holds its size;
//  4. redrive's own texts, longest first (redrive-error, -error-code, -id,
//     -origin-topic, -group, -instance; the id and the topic keep at least
//     one character), listed in redrive-truncated-headers too.
//
// Redrive's other headers are never cut, so the dead letter still decodes
// with its reason, class, attempts and origin. Any limit of at least
// MinRecordBytes is met.
func (f *fitter) fit(limit int) *kgo.Record {
	r := f.record()
	if EncodedSize(r) <= limit {
		return r
	}
	if len(f.value) > 0 {
		whole := f.value
		f.meta.Truncated = int64(len(whole))
		f.value = whole[:0:0] // empty, not null: a null value is a tombstone
		r = f.record()
		// The value's length varint and the record's grow with it: 10
		// bytes cover both.
		if room := limit - EncodedSize(r) - 10; room > 0 {
			keep := min(room, len(whole))
			f.value = whole[:keep:keep]
			return f.record()
		}
	}
	if len(f.user) > 0 {
		r = f.cutHeaders(limit)
		if EncodedSize(r) <= limit {
			return r
		}
	}
	if len(f.key) > 0 {
		whole := f.key
		f.meta.TruncatedKey = int64(len(whole))
		f.key = whole[:0:0]
		r = f.record()
		if room := limit - EncodedSize(r) - 10; room > 0 {
			keep := min(room, len(whole))
			f.key = whole[:keep:keep]
			return f.record()
		}
	}
	return f.cutMeta(limit)
}

// cutHeaders cuts user headers, largest first, until the record fits.
func (f *fitter) cutHeaders(limit int) *kgo.Record {
	user := make([]kgo.RecordHeader, len(f.user))
	copy(user, f.user)
	total := 0
	for _, h := range user {
		total += headerSize(h)
	}
	// What the record takes without user headers, with the list of cuts
	// at its longest, and 10 bytes for the varints that grow with them.
	f.user = nil
	marker := varintLen(len(retry.HeaderTruncatedHeaders)) + len(retry.HeaderTruncatedHeaders) +
		varintLen(MaxTruncatedHeadersBytes) + MaxTruncatedHeadersBytes
	reserve := EncodedSize(f.record()) + marker + 10 + varintLen(len(user))
	need := total - (limit - reserve)
	order := make([]int, len(user))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return headerSize(user[order[a]]) > headerSize(user[order[b]]) })
	dropped := make([]bool, len(user))
	for _, i := range order {
		if need <= 0 {
			break
		}
		h := user[i]
		f.cuts = append(f.cuts, cut{h.Key, len(h.Value)})
		// Cutting the value saves its bytes (its length varint only
		// shrinks); if that is not enough, the whole header goes.
		if len(h.Value) > need {
			keep := len(h.Value) - need
			user[i].Value = h.Value[:keep:keep]
			need = 0
			break
		}
		dropped[i] = true
		need -= headerSize(h)
	}
	for i, h := range user {
		if !dropped[i] {
			f.user = append(f.user, h)
		}
	}
	return f.record()
}

// cutMeta cuts redrive's own texts, longest first, until the record fits
// or none can be cut further.
func (f *fitter) cutMeta(limit int) *kgo.Record {
	fields := []struct {
		name string
		s    *string
		keep int
	}{
		{retry.HeaderError, &f.meta.Error, 0},
		{retry.HeaderErrorCode, &f.meta.ErrorCode, 0},
		{retry.HeaderID, &f.meta.ID, 1},
		{retry.HeaderOriginTopic, &f.meta.OriginTopic, 1},
		{retry.HeaderGroup, &f.meta.Group, 0},
		{retry.HeaderInstance, &f.meta.Instance, 0},
	}
	// redrive-error is written at most MaxErrorBytes long.
	f.meta.Error = retry.TruncateUTF8(f.meta.Error, retry.MaxErrorBytes)
	listed := map[string]bool{}
	r := f.record()
	for EncodedSize(r) > limit {
		big := -1
		for i, fl := range fields {
			if len(*fl.s) > fl.keep && (big < 0 || len(*fl.s)-fl.keep > len(*fields[big].s)-fields[big].keep) {
				big = i
			}
		}
		if big < 0 {
			return r // nothing left to cut: the limit is below MinRecordBytes
		}
		fl := fields[big]
		if !listed[fl.name] {
			listed[fl.name] = true
			f.cuts = append(f.cuts, cut{fl.name, len(*fl.s)})
		}
		// A cut text appears twice in the compatibility headers; 16 bytes
		// cover the marker's growth.
		over := EncodedSize(r) - limit + 16
		n := max(fl.keep, len(*fl.s)-over)
		cutTo := retry.TruncateUTF8(*fl.s, n)
		if len(cutTo) < fl.keep {
			// A first rune longer than keep: keep it whole.
			_, size := utf8.DecodeRuneInString(*fl.s)
			cutTo = (*fl.s)[:size]
		}
		if len(cutTo) >= len(*fl.s) {
			fields[big].keep = len(*fl.s) // cannot shrink further
			continue
		}
		*fl.s = cutTo
		r = f.record()
	}
	return r
}

// formatCuts is redrive-truncated-headers: name=size, comma-separated, the
// name percent-encoded (every byte but letters, digits and -._~ as %XX, so
// that ',' and '=' never appear in it), in the order cut, at most
// MaxTruncatedHeadersBytes long: the cuts that do not fit are counted in a
// last entry +N.
func formatCuts(cuts []cut) string {
	if len(cuts) == 0 {
		return ""
	}
	var b strings.Builder
	for i, c := range cuts {
		e := escapeName(c.name) + "=" + strconv.Itoa(c.size)
		// Room for this entry and a count of every later one.
		if b.Len()+1+len(e)+1+len(",+")+len(strconv.Itoa(len(cuts))) > MaxTruncatedHeadersBytes {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString("+" + strconv.Itoa(len(cuts)-i))
			break
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e)
	}
	return b.String()
}

func escapeName(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
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
	// TruncatedKey is the original key size when the key was cut; 0 if
	// whole.
	TruncatedKey int64
	// TruncatedHeaders lists the headers cut or dropped to fit
	// (redrive-truncated-headers); "" if none was.
	TruncatedHeaders string
	// Deliveries is the share group's delivery count of a crashed dead
	// letter (redrive-deliveries), the delivery that dead-lettered it
	// included; 0 otherwise.
	Deliveries int

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
		Truncated: m.Truncated, TruncatedKey: m.TruncatedKey, TruncatedHeaders: m.TruncatedHeaders, Deliveries: m.Deliveries, Meta: m,
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

// ErrTruncated is Republish's error for a dead letter whose value, key or
// headers were cut to fit the DLQ (redrive-truncated,
// redrive-truncated-key, redrive-truncated-headers): republishing it would
// hand the handler a broken request, so nothing republishes it — not
// `redrive replay`, not POST /api/replay, not a rule.
var ErrTruncated = errors.New("it was cut to fit the DLQ: not republished")

// IsTruncated reports whether anything of d was cut to fit the DLQ.
func (d *DeadLetter) IsTruncated() bool {
	return d.Truncated > 0 || d.TruncatedKey > 0 || d.TruncatedHeaders != ""
}

// Republish builds the record that brings d back to topic: the original
// key, value and user headers (a redacted header stays "[redacted]": do not
// redact headers the handler needs), the same redrive-id and origin,
// redrive-redrives + 1, and no attempt, error, delivery count or
// compatibility headers, so the request gets the full schedule (and, in a
// share group, its max_deliveries) again.
//
// A truncated dead letter (d.IsTruncated()) gets no record and an error
// wrapping ErrTruncated that says what was cut. This is the one place that
// refuses them.
func Republish(d *DeadLetter, topic string) (*kgo.Record, error) {
	if d.IsTruncated() {
		var what []string
		if d.Truncated > 0 {
			what = append(what, fmt.Sprintf("value: %d of %d bytes kept", len(d.Value), d.Truncated))
		}
		if d.TruncatedKey > 0 {
			what = append(what, fmt.Sprintf("key: %d of %d bytes kept", len(d.Key), d.TruncatedKey))
		}
		if d.TruncatedHeaders != "" {
			what = append(what, "headers cut: "+retry.TruncateUTF8(d.TruncatedHeaders, 200))
		}
		return nil, fmt.Errorf("dead letter %s/%d/%d: %w (%s)", d.Topic, d.Partition, d.Offset, ErrTruncated, strings.Join(what, "; "))
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
