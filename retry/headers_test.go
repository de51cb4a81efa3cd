package retry_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// knownHeaders is every header of the wire contract that Decode reads.
var knownHeaders = []string{
	retry.HeaderID, retry.HeaderAttempt, retry.HeaderPolls, retry.HeaderDue, retry.HeaderTier,
	retry.HeaderOriginTopic, retry.HeaderOriginPartition, retry.HeaderOriginOffset, retry.HeaderOriginTimestamp,
	retry.HeaderFirstErrorAt, retry.HeaderLastErrorAt, retry.HeaderError, retry.HeaderErrorCode,
	retry.HeaderErrorClass, retry.HeaderState, retry.HeaderReason, retry.HeaderRedrives,
	retry.HeaderGroup, retry.HeaderInstance, retry.HeaderTruncated, retry.HeaderNotReadySince,
	retry.HeaderTruncatedKey, retry.HeaderTruncatedHeaders, retry.HeaderFailovers, retry.HeaderDeliveries,
}

func h(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// fullMeta sets every field of Meta to a non-zero value.
func fullMeta() retry.Meta {
	t0 := time.UnixMilli(1_740_830_400_123)
	return retry.Meta{
		ID:               "order-7f3a",
		Attempt:          3,
		Polls:            2,
		Due:              t0.Add(30 * time.Second),
		Tier:             "30s",
		OriginTopic:      "solve.requests",
		OriginPartition:  5,
		OriginOffset:     918273,
		OriginTimestamp:  t0.Add(-time.Minute),
		HasOrigin:        true,
		FirstErrorAt:     t0.Add(-50 * time.Second),
		LastErrorAt:      t0,
		Error:            "POST http://solver:8080/solve: 503 Service Unavailable: ERROR_NO_SLOT_AVAILABLE — réessayez",
		ErrorCode:        "ERROR_NO_SLOT_AVAILABLE",
		ErrorClass:       retry.ClassTransient,
		State:            []byte("task-4711"),
		Reason:           "exhausted",
		Redrives:         1,
		Group:            "redrive.solve",
		Instance:         "redrive-7d9f-x2k",
		Truncated:        2_000_000,
		NotReadySince:    t0.Add(-40 * time.Second),
		TruncatedKey:     300_000,
		TruncatedHeaders: "x-big=900000,x%20odd=5",
		Failovers:        2,
		Deliveries:       4,
	}
}

// metaDiff lists the fields in which a and b differ; times are compared
// with Equal.
func metaDiff(a, b retry.Meta) []string {
	var diff []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		name := va.Type().Field(i).Name
		fa, fb := va.Field(i).Interface(), vb.Field(i).Interface()
		if ta, ok := fa.(time.Time); ok {
			if !ta.Equal(fb.(time.Time)) {
				diff = append(diff, fmt.Sprintf("%s: %v != %v", name, fa, fb))
			}
			continue
		}
		if ba, ok := fa.([]byte); ok {
			if !bytes.Equal(ba, fb.([]byte)) {
				diff = append(diff, fmt.Sprintf("%s: %q != %q", name, fa, fb))
			}
			continue
		}
		if !reflect.DeepEqual(fa, fb) {
			diff = append(diff, fmt.Sprintf("%s: %#v != %#v", name, fa, fb))
		}
	}
	return diff
}

// headersDiff reports how got differs from want: keys, values (byte for
// byte) and nil-ness of values, in order.
func headersDiff(got, want []kgo.RecordHeader) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d headers, want %d:\n got %s\nwant %s", len(got), len(want), fmtHeaders(got), fmtHeaders(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Key != w.Key || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
			return fmt.Sprintf("header %d = %s, want %s", i, fmtHeaders(got[i:i+1]), fmtHeaders(want[i:i+1]))
		}
	}
	return ""
}

func fmtHeaders(hs []kgo.RecordHeader) string {
	var b strings.Builder
	for _, h := range hs {
		if h.Value == nil {
			fmt.Fprintf(&b, "[%q=nil]", h.Key)
		} else {
			fmt.Fprintf(&b, "[%q=%q]", h.Key, h.Value)
		}
	}
	return b.String()
}

func count(hs []kgo.RecordHeader, key string) int {
	n := 0
	for _, h := range hs {
		if h.Key == key {
			n++
		}
	}
	return n
}

func value(hs []kgo.RecordHeader, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Headers is the codec's one table of headers; it must name exactly the
// contract's, each once, in the order Encode writes them.
func TestHeadersListsTheContract(t *testing.T) {
	got := retry.Headers()
	if !slices.Equal(got, knownHeaders) {
		t.Errorf("Headers() = %v\nwant %v", got, knownHeaders)
	}
	var written []string
	for _, h := range retry.Encode(fullMeta(), nil) {
		written = append(written, h.Key)
	}
	if !slices.Equal(written, got) {
		t.Errorf("Encode(fullMeta) writes %v\nwant every header in Headers() order %v", written, got)
	}
	got[0] = "changed"
	if retry.Headers()[0] != retry.HeaderID {
		t.Errorf("Headers returns the table itself")
	}
}

func TestFullMetaSetsEveryField(t *testing.T) {
	v := reflect.ValueOf(fullMeta())
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullMeta leaves %s zero: add it, so the round trip covers it", v.Type().Field(i).Name)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	user := []kgo.RecordHeader{h("content-type", "application/json"), h("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), h("tenant", "acme")}
	for _, tc := range []struct {
		name string
		m    retry.Meta
	}{
		{"every field", fullMeta()},
		{"empty", retry.Meta{}},
		{"first retry", retry.Meta{ID: "solve.requests/0/42", Attempt: 1, Due: time.UnixMilli(1_740_830_405_000), Tier: "5s",
			HasOrigin: true, OriginTopic: "solve.requests", OriginPartition: 0, OriginOffset: 0, OriginTimestamp: time.UnixMilli(1_740_830_400_000),
			FirstErrorAt: time.UnixMilli(1_740_830_400_100), LastErrorAt: time.UnixMilli(1_740_830_400_100),
			Error: "timeout after 30s", ErrorCode: "timeout", ErrorClass: retry.ClassTransient}},
		{"not-ready poll", retry.Meta{ID: "k", Attempt: 1, Polls: 4, ErrorClass: retry.ClassNotReady, ErrorCode: "CAPCHA_NOT_READY",
			State: []byte{0, 1, 2, 0x7f}, NotReadySince: time.UnixMilli(0)}}, // the epoch is a time, not "absent"
		{"republished", retry.Meta{ID: "k", Redrives: 3}},
		{"attempt 0 with id", retry.Meta{ID: "k"}},
		{"largest values", retry.Meta{ID: strings.Repeat("i", retry.MaxIDBytes), Attempt: retry.MaxAttempt, Polls: retry.MaxCount, Redrives: retry.MaxCount,
			HasOrigin: true, OriginTopic: "t", OriginPartition: 1<<31 - 1, OriginOffset: 1<<63 - 1, Due: time.UnixMilli(retry.MaxMillis),
			OriginTimestamp: time.UnixMilli(retry.MaxMillis), Truncated: retry.MaxTruncated, Deliveries: retry.MaxDeliveryCount}},
		{"crashed dead letter", retry.Meta{ID: "solve.requests/2/7", Reason: "crashed", Deliveries: 4,
			HasOrigin: true, OriginTopic: "solve.requests", OriginPartition: 2, OriginOffset: 7, Group: "redrive.solve", Instance: "pod-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := retry.Encode(tc.m, user)
			got, gotUser, err := retry.Decode(hs)
			if err != nil {
				t.Fatalf("Decode(Encode(m)) error: %v\nheaders %s", err, fmtHeaders(hs))
			}
			if d := metaDiff(got, tc.m); d != nil {
				t.Errorf("round trip changed:\n%s", strings.Join(d, "\n"))
			}
			if d := headersDiff(gotUser, user); d != "" {
				t.Errorf("user headers: %s", d)
			}
		})
	}
}

func TestEncodeWireFormat(t *testing.T) {
	m := fullMeta()
	hs := retry.Encode(m, nil)
	want := map[string]string{
		retry.HeaderID:               "order-7f3a",
		retry.HeaderAttempt:          "3",
		retry.HeaderPolls:            "2",
		retry.HeaderDue:              "1740830430123",
		retry.HeaderTier:             "30s",
		retry.HeaderOriginTopic:      "solve.requests",
		retry.HeaderOriginPartition:  "5",
		retry.HeaderOriginOffset:     "918273",
		retry.HeaderOriginTimestamp:  "1740830340123",
		retry.HeaderFirstErrorAt:     "1740830350123",
		retry.HeaderLastErrorAt:      "1740830400123",
		retry.HeaderError:            m.Error,
		retry.HeaderErrorCode:        "ERROR_NO_SLOT_AVAILABLE",
		retry.HeaderErrorClass:       "transient",
		retry.HeaderState:            "task-4711",
		retry.HeaderReason:           "exhausted",
		retry.HeaderRedrives:         "1",
		retry.HeaderGroup:            "redrive.solve",
		retry.HeaderInstance:         "redrive-7d9f-x2k",
		retry.HeaderTruncated:        "2000000",
		retry.HeaderNotReadySince:    "1740830360123",
		retry.HeaderTruncatedKey:     "300000",
		retry.HeaderTruncatedHeaders: "x-big=900000,x%20odd=5",
		retry.HeaderFailovers:        "2",
		retry.HeaderDeliveries:       "4",
	}
	if len(hs) != len(want) {
		t.Errorf("%d headers, want %d: %s", len(hs), len(want), fmtHeaders(hs))
	}
	for k, v := range want {
		if n := count(hs, k); n != 1 {
			t.Errorf("%s appears %d times, want once", k, n)
		}
		if got, _ := value(hs, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestEncodeOmitsAbsentFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    retry.Meta
		want []kgo.RecordHeader
	}{
		{"zero meta writes nothing", retry.Meta{}, nil},
		{"id brings attempt 0", retry.Meta{ID: "k"}, []kgo.RecordHeader{h(retry.HeaderID, "k"), h(retry.HeaderAttempt, "0")}},
		{"attempt without id", retry.Meta{Attempt: 2}, []kgo.RecordHeader{h(retry.HeaderAttempt, "2")}},
		{"origin needs HasOrigin", retry.Meta{OriginTopic: "t", OriginPartition: 1, OriginOffset: 2}, nil},
		{"origin zero partition and offset are written", retry.Meta{HasOrigin: true, OriginTopic: "t"},
			[]kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginPartition, "0"), h(retry.HeaderOriginOffset, "0")}},
		{"empty state", retry.Meta{State: []byte{}}, nil},
		{"class none", retry.Meta{ErrorClass: retry.ClassNone}, nil},
		// Only a crashed dead letter counts deliveries; 0 is not written.
		{"deliveries 0", retry.Meta{Reason: "exhausted"}, []kgo.RecordHeader{h(retry.HeaderReason, "exhausted")}},
		{"deliveries", retry.Meta{Reason: "crashed", Deliveries: 4}, []kgo.RecordHeader{h(retry.HeaderReason, "crashed"), h(retry.HeaderDeliveries, "4")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := headersDiff(retry.Encode(tc.m, nil), tc.want); d != "" {
				t.Error(d)
			}
		})
	}
}

// TestEncodeReplacesRedriveHeaders: whatever redrive-* headers the user
// headers hold (a record from the previous hop, a buggy producer's
// duplicates), Encode writes each of its own exactly once, from m, and
// drops the stale ones m does not set.
func TestEncodeReplacesRedriveHeaders(t *testing.T) {
	stale := []kgo.RecordHeader{
		h(retry.HeaderAttempt, "1"),
		h("content-type", "application/json"),
		h(retry.HeaderAttempt, "2"),
		h(retry.HeaderID, "stale-id"),
		h(retry.HeaderError, "old error"),
		h(retry.HeaderReason, "permanent"), // m has no reason: dropped, not kept
		h(retry.HeaderState, "old-task"),
		h(retry.HeaderDue, "1"),
		h(retry.HeaderDue, "2"),
		h("redrive-future-header", "v2"), // unknown to this version: kept, as a user header
		h("trace", "a"),
	}
	for _, k := range knownHeaders {
		stale = append(stale, h(k, "stale"))
	}
	m := retry.Meta{ID: "fresh-id", Attempt: 3, Due: time.UnixMilli(1_740_830_430_000), Tier: "30s", Error: "new error", ErrorClass: retry.ClassTransient}
	hs := retry.Encode(m, stale)
	for _, k := range knownHeaders {
		want := 0
		switch k {
		case retry.HeaderID, retry.HeaderAttempt, retry.HeaderDue, retry.HeaderTier, retry.HeaderError, retry.HeaderErrorClass:
			want = 1
		}
		if n := count(hs, k); n != want {
			t.Errorf("%s appears %d times, want %d", k, n, want)
		}
	}
	for k, v := range map[string]string{retry.HeaderID: "fresh-id", retry.HeaderAttempt: "3", retry.HeaderDue: "1740830430000", retry.HeaderError: "new error"} {
		if got, _ := value(hs, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	want := []kgo.RecordHeader{h("content-type", "application/json"), h("redrive-future-header", "v2"), h("trace", "a")}
	if d := headersDiff(hs[len(hs)-3:], want); d != "" {
		t.Errorf("user headers after the redrive ones: %s", d)
	}
	if _, _, err := retry.Decode(hs); err != nil {
		t.Errorf("Decode of Encode's output: %v", err)
	}
}

// TestUserHeadersCopiedUnchanged: header keys are case-sensitive in Kafka,
// and only the exact lower-case names of the contract belong to redrive.
// Everything else (look-alike prefixes, other cases, unknown redrive-*
// names) is the user's, and is copied unchanged, in order, duplicates and
// empty or nil values included.
func TestUserHeadersCopiedUnchanged(t *testing.T) {
	user := []kgo.RecordHeader{
		h("content-type", "application/json"),
		h("Redrive-Id", "upper-case is not redrive's"),
		h("REDRIVE-ATTEMPT", "x"),
		h("redrivex", "no dash"),
		h("redrive", "bare"),
		h("redrive_attempt", "underscore"),
		h("x-redrive-id", "prefixed"),
		h(" redrive-id", "leading space"),
		h("redrive-id ", "trailing space"),
		h("redrive-", "prefix alone"),
		h("redrive-attempts", "plural: unknown"),
		h("redrive-future", "newer writer"),
		h("redrive-future", "newer writer, twice"),
		h("trace", "a"),
		h("trace", "a"), // exact duplicate
		h("trace", "b"),
		{Key: "empty", Value: []byte{}},
		{Key: "nil", Value: nil},
		{Key: "", Value: []byte("empty key")},
		{Key: "binary", Value: []byte{0xff, 0x00, 0xfe}},
		h("idempotency-key", "order-7f3a"),
	}
	orig := slices.Clone(user)
	hs := retry.Encode(fullMeta(), user)
	_, gotUser, err := retry.Decode(hs)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if d := headersDiff(gotUser, orig); d != "" {
		t.Errorf("Decode(Encode) user headers: %s", d)
	}
	if d := headersDiff(hs[len(hs)-len(user):], orig); d != "" {
		t.Errorf("Encode's user headers: %s", d)
	}
	if d := headersDiff(user, orig); d != "" {
		t.Errorf("Encode modified its input: %s", d)
	}
	// Decode of the user's headers alone: all of them are the user's.
	m, gotUser, err := retry.Decode(user)
	if err != nil || !reflect.ValueOf(m).IsZero() {
		t.Errorf("Decode(user headers) = %+v, %v; want zero meta", m, err)
	}
	if d := headersDiff(gotUser, orig); d != "" {
		t.Errorf("Decode(user headers): %s", d)
	}
}

func TestDecodeInterleaved(t *testing.T) {
	hs := []kgo.RecordHeader{
		h("a", "1"),
		h(retry.HeaderID, "k"),
		h("b", "2"),
		h(retry.HeaderAttempt, "2"),
		h("a", "3"),
	}
	m, user, err := retry.Decode(hs)
	if err != nil || m.ID != "k" || m.Attempt != 2 {
		t.Fatalf("Decode = %+v, %v", m, err)
	}
	if d := headersDiff(user, []kgo.RecordHeader{h("a", "1"), h("b", "2"), h("a", "3")}); d != "" {
		t.Error(d)
	}
	if m, user, err := retry.Decode(nil); err != nil || user != nil || !reflect.ValueOf(m).IsZero() {
		t.Errorf("Decode(nil) = %+v, %v, %v", m, user, err)
	}
}

// TestDecodeAccepts documents what Decode takes that Encode would not write.
func TestDecodeAccepts(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes
	for _, tc := range []struct {
		name  string
		hs    []kgo.RecordHeader
		check func(retry.Meta) bool
	}{
		{"attempt 0", []kgo.RecordHeader{h(retry.HeaderAttempt, "0")}, func(m retry.Meta) bool { return m.Attempt == 0 }},
		{"attempt at its maximum", []kgo.RecordHeader{h(retry.HeaderAttempt, "10000")}, func(m retry.Meta) bool { return m.Attempt == retry.MaxAttempt }},
		{"polls at their maximum", []kgo.RecordHeader{h(retry.HeaderPolls, "1000000000")}, func(m retry.Meta) bool { return m.Polls == retry.MaxCount }},
		{"deliveries at their maximum", []kgo.RecordHeader{h(retry.HeaderDeliveries, "32767")}, func(m retry.Meta) bool { return m.Deliveries == retry.MaxDeliveryCount }},
		{"deliveries 0", []kgo.RecordHeader{h(retry.HeaderDeliveries, "0")}, func(m retry.Meta) bool { return m.Deliveries == 0 }},
		{"due at the latest time", []kgo.RecordHeader{h(retry.HeaderDue, "7258118400000")}, func(m retry.Meta) bool {
			return m.Due.Equal(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
		}},
		{"id of the largest size", []kgo.RecordHeader{h(retry.HeaderID, strings.Repeat("é", retry.MaxIDBytes/2))}, func(m retry.Meta) bool {
			return len(m.ID) == retry.MaxIDBytes
		}},
		{"id with spaces, punctuation and non-ASCII", []kgo.RecordHeader{h(retry.HeaderID, "order 7/ä:{x}")}, func(m retry.Meta) bool { return m.ID == "order 7/ä:{x}" }},
		{"due at the epoch", []kgo.RecordHeader{h(retry.HeaderDue, "0")}, func(m retry.Meta) bool { return m.Due.Equal(time.Unix(0, 0)) }},
		{"tier in a long spelling", []kgo.RecordHeader{h(retry.HeaderTier, "1h0m0s")}, func(m retry.Meta) bool { return m.Tier == "1h0m0s" }},
		{"empty class is none", []kgo.RecordHeader{h(retry.HeaderErrorClass, "")}, func(m retry.Meta) bool { return m.ErrorClass == retry.ClassNone }},
		{"every class", nil, func(retry.Meta) bool { // checked below
			for _, c := range []retry.Class{retry.ClassTransient, retry.ClassNotReady, retry.ClassPermanent, retry.ClassInvalid, retry.ClassExpired} {
				if m, _, err := retry.Decode([]kgo.RecordHeader{h(retry.HeaderErrorClass, string(c))}); err != nil || m.ErrorClass != c {
					return false
				}
			}
			return true
		}},
		// Reasons are the dlq package's to check (dlq.Decode); retry keeps the text.
		{"any reason text", []kgo.RecordHeader{h(retry.HeaderReason, "whatever")}, func(m retry.Meta) bool { return m.Reason == "whatever" }},
		// The 1 KiB limit is Encode's: a longer error from another writer is read whole.
		{"error over 1 KiB", []kgo.RecordHeader{h(retry.HeaderError, long)}, func(m retry.Meta) bool { return m.Error == long }},
		{"state of exactly 4 KiB", []kgo.RecordHeader{h(retry.HeaderState, strings.Repeat("s", retry.MaxStateBytes))}, func(m retry.Meta) bool {
			return len(m.State) == retry.MaxStateBytes
		}},
		{"empty error", []kgo.RecordHeader{h(retry.HeaderError, "")}, func(m retry.Meta) bool { return m.Error == "" }},
		{"largest partition", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginPartition, "2147483647"), h(retry.HeaderOriginOffset, "0")},
			func(m retry.Meta) bool { return m.HasOrigin && m.OriginPartition == 1<<31-1 }},
		{"origin without timestamp", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginPartition, "1"), h(retry.HeaderOriginOffset, "2")},
			func(m retry.Meta) bool { return m.HasOrigin && m.OriginTimestamp.IsZero() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, err := retry.Decode(tc.hs)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !tc.check(m) {
				t.Errorf("Decode = %+v", m)
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	origin := func(hs ...kgo.RecordHeader) []kgo.RecordHeader {
		return append([]kgo.RecordHeader{h(retry.HeaderOriginTopic, "solve"), h(retry.HeaderOriginPartition, "1"), h(retry.HeaderOriginOffset, "2")}, hs...)
	}
	for _, tc := range []struct {
		name   string
		hs     []kgo.RecordHeader
		header string // the header the error names
		reason string // part of the error's reason
	}{
		{"attempt not numeric", []kgo.RecordHeader{h(retry.HeaderAttempt, "two")}, retry.HeaderAttempt, "decimal"},
		{"attempt empty", []kgo.RecordHeader{h(retry.HeaderAttempt, "")}, retry.HeaderAttempt, "decimal"},
		{"attempt with spaces", []kgo.RecordHeader{h(retry.HeaderAttempt, " 2")}, retry.HeaderAttempt, "decimal"},
		{"attempt fractional", []kgo.RecordHeader{h(retry.HeaderAttempt, "1.5")}, retry.HeaderAttempt, "decimal"},
		{"attempt hex", []kgo.RecordHeader{h(retry.HeaderAttempt, "0x2")}, retry.HeaderAttempt, "decimal"},
		{"attempt negative", []kgo.RecordHeader{h(retry.HeaderAttempt, "-1")}, retry.HeaderAttempt, "negative"},
		{"attempt overflows", []kgo.RecordHeader{h(retry.HeaderAttempt, "99999999999999999999")}, retry.HeaderAttempt, "decimal"},
		// Numbers are canonical decimal within a range.
		{"attempt at int64's maximum", []kgo.RecordHeader{h(retry.HeaderAttempt, "9223372036854775807")}, retry.HeaderAttempt, "out of range; want a decimal integer from 0 to 10000"},
		{"attempt above its maximum", []kgo.RecordHeader{h(retry.HeaderAttempt, "10001")}, retry.HeaderAttempt, "out of range"},
		{"attempt with a plus sign", []kgo.RecordHeader{h(retry.HeaderAttempt, "+3")}, retry.HeaderAttempt, "signed"},
		{"attempt with a leading space", []kgo.RecordHeader{h(retry.HeaderAttempt, " 3")}, retry.HeaderAttempt, "not a canonical decimal"},
		{"attempt with a trailing space", []kgo.RecordHeader{h(retry.HeaderAttempt, "3 ")}, retry.HeaderAttempt, "not a canonical decimal"},
		{"attempt with leading zeros", []kgo.RecordHeader{h(retry.HeaderAttempt, "00003")}, retry.HeaderAttempt, "leading zero"},
		{"attempt minus zero", []kgo.RecordHeader{h(retry.HeaderAttempt, "-0")}, retry.HeaderAttempt, "signed"},
		{"attempt a sign alone", []kgo.RecordHeader{h(retry.HeaderAttempt, "+")}, retry.HeaderAttempt, "not a canonical decimal"},
		{"attempt full-width digits", []kgo.RecordHeader{h(retry.HeaderAttempt, "３")}, retry.HeaderAttempt, "not a canonical decimal"},
		{"polls above the maximum", []kgo.RecordHeader{h(retry.HeaderPolls, "1000000001")}, retry.HeaderPolls, "out of range"},
		{"redrives with leading zero", []kgo.RecordHeader{h(retry.HeaderRedrives, "01")}, retry.HeaderRedrives, "leading zero"},
		{"due beyond 2200", []kgo.RecordHeader{h(retry.HeaderDue, "7258118400001")}, retry.HeaderDue, "out of range; want Unix milliseconds"},
		{"due in 2262", []kgo.RecordHeader{h(retry.HeaderDue, "9223372036854")}, retry.HeaderDue, "out of range"},
		{"due 9999999999999 ms", []kgo.RecordHeader{h(retry.HeaderDue, "9999999999999")}, retry.HeaderDue, "out of range"},
		{"due int64's maximum", []kgo.RecordHeader{h(retry.HeaderDue, "9223372036854775807")}, retry.HeaderDue, "out of range"},
		{"due with a plus sign", []kgo.RecordHeader{h(retry.HeaderDue, "+1740830400000")}, retry.HeaderDue, "signed"},
		{"origin offset leading zero", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginPartition, "1"), h(retry.HeaderOriginOffset, "042")}, retry.HeaderOriginOffset, "leading zero"},
		{"truncated beyond int32", []kgo.RecordHeader{h(retry.HeaderTruncated, "2147483648")}, retry.HeaderTruncated, "out of range"},
		{"id of 200 KB", []kgo.RecordHeader{h(retry.HeaderID, strings.Repeat("k", 200<<10))}, retry.HeaderID, "204800 bytes, longer than 512"},
		{"id one byte too long", []kgo.RecordHeader{h(retry.HeaderID, strings.Repeat("k", retry.MaxIDBytes+1))}, retry.HeaderID, "longer than 512"},
		{"id with a newline", []kgo.RecordHeader{h(retry.HeaderID, "a\r\nX-Evil: 1")}, retry.HeaderID, "control character"},
		{"id with a tab", []kgo.RecordHeader{h(retry.HeaderID, "a\tb")}, retry.HeaderID, "control character"},
		{"polls exponent", []kgo.RecordHeader{h(retry.HeaderPolls, "1e3")}, retry.HeaderPolls, "decimal"},
		{"polls negative", []kgo.RecordHeader{h(retry.HeaderPolls, "-3")}, retry.HeaderPolls, "negative"},
		{"redrives negative", []kgo.RecordHeader{h(retry.HeaderRedrives, "-2")}, retry.HeaderRedrives, "negative"},
		{"redrives text", []kgo.RecordHeader{h(retry.HeaderRedrives, "once")}, retry.HeaderRedrives, "decimal"},
		{"due negative", []kgo.RecordHeader{h(retry.HeaderDue, "-5")}, retry.HeaderDue, "negative"},
		{"due RFC 3339", []kgo.RecordHeader{h(retry.HeaderDue, "2025-03-01T12:00:00Z")}, retry.HeaderDue, "milliseconds"},
		{"due fractional", []kgo.RecordHeader{h(retry.HeaderDue, "1740830400.5")}, retry.HeaderDue, "milliseconds"},
		{"due empty", []kgo.RecordHeader{h(retry.HeaderDue, "")}, retry.HeaderDue, "milliseconds"},
		{"origin timestamp bad", origin(h(retry.HeaderOriginTimestamp, "yesterday")), retry.HeaderOriginTimestamp, "milliseconds"},
		{"first error at bad", []kgo.RecordHeader{h(retry.HeaderFirstErrorAt, "x")}, retry.HeaderFirstErrorAt, "milliseconds"},
		{"last error at negative", []kgo.RecordHeader{h(retry.HeaderLastErrorAt, "-1")}, retry.HeaderLastErrorAt, "negative"},
		{"not ready since bad", []kgo.RecordHeader{h(retry.HeaderNotReadySince, "soon")}, retry.HeaderNotReadySince, "milliseconds"},
		{"tier without unit", []kgo.RecordHeader{h(retry.HeaderTier, "30")}, retry.HeaderTier, "bad delay"},
		{"tier sub-second", []kgo.RecordHeader{h(retry.HeaderTier, "500ms")}, retry.HeaderTier, "below 1s"},
		{"tier fractional", []kgo.RecordHeader{h(retry.HeaderTier, "1.5s")}, retry.HeaderTier, "whole"},
		{"id empty", []kgo.RecordHeader{h(retry.HeaderID, "")}, retry.HeaderID, "empty"},
		{"origin topic empty", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "")}, retry.HeaderOriginTopic, "empty"},
		{"origin partition text", []kgo.RecordHeader{h(retry.HeaderOriginPartition, "x")}, retry.HeaderOriginPartition, "decimal"},
		{"origin partition negative", []kgo.RecordHeader{h(retry.HeaderOriginPartition, "-1")}, retry.HeaderOriginPartition, "negative"},
		{"origin topic alone", origin()[:1], retry.HeaderOriginTopic, "without"},
		{"origin partition beyond int32", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginPartition, "2147483648")}, retry.HeaderOriginPartition, "out of range"},
		{"origin offset negative", []kgo.RecordHeader{h(retry.HeaderOriginOffset, "-1")}, retry.HeaderOriginOffset, "negative"},
		{"origin offset text", []kgo.RecordHeader{h(retry.HeaderOriginOffset, "latest")}, retry.HeaderOriginOffset, ""},
		{"origin topic without partition", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginOffset, "2")}, retry.HeaderOriginTopic, "without"},
		{"origin topic without offset", []kgo.RecordHeader{h(retry.HeaderOriginTopic, "t"), h(retry.HeaderOriginPartition, "2")}, retry.HeaderOriginTopic, "without"},
		// Encode writes the origin as a group; a part of it alone would be
		// dropped on the next hop, so it is malformed, like the topic alone.
		{"origin partition without topic", []kgo.RecordHeader{h(retry.HeaderOriginPartition, "1"), h(retry.HeaderOriginOffset, "2")}, retry.HeaderOriginPartition, "without origin topic"},
		{"origin offset without topic", []kgo.RecordHeader{h(retry.HeaderOriginOffset, "2")}, retry.HeaderOriginOffset, "without origin topic"},
		{"origin timestamp without topic", []kgo.RecordHeader{h(retry.HeaderOriginTimestamp, "1740830400000")}, retry.HeaderOriginTimestamp, "without origin topic"},
		{"class unknown", []kgo.RecordHeader{h(retry.HeaderErrorClass, "sometimes")}, retry.HeaderErrorClass, "unknown class"},
		{"class upper-case", []kgo.RecordHeader{h(retry.HeaderErrorClass, "Transient")}, retry.HeaderErrorClass, "unknown class"},
		{"class with underscore", []kgo.RecordHeader{h(retry.HeaderErrorClass, "not_ready")}, retry.HeaderErrorClass, "unknown class"},
		{"state over 4 KiB", []kgo.RecordHeader{h(retry.HeaderState, strings.Repeat("s", retry.MaxStateBytes+1))}, retry.HeaderState, "4096"},
		{"state not UTF-8", []kgo.RecordHeader{{Key: retry.HeaderState, Value: []byte{0xff, 0xfe}}}, retry.HeaderState, "UTF-8"},
		{"error not UTF-8", []kgo.RecordHeader{{Key: retry.HeaderError, Value: []byte("bad \xc3\x28 byte")}}, retry.HeaderError, "UTF-8"},
		{"id not UTF-8", []kgo.RecordHeader{{Key: retry.HeaderID, Value: []byte{0xc0, 0x80}}}, retry.HeaderID, "UTF-8"},
		{"error code not UTF-8", []kgo.RecordHeader{{Key: retry.HeaderErrorCode, Value: []byte("E\xff")}}, retry.HeaderErrorCode, "UTF-8"},
		{"truncated text", []kgo.RecordHeader{h(retry.HeaderTruncated, "big")}, retry.HeaderTruncated, ""},
		{"truncated negative", []kgo.RecordHeader{h(retry.HeaderTruncated, "-100")}, retry.HeaderTruncated, "negative"},
		{"truncated key negative", []kgo.RecordHeader{h(retry.HeaderTruncatedKey, "-1")}, retry.HeaderTruncatedKey, "negative"},
		{"deliveries text", []kgo.RecordHeader{h(retry.HeaderDeliveries, "four")}, retry.HeaderDeliveries, "not a canonical decimal integer; want a decimal integer from 0 to 32767"},
		{"deliveries empty", []kgo.RecordHeader{h(retry.HeaderDeliveries, "")}, retry.HeaderDeliveries, "empty"},
		{"deliveries negative", []kgo.RecordHeader{h(retry.HeaderDeliveries, "-4")}, retry.HeaderDeliveries, "negative"},
		{"deliveries signed", []kgo.RecordHeader{h(retry.HeaderDeliveries, "+4")}, retry.HeaderDeliveries, "signed"},
		{"deliveries leading zero", []kgo.RecordHeader{h(retry.HeaderDeliveries, "04")}, retry.HeaderDeliveries, "leading zero"},
		{"deliveries beyond Kafka's int16 count", []kgo.RecordHeader{h(retry.HeaderDeliveries, "32768")}, retry.HeaderDeliveries, "out of range"},
		{"deliveries fractional", []kgo.RecordHeader{h(retry.HeaderDeliveries, "4.0")}, retry.HeaderDeliveries, "decimal"},
		{"duplicate deliveries", []kgo.RecordHeader{h(retry.HeaderDeliveries, "4"), h(retry.HeaderDeliveries, "5")}, retry.HeaderDeliveries, "duplicate"},
		{"duplicate attempt, conflicting", []kgo.RecordHeader{h(retry.HeaderAttempt, "1"), h(retry.HeaderAttempt, "2")}, retry.HeaderAttempt, "duplicate"},
		// Any repeat breaks "never appends duplicates", even with the same value.
		{"duplicate attempt, same value", []kgo.RecordHeader{h(retry.HeaderAttempt, "2"), h(retry.HeaderTier, "5s"), h(retry.HeaderAttempt, "2")}, retry.HeaderAttempt, "duplicate"},
		{"duplicate id", []kgo.RecordHeader{h(retry.HeaderID, "a"), h(retry.HeaderID, "b")}, retry.HeaderID, "duplicate"},
		{"duplicate error, second one bad UTF-8", []kgo.RecordHeader{h(retry.HeaderError, "ok"), {Key: retry.HeaderError, Value: []byte{0xff}}}, retry.HeaderError, "duplicate"},
		{"first of two errors is named", []kgo.RecordHeader{h(retry.HeaderPolls, "x"), h(retry.HeaderAttempt, "y")}, retry.HeaderPolls, "decimal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := []kgo.RecordHeader{h("content-type", "text/plain"), h("redrivex", "1")}
			hs := append(slices.Clone(user[:1]), tc.hs...)
			hs = append(hs, user[1:]...)
			_, gotUser, err := retry.Decode(hs)
			if err == nil {
				t.Fatalf("Decode(%s) = nil error", fmtHeaders(tc.hs))
			}
			if !errors.Is(err, retry.ErrBadHeader) {
				t.Errorf("%v does not wrap ErrBadHeader", err)
			}
			var bad *retry.BadHeaderError
			if !errors.As(err, &bad) {
				t.Fatalf("%v (%T) is not a *BadHeaderError", err, err)
			}
			if bad.Header != tc.header {
				t.Errorf("error names %q, want %q (%v)", bad.Header, tc.header, err)
			}
			if !strings.Contains(err.Error(), tc.header) || !strings.Contains(bad.Reason, tc.reason) {
				t.Errorf("error %q: want the header %q and a reason with %q", err, tc.header, tc.reason)
			}
			// The record is dead-lettered as invalid with nothing lost.
			if d := headersDiff(gotUser, user); d != "" {
				t.Errorf("user headers on error: %s", d)
			}
		})
	}
}

func TestBadHeaderErrorMessage(t *testing.T) {
	e := &retry.BadHeaderError{Header: retry.HeaderAttempt, Value: "two", Reason: "not a decimal integer"}
	if got, want := e.Error(), `header redrive-attempt="two": not a decimal integer`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	long := &retry.BadHeaderError{Header: retry.HeaderState, Value: strings.Repeat("x", 5000), Reason: "too long"}
	if n := len(long.Error()); n > 200 {
		t.Errorf("message of %d bytes for a 5000-byte value: the value is not shortened", n)
	}
	if !strings.Contains(long.Error(), "...") {
		t.Errorf("shortened value not marked: %q", long.Error())
	}
}

func TestEncodeTruncatesError(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string
	}{
		{"ASCII", strings.Repeat("x", 5000)},
		{"two-byte runes across the limit", strings.Repeat("é", 700)},
		{"three-byte runes", "upstream: " + strings.Repeat("错误", 400)},
		{"four-byte runes", strings.Repeat("🙂", 300)},
		{"invalid UTF-8", strings.Repeat("a\xff", 700)},
		{"exactly 1 KiB", strings.Repeat("y", retry.MaxErrorBytes)},
		{"short", "503 Service Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := retry.Encode(retry.Meta{Error: tc.msg}, nil)
			v, ok := value(hs, retry.HeaderError)
			if !ok {
				t.Fatal("no redrive-error")
			}
			if len(v) > retry.MaxErrorBytes || !utf8.ValidString(v) {
				t.Errorf("redrive-error of %d bytes, valid UTF-8 %v", len(v), utf8.ValidString(v))
			}
			if utf8.ValidString(tc.msg) && !strings.HasPrefix(tc.msg, v) {
				t.Errorf("redrive-error is not a prefix of the message")
			}
			if len(tc.msg) <= retry.MaxErrorBytes && utf8.ValidString(tc.msg) && v != tc.msg {
				t.Errorf("a message within the limit was changed")
			}
			if len(tc.msg) > retry.MaxErrorBytes && len(v) < retry.MaxErrorBytes-utf8.UTFMax+1 {
				t.Errorf("cut to %d bytes, more than a rune short of the limit", len(v))
			}
			if _, _, err := retry.Decode(hs); err != nil {
				t.Errorf("Decode: %v", err)
			}
		})
	}
}

// TestEncodeKeepsStateWhole: state is opaque (a solver's task id), so Encode
// never cuts it; the 4 KiB limit is enforced when it is read (Decode) and by
// the processor before it writes an oversized state.
func TestEncodeKeepsStateWhole(t *testing.T) {
	st := []byte(strings.Repeat("t", retry.MaxStateBytes+10))
	hs := retry.Encode(retry.Meta{State: st}, nil)
	if v, _ := value(hs, retry.HeaderState); v != string(st) {
		t.Errorf("state changed by Encode: %d bytes", len(v))
	}
	if _, _, err := retry.Decode(hs); err == nil {
		t.Errorf("Decode accepted a %d-byte state", len(st))
	}
}

func TestDecodeCopiesState(t *testing.T) {
	hs := []kgo.RecordHeader{h(retry.HeaderState, "task-1")}
	m, _, err := retry.Decode(hs)
	if err != nil {
		t.Fatal(err)
	}
	hs[0].Value[0] = 'X' // the record's buffer is reused
	if string(m.State) != "task-1" {
		t.Errorf("Meta.State aliases the header value: %q", m.State)
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 10, ""},
		{"abc", 10, "abc"},
		{"abc", 3, "abc"},
		{"abc", 2, "ab"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"héllo", 2, "h"}, // é is 2 bytes at [1,3)
		{"héllo", 3, "hé"},
		{"日本語", 5, "日"},
		{"日本語", 6, "日本"},
		{"🙂🙂", 7, "🙂"},
		{"🙂🙂", 3, ""},
		{"a\xffb", 10, "a\uFFFDb"},     // invalid bytes replaced
		{"a\xffb", 3, "a"},             // the replacement is 3 bytes: it does not fit
		{"\xff\xfe\xfd", 10, "\uFFFD"}, // a run of invalid bytes is one replacement
		{"ok\xc3", 10, "ok\uFFFD"},     // a rune cut by the writer
	} {
		if got := retry.TruncateUTF8(tc.s, tc.n); got != tc.want {
			t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	// Every cut of a mixed string: valid, within n, the longest prefix that fits.
	s := "a é 日本 🙂 z" + strings.Repeat("ü", 10)
	for n := range len(s) + 2 {
		checkTruncate(t, s, n)
	}
}

func checkTruncate(t *testing.T, s string, n int) {
	t.Helper()
	got := retry.TruncateUTF8(s, n)
	if !utf8.ValidString(got) {
		t.Fatalf("TruncateUTF8(%q, %d) = %q: invalid UTF-8", s, n, got)
	}
	if len(got) > max(n, 0) {
		t.Fatalf("TruncateUTF8(%q, %d) = %q: %d bytes", s, n, got, len(got))
	}
	valid := strings.ToValidUTF8(s, "\uFFFD")
	if !strings.HasPrefix(valid, got) {
		t.Fatalf("TruncateUTF8(%q, %d) = %q: not a prefix of %q", s, n, got, valid)
	}
	if rest := valid[len(got):]; rest != "" {
		_, size := utf8.DecodeRuneInString(rest)
		if len(got)+size <= n {
			t.Fatalf("TruncateUTF8(%q, %d) = %q: the next rune would fit", s, n, got)
		}
	}
}

func TestRequestID(t *testing.T) {
	rec := func(hs ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: "solve.requests", Partition: 3, Offset: 918273, Headers: hs}
	}
	const fallback = "solve.requests/3/918273"
	for _, tc := range []struct {
		name string
		r    *kgo.Record
		want string
	}{
		{"no headers", rec(), fallback},
		{"idempotency-key", rec(h("content-type", "application/json"), h("idempotency-key", "order-7f3a")), "order-7f3a"},
		{"empty key falls back", rec(h("idempotency-key", "")), fallback},
		{"nil key falls back", rec(kgo.RecordHeader{Key: "idempotency-key"}), fallback},
		{"invalid UTF-8 falls back", rec(kgo.RecordHeader{Key: "idempotency-key", Value: []byte{0xff}}), fallback},
		{"header names are case-sensitive", rec(h("Idempotency-Key", "upper")), fallback},
		{"first usable key wins", rec(h("idempotency-key", ""), h("idempotency-key", "second"), h("idempotency-key", "third")), "second"},
		{"redrive-id is not consulted", rec(h(retry.HeaderID, "from-header")), fallback},
		// The id is sent as Idempotency-Key; a key that
		// cannot be an id (CheckID) is not used.
		{"key of 200 KB falls back", rec(h("idempotency-key", strings.Repeat("k", 200<<10))), fallback},
		{"key one byte too long falls back", rec(h("idempotency-key", strings.Repeat("k", retry.MaxIDBytes+1))), fallback},
		{"key of the largest size", rec(h("idempotency-key", strings.Repeat("k", retry.MaxIDBytes))), strings.Repeat("k", retry.MaxIDBytes)},
		{"key with a newline falls back", rec(h("idempotency-key", "a\r\nX-Evil: 1")), fallback},
		{"longest topic", &kgo.Record{Topic: strings.Repeat("t", 249), Partition: 1<<31 - 1, Offset: 1<<63 - 1},
			strings.Repeat("t", 249) + "/2147483647/9223372036854775807"},
		{"partition 0 offset 0", &kgo.Record{Topic: "t"}, "t/0/0"},
		{"large offset", &kgo.Record{Topic: "t", Partition: 1<<31 - 1, Offset: 1<<63 - 1}, "t/2147483647/9223372036854775807"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retry.RequestID(tc.r); got != tc.want {
				t.Errorf("RequestID = %q, want %q", got, tc.want)
			}
		})
	}
}

// Every id RequestID makes is a valid redrive-id, the fallback for the
// longest topic name too.
func TestRequestIDIsAValidID(t *testing.T) {
	r := &kgo.Record{Topic: strings.Repeat("t", 249), Partition: 1<<31 - 1, Offset: 1<<63 - 1,
		Headers: []kgo.RecordHeader{h("idempotency-key", strings.Repeat("k", retry.MaxIDBytes+1))}}
	id := retry.RequestID(r)
	if err := retry.CheckID(id); err != nil {
		t.Fatalf("RequestID = %q: %v", id, err)
	}
}

// A malformed redrive-id is not kept in Meta: the record's dead letter gets
// the fallback id (identify), not the 200 KB value.
func TestDecodeDropsABadID(t *testing.T) {
	m, _, err := retry.Decode([]kgo.RecordHeader{h(retry.HeaderID, strings.Repeat("k", 200<<10))})
	if err == nil || m.ID != "" {
		t.Fatalf("Decode = ID of %d bytes, %v; want no ID and an error", len(m.ID), err)
	}
	if n := len(err.Error()); n > 200 {
		t.Errorf("error message of %d bytes", n)
	}
}

func TestClassValid(t *testing.T) {
	for _, c := range []retry.Class{"", "transient", "not-ready", "permanent", "invalid", "expired"} {
		if !c.Valid() {
			t.Errorf("%q not valid", c)
		}
	}
	for _, c := range []retry.Class{"exhausted", "Transient", "not_ready", " transient", "unknown"} {
		if c.Valid() {
			t.Errorf("%q valid", c)
		}
	}
}

func ExampleEncode() {
	m := retry.Meta{
		ID: "order-7f3a", Attempt: 1,
		Due: time.UnixMilli(1_740_830_405_000), Tier: "5s",
		HasOrigin: true, OriginTopic: "solve.requests", OriginPartition: 3, OriginOffset: 42,
		ErrorCode: "ERROR_NO_SLOT_AVAILABLE", ErrorClass: retry.ClassTransient,
	}
	user := []kgo.RecordHeader{
		{Key: "content-type", Value: []byte("application/json")},
		{Key: retry.HeaderAttempt, Value: []byte("0")}, // from the previous hop: replaced
	}
	for _, h := range retry.Encode(m, user) {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}
	// Output:
	// redrive-id: order-7f3a
	// redrive-attempt: 1
	// redrive-due: 1740830405000
	// redrive-tier: 5s
	// redrive-origin-topic: solve.requests
	// redrive-origin-partition: 3
	// redrive-origin-offset: 42
	// redrive-error-code: ERROR_NO_SLOT_AVAILABLE
	// redrive-error-class: transient
	// content-type: application/json
}

// Fuzz input: a byte stream read as a list of headers, so that the fuzzer
// controls keys, values, order and duplicates. Per header: one byte k, then
// the key (k < 0x80: fuzzKeys[k%len]; else k&0x7f raw bytes), then one
// byte l and the value (l == 0xff: nil; l == 0xfe: two bytes of big-endian
// length, then that many bytes; else l bytes).
var fuzzKeys = append(slices.Clone(knownHeaders),
	"content-type", "idempotency-key", "traceparent", "Redrive-Id", "redrivex", "redrive-future", "")

func headersFromBytes(b []byte) []kgo.RecordHeader {
	take := func(n int) []byte {
		n = min(n, len(b))
		v := b[:n:n]
		b = b[n:]
		return v
	}
	var hs []kgo.RecordHeader
	for len(b) > 0 && len(hs) < 64 {
		k := take(1)[0]
		var key string
		if k < 0x80 {
			key = fuzzKeys[int(k)%len(fuzzKeys)]
		} else {
			key = string(take(int(k & 0x7f)))
		}
		var val []byte
		if l := take(1); len(l) == 1 {
			switch l[0] {
			case 0xff:
				val = nil
			case 0xfe:
				n := take(2)
				size := 0
				for _, c := range n {
					size = size<<8 | int(c)
				}
				val = take(size)
			default:
				val = take(int(l[0]))
			}
		}
		hs = append(hs, kgo.RecordHeader{Key: key, Value: val})
	}
	return hs
}

func headersToBytes(hs []kgo.RecordHeader) []byte {
	var b []byte
	for _, h := range hs {
		if i := slices.Index(fuzzKeys, h.Key); i >= 0 {
			b = append(b, byte(i))
		} else {
			b = append(b, 0x80|byte(len(h.Key)))
			b = append(b, h.Key...)
		}
		switch {
		case h.Value == nil:
			b = append(b, 0xff)
		case len(h.Value) < 0xfe:
			b = append(b, byte(len(h.Value)))
			b = append(b, h.Value...)
		default:
			b = append(b, 0xfe, byte(len(h.Value)>>8), byte(len(h.Value)))
			b = append(b, h.Value...)
		}
	}
	return b
}

func TestFuzzHeaderBytes(t *testing.T) {
	hs := []kgo.RecordHeader{h(retry.HeaderID, "k"), h("custom", "v"), {Key: "nil"}, h("long", strings.Repeat("x", 300)), h("", "")}
	if d := headersDiff(headersFromBytes(headersToBytes(hs)), hs); d != "" {
		t.Error(d)
	}
}

func fuzzSeeds() [][]kgo.RecordHeader {
	m := fullMeta()
	retryRec := retry.Encode(retry.Meta{ID: "solve.requests/3/42", Attempt: 2, Due: time.UnixMilli(1_740_830_430_000), Tier: "30s",
		HasOrigin: true, OriginTopic: "solve.requests", OriginPartition: 3, OriginOffset: 42, OriginTimestamp: time.UnixMilli(1_740_830_400_000),
		FirstErrorAt: time.UnixMilli(1_740_830_400_500), LastErrorAt: time.UnixMilli(1_740_830_405_500),
		Error: "POST http://solver/solve: 503 Service Unavailable", ErrorCode: "http_503", ErrorClass: retry.ClassTransient},
		[]kgo.RecordHeader{h("content-type", "application/json"), h("idempotency-key", "order-1"), h("traceparent", "00-abc-def-01")})
	return [][]kgo.RecordHeader{
		nil,
		retryRec,
		retry.Encode(m, nil),
		retry.Encode(retry.Meta{ID: "k", Redrives: 2, HasOrigin: true, OriginTopic: "t", OriginPartition: 0, OriginOffset: 7}, []kgo.RecordHeader{h("Redrive-Id", "x"), h("redrivex", "y")}),
		retry.Encode(retry.Meta{ID: "k", Attempt: 1, Polls: 3, ErrorClass: retry.ClassNotReady, ErrorCode: "CAPCHA_NOT_READY", State: []byte("task-77"),
			NotReadySince: time.UnixMilli(1_740_830_400_000), Due: time.UnixMilli(1_740_830_405_000), Tier: "5s"}, nil),
		{h(retry.HeaderError, strings.Repeat("é", 600))}, // over 1 KiB: read whole, cut when written
		{h(retry.HeaderState, strings.Repeat("s", retry.MaxStateBytes))},
		{h(retry.HeaderState, strings.Repeat("s", retry.MaxStateBytes+1))},
		{h(retry.HeaderAttempt, "1"), h(retry.HeaderAttempt, "2")},
		{h(retry.HeaderAttempt, "+3"), h(retry.HeaderDue, "0"), h(retry.HeaderTier, "1h0m0s")},
		{h(retry.HeaderOriginPartition, "1"), h(retry.HeaderOriginOffset, "2")},
		{h(retry.HeaderErrorClass, "sometimes"), {Key: retry.HeaderError, Value: []byte{0xff}}},
		{h(retry.HeaderTruncated, "-1"), h("redrive-future", "x"), {Key: "nil"}},
		// Non-canonical and out-of-range numbers, long ids.
		{h(retry.HeaderAttempt, "9223372036854775807")},
		{h(retry.HeaderAttempt, " 3")},
		{h(retry.HeaderAttempt, "00003"), h(retry.HeaderPolls, "0")},
		{h(retry.HeaderAttempt, "10000"), h(retry.HeaderRedrives, "1000000000")},
		{h(retry.HeaderDue, "9999999999999")},
		{h(retry.HeaderDue, "9223372036854"), h(retry.HeaderTier, "5s")},
		{h(retry.HeaderDue, "7258118400000"), h(retry.HeaderLastErrorAt, "-0")},
		{h(retry.HeaderID, strings.Repeat("k", retry.MaxIDBytes+1))},
		{h(retry.HeaderID, strings.Repeat("k", retry.MaxIDBytes)), h("idempotency-key", strings.Repeat("x", 600))},
		{h(retry.HeaderID, "a\nb")},
		retry.Encode(retry.Meta{ID: "k", Reason: "crashed", Deliveries: 4, HasOrigin: true, OriginTopic: "t", OriginPartition: 1, OriginOffset: 9}, nil),
		{h(retry.HeaderDeliveries, "32767"), h(retry.HeaderReason, "crashed")},
		{h(retry.HeaderDeliveries, "32768")},
		{h(retry.HeaderDeliveries, "007"), h(retry.HeaderDeliveries, "7")},
		{h(retry.HeaderDeliveries, "-0")},
	}
}

// numericHeaders are the headers whose value is a canonical decimal.
var numericHeaders = []string{retry.HeaderAttempt, retry.HeaderPolls, retry.HeaderDue, retry.HeaderOriginPartition, retry.HeaderOriginOffset,
	retry.HeaderOriginTimestamp, retry.HeaderFirstErrorAt, retry.HeaderLastErrorAt, retry.HeaderRedrives, retry.HeaderTruncated, retry.HeaderNotReadySince,
	retry.HeaderDeliveries}

// canonicalRE is a canonical decimal: digits only, no leading zero.
var canonicalRE = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// checkCanonical fails unless every number Decode accepted from hs is
// canonical decimal within its range and every id is a valid id.
func checkCanonical(t *testing.T, hs []kgo.RecordHeader, m retry.Meta) {
	t.Helper()
	for _, k := range numericHeaders {
		v, ok := value(hs, k)
		if !ok {
			continue
		}
		if !canonicalRE.MatchString(v) {
			t.Fatalf("Decode accepted %s=%q, not canonical decimal", k, v)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("Decode accepted %s=%q: %v", k, v, err)
		}
		var max uint64
		switch k {
		case retry.HeaderAttempt:
			max = retry.MaxAttempt
		case retry.HeaderPolls, retry.HeaderRedrives:
			max = retry.MaxCount
		case retry.HeaderOriginPartition, retry.HeaderTruncated:
			max = 1<<31 - 1
		case retry.HeaderOriginOffset:
			max = 1<<63 - 1
		case retry.HeaderDeliveries:
			max = retry.MaxDeliveryCount
		default: // times
			max = retry.MaxMillis
		}
		if n > max {
			t.Fatalf("Decode accepted %s=%q, above %d", k, v, max)
		}
	}
	if v, ok := value(hs, retry.HeaderID); ok && (len(v) > retry.MaxIDBytes || m.ID != v || retry.CheckID(v) != nil) {
		t.Fatalf("Decode accepted an id of %d bytes (%q)", len(v), retry.TruncateUTF8(v, 40))
	}
	if len(m.ID) > retry.MaxIDBytes {
		t.Fatalf("Meta.ID of %d bytes", len(m.ID))
	}
}

func FuzzDecode(f *testing.F) {
	for _, hs := range fuzzSeeds() {
		f.Add(headersToBytes(hs))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hs := headersFromBytes(data)
		m, user, err := retry.Decode(hs)
		// DecodeView reads the same, error or not.
		mv, userv, errv := retry.DecodeView(hs)
		if d := metaDiff(mv, m); d != nil || headersDiff(userv, user) != "" || fmt.Sprint(errv) != fmt.Sprint(err) {
			t.Fatalf("DecodeView differs from Decode: %v; error %v, want %v", d, errv, err)
		}

		// The user's headers come back whole, in order, error or not.
		var wantUser []kgo.RecordHeader
		for _, h := range hs {
			if !slices.Contains(knownHeaders, h.Key) {
				wantUser = append(wantUser, h)
			}
		}
		if d := headersDiff(user, wantUser); d != "" {
			t.Fatalf("user headers: %s", d)
		}
		if err != nil {
			var bad *retry.BadHeaderError
			if !errors.Is(err, retry.ErrBadHeader) || !errors.As(err, &bad) || !slices.Contains(knownHeaders, bad.Header) {
				t.Fatalf("error %v (%T) is not a BadHeaderError naming a redrive header", err, err)
			}
			if len(m.ID) > retry.MaxIDBytes || (m.ID != "" && retry.CheckID(m.ID) != nil) {
				t.Fatalf("Meta.ID of %d bytes kept on error", len(m.ID))
			}
			return
		}
		checkCanonical(t, hs, m)

		out := retry.Encode(m, user)
		for _, k := range knownHeaders {
			if n := count(out, k); n > 1 {
				t.Fatalf("Encode wrote %s %d times", k, n)
			}
		}
		m2, user2, err := retry.Decode(out)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(hs))): %v\nin  %s\nout %s", err, fmtHeaders(hs), fmtHeaders(out))
		}
		want := m
		want.Error = retry.TruncateUTF8(m.Error, retry.MaxErrorBytes) // a longer error is cut when written
		if d := metaDiff(m2, want); d != nil {
			t.Fatalf("meta changed by Encode/Decode:\n%s\nin  %s\nout %s", strings.Join(d, "\n"), fmtHeaders(hs), fmtHeaders(out))
		}
		if d := headersDiff(user2, user); d != "" {
			t.Fatalf("user headers changed by Encode/Decode: %s", d)
		}
		// Encode is a fixed point after one round.
		if d := headersDiff(retry.Encode(m2, user2), out); d != "" {
			t.Fatalf("Encode not stable: %s", d)
		}
	})
}

func FuzzTruncateUTF8(f *testing.F) {
	for _, s := range []string{"", "abc", "héllo", "日本語", "🙂🙂", "a\xffb", "\xff\xfe\xfd", "ok\xc3", strings.Repeat("é", 700)} {
		for _, n := range []int{-1, 0, 1, 2, 3, 4, 5, 1024} {
			f.Add(s, n)
		}
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		checkTruncate(t, s, n%(1<<20))
	})
}
