package analyzer

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// queue builds held records at offs; done marks the finished ones.
func queue(offs []int64, done []bool) []*held {
	q := make([]*held, len(offs))
	for i, o := range offs {
		q[i] = &held{off: o, done: done[i]}
	}
	return q
}

// TestFinishedRunsRoundTrip: the commit point's metadata names exactly the
// finished records past it (gaps between offsets, as control records and
// aborted transactions leave, included in a run or not, never an
// unfinished record), and reads back to them.
func TestFinishedRunsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + r.IntN(40)
		offs := make([]int64, n)
		done := make([]bool, n)
		off := r.Int64N(1 << 40)
		for i := range n {
			off += 1 + r.Int64N(3)
			offs[i] = off
			done[i] = i > 0 && r.IntN(3) > 0
		}
		q := queue(offs, done)
		pt, ok := commitPoint(q, 0)
		if !ok || pt.off != offs[0] {
			t.Fatalf("commit point %+v, %v; want offset %d", pt, ok, offs[0])
		}
		spans, err := decodeFinished(pt.meta, pt.off)
		if err != nil {
			t.Fatalf("%q: %v", pt.meta, err)
		}
		var ts txState
		ts.init()
		ts.skip[0] = spans
		for i, o := range offs {
			if got := ts.finished(0, o); got != done[i] {
				t.Fatalf("offsets %v done %v, meta %q: finished(%d) = %v", offs, done, pt.meta, o, got)
			}
		}
		if runs := countRuns(q); runs != len(spans) {
			t.Fatalf("countRuns %d, %d runs in the metadata %q", runs, len(spans), pt.meta)
		}
	}
}

// TestRunDelta: finishing one record changes countRuns by runDelta.
func TestRunDelta(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		n := 1 + r.IntN(12)
		offs := make([]int64, n)
		done := make([]bool, n)
		for i := range n {
			offs[i] = int64(i)
			done[i] = r.IntN(2) == 0
		}
		q := queue(offs, done)
		var undone []int
		for i, h := range q {
			if !h.done {
				undone = append(undone, i)
			}
		}
		if len(undone) == 0 {
			continue
		}
		i := undone[r.IntN(len(undone))]
		lead := !slices.Contains(done[:i], false)
		before := countRuns(q)
		delta := runDelta(q, i, lead)
		q[i].done = true
		if after := countRuns(q); after-before != delta {
			t.Fatalf("done %v, finishing %d: runs %d → %d, runDelta said %+d", done, i, before, after, delta)
		}
	}
}

// TestFinishedMetadataFitsTheBroker: maxRuns runs at the largest offsets
// stay within 4096 bytes (the broker's default offset.metadata.max.bytes)
// with room to spare.
func TestFinishedMetadataFitsTheBroker(t *testing.T) {
	var offs []int64
	var done []bool
	base := int64(1)
	offs, done = append(offs, base), append(done, false)
	for i := range maxRuns {
		gap := int64(math.MaxInt64 / (4 * maxRuns))
		offs = append(offs, base+int64(2*i+1)*gap, base+int64(2*i+2)*gap)
		done = append(done, true, false)
	}
	q := queue(offs, done)
	if runs := countRuns(q); runs != maxRuns {
		t.Fatalf("%d runs, want %d", runs, maxRuns)
	}
	meta := encodeFinished(q)
	if len(meta) > 2048 {
		t.Errorf("%d runs take %d bytes of metadata, want at most 2048", maxRuns, len(meta))
	}
	if _, err := decodeFinished(meta, offs[0]); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeFinishedRefusesNonsense(t *testing.T) {
	for _, meta := range []string{
		finishedPrefix, finishedPrefix + "1", finishedPrefix + "0+1", finishedPrefix + "1+-1",
		finishedPrefix + "z+z,", finishedPrefix + "1+1,0+0", finishedPrefix + strings.Repeat("z", 20) + "+1",
	} {
		if s, err := decodeFinished(meta, 10); err == nil {
			t.Errorf("%q read as %v, want an error", meta, s)
		}
	}
	for _, meta := range []string{"", "kgo-member-1", "redrive.finished.2:1+1"} {
		if s, err := decodeFinished(meta, 10); err != nil || s != nil {
			t.Errorf("%q (not ours) read as %v, %v; want nothing", meta, s, err)
		}
	}
	s, err := decodeFinished(finishedPrefix+"2+3,a+0", 100)
	if err != nil || !slices.Equal(s, []span{{102, 105}, {115, 115}}) {
		t.Errorf("got %v, %v", s, err)
	}
}

// FuzzDecodeFinished: the offset commit metadata is read back from the
// broker, where anyone with access to the group can write it. Whatever it
// holds, decoding never panics, and the runs it accepts lie past the
// committed offset, in order, without overlap.
func FuzzDecodeFinished(f *testing.F) {
	f.Add(finishedPrefix+"1+0", int64(10))
	f.Add(finishedPrefix+"2+a,3+zz", int64(0))
	f.Add(finishedPrefix+"-1+0", int64(5))
	f.Add(finishedPrefix+"1y2p0ij32e8e7+1", int64(1<<62))
	f.Add("", int64(0))
	f.Fuzz(func(t *testing.T, meta string, committed int64) {
		if committed < 0 {
			committed = -committed
		}
		spans, err := decodeFinished(meta, committed)
		if err != nil {
			return
		}
		prev := committed
		for _, s := range spans {
			if s.from <= prev || s.to < s.from {
				t.Fatalf("%q at %d: run %+v not past %d", meta, committed, s, prev)
			}
			prev = s.to
		}
	})
}
