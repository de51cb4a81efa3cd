package dlq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

func sample() (*kgo.Record, retry.Meta, []kgo.RecordHeader) {
	now := time.UnixMilli(1_700_000_000_000)
	src := &kgo.Record{Topic: "solve.retry.30s", Partition: 2, Offset: 77, Key: []byte("k1"), Value: []byte(`{"site":"x"}`)}
	m := retry.Meta{ID: "solve/1/10", Attempt: 4, Polls: 1, Due: now, Tier: "30s", State: []byte("task-9"), HasOrigin: true,
		OriginTopic: "solve", OriginPartition: 1, OriginOffset: 10, OriginTimestamp: now.Add(-time.Minute),
		FirstErrorAt: now.Add(-50 * time.Second), LastErrorAt: now, Error: "503 Service Unavailable", ErrorCode: "http_503",
		ErrorClass: retry.ClassTransient, Reason: string(ReasonExhausted), Redrives: 1, NotReadySince: now}
	user := []kgo.RecordHeader{{Key: "Authorization", Value: []byte("Bearer s3cret")}, {Key: "trace", Value: []byte("a")}, {Key: "trace", Value: []byte("b")}}
	return src, m, user
}

func TestBuildAndDecode(t *testing.T) {
	src, m, user := sample()
	r := Build(src, m, user, BuildOptions{Topic: "solve.dlq", RedactHeaders: []string{"authorization"}, Group: "redrive.solve", Instance: "pod-1"})
	if r.Topic != "solve.dlq" || !bytes.Equal(r.Key, src.Key) || !bytes.Equal(r.Value, src.Value) {
		t.Fatalf("topic/key/value: %s %q %q", r.Topic, r.Key, r.Value)
	}
	seen := map[string]int{}
	for _, h := range r.Headers {
		seen[h.Key]++
	}
	for _, k := range []string{retry.HeaderID, retry.HeaderAttempt, retry.HeaderPolls, retry.HeaderOriginTopic, retry.HeaderOriginPartition,
		retry.HeaderOriginOffset, retry.HeaderOriginTimestamp, retry.HeaderFirstErrorAt, retry.HeaderLastErrorAt, retry.HeaderError,
		retry.HeaderErrorCode, retry.HeaderErrorClass, retry.HeaderReason, retry.HeaderRedrives, retry.HeaderGroup, retry.HeaderInstance} {
		if seen[k] != 1 {
			t.Errorf("header %s appears %d times, want 1", k, seen[k])
		}
	}
	for _, k := range []string{retry.HeaderDue, retry.HeaderTier, retry.HeaderState, retry.HeaderNotReadySince} {
		if seen[k] != 0 {
			t.Errorf("dead letter carries %s", k)
		}
	}
	d, err := Decode(r)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if d.ID != m.ID || d.Reason != ReasonExhausted || d.Attempt != 4 || d.Polls != 1 || d.Code != "http_503" || d.Class != retry.ClassTransient ||
		d.OriginTopic != "solve" || d.OriginPartition != 1 || d.OriginOffset != 10 || !d.OriginTimestamp.Equal(m.OriginTimestamp) ||
		d.Group != "redrive.solve" || d.Instance != "pod-1" || d.Redrives != 1 || d.Error != m.Error {
		t.Errorf("decoded %+v", d)
	}
	if len(d.UserHeaders) != 3 || string(d.UserHeaders[0].Value) != Redacted || d.UserHeaders[0].Key != "Authorization" ||
		string(d.UserHeaders[1].Value) != "a" || string(d.UserHeaders[2].Value) != "b" {
		t.Errorf("user headers %v: want Authorization redacted, trace a, b in order", d.UserHeaders)
	}
	if string(user[0].Value) != "Bearer s3cret" {
		t.Errorf("Build modified the caller's headers")
	}
}

func TestBuildTruncatesToFit(t *testing.T) {
	src, m, user := sample()
	src.Value = make([]byte, 300_000)
	for i := range src.Value {
		src.Value[i] = byte(rand.Uint32())
	}
	const limit = 100_000
	r := Build(src, m, user, BuildOptions{Topic: "d", MaxRecordBytes: limit})
	if EncodedSize(r) > limit {
		t.Fatalf("encoded size %d over the limit %d", EncodedSize(r), limit)
	}
	if len(r.Value) == 0 || !bytes.HasPrefix(src.Value, r.Value) || len(r.Value) < limit-2000 {
		t.Errorf("value %d bytes: want a prefix close to the limit", len(r.Value))
	}
	d, err := Decode(r)
	if err != nil || d.Truncated != 300_000 {
		t.Fatalf("Truncated = %d, err %v; want 300000", d.Truncated, err)
	}
	// Real batch size, as kgo would write it, stays under the limit too.
	if n := batchSize(r); n > limit {
		t.Errorf("kgo-style batch of %d bytes over the limit", n)
	}
}

func TestBuildCutsLargestUserHeaderWhenHeadersAloneDoNotFit(t *testing.T) {
	src, m, _ := sample()
	user := []kgo.RecordHeader{{Key: "small", Value: []byte("s")}, {Key: "huge", Value: bytes.Repeat([]byte("h"), 50_000)}}
	r := Build(src, m, user, BuildOptions{Topic: "d", MaxRecordBytes: 20_000})
	if EncodedSize(r) > 20_000 {
		t.Fatalf("size %d over 20000", EncodedSize(r))
	}
	d, err := Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != m.ID || d.Reason != ReasonExhausted || d.Error != m.Error {
		t.Errorf("redrive headers were cut: %+v", d)
	}
	for _, h := range d.UserHeaders {
		if h.Key == "small" && string(h.Value) != "s" {
			t.Errorf("small header cut")
		}
		if h.Key == "huge" && len(h.Value) >= 50_000 {
			t.Errorf("huge header not cut")
		}
	}
}

// The processor rebuilds a refused dead letter at a smaller limit from the
// consumed record: the marks keep the sizes of the record as consumed.
func TestBuildAtASmallerLimitKeepsOriginalSizes(t *testing.T) {
	src, m, user := sample()
	src.Value = bytes.Repeat([]byte("v"), 30_000)
	for _, limit := range []int{20_000, 10_000, 5_000} {
		r := Build(src, m, user, BuildOptions{Topic: "d", RedactHeaders: []string{"authorization"}, Group: "g", Instance: "i", HeaderStyle: StyleConnect, MaxRecordBytes: limit})
		if n := EncodedSize(r); n > limit {
			t.Errorf("limit %d: %d bytes", limit, n)
		}
		d, err := Decode(r)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if d.Truncated != 30_000 || !bytes.HasPrefix(src.Value, d.Value) || len(d.Value) < limit-3000 {
			t.Errorf("limit %d: value %d bytes, Truncated %d; want a prefix near the limit and 30000", limit, len(d.Value), d.Truncated)
		}
		if d.ID != m.ID || d.Reason != ReasonExhausted || d.Error != m.Error || d.Group != "g" || d.Instance != "i" || d.Attempt != 4 {
			t.Errorf("redrive headers changed: %+v", d)
		}
		var got []string
		for _, h := range d.UserHeaders {
			got = append(got, h.Key+"="+string(h.Value))
		}
		if want := "Authorization=[redacted] trace=a trace=b " + ConnectTopic + "=solve"; !strings.HasPrefix(strings.Join(got, " "), want) {
			t.Errorf("user headers %v, want them (redacted, compatibility ones too) kept in order: %s ...", got, want)
		}
	}
}

// EncodedSize is what the producer and the broker count, never less: the
// record as the one record of a v2 batch, plus the 4 bytes of length
// before the batch that franz-go counts too.
func TestEncodedSizeBoundsTheBatch(t *testing.T) {
	for _, r := range []*kgo.Record{
		{},
		{Key: []byte("k"), Value: []byte("v")},
		{Value: make([]byte, 63)}, {Value: make([]byte, 64)}, {Value: make([]byte, 8191)}, {Value: make([]byte, 8192)},
		{Key: make([]byte, 1<<20), Value: make([]byte, 3<<20)},
		{Headers: []kgo.RecordHeader{{Key: "a"}, {Key: strings.Repeat("h", 200), Value: make([]byte, 70_000)}}},
		{Headers: make([]kgo.RecordHeader, 5000)},
	} {
		exact := batchSize(r) + 4
		if got := EncodedSize(r); got < exact || got > exact+20 {
			t.Errorf("key %d value %d headers %d: EncodedSize %d, batch (with its length) %d", len(r.Key), len(r.Value), len(r.Headers), got, exact)
		}
	}
}

// big is n bytes that do not compress.
func big(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

// Whatever is too large — value, key, user headers, redrive's own texts —
// the dead letter fits the limit, decodes with its reason, class, attempts
// and origin, and says what was cut; what fits is not cut.
func TestBuildFitsEveryLimit(t *testing.T) {
	type tc struct {
		name    string
		key     []byte
		value   []byte
		user    []kgo.RecordHeader
		meta    func(*retry.Meta)
		cutVal  bool
		cutKey  bool
		cutHdrs []string // names expected in redrive-truncated-headers
	}
	mb := 1 << 20
	many := make([]kgo.RecordHeader, 0, 100_000)
	for i := range 100_000 {
		many = append(many, kgo.RecordHeader{Key: fmt.Sprintf("h%d", i), Value: []byte("0123456789")})
	}
	cases := []tc{
		{name: "fits", key: []byte("k"), value: []byte("v"), user: []kgo.RecordHeader{{Key: "a", Value: []byte("b")}}},
		{name: "value", key: []byte("k"), value: big(2 * mb), cutVal: true},
		{name: "headers", key: []byte("k"), value: []byte("v"),
			user:   []kgo.RecordHeader{{Key: "small", Value: []byte("s")}, {Key: "huge", Value: big(mb)}, {Key: "x y,z=", Value: big(mb / 2)}},
			cutVal: true, cutHdrs: []string{"huge="}},
		{name: "header name", value: []byte("v"), user: []kgo.RecordHeader{{Key: strings.Repeat("n", mb), Value: []byte("x")}}, cutVal: true, cutHdrs: []string{"+1"}},
		{name: "many headers", value: []byte("v"), user: many, cutVal: true, cutHdrs: []string{"h10000=10", ",+"}},
		{name: "key", key: big(2 * mb), value: []byte("v"), cutKey: true, cutVal: true},
		{name: "all", key: big(mb), value: big(mb), user: []kgo.RecordHeader{{Key: "huge", Value: big(mb)}}, cutKey: true, cutVal: true, cutHdrs: []string{"huge"}},
		{name: "headers and malformed attempt", value: []byte("v"), user: []kgo.RecordHeader{{Key: "huge", Value: big(mb)}},
			meta: func(m *retry.Meta) {
				m.Attempt, m.Error, m.ErrorCode = 0, `header redrive-attempt="x": not a decimal integer`, "bad_header"
			},
			cutVal: true, cutHdrs: []string{"huge"}},
		{name: "huge texts", value: []byte("v"), meta: func(m *retry.Meta) {
			m.ID, m.ErrorCode, m.Error = strings.Repeat("i", 2*mb), strings.Repeat("c", mb), strings.Repeat("é", mb)
		}, cutVal: true, cutHdrs: []string{retry.HeaderID}},
	}
	for _, c := range cases {
		for _, style := range []string{StyleRedrive, StyleSpring, StyleConnect} {
			for _, limit := range []int{MinRecordBytes, 20_000, DefaultProducerBatchBytes} {
				src, m, _ := sample()
				src.Key, src.Value = c.key, c.value
				if c.meta != nil {
					c.meta(&m)
				}
				r := Build(src, m, c.user, BuildOptions{Topic: "d", Group: "redrive.solve", Instance: "pod-1", HeaderStyle: style, MaxRecordBytes: limit})
				name := fmt.Sprintf("%s/%q/%d", c.name, style, limit)
				if n := EncodedSize(r); n > limit {
					t.Errorf("%s: %d bytes over the limit", name, n)
				}
				d, err := Decode(r)
				if err != nil {
					t.Errorf("%s: Decode: %v", name, err)
					continue
				}
				if d.ID == "" || d.Reason != ReasonExhausted || d.Class != m.ErrorClass || d.Attempt != m.Attempt || d.OriginTopic != "solve" ||
					d.OriginOffset != 10 || d.Group != "redrive.solve" || d.Instance != "pod-1" || !strings.HasPrefix(m.ID, d.ID) {
					t.Errorf("%s: redrive headers lost: %+v", name, d.Meta)
				}
				if got := d.Truncated > 0; got != c.cutVal || got && (d.Truncated != int64(len(c.value)) || !bytes.HasPrefix(c.value, d.Value)) {
					t.Errorf("%s: value %d bytes, Truncated %d; want cut %v", name, len(d.Value), d.Truncated, c.cutVal)
				}
				if !c.cutVal && !bytes.Equal(d.Value, c.value) {
					t.Errorf("%s: value changed", name)
				}
				if got := d.TruncatedKey > 0; got != c.cutKey || got && (d.TruncatedKey != int64(len(c.key)) || !bytes.HasPrefix(c.key, d.Key)) {
					t.Errorf("%s: key %d bytes, TruncatedKey %d; want cut %v", name, len(d.Key), d.TruncatedKey, c.cutKey)
				}
				if !c.cutKey && !bytes.Equal(d.Key, c.key) {
					t.Errorf("%s: key changed", name)
				}
				if (d.TruncatedHeaders != "") != (len(c.cutHdrs) > 0) {
					t.Errorf("%s: redrive-truncated-headers %q, want %q", name, d.TruncatedHeaders, c.cutHdrs)
				}
				if len(d.TruncatedHeaders) > MaxTruncatedHeadersBytes {
					t.Errorf("%s: redrive-truncated-headers is %d bytes", name, len(d.TruncatedHeaders))
				}
				for _, h := range c.cutHdrs {
					if !strings.Contains(d.TruncatedHeaders, h) {
						t.Errorf("%s: redrive-truncated-headers %.100q does not list %s", name, d.TruncatedHeaders, h)
					}
				}
				if _, err := Republish(d, "solve"); (err != nil) != d.IsTruncated() {
					t.Errorf("%s: Republish: %v (truncated %v)", name, err, d.IsTruncated())
				}
			}
		}
	}
}

// Headers are cut largest first, and only as many as needed: the smaller
// ones stay whole. (The value goes first; here it is empty.)
func TestBuildCutsHeadersLargestFirst(t *testing.T) {
	for _, c := range []struct {
		limit  int
		cut    string // the header whose value is cut, not dropped
		marker string
	}{{12_000, "b", "b=9000"}, {8_000, "c", "b=9000,c=6000"}} {
		src, m, _ := sample()
		src.Value = []byte{}
		user := []kgo.RecordHeader{{Key: "a", Value: big(3000)}, {Key: "b", Value: big(9000)}, {Key: "c", Value: big(6000)}, {Key: "d", Value: big(100)}}
		r := Build(src, m, user, BuildOptions{Topic: "d", MaxRecordBytes: c.limit})
		d, err := Decode(r)
		if err != nil || EncodedSize(r) > c.limit {
			t.Fatalf("limit %d: Decode: %v, %d bytes", c.limit, err, EncodedSize(r))
		}
		sizes := map[string]int{}
		for _, h := range d.UserHeaders {
			sizes[h.Key] = len(h.Value)
		}
		want := map[string]int{"a": 3000, "b": 9000, "c": 6000, "d": 100}
		for k, n := range want {
			switch {
			case k == c.cut:
				if sizes[k] == 0 || sizes[k] >= n {
					t.Errorf("limit %d: %s is %d bytes, want cut", c.limit, k, sizes[k])
				}
			case strings.Contains(c.marker, k+"="):
				if _, ok := sizes[k]; ok {
					t.Errorf("limit %d: %s kept, want it dropped", c.limit, k)
				}
			case sizes[k] != n:
				t.Errorf("limit %d: %s is %d bytes, want whole", c.limit, k, sizes[k])
			}
		}
		if d.TruncatedHeaders != c.marker {
			t.Errorf("limit %d: redrive-truncated-headers = %q, want %q", c.limit, d.TruncatedHeaders, c.marker)
		}
		if d.Truncated != 0 || d.TruncatedKey != 0 || !bytes.Equal(d.Key, src.Key) {
			t.Errorf("limit %d: key marked cut though only headers needed to be: %d %d", c.limit, d.Truncated, d.TruncatedKey)
		}
	}
}

func TestFormatCutsIsBounded(t *testing.T) {
	var cuts []cut
	for i := range 1000 {
		cuts = append(cuts, cut{fmt.Sprintf("header-%d", i), i})
	}
	s := formatCuts(cuts)
	if len(s) > MaxTruncatedHeadersBytes {
		t.Fatalf("%d bytes", len(s))
	}
	parts := strings.Split(s, ",")
	last := parts[len(parts)-1]
	n, err := strconv.Atoi(strings.TrimPrefix(last, "+"))
	if !strings.HasPrefix(last, "+") || err != nil || len(parts)-1+n != 1000 {
		t.Errorf("last entry %q after %d: want +N counting the rest of 1000", last, len(parts)-1)
	}
	if got := formatCuts([]cut{{"a b", 3}, {"é", 1}}); got != "a%20b=3,%C3%A9=1" {
		t.Errorf("formatCuts = %q", got)
	}
}

// batchSize computes a record batch's length with varints as kgo does.
func batchSize(r *kgo.Record) int {
	uv := func(n int) int { return len(binary.AppendVarint(nil, int64(n))) }
	body := 1 + uv(0) + uv(0) + uv(len(r.Key)) + len(r.Key) + uv(len(r.Value)) + len(r.Value) + uv(len(r.Headers))
	for _, h := range r.Headers {
		body += uv(len(h.Key)) + len(h.Key) + uv(len(h.Value)) + len(h.Value)
	}
	return 61 + uv(body) + body
}

func TestCompatibilityHeaders(t *testing.T) {
	src, m, user := sample()
	r := Build(src, m, user, BuildOptions{Topic: "d", HeaderStyle: StyleSpring})
	get := func(r *kgo.Record, k string) []byte {
		for _, h := range r.Headers {
			if h.Key == k {
				return h.Value
			}
		}
		t.Fatalf("no header %s", k)
		return nil
	}
	if string(get(r, SpringOriginalTopic)) != "solve" || binary.BigEndian.Uint32(get(r, SpringOriginalPartition)) != 1 ||
		binary.BigEndian.Uint64(get(r, SpringOriginalOffset)) != 10 ||
		int64(binary.BigEndian.Uint64(get(r, SpringOriginalTimestamp))) != m.OriginTimestamp.UnixMilli() ||
		string(get(r, SpringExceptionMessage)) != m.Error {
		t.Errorf("spring headers wrong")
	}
	r = Build(src, m, user, BuildOptions{Topic: "d", HeaderStyle: StyleConnect})
	if string(get(r, ConnectTopic)) != "solve" || string(get(r, ConnectPartition)) != "1" || string(get(r, ConnectOffset)) != "10" ||
		string(get(r, ConnectMessage)) != m.Error || string(get(r, ConnectClassName)) != "redrive.transient" {
		t.Errorf("connect headers wrong")
	}
	// Republishing drops them again.
	d, _ := Decode(r)
	back, err := Republish(d, "solve")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range back.Headers {
		if strings.HasPrefix(h.Key, "__connect") {
			t.Errorf("republished record keeps %s", h.Key)
		}
	}
}

func TestRepublish(t *testing.T) {
	src, m, user := sample()
	d, err := Decode(Build(src, m, user, BuildOptions{Topic: "d"}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Republish(d, "solve")
	if err != nil {
		t.Fatal(err)
	}
	rm, ru, err := retry.Decode(r.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "solve" || !bytes.Equal(r.Key, src.Key) || !bytes.Equal(r.Value, src.Value) {
		t.Errorf("topic/key/value changed")
	}
	if rm.ID != m.ID || rm.Redrives != 2 || rm.Attempt != 0 || rm.Reason != "" || rm.ErrorCode != "" || rm.OriginOffset != 10 || !rm.HasOrigin {
		t.Errorf("republished meta %+v", rm)
	}
	if len(ru) != 3 {
		t.Errorf("user headers %v", ru)
	}
}

func TestDecodeRejects(t *testing.T) {
	if _, err := Decode(&kgo.Record{Topic: "x"}); !errors.Is(err, ErrNotDeadLetter) {
		t.Errorf("record without headers: %v, want ErrNotDeadLetter", err)
	}
	d, err := Decode(&kgo.Record{Topic: "x", Headers: []kgo.RecordHeader{{Key: retry.HeaderReason, Value: []byte("exhausted")}, {Key: retry.HeaderAttempt, Value: []byte("x")}}})
	if !errors.Is(err, retry.ErrBadHeader) || d == nil || d.Reason != ReasonExhausted {
		t.Errorf("bad attempt: %v, %+v", err, d)
	}
	if _, err := Decode(&kgo.Record{Headers: []kgo.RecordHeader{{Key: retry.HeaderReason, Value: []byte("bored")}}}); !errors.Is(err, retry.ErrBadHeader) {
		t.Errorf("unknown reason: %v", err)
	}
}

// A dead letter cut to fit is never republished: Republish says so with
// ErrTruncated, which every republisher (replay, the API, the rules) sees.
func TestRepublishRefusesTruncated(t *testing.T) {
	src, m, user := sample()
	src.Value = bytes.Repeat([]byte("x"), 5000)
	d, err := Decode(Build(src, m, user, BuildOptions{Topic: "d", MaxRecordBytes: 2000}))
	if err != nil || d.Truncated != 5000 {
		t.Fatalf("Decode: truncated %d, %v", d.Truncated, err)
	}
	rec, err := Republish(d, "solve")
	if rec != nil || !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "of 5000 bytes kept") {
		t.Errorf("Republish = %v, %v; want ErrTruncated saying what is left", rec, err)
	}
}

func FuzzDecode(f *testing.F) {
	src, m, user := sample()
	r := Build(src, m, user, BuildOptions{Topic: "d"})
	for _, h := range r.Headers {
		f.Add(h.Key, h.Value, []byte("v"))
	}
	f.Add(retry.HeaderReason, []byte("\xff"), []byte(nil))
	f.Add(retry.HeaderDeliveries, []byte("4"), []byte("v"))
	f.Add(retry.HeaderDeliveries, []byte("32768"), []byte("v"))
	f.Fuzz(func(t *testing.T, k string, v, value []byte) {
		rec := &kgo.Record{Value: value, Headers: append(append([]kgo.RecordHeader{}, r.Headers...), kgo.RecordHeader{Key: k, Value: v})}
		d, err := Decode(rec)
		if d == nil {
			t.Fatal("Decode returned no record")
		}
		if err == nil {
			// A valid dead letter rebuilds and republishes without trouble.
			if _, err := ParseReason(string(d.Reason)); err != nil {
				t.Fatalf("accepted reason %q", d.Reason)
			}
			rec, err := Republish(d, "t")
			if (err != nil) != (d.Truncated > 0) || err != nil && (!errors.Is(err, ErrTruncated) || rec != nil) {
				t.Fatalf("Republish of a dead letter with truncated %d: %v, %v", d.Truncated, rec, err)
			}
		}
	})
}

func ExampleBuild() {
	src := &kgo.Record{Topic: "solve", Partition: 0, Offset: 42, Key: []byte("k"), Value: []byte("v")}
	meta := retry.Meta{ID: "solve/0/42", Attempt: 1, HasOrigin: true, OriginTopic: "solve", OriginOffset: 42,
		ErrorClass: retry.ClassPermanent, ErrorCode: "ERROR_WRONG_USER_KEY", Error: "400 Bad Request", Reason: string(ReasonPermanent)}
	r := Build(src, meta, nil, BuildOptions{Topic: "solve.dlq", Group: "redrive.solve", Instance: "pod-1"})
	d, _ := Decode(r)
	fmt.Println(d.Reason, d.Code, d.OriginTopic, d.OriginOffset)
	// Output: permanent ERROR_WRONG_USER_KEY solve 42
}

// crashedSample is a main-topic record a share group delivered 4 times
// without an outcome, as the processor dead-letters it.
func crashedSample() (*kgo.Record, retry.Meta) {
	src := &kgo.Record{Topic: "solve", Partition: 1, Offset: 10, Key: []byte("k1"), Value: []byte(`{"site":"x"}`)}
	m := retry.Meta{ID: "solve/1/10", HasOrigin: true, OriginTopic: "solve", OriginPartition: 1, OriginOffset: 10,
		OriginTimestamp: time.UnixMilli(1_700_000_000_000), Reason: string(ReasonCrashed), Deliveries: 4}
	return src, m
}

func TestParseReason(t *testing.T) {
	for _, r := range []string{"exhausted", "permanent", "invalid", "expired", "crashed"} {
		if got, err := ParseReason(r); err != nil || string(got) != r {
			t.Errorf("ParseReason(%q) = %q, %v", r, got, err)
		}
	}
	_, err := ParseReason("Crashed")
	if want := `unknown dead-letter reason "Crashed" (want exhausted, permanent, invalid, expired or crashed)`; err == nil || err.Error() != want {
		t.Errorf("ParseReason(Crashed) = %v, want %s", err, want)
	}
	if msg := checkReason("tired"); msg != `unknown dead-letter reason "tired": want exhausted, permanent, invalid, expired or crashed` {
		t.Errorf("checkReason = %s", msg)
	}
}

// A crashed dead letter says how many deliveries it took, and keeps saying
// it when it has to be cut to fit the DLQ.
func TestBuildKeepsDeliveries(t *testing.T) {
	src, m := crashedSample()
	for _, limit := range []int{0, MinRecordBytes} {
		s := *src
		if limit > 0 {
			s.Value = big(3 * limit)
		}
		r := Build(&s, m, nil, BuildOptions{Topic: "solve.dlq", Group: "redrive.solve", Instance: "pod-1", MaxRecordBytes: limit})
		n := 0
		for _, h := range r.Headers {
			if h.Key == retry.HeaderDeliveries {
				n++
				if string(h.Value) != "4" {
					t.Errorf("limit %d: %s = %q, want 4", limit, h.Key, h.Value)
				}
			}
		}
		if n != 1 {
			t.Errorf("limit %d: %s appears %d times, want once", limit, retry.HeaderDeliveries, n)
		}
		d, err := Decode(r)
		if err != nil {
			t.Fatalf("limit %d: Decode: %v", limit, err)
		}
		if d.Reason != ReasonCrashed || d.Deliveries != 4 || d.Meta.Deliveries != 4 || d.OriginOffset != 10 {
			t.Errorf("limit %d: decoded reason %q, deliveries %d, origin offset %d", limit, d.Reason, d.Deliveries, d.OriginOffset)
		}
	}
}

// A replayed crashed request starts fresh: the same id and origin, one
// more redrive, and no delivery count, so a share group gives it its
// max_deliveries again (the header is the dead letter's, like the
// reason and the error).
func TestRepublishDropsDeliveries(t *testing.T) {
	src, m := crashedSample()
	d, err := Decode(Build(src, m, []kgo.RecordHeader{{Key: "trace", Value: []byte("a")}}, BuildOptions{Topic: "solve.dlq"}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Republish(d, "solve")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Headers {
		if h.Key == retry.HeaderDeliveries || h.Key == retry.HeaderReason {
			t.Errorf("republished record carries %s=%q", h.Key, h.Value)
		}
	}
	rm, ru, err := retry.Decode(r.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if rm.Deliveries != 0 || rm.ID != "solve/1/10" || rm.Redrives != 1 || rm.Attempt != 0 || !rm.HasOrigin || rm.OriginOffset != 10 {
		t.Errorf("republished meta %+v", rm)
	}
	if len(ru) != 1 || ru[0].Key != "trace" {
		t.Errorf("user headers %v", ru)
	}
}
