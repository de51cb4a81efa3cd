package processor

import "github.com/twmb/franz-go/pkg/kgo"

// offsetTracker tracks the records of one partition from poll to finish and
// gives the offset that may be committed: the lowest unfinished one, or one
// past the last finished record. Records are added in offset order and
// finished in any order. Not safe for concurrent use: the pipeline's mutex
// guards it.
type offsetTracker struct {
	// q holds entries from the lowest unfinished offset on, in offset order.
	q queue[*entry]
	// next is the offset to commit once q is empty; -1 before any record.
	next  int64
	epoch int32
	// slab is where add takes entries from, entrySlab at a time: one
	// allocation for many records. A slab lives while one of its entries
	// is in q (at most entrySlab × 24 bytes per slow record).
	slab []entry
}

const entrySlab = 128

type entry struct {
	offset int64
	epoch  int32
	done   bool
	// held is the record's work once its outcome is held for a
	// transaction (exactly-once, txn.go); nil otherwise.
	held *work
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{next: -1} }

// add registers a polled record and returns its entry, to be passed to finish.
func (t *offsetTracker) add(r *kgo.Record) *entry {
	if len(t.slab) == cap(t.slab) {
		t.slab = make([]entry, 0, entrySlab)
	}
	t.slab = append(t.slab, entry{offset: r.Offset, epoch: r.LeaderEpoch})
	e := &t.slab[len(t.slab)-1]
	t.q.push(e)
	return e
}

// finish marks e done and advances the commit point past every finished
// record at the front.
func (t *offsetTracker) finish(e *entry) {
	e.done = true
	for t.q.len() > 0 && (*t.q.front()).done {
		f := t.q.pop()
		t.next, t.epoch = f.offset+1, f.epoch
	}
}

// commitPoint is the offset that may be committed and its leader epoch;
// ok is false when nothing has finished yet.
func (t *offsetTracker) commitPoint() (kgo.EpochOffset, bool) {
	if t.next < 0 {
		return kgo.EpochOffset{}, false
	}
	return kgo.EpochOffset{Epoch: t.epoch, Offset: t.next}, true
}

// pending is the number of unfinished records.
func (t *offsetTracker) pending() int { return t.q.len() }
