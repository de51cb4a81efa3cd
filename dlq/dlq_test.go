package dlq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Shrink is the fallback when the broker refuses a built dead letter: each
// call halves the value, and redrive-truncated keeps the size of the value
// as first consumed, not of the previous cut.
func TestShrinkHalvesValueAndKeepsOriginalSize(t *testing.T) {
	src, m, user := sample()
	src.Value = bytes.Repeat([]byte("v"), 1000)
	r := Build(src, m, user, BuildOptions{Topic: "d", RedactHeaders: []string{"authorization"}, Group: "g", Instance: "i", HeaderStyle: StyleConnect})
	if d, err := Decode(r); err != nil || d.Truncated != 0 {
		t.Fatalf("built dead letter: Truncated %d, err %v; want whole", d.Truncated, err)
	}
	once := Shrink(r)
	if len(r.Value) != 1000 {
		t.Fatalf("Shrink changed its argument: value %d bytes", len(r.Value))
	}
	twice := Shrink(once)
	for _, c := range []struct {
		r    *kgo.Record
		size int
	}{{once, 500}, {twice, 250}} {
		if len(c.r.Value) != c.size || !bytes.HasPrefix(src.Value, c.r.Value) || c.r.Topic != "d" || !bytes.Equal(c.r.Key, src.Key) {
			t.Errorf("shrunk to %d bytes (topic %s key %q), want a %d-byte prefix on d", len(c.r.Value), c.r.Topic, c.r.Key, c.size)
		}
		d, err := Decode(c.r)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if d.Truncated != 1000 {
			t.Errorf("Truncated = %d, want the original 1000", d.Truncated)
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
