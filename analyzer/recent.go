package analyzer

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
)

// kept is one dead letter in a pipeline's recent list. It holds copies of
// the key, the user headers and at most Limits.RecentValueBytes of the
// value, so that nothing of the fetch buffer the record came in stays
// alive; the whole value is read from the DLQ by offset when asked for
// (fetch.go). A kept entry is never changed once made.
type kept struct {
	d         *dlq.DeadLetter
	valueSize int    // the value's length in the DLQ record
	valueHash string // ValueHash of the whole value when values are hidden (d.Value is nil then)
	cut       bool   // d.Value holds only its first bytes
	cost      int64  // what it counts against Limits.RecentBytes
}

// keptOverhead is what a kept entry counts besides its bytes: the
// structs, slice and string headers, the ring's slot.
const keptOverhead = 512

// keep copies d for the recent list, its value cut to at most prefix
// bytes (at a UTF-8 boundary, so that a text value stays text); with hide
// (Options.HideValues) no byte of the value is kept, only its size and
// ValueHash. The key and the user headers are kept whole: filters match
// them exactly. They count against the budget like the value.
func keep(d *dlq.DeadLetter, prefix int64, hide bool) *kept {
	c := *d
	k := &kept{d: &c, valueSize: len(d.Value)}
	v := d.Value
	if hide && v != nil {
		k.valueHash = ValueHash(v)
		v = nil
	}
	if int64(len(v)) > prefix {
		v = v[:cutAt(v, int(prefix))]
		k.cut = true
	}
	n := len(d.Key) + len(v)
	for _, h := range d.UserHeaders {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		buf = append(buf, b...)
		return buf[len(buf)-len(b) : len(buf) : len(buf)]
	}
	c.Key = clone(d.Key)
	c.Value = clone(v)
	cost := int64(keptOverhead + n)
	if d.UserHeaders != nil {
		c.UserHeaders = make([]kgo.RecordHeader, len(d.UserHeaders))
		for i, h := range d.UserHeaders {
			c.UserHeaders[i] = kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)}
			cost += int64(len(h.Key)) + 40
		}
	}
	// The decoded strings are copies already (and Meta shares them).
	for _, s := range []string{d.ID, d.Error, d.Code, d.OriginTopic, d.Group, d.Instance, d.Meta.Tier, string(d.Reason), string(d.Class)} {
		cost += int64(len(s))
	}
	k.cost = cost + int64(len(d.Meta.State))
	return k
}

// cutAt is n, moved back (by at most 3 bytes) so that b[:n] does not end
// inside a UTF-8 sequence.
func cutAt(b []byte, n int) int {
	if n >= len(b) {
		return len(b)
	}
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(b[n]); i++ {
		n--
	}
	return n
}

// push adds k as the newest entry, first dropping the oldest ones until
// the ring has a free slot and k fits budget with them. An entry that
// alone costs more than budget (a key and headers larger than it) is not
// listed at all: the statistics still count it.
// The caller holds p.mu.
func (p *pipe) push(k *kept, budget int64) {
	if k.cost > budget {
		return
	}
	for p.n > 0 && (p.n == len(p.recent) || p.bytes+k.cost > budget) {
		i := (p.head - p.n + len(p.recent)) % len(p.recent)
		p.bytes -= p.recent[i].cost
		p.recent[i] = nil
		p.n--
	}
	p.recent[p.head] = k
	p.head = (p.head + 1) % len(p.recent)
	p.n++
	p.bytes += k.cost
}

// view is k as GET /api/deadletters shows it.
func (k *kept) view() DeadLetterView {
	v := DeadLetterView{View: dlq.NewView(k.d), ValueSize: k.valueSize, ValueCut: k.cut}
	if k.valueHash != "" {
		v.hide(k.valueHash)
	}
	return v
}

// EncodingHidden is the value_encoding of a value shown as its size and
// hash only (analyzer.hide_values, `redrive dlq export --hide-values`).
const EncodingHidden = "hidden"

// ValueHash is how a hidden value is shown: "sha256:" and the SHA-256 of
// its bytes in hex. Equal values have equal hashes; a short or guessable
// value can be found again by hashing guesses: it hides, it does not
// anonymise.
func ValueHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// hide replaces v's value by hash (its ValueSize stays): value null,
// value_encoding "hidden", value_sha256 the hash.
func (v *DeadLetterView) hide(hash string) {
	v.Value, v.ValueEncoding, v.ValueSHA256, v.ValueCut = nil, EncodingHidden, hash, false
}
