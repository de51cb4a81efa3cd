package retry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of the wire contract (see docs/headers.md). All
// values are UTF-8 text; times are Unix milliseconds; integers are
// canonical decimal (digits only, no sign, spaces or leading zeros) within
// the ranges below.
// Each has one row in the headers table (how it is decoded and encoded); a
// new header is a constant, a Meta field and a row.
const (
	// HeaderPrefix starts every header that redrive owns.
	HeaderPrefix = "redrive-"

	HeaderID               = "redrive-id"                // stable id of the request across all hops
	HeaderAttempt          = "redrive-attempt"           // handler attempts made so far (polls excluded)
	HeaderPolls            = "redrive-polls"             // not-ready polls so far
	HeaderDue              = "redrive-due"               // not to be handled before this time (ms)
	HeaderTier             = "redrive-tier"              // the tier's delay, e.g. "30s"
	HeaderOriginTopic      = "redrive-origin-topic"      // topic the request first entered
	HeaderOriginPartition  = "redrive-origin-partition"  // its partition
	HeaderOriginOffset     = "redrive-origin-offset"     // its offset
	HeaderOriginTimestamp  = "redrive-origin-timestamp"  // its record timestamp (ms)
	HeaderFirstErrorAt     = "redrive-first-error-at"    // time of the first failure (ms)
	HeaderLastErrorAt      = "redrive-last-error-at"     // time of the last failure (ms)
	HeaderError            = "redrive-error"             // last error message, <= 1 KiB
	HeaderErrorCode        = "redrive-error-code"        // machine code, e.g. ERROR_NO_SLOT_AVAILABLE or http_503
	HeaderErrorClass       = "redrive-error-class"       // transient, not-ready, permanent, invalid, expired
	HeaderState            = "redrive-state"             // opaque handler state, <= 4 KiB
	HeaderReason           = "redrive-reason"            // DLQ only: exhausted, permanent, invalid, expired, crashed
	HeaderRedrives         = "redrive-redrives"          // times republished out of the DLQ
	HeaderGroup            = "redrive-group"             // DLQ only: consumer group that dead-lettered it
	HeaderInstance         = "redrive-instance"          // DLQ only: instance that dead-lettered it
	HeaderTruncated        = "redrive-truncated"         // DLQ only: original value size when the value was cut to fit
	HeaderNotReadySince    = "redrive-not-ready-since"   // retry: time of the first not-ready answer (ms); not_ready_deadline counts from it
	HeaderTruncatedKey     = "redrive-truncated-key"     // DLQ only: original key size when the key was cut to fit
	HeaderTruncatedHeaders = "redrive-truncated-headers" // DLQ only: the headers cut or dropped to fit, name=original size, comma-separated
	HeaderFailovers        = "redrive-failovers"         // times forwarded to another pipeline while this one's line was stopped
	HeaderDeliveries       = "redrive-deliveries"        // DLQ only: the share group's delivery count of a record dead-lettered crashed
)

// Size limits of the contract.
const (
	MaxErrorBytes = 1024
	MaxStateBytes = 4096
	// MaxIDBytes bounds a request id (redrive-id, and the producer's
	// idempotency-key that becomes it): it is sent as the HTTP
	// Idempotency-Key. The fallback id "<topic>/<partition>/<offset>" is at
	// most 249+1+10+1+19 = 280 bytes.
	MaxIDBytes = 512
)

// Ranges of the numbers in redrive-* headers (docs/headers.md). A value
// outside its range is malformed, so that no count can overflow when it is
// incremented and no time is beyond what time.Time arithmetic handles.
const (
	// MaxAttempt is the largest redrive-attempt (a Schedule's MaxAttempts
	// is at most MaxMaxAttempts, far below it).
	MaxAttempt = 10000
	// MaxCount is the largest redrive-polls and redrive-redrives.
	MaxCount = 1_000_000_000
	// MaxMillis is the latest time a time header may hold,
	// 2200-01-01T00:00:00Z in Unix milliseconds (int64 nanoseconds end in
	// 2262).
	MaxMillis = 7_258_118_400_000
	// MaxTruncated is the largest redrive-truncated: a Kafka value's
	// length is an int32.
	MaxTruncated = 1<<31 - 1
	// MaxDeliveryCount is the largest redrive-deliveries: a share group's
	// delivery count is an int16 in Kafka's protocol.
	MaxDeliveryCount = 1<<15 - 1
)

// Class is the error class of a failed attempt.
type Class string

const (
	ClassNone      Class = ""
	ClassTransient Class = "transient"
	ClassNotReady  Class = "not-ready"
	ClassPermanent Class = "permanent"
	ClassInvalid   Class = "invalid"
	ClassExpired   Class = "expired"
)

// Valid reports whether c is one of the contract's classes (or empty).
func (c Class) Valid() bool {
	switch c {
	case ClassNone, ClassTransient, ClassNotReady, ClassPermanent, ClassInvalid, ClassExpired:
		return true
	}
	return false
}

// ErrBadHeader is wrapped by every header decoding error.
var ErrBadHeader = errors.New("malformed redrive header")

// BadHeaderError names the header that could not be decoded.
type BadHeaderError struct {
	Header string
	Value  string
	Reason string
}

func (e *BadHeaderError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("header %s=%q: %s", e.Header, v, e.Reason)
}

func (e *BadHeaderError) Unwrap() error { return ErrBadHeader }

// Meta is redrive's view of a record: every redrive-* header, decoded.
// Zero values mean "absent".
type Meta struct {
	ID              string
	Attempt         int
	Polls           int
	Due             time.Time
	Tier            string
	OriginTopic     string
	OriginPartition int32
	OriginOffset    int64
	OriginTimestamp time.Time
	HasOrigin       bool
	FirstErrorAt    time.Time
	LastErrorAt     time.Time
	Error           string
	ErrorCode       string
	ErrorClass      Class
	State           []byte
	Reason          string
	Redrives        int
	Group           string
	Instance        string
	Truncated       int64 // original value size, when the DLQ value was truncated
	NotReadySince   time.Time
	// TruncatedKey is the original key size, when the DLQ key was cut.
	TruncatedKey int64
	// TruncatedHeaders lists the headers cut or dropped to fit the DLQ
	// (package dlq writes and reads the list).
	TruncatedHeaders string
	// Failovers counts forwards to another pipeline (breaker.failover_to).
	Failovers int
	// Deliveries is the share group's delivery count of a main-topic record
	// dead-lettered "crashed": Kafka's count, the delivery that
	// dead-lettered it included (every one before it ended without an
	// outcome: its handling killed the process). 0 (absent) otherwise.
	Deliveries int
}

// header is one redrive-* header: its name and how its value is read into
// and written from Meta. The headers table is the only list of them:
// Decode, Encode and Headers all iterate over it.
type header struct {
	name string
	// decode reads v (valid UTF-8; raw is the same bytes) into m.
	decode func(m *Meta, v string, raw []byte) error
	// encode appends m's value to buf; it appends nothing when m has none.
	encode func(m *Meta, buf []byte) []byte
}

// headers is in the order Encode writes them.
var headers = [...]header{
	{HeaderID, func(m *Meta, v string, _ []byte) error {
		if err := CheckID(v); err != nil {
			return err // m.ID stays empty: a dead letter gets the fallback id
		}
		m.ID = v
		return nil
	},
		func(m *Meta, b []byte) []byte { return append(b, m.ID...) }},
	{HeaderAttempt, func(m *Meta, v string, _ []byte) (err error) { m.Attempt, err = count(v, MaxAttempt); return err },
		// Written as 0 too once the request has an id: "not attempted yet".
		func(m *Meta, b []byte) []byte { return appendInt(b, int64(m.Attempt), m.ID != "") }},
	{HeaderPolls, func(m *Meta, v string, _ []byte) (err error) { m.Polls, err = count(v, MaxCount); return err },
		func(m *Meta, b []byte) []byte { return appendInt(b, int64(m.Polls), false) }},
	{HeaderDue, func(m *Meta, v string, _ []byte) (err error) { m.Due, err = millis(v); return err },
		func(m *Meta, b []byte) []byte { return appendTime(b, m.Due) }},
	{HeaderTier, func(m *Meta, v string, _ []byte) error { m.Tier = v; _, err := ParseDelay(v); return err },
		func(m *Meta, b []byte) []byte { return append(b, m.Tier...) }},
	// The origin is one group, written only with HasOrigin (see Decode).
	{HeaderOriginTopic, func(m *Meta, v string, _ []byte) error { m.OriginTopic = v; return notEmpty(v) },
		func(m *Meta, b []byte) []byte { return appendIf(b, m.HasOrigin, m.OriginTopic) }},
	{HeaderOriginPartition, func(m *Meta, v string, _ []byte) error {
		p, err := decimal(v, 1<<31-1, "a decimal integer")
		m.OriginPartition = int32(p)
		return err
	}, func(m *Meta, b []byte) []byte { return appendOrigin(b, m, int64(m.OriginPartition)) }},
	{HeaderOriginOffset, func(m *Meta, v string, _ []byte) error {
		n, err := decimal(v, 1<<63-1, "a decimal integer")
		m.OriginOffset = int64(n)
		return err
	},
		func(m *Meta, b []byte) []byte { return appendOrigin(b, m, m.OriginOffset) }},
	{HeaderOriginTimestamp, func(m *Meta, v string, _ []byte) (err error) { m.OriginTimestamp, err = millis(v); return err },
		func(m *Meta, b []byte) []byte {
			if !m.HasOrigin {
				return b
			}
			return appendTime(b, m.OriginTimestamp)
		}},
	{HeaderFirstErrorAt, func(m *Meta, v string, _ []byte) (err error) { m.FirstErrorAt, err = millis(v); return err },
		func(m *Meta, b []byte) []byte { return appendTime(b, m.FirstErrorAt) }},
	{HeaderLastErrorAt, func(m *Meta, v string, _ []byte) (err error) { m.LastErrorAt, err = millis(v); return err },
		func(m *Meta, b []byte) []byte { return appendTime(b, m.LastErrorAt) }},
	{HeaderError, func(m *Meta, v string, _ []byte) error { m.Error = v; return nil },
		func(m *Meta, b []byte) []byte { return append(b, TruncateUTF8(m.Error, MaxErrorBytes)...) }},
	{HeaderErrorCode, func(m *Meta, v string, _ []byte) error { m.ErrorCode = v; return nil },
		func(m *Meta, b []byte) []byte { return append(b, m.ErrorCode...) }},
	{HeaderErrorClass, func(m *Meta, v string, _ []byte) error {
		m.ErrorClass = Class(v)
		if !m.ErrorClass.Valid() {
			return errors.New("unknown class")
		}
		return nil
	}, func(m *Meta, b []byte) []byte { return append(b, m.ErrorClass...) }},
	// State is opaque: never cut by Encode; its limit is checked on reading.
	{HeaderState, func(m *Meta, _ string, raw []byte) error {
		m.State = append([]byte(nil), raw...) // the record's buffer may be reused
		if len(raw) > MaxStateBytes {
			return fmt.Errorf("longer than %d bytes", MaxStateBytes)
		}
		return nil
	}, func(m *Meta, b []byte) []byte { return append(b, m.State...) }},
	{HeaderReason, func(m *Meta, v string, _ []byte) error { m.Reason = v; return nil },
		func(m *Meta, b []byte) []byte { return append(b, m.Reason...) }},
	{HeaderRedrives, func(m *Meta, v string, _ []byte) (err error) { m.Redrives, err = count(v, MaxCount); return err },
		func(m *Meta, b []byte) []byte { return appendInt(b, int64(m.Redrives), false) }},
	{HeaderGroup, func(m *Meta, v string, _ []byte) error { m.Group = v; return nil },
		func(m *Meta, b []byte) []byte { return append(b, m.Group...) }},
	{HeaderInstance, func(m *Meta, v string, _ []byte) error { m.Instance = v; return nil },
		func(m *Meta, b []byte) []byte { return append(b, m.Instance...) }},
	{HeaderTruncated, func(m *Meta, v string, _ []byte) error {
		n, err := decimal(v, MaxTruncated, "a size in bytes")
		m.Truncated = int64(n)
		return err
	},
		func(m *Meta, b []byte) []byte { return appendInt(b, m.Truncated, false) }},
	{HeaderNotReadySince, func(m *Meta, v string, _ []byte) (err error) { m.NotReadySince, err = millis(v); return err },
		func(m *Meta, b []byte) []byte { return appendTime(b, m.NotReadySince) }},
	{HeaderTruncatedKey, func(m *Meta, v string, _ []byte) error {
		n, err := decimal(v, MaxTruncated, "a size in bytes")
		m.TruncatedKey = int64(n)
		return err
	},
		func(m *Meta, b []byte) []byte { return appendInt(b, m.TruncatedKey, false) }},
	{HeaderTruncatedHeaders, func(m *Meta, v string, _ []byte) error { m.TruncatedHeaders = v; return nil },
		func(m *Meta, b []byte) []byte { return append(b, m.TruncatedHeaders...) }},
	{HeaderFailovers, func(m *Meta, v string, _ []byte) (err error) { m.Failovers, err = count(v, MaxCount); return err },
		func(m *Meta, b []byte) []byte { return appendInt(b, int64(m.Failovers), false) }},
	{HeaderDeliveries, func(m *Meta, v string, _ []byte) (err error) {
		m.Deliveries, err = count(v, MaxDeliveryCount)
		return err
	},
		func(m *Meta, b []byte) []byte { return appendInt(b, int64(m.Deliveries), false) }},
}

// headerIndex finds a header's entry in headers by name.
var headerIndex = func() map[string]int {
	idx := make(map[string]int, len(headers))
	for i, h := range headers {
		idx[h.name] = i
	}
	return idx
}()

// Headers lists every redrive-* header this version reads and writes, in
// the order Encode writes them.
func Headers() []string {
	names := make([]string, len(headers))
	for i, h := range headers {
		names[i] = h.name
	}
	return names
}

// Decode splits headers into redrive's Meta and the user's headers (in their
// original order). A malformed redrive-* header yields a *BadHeaderError (wrapping
// ErrBadHeader) naming it; the user headers are still returned whole so that
// the record can be dead-lettered as invalid without losing anything.
// Unknown redrive-* headers are kept with the user headers, so that a newer
// writer's headers survive an older reader.
//
// A record with no known redrive-* header (a request as its producer wrote
// it) decodes to a zero Meta and hs itself, with no allocation.
func Decode(hs []kgo.RecordHeader) (Meta, []kgo.RecordHeader, error) {
	return decode(hs, false)
}

// DecodeView is Decode whose Meta strings share the bytes of hs's values
// instead of copying them: no allocation per header. hs's values must not
// change while the Meta (or a string taken from it) is in use, and the
// Meta keeps them from being freed; for a record handled and then let go
// (the processor), not for one kept long (the analyzer).
func DecodeView(hs []kgo.RecordHeader) (Meta, []kgo.RecordHeader, error) {
	return decode(hs, true)
}

func decode(hs []kgo.RecordHeader, view bool) (Meta, []kgo.RecordHeader, error) {
	if !hasKnown(hs) {
		return Meta{}, hs, nil
	}
	m := scratch.Get().(*Meta)
	defer release(m)
	var user []kgo.RecordHeader
	var firstErr error
	var seen, ok uint32 // bit i: headers[i] was present, was valid
	fail := func(h kgo.RecordHeader, reason string) {
		if firstErr == nil {
			firstErr = &BadHeaderError{Header: h.Key, Value: string(h.Value), Reason: reason}
		}
	}
	for _, h := range hs {
		i, known := -1, false
		if strings.HasPrefix(h.Key, HeaderPrefix) {
			i, known = headerIndex[h.Key]
		}
		if !known {
			user = append(user, h)
			continue
		}
		if seen&(1<<i) != 0 {
			fail(h, "duplicate header")
			continue
		}
		seen |= 1 << i
		var v string
		if view {
			v = unsafe.String(unsafe.SliceData(h.Value), len(h.Value))
		} else {
			v = string(h.Value)
		}
		if !utf8.ValidString(v) {
			fail(h, "not valid UTF-8")
			continue
		}
		if err := headers[i].decode(m, v, h.Value); err != nil {
			fail(h, err.Error())
			continue
		}
		ok |= 1 << i
	}
	has := func(name string) bool { return ok&(1<<headerIndex[name]) != 0 }
	if firstErr == nil && m.OriginTopic != "" {
		if !has(HeaderOriginPartition) || !has(HeaderOriginOffset) {
			firstErr = &BadHeaderError{Header: HeaderOriginTopic, Value: m.OriginTopic, Reason: "origin topic without origin partition and offset"}
		} else {
			m.HasOrigin = true
		}
	}
	// The origin is one group: Encode writes none of it without the topic,
	// so a part of it alone would be lost on the next hop.
	if firstErr == nil && m.OriginTopic == "" {
		for _, k := range []string{HeaderOriginPartition, HeaderOriginOffset, HeaderOriginTimestamp} {
			if has(k) {
				firstErr = &BadHeaderError{Header: k, Value: headerValue(hs, k), Reason: "without origin topic"}
				break
			}
		}
	}
	return *m, user, firstErr
}

// scratch holds the Meta that Decode and Encode hand to the table's
// functions: a pointer passed to a function value escapes, and a pooled
// Meta keeps that from costing an allocation per record.
var scratch = sync.Pool{New: func() any { return new(Meta) }}

func release(m *Meta) {
	*m = Meta{} // drop references to record buffers
	scratch.Put(m)
}

func isKnown(k string) bool {
	_, ok := headerIndex[k]
	return ok
}

func headerValue(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func notEmpty(v string) error {
	if v == "" {
		return errors.New("empty")
	}
	return nil
}

// CheckID says why id cannot be a request id, or nil: an id is 1 to
// MaxIDBytes bytes of UTF-8 without control characters (it is sent as an
// HTTP header value).
func CheckID(id string) error {
	switch {
	case id == "":
		return errors.New("empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%d bytes, longer than %d", len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return errors.New("not valid UTF-8")
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("control character %#02x at byte %d", c, i)
		}
	}
	return nil
}

// decimal reads a canonical decimal integer from 0 to max: digits only, no
// sign, spaces or leading zeros ("0" itself is fine), so that every number
// has one spelling. want describes the value in the error.
func decimal(v string, max uint64, want string) (uint64, error) {
	bad := func(problem string) error {
		return fmt.Errorf("%s; want %s from 0 to %d, digits only", problem, want, max)
	}
	if v == "" {
		return 0, bad("empty")
	}
	digits := v
	if v[0] == '-' || v[0] == '+' {
		digits = v[1:]
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, bad("not a canonical decimal integer")
		}
	}
	switch {
	case digits == "":
		return 0, bad("not a canonical decimal integer")
	case v[0] == '-' && strings.Trim(digits, "0") != "":
		return 0, bad("negative")
	case v[0] == '-' || v[0] == '+':
		return 0, bad("signed, not a canonical decimal integer")
	case len(v) > 1 && v[0] == '0':
		return 0, bad("leading zero, not a canonical decimal integer")
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > max {
		return 0, bad("out of range")
	}
	return n, nil
}

// count reads a count from 0 to max (max fits an int on every platform
// Go supports).
func count(v string, max uint64) (int, error) {
	n, err := decimal(v, max, "a decimal integer")
	return int(n), err
}

// millis reads a time: canonical decimal Unix milliseconds from 0 to
// MaxMillis.
func millis(v string) (time.Time, error) {
	n, err := decimal(v, MaxMillis, "Unix milliseconds, a decimal integer")
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(int64(n)), nil
}

func appendInt(b []byte, n int64, keepZero bool) []byte {
	if n == 0 && !keepZero {
		return b
	}
	return strconv.AppendInt(b, n, 10)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	return strconv.AppendInt(b, t.UnixMilli(), 10)
}

// appendOrigin appends an origin number, 0 included, when m has an origin.
func appendOrigin(b []byte, m *Meta, n int64) []byte {
	if !m.HasOrigin {
		return b
	}
	return strconv.AppendInt(b, n, 10)
}

func appendIf(b []byte, cond bool, v string) []byte {
	if !cond {
		return b
	}
	return append(b, v...)
}

// Encode writes m as redrive-* headers followed by the user's headers
// unchanged. Empty fields are left out. The result never holds a redrive
// header twice, whatever user holds: known redrive-* headers in user are
// dropped in favour of m's.
func Encode(m Meta, user []kgo.RecordHeader) []kgo.RecordHeader {
	return EncodeTo(nil, nil, m, user)
}

// EncodeTo is Encode appending the headers to hs[:0] and their values to
// buf[:0]: no allocation when both are large enough (a caller that keeps
// them per record saves two per record). The values are slices of buf.
func EncodeTo(hs []kgo.RecordHeader, buf []byte, m Meta, user []kgo.RecordHeader) []kgo.RecordHeader {
	// One buffer holds every value (at most one allocation, not one per
	// header); the error and the state are the only long ones. The values
	// are sliced from it once all are written: it may grow meanwhile.
	if cap(buf) == 0 {
		buf = make([]byte, 0, 256+min(len(m.Error), MaxErrorBytes)+len(m.State))
	}
	buf = buf[:0]
	mp := scratch.Get().(*Meta)
	*mp = m
	var ends [len(headers)]int
	n := 0
	for i := range headers {
		before := len(buf)
		buf = headers[i].encode(mp, buf)
		ends[i] = len(buf)
		if len(buf) > before {
			n++
		}
	}
	release(mp)
	if cap(hs) < n+len(user) {
		hs = make([]kgo.RecordHeader, 0, n+len(user))
	}
	hs = hs[:0]
	start := 0
	for i, end := range ends {
		if end > start {
			// Capped, so that appending to one value copies.
			hs = append(hs, kgo.RecordHeader{Key: headers[i].name, Value: buf[start:end:end]})
		}
		start = end
	}
	for _, h := range user {
		if isKnown(h.Key) {
			continue
		}
		hs = append(hs, h)
	}
	return hs
}

// TruncateUTF8 cuts s to at most n bytes on a rune boundary and replaces
// invalid UTF-8, so the result is always valid UTF-8.
func TruncateUTF8(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// RequestID is the stable id of a request first seen at topic/partition/offset:
// the producer's idempotency-key header when it is a valid id (CheckID: at
// most MaxIDBytes of UTF-8 without control characters), else
// "<topic>/<partition>/<offset>".
func RequestID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "idempotency-key" && len(h.Value) > 0 && len(h.Value) <= MaxIDBytes {
			if id := string(h.Value); CheckID(id) == nil {
				return id
			}
		}
	}
	var buf [96]byte // one allocation, the string
	b := append(buf[:0], r.Topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, r.Offset, 10)
	return string(b)
}

// hasKnown reports whether hs holds a header Decode reads into Meta.
func hasKnown(hs []kgo.RecordHeader) bool {
	for _, h := range hs {
		if strings.HasPrefix(h.Key, HeaderPrefix) {
			if _, ok := headerIndex[h.Key]; ok {
				return true
			}
		}
	}
	return false
}
