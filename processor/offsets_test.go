package processor

import (
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestOffsetTrackerCommitsUpToLowestUnfinished(t *testing.T) {
	tr := newOffsetTracker()
	if _, ok := tr.commitPoint(); ok {
		t.Fatal("commit point before any record finished")
	}
	var es []*entry
	for o := int64(10); o < 15; o++ {
		es = append(es, tr.add(&kgo.Record{Offset: o, LeaderEpoch: 3}))
	}
	tr.finish(es[2]) // 12 done, 10 not: nothing committable
	if _, ok := tr.commitPoint(); ok {
		t.Fatal("committed past unfinished offset 10")
	}
	tr.finish(es[0]) // 10 done: commit 11
	if eo, _ := tr.commitPoint(); eo.Offset != 11 || eo.Epoch != 3 {
		t.Fatalf("commit point %+v, want 11", eo)
	}
	tr.finish(es[1]) // 11 done, 12 done: commit 13
	if eo, _ := tr.commitPoint(); eo.Offset != 13 {
		t.Fatalf("commit point %+v, want 13", eo)
	}
	tr.finish(es[4])
	tr.finish(es[3])
	if eo, _ := tr.commitPoint(); eo.Offset != 15 || tr.pending() != 0 {
		t.Fatalf("commit point %+v pending %d, want 15 and 0", eo, tr.pending())
	}
}

func TestOffsetTrackerRandomOrderWithGaps(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		tr := newOffsetTracker()
		var es []*entry
		o := int64(0)
		for i := 0; i < 3000; i++ {
			o += 1 + int64(rnd.IntN(3)) // gaps, as after compaction or txn markers
			es = append(es, tr.add(&kgo.Record{Offset: o}))
		}
		perm := rnd.Perm(len(es))
		done := make([]bool, len(es))
		for _, i := range perm {
			tr.finish(es[i])
			done[i] = true
			// The commit point must be one past the longest finished prefix.
			want := int64(-1)
			for j := range es {
				if !done[j] {
					break
				}
				want = es[j].offset + 1
			}
			got, ok := tr.commitPoint()
			if want < 0 && ok || want >= 0 && got.Offset != want {
				t.Fatalf("round %d: commit point %d (ok=%v), want %d", round, got.Offset, ok, want)
			}
		}
	}
}

func BenchmarkOffsetTracker(b *testing.B) {
	tr := newOffsetTracker()
	es := make([]*entry, 64)
	r := &kgo.Record{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Offset = int64(i)
		es[i%64] = tr.add(r)
		if i%64 == 63 {
			for j := 63; j >= 0; j-- {
				tr.finish(es[j])
			}
		}
	}
}
