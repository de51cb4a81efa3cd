package retry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of the wire contract (see docs/headers.md). All
// values are UTF-8 text; times are Unix milliseconds; integers are decimal.
const (
	// HeaderPrefix starts every header that redrive owns.
	HeaderPrefix = "redrive-"

	HeaderID              = "redrive-id"               // stable id of the request across all hops
	HeaderAttempt         = "redrive-attempt"          // handler attempts made so far (polls excluded)
	HeaderPolls           = "redrive-polls"            // not-ready polls so far
	HeaderDue             = "redrive-due"              // not to be handled before this time (ms)
	HeaderTier            = "redrive-tier"             // the tier's delay, e.g. "30s"
	HeaderOriginTopic     = "redrive-origin-topic"     // topic the request first entered
	HeaderOriginPartition = "redrive-origin-partition" // its partition
	HeaderOriginOffset    = "redrive-origin-offset"    // its offset
	HeaderOriginTimestamp = "redrive-origin-timestamp" // its record timestamp (ms)
	HeaderFirstErrorAt    = "redrive-first-error-at"   // time of the first failure (ms)
	HeaderLastErrorAt     = "redrive-last-error-at"    // time of the last failure (ms)
	HeaderError           = "redrive-error"            // last error message, <= 1 KiB
	HeaderErrorCode       = "redrive-error-code"       // machine code, e.g. ERROR_NO_SLOT_AVAILABLE or http_503
	HeaderErrorClass      = "redrive-error-class"      // transient, not-ready, permanent, invalid, expired
	HeaderState           = "redrive-state"            // opaque handler state, <= 4 KiB
	HeaderReason          = "redrive-reason"           // DLQ only: exhausted, permanent, invalid, expired
	HeaderRedrives        = "redrive-redrives"         // times republished out of the DLQ
	HeaderGroup           = "redrive-group"            // DLQ only: consumer group that dead-lettered it
	HeaderInstance        = "redrive-instance"         // DLQ only: instance that dead-lettered it
	HeaderTruncated       = "redrive-truncated"        // DLQ only: original value size when the value was cut to fit
	HeaderNotReadySince   = "redrive-not-ready-since"  // retry: time of the first not-ready answer (ms); not_ready_deadline counts from it
)

// Size limits of the contract.
const (
	MaxErrorBytes = 1024
	MaxStateBytes = 4096
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
}

// Decode splits headers into redrive's Meta and the user's headers (in their
// original order). A malformed redrive-* header yields a *BadHeaderError (wrapping
// ErrBadHeader) naming it; the user headers are still returned whole so that
// the record can be dead-lettered as invalid without losing anything.
// Unknown redrive-* headers are kept with the user headers, so that a newer
// writer's headers survive an older reader.
func Decode(hs []kgo.RecordHeader) (Meta, []kgo.RecordHeader, error) {
	var m Meta
	var user []kgo.RecordHeader
	var firstErr error
	seen := make(map[string]bool, 8)
	fail := func(h kgo.RecordHeader, reason string) {
		if firstErr == nil {
			firstErr = &BadHeaderError{Header: h.Key, Value: string(h.Value), Reason: reason}
		}
	}
	var hasPart, hasOff, hasTS bool
	for _, h := range hs {
		if !strings.HasPrefix(h.Key, HeaderPrefix) {
			user = append(user, h)
			continue
		}
		if !isKnown(h.Key) {
			user = append(user, h)
			continue
		}
		if seen[h.Key] {
			fail(h, "duplicate header")
			continue
		}
		seen[h.Key] = true
		v := string(h.Value)
		if !utf8.ValidString(v) {
			fail(h, "not valid UTF-8")
			continue
		}
		var err error
		switch h.Key {
		case HeaderID:
			if v == "" {
				err = errors.New("empty")
			}
			m.ID = v
		case HeaderAttempt:
			m.Attempt, err = nonNegInt(v)
		case HeaderPolls:
			m.Polls, err = nonNegInt(v)
		case HeaderRedrives:
			m.Redrives, err = nonNegInt(v)
		case HeaderDue:
			m.Due, err = millis(v)
		case HeaderTier:
			if _, perr := ParseDelay(v); perr != nil {
				err = perr
			}
			m.Tier = v
		case HeaderOriginTopic:
			if v == "" {
				err = errors.New("empty")
			}
			m.OriginTopic = v
		case HeaderOriginPartition:
			var p int
			p, err = nonNegInt(v)
			if err == nil && p > 1<<31-1 {
				err = errors.New("out of range")
			}
			m.OriginPartition = int32(p)
			hasPart = err == nil
		case HeaderOriginOffset:
			var o int64
			o, err = strconv.ParseInt(v, 10, 64)
			if err == nil && o < 0 {
				err = errors.New("negative")
			}
			m.OriginOffset = o
			hasOff = err == nil
		case HeaderOriginTimestamp:
			m.OriginTimestamp, err = millis(v)
			hasTS = err == nil
		case HeaderFirstErrorAt:
			m.FirstErrorAt, err = millis(v)
		case HeaderLastErrorAt:
			m.LastErrorAt, err = millis(v)
		case HeaderError:
			m.Error = v
		case HeaderErrorCode:
			m.ErrorCode = v
		case HeaderErrorClass:
			m.ErrorClass = Class(v)
			if !m.ErrorClass.Valid() {
				err = errors.New("unknown class")
			}
		case HeaderState:
			if len(h.Value) > MaxStateBytes {
				err = fmt.Errorf("longer than %d bytes", MaxStateBytes)
			}
			m.State = append([]byte(nil), h.Value...)
		case HeaderReason:
			m.Reason = v
		case HeaderGroup:
			m.Group = v
		case HeaderInstance:
			m.Instance = v
		case HeaderTruncated:
			m.Truncated, err = strconv.ParseInt(v, 10, 64)
			if err == nil && m.Truncated < 0 {
				err = errors.New("negative")
			}
		case HeaderNotReadySince:
			m.NotReadySince, err = millis(v)
		}
		if err != nil {
			fail(h, err.Error())
		}
	}
	if firstErr == nil && m.OriginTopic != "" {
		if !hasPart || !hasOff {
			firstErr = &BadHeaderError{Header: HeaderOriginTopic, Value: m.OriginTopic, Reason: "origin topic without origin partition and offset"}
		} else {
			m.HasOrigin = true
		}
	}
	// The origin is one group: Encode writes none of it without the topic,
	// so a part of it alone would be lost on the next hop.
	if firstErr == nil && m.OriginTopic == "" {
		for _, p := range []struct {
			key string
			has bool
		}{{HeaderOriginPartition, hasPart}, {HeaderOriginOffset, hasOff}, {HeaderOriginTimestamp, hasTS}} {
			if p.has {
				firstErr = &BadHeaderError{Header: p.key, Value: headerValue(hs, p.key), Reason: "without origin topic"}
				break
			}
		}
	}
	return m, user, firstErr
}

var known = map[string]bool{
	HeaderID: true, HeaderAttempt: true, HeaderPolls: true, HeaderDue: true, HeaderTier: true,
	HeaderOriginTopic: true, HeaderOriginPartition: true, HeaderOriginOffset: true, HeaderOriginTimestamp: true,
	HeaderFirstErrorAt: true, HeaderLastErrorAt: true, HeaderError: true, HeaderErrorCode: true,
	HeaderErrorClass: true, HeaderState: true, HeaderReason: true, HeaderRedrives: true,
	HeaderGroup: true, HeaderInstance: true, HeaderTruncated: true, HeaderNotReadySince: true,
}

func isKnown(k string) bool { return known[k] }

func headerValue(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func nonNegInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("not a decimal integer")
	}
	if n < 0 {
		return 0, errors.New("negative")
	}
	return n, nil
}

func millis(v string) (time.Time, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, errors.New("not Unix milliseconds")
	}
	if n < 0 {
		return time.Time{}, errors.New("negative time")
	}
	return time.UnixMilli(n), nil
}

// headerCount is how many redrive headers Encode writes for m (at most).
func (m *Meta) headerCount() int {
	n := 0
	for _, set := range []bool{
		m.ID != "", m.ID != "" || m.Attempt != 0, m.Polls != 0, !m.Due.IsZero(), m.Tier != "",
		m.HasOrigin, m.HasOrigin, m.HasOrigin, m.HasOrigin && !m.OriginTimestamp.IsZero(),
		!m.FirstErrorAt.IsZero(), !m.LastErrorAt.IsZero(), m.Error != "", m.ErrorCode != "", m.ErrorClass != "",
		len(m.State) > 0, m.Reason != "", m.Redrives != 0, m.Group != "", m.Instance != "", m.Truncated != 0, !m.NotReadySince.IsZero(),
	} {
		if set {
			n++
		}
	}
	return n
}

// Encode writes m as redrive-* headers followed by the user's headers
// unchanged. Empty fields are left out. The result never holds a redrive
// header twice, whatever user holds: known redrive-* headers in user are
// dropped in favour of m's.
func Encode(m Meta, user []kgo.RecordHeader) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(user)+m.headerCount())
	// One buffer holds every value (two allocations per call, not one per
	// header); each value is capped so that appending to it copies.
	buf := make([]byte, 0, 160+len(m.ID)+len(m.Tier)+len(m.OriginTopic)+min(len(m.Error), MaxErrorBytes)+
		len(m.ErrorCode)+len(m.ErrorClass)+len(m.Reason)+len(m.Group)+len(m.Instance))
	push := func(k string, start int) {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: buf[start:len(buf):len(buf)]})
	}
	add := func(k, v string) {
		if v != "" {
			start := len(buf)
			buf = append(buf, v...)
			push(k, start)
		}
	}
	addInt := func(k string, n int64, keepZero bool) {
		if n != 0 || keepZero {
			start := len(buf)
			buf = strconv.AppendInt(buf, n, 10)
			push(k, start)
		}
	}
	addTime := func(k string, t time.Time) {
		if !t.IsZero() {
			start := len(buf)
			buf = strconv.AppendInt(buf, t.UnixMilli(), 10)
			push(k, start)
		}
	}
	add(HeaderID, m.ID)
	addInt(HeaderAttempt, int64(m.Attempt), m.ID != "")
	addInt(HeaderPolls, int64(m.Polls), false)
	addTime(HeaderDue, m.Due)
	add(HeaderTier, m.Tier)
	if m.HasOrigin {
		add(HeaderOriginTopic, m.OriginTopic)
		addInt(HeaderOriginPartition, int64(m.OriginPartition), true)
		addInt(HeaderOriginOffset, m.OriginOffset, true)
		addTime(HeaderOriginTimestamp, m.OriginTimestamp)
	}
	addTime(HeaderFirstErrorAt, m.FirstErrorAt)
	addTime(HeaderLastErrorAt, m.LastErrorAt)
	add(HeaderError, TruncateUTF8(m.Error, MaxErrorBytes))
	add(HeaderErrorCode, m.ErrorCode)
	add(HeaderErrorClass, string(m.ErrorClass))
	if len(m.State) > 0 {
		hs = append(hs, kgo.RecordHeader{Key: HeaderState, Value: m.State})
	}
	add(HeaderReason, m.Reason)
	addInt(HeaderRedrives, int64(m.Redrives), false)
	add(HeaderGroup, m.Group)
	add(HeaderInstance, m.Instance)
	addInt(HeaderTruncated, m.Truncated, false)
	addTime(HeaderNotReadySince, m.NotReadySince)
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
// the producer's idempotency-key header when set, else "<topic>/<partition>/<offset>".
func RequestID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "idempotency-key" && len(h.Value) > 0 && utf8.Valid(h.Value) {
			return string(h.Value)
		}
	}
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}
