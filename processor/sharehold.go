package processor

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// shareHold keeps a share reader from holding records it does not run
// while suspects run alone. franz-go fetches while a poll is open, and
// the poll that returns the suspects can end with a fetch still open; a
// death counts a delivery of every record acquired, run or not. shareHold
// is the share client's hook (franz-go's fetch goroutine calls it): it
// knows the records franz-go buffered and not yet returned, releases them
// when the hold starts, and releases at once what lands during it.
//
// A released record comes back with its delivery count one up (Kafka
// counts an acquisition, not a run). shareHold remembers the deliveries
// it released unrun, and take says how many came just before the record's
// next delivery, so that they are not counted against it. The memory is
// the process's: one that dies before it takes the record again leaves
// the count one up for whichever replica does (the record then runs
// alone once, as a suspect).
type shareHold struct {
	topic string

	mu sync.Mutex // a leaf lock
	// holding: suspects are pending, the main topic is paused.
	holding bool
	// buffered are records franz-go acquired and buffered, not returned
	// by a poll yet.
	buffered map[*kgo.Record]struct{}
	// stale are released records still in franz-go's buffer: skipped when
	// a poll returns them.
	stale map[*kgo.Record]struct{}
	// unrun are, per record, the deliveries released unrun.
	unrun map[soloKey]unrunMark
}

// unrunMark: a record released unrun at delivery last, and at the n
// deliveries up to it in a row.
type unrunMark struct{ last, n int }

// unrunMax bounds the records remembered as released unrun; past it the
// memory starts over (those records then run alone once, as suspects).
const unrunMax = 1 << 14

func newShareHold(topic string) *shareHold {
	return &shareHold{topic: topic, buffered: map[*kgo.Record]struct{}{},
		stale: map[*kgo.Record]struct{}{}, unrun: map[soloKey]unrunMark{}}
}

// start holds: what franz-go buffered is released, and what lands from now
// on too.
func (h *shareHold) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding = true
	for r := range h.buffered {
		h.releaseLocked(r)
	}
	clear(h.buffered)
}

// stop ends the hold and reports whether there was one.
func (h *shareHold) stop() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.holding
	h.holding = false
	return was
}

// releaseLocked gives r back to the group without a call and remembers
// it. h.mu held.
func (h *shareHold) releaseLocked(r *kgo.Record) {
	r.Ack(kgo.AckRelease)
	h.stale[r] = struct{}{}
	if len(h.unrun) >= unrunMax {
		clear(h.unrun)
	}
	k := soloKey{r.Partition, r.Offset}
	h.unrun[k] = markUnrun(h.unrun[k], int(r.DeliveryCount()))
}

// take reports whether r, returned by a poll, is a released copy to skip;
// else how many of the deliveries just before r's were released unrun
// (forgotten now: r is taken).
func (h *shareHold) take(r *kgo.Record) (stale bool, unrun int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.stale[r]; ok {
		delete(h.stale, r)
		return true, 0
	}
	k := soloKey{r.Partition, r.Offset}
	m, ok := h.unrun[k]
	if !ok {
		return false, 0
	}
	delete(h.unrun, k)
	return false, unrunBefore(m, int(r.DeliveryCount()))
}

// markUnrun adds delivery d, released unrun, to m.
func markUnrun(m unrunMark, d int) unrunMark {
	if m.n > 0 && m.last == d-1 {
		return unrunMark{last: d, n: m.n + 1}
	}
	return unrunMark{last: d, n: 1}
}

// unrunBefore is how many of the deliveries just before delivery d were
// released unrun, as m says.
func unrunBefore(m unrunMark, d int) int {
	if m.last != d-1 {
		return 0
	}
	return min(m.n, d-1)
}

// OnFetchRecordBuffered: franz-go acquired r and buffered it.
func (h *shareHold) OnFetchRecordBuffered(r *kgo.Record) {
	if r.Topic != h.topic {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		h.releaseLocked(r)
		return
	}
	h.buffered[r] = struct{}{}
}

// OnFetchRecordUnbuffered: a poll returned r, or franz-go dropped it.
func (h *shareHold) OnFetchRecordUnbuffered(r *kgo.Record, _ bool) {
	h.mu.Lock()
	delete(h.buffered, r)
	h.mu.Unlock()
}
