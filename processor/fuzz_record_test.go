package processor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// fuzzNames are the header names a fuzz input picks from by index: every
// redrive-* header, the user headers redrive reads, a redacted one, and
// look-alikes.
var fuzzNames = append(retry.Headers(), "idempotency-key", "content-type", "authorization", "traceparent",
	"Redrive-Id", "redrive-future", "kafka_dlt-original-topic", "__connect.errors.topic", "")

// fuzzHeaders reads b as a list of headers. Per header: a byte k (k <
// 0x80: fuzzNames[k%len]; else a raw name of k&0x7f bytes), two bytes of
// big-endian length n, then the value: n bytes from b, or, when n's top
// bit is set, (n&0x7fff)*64 bytes of one repeated byte (so that a short
// input can make a header of up to 2 MB).
func fuzzHeaders(b []byte) []kgo.RecordHeader {
	take := func(n int) []byte {
		n = min(n, len(b))
		v := b[:n:n]
		b = b[n:]
		return v
	}
	var hs []kgo.RecordHeader
	for len(b) > 0 && len(hs) < 64 {
		k := take(1)[0]
		name := ""
		if k < 0x80 {
			name = fuzzNames[int(k)%len(fuzzNames)]
		} else {
			name = string(take(int(k & 0x7f)))
		}
		var n int
		for _, c := range take(2) {
			n = n<<8 | int(c)
		}
		var v []byte
		if n&0x8000 != 0 {
			v = bytes.Repeat([]byte{byte(n)}, (n&0x7fff)*64)
		} else {
			v = take(n)
		}
		hs = append(hs, kgo.RecordHeader{Key: name, Value: v})
	}
	return hs
}

func fuzzHeaderBytes(hs ...kgo.RecordHeader) []byte {
	var b []byte
	for _, h := range hs {
		i := 0
		for i < len(fuzzNames) && fuzzNames[i] != h.Key {
			i++
		}
		if i < len(fuzzNames) {
			b = append(b, byte(i))
		} else {
			b = append(b, 0x80|byte(len(h.Key)))
			b = append(b, h.Key...)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

// FuzzRecordOutcome drives whole records — headers (redrive's with any
// value, user ones of any size), key and value sizes, timestamps, the
// handler's answer — through the processor's decision (screen, decide)
// and the outcome builder (retry, results and dead-letter records), with
// small topic and producer limits, and checks that every record redrive
// would produce fits its limit and is valid: a dead letter decodes with
// dlq.Decode and carries its reason, class, id and origin; a retry or
// results record decodes with retry.Decode.
func FuzzRecordOutcome(f *testing.F) {
	malformed := fuzzHeaderBytes(kgo.RecordHeader{Key: retry.HeaderAttempt, Value: []byte("two")})
	// Seeds: the probe (1 MB of headers and a malformed attempt, at
	// the default limits), and headers, key or value alone over a small
	// limit, on the main topic and on a tier, for every answer.
	huge := append(append([]byte{}, fuzzHeaderBytes(kgo.RecordHeader{Key: "x-a"})...), malformed...)
	huge = append(huge, 0x83, 'x', '-', 'b', 0x80|0x3d, 0x09) // x-b: 0x3d09*64 = 1,000,000 bytes
	retryRec := fuzzHeaderBytes(retry.Encode(retry.Meta{ID: "r-1", Attempt: 1, Due: t0.Add(-time.Second), Tier: "5s", HasOrigin: true,
		OriginTopic: "solve", OriginOffset: 3, OriginTimestamp: t0.Add(-time.Minute), FirstErrorAt: t0.Add(-time.Second),
		LastErrorAt: t0.Add(-time.Second), ErrorClass: retry.ClassTransient, ErrorCode: "http_503", Error: "503"},
		[]kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-1")}})...)
	notReady := fuzzHeaderBytes(retry.Encode(retry.Meta{ID: "r-2", Attempt: 1, Polls: 2, Due: t0.Add(-time.Second), Tier: "30s",
		ErrorClass: retry.ClassNotReady, State: []byte("task"), NotReadySince: t0.Add(-time.Hour)}, nil)...)
	big := []byte{0x85, 'x', '-', 'b', 'i', 'g', 0x80 | 0x04, 0x00} // 1024*64 = 64 KiB
	for _, hs := range [][]byte{nil, malformed, huge, retryRec, notReady, big, append(append([]byte{}, big...), malformed...)} {
		for _, kind := range []uint8{0, 1, 2, 3, 4, 5} {
			f.Add(hs, uint32(1), uint32(10), int64(-1), uint8(kind), "code", uint32(10), uint16(0), uint16(0), uint8(0))
		}
		f.Add(hs, uint32(100_000), uint32(10), int64(0), uint8(4), "code", uint32(0), uint16(1000), uint16(0), uint8(1))
		f.Add(hs, uint32(0), uint32(100_000), int64(0), uint8(3), "", uint32(0), uint16(0), uint16(1000), uint8(2))
		f.Add(hs, uint32(0), uint32(0), int64(1), uint8(0), "", uint32(50_000), uint16(100), uint16(100), uint8(3))
	}
	f.Fuzz(func(t *testing.T, hdrs []byte, keyLen, valueLen uint32, ts int64, kind uint8, code string, resultLen uint32, tierMax, producerMax uint16, style uint8) {
		// Limits between dlq.MinRecordBytes and the defaults; sizes up to
		// 2 MB (over the default limits), from a few input bytes.
		limitOf := func(n uint16, dflt int) int {
			if n == 0 {
				return dflt
			}
			return dlq.MinRecordBytes + int(n)*16
		}
		producer := limitOf(producerMax, dlq.DefaultProducerBatchBytes)
		topicLimits := map[string]int{"solve.dlq": dlq.DefaultMaxRecordBytes, "solve.results": limitOf(tierMax, dlq.DefaultMaxRecordBytes)}
		tiers := []string{"solve.retry.5s", "solve.retry.30s", "solve.retry.5m"}
		for _, tt := range tiers {
			topicLimits[tt] = limitOf(tierMax, dlq.DefaultMaxRecordBytes)
		}
		o := outputs{
			tiers:   tiers,
			results: "solve.results",
			dead: dlq.BuildOptions{Topic: "solve.dlq", RedactHeaders: []string{"authorization"}, Group: "redrive.solve", Instance: "pod-1",
				HeaderStyle: []string{dlq.StyleRedrive, dlq.StyleSpring, dlq.StyleConnect}[int(style)%3]},
			limit: func(topic string) int { return min(topicLimits[topic], producer) },
		}
		size := func(n uint32) int { return int(n % (2 << 20)) }
		fill := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
		tier := int(style/3)%(len(tiers)+1) - 1 // -1: the main topic
		src := &kgo.Record{Topic: "solve", Partition: 1, Offset: 42, Key: fill(size(keyLen), 'k'), Value: fill(size(valueLen), 'v'),
			Timestamp: t0.Add(time.Duration(ts%(1<<40)) * time.Millisecond), Headers: fuzzHeaders(hdrs)}
		if tier >= 0 {
			src.Topic = tiers[tier]
		}
		p := pol
		p.results = kind%2 == 0
		p.rnd = rand.New(rand.NewPCG(1, 2))
		now := t0

		meta, user, decodeErr := retry.Decode(src.Headers)
		meta = identify(meta, src)
		d, call := screen(meta, decodeErr, tier, p, now)
		if call {
			code := strings.ToValidUTF8(code, "?") // a handler's code is text
			var out Outcome
			switch kind % 6 {
			case 0:
				out = Succeed(fill(size(resultLen), 'r'))
			case 1:
				out = Retry(code, errors.New(strings.Repeat("e", size(resultLen)%5000)))
			case 2:
				out = Poll(fill(size(resultLen)%5000, 's'), 0)
			case 3:
				out = Fail(code, nil)
			case 4:
				out = Reject(code, errors.New("no"))
			default:
				out = Outcome{Code: code}
			}
			d = decide(meta, out, p, now)
		}
		if d.to == "" {
			return
		}
		r, got := o.build(new(outRec), src, user, d, now)
		if n, limit := dlq.EncodedSize(r), o.limit(r.Topic); n > limit {
			t.Fatalf("%s record of %d bytes for %s, over its limit %d", got.to, n, r.Topic, limit)
		}
		if got.to != d.to && (got.to != toDLQ || got.meta.ErrorCode != CodeRecordTooLarge) {
			t.Fatalf("decision %s became %s (code %s)", d.to, got.to, got.meta.ErrorCode)
		}
		switch got.to {
		case toDLQ:
			checkDeadLetter(t, r, src)
			// The write path's fallback: rebuilt at half the size.
			if half := dlq.EncodedSize(r) / 2; half >= dlq.MinRecordBytes {
				r2 := o.deadLetter(src, user, got.meta, half)
				if n := dlq.EncodedSize(r2); n > half {
					t.Fatalf("dead letter rebuilt at %d bytes is %d", half, n)
				}
				checkDeadLetter(t, r2, src)
			}
		case toRetry, toResults:
			if _, _, err := retry.Decode(r.Headers); err != nil {
				t.Fatalf("%s record does not decode: %v", got.to, err)
			}
		}
	})
}

func checkDeadLetter(t *testing.T, r *kgo.Record, src *kgo.Record) {
	t.Helper()
	d, err := dlq.Decode(r)
	if err != nil {
		t.Fatalf("dead letter does not decode: %v", err)
	}
	if d.ID == "" || d.OriginTopic == "" || !d.Class.Valid() || d.Class == retry.ClassNone || d.Group != "redrive.solve" || d.Instance != "pod-1" {
		t.Fatalf("dead letter lacks redrive headers: %+v", d.Meta)
	}
	if d.Truncated > 0 != (len(d.Value) < len(src.Value)) || d.TruncatedKey > 0 != (len(d.Key) < len(src.Key)) {
		t.Fatalf("value %d of %d bytes (marked %d), key %d of %d (marked %d)", len(d.Value), len(src.Value), d.Truncated, len(d.Key), len(src.Key), d.TruncatedKey)
	}
	if !bytes.HasPrefix(src.Value, d.Value) || !bytes.HasPrefix(src.Key, d.Key) {
		t.Fatalf("value or key is not a prefix of the record's")
	}
	if len(d.TruncatedHeaders) > dlq.MaxTruncatedHeadersBytes {
		t.Fatalf("redrive-truncated-headers of %d bytes", len(d.TruncatedHeaders))
	}
}
