package processor

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Due tier records are fetched ahead of fresh work.
//
// The client fetches a partition again only once everything it buffered
// from the last fetch has been polled, and the pipeline polls only as the
// in-flight bound frees room. One fetch can hold many seconds of main-topic
// records (a fetch's limit is in compressed bytes per partition: 256 KiB
// of well-compressed requests is over ten thousand), so at saturation
// tier records written meanwhile would not even be fetched until those
// are handled: retries would be seconds late behind fresh work.
//
// So the pipeline keeps, per owned tier partition, what it knows is there
// and not yet fetched, and when (pending): the retries it wrote itself
// (acknowledged offset, wanted lead before their due time) and the records
// a fetch showed beyond its last (up to the last stable offset, wanted at once).
// While a tier partition that is not paused for max_waiting holds a
// pending record that is wanted by now, the pipeline holds the main topic:
// the client stops fetching it and drops what it buffered of it (fetched
// again later), and the pipeline polls beyond the in-flight bound by up to
// a quarter of it, so the tier records come in at once. A hold lasts at
// most mainHoldMax; then the main topic is fetched for at least
// mainHoldGap: it keeps at least a quarter of the time however much is due.
const (
	mainHoldMax = 750 * time.Millisecond
	mainHoldGap = 250 * time.Millisecond
	// pendingLead is how long before its due time a retry should be
	// fetched: a fetch round trip and the poll after it.
	pendingLead = 200 * time.Millisecond
	// pendingCoalesce merges pending records wanted this close together
	// into one entry (the later offset), bounding the list by time.
	pendingCoalesce = 10 * time.Millisecond
	// holdCheck is how often a pipeline at its in-flight bound looks
	// whether to hold the main topic.
	holdCheck = 50 * time.Millisecond
)

// pendingRec is a record known to be in a tier partition and not fetched
// yet: every offset up to off is wanted from at on.
type pendingRec struct {
	off int64
	at  time.Time
}

// pendingList is a tier partition's pending records in offset order.
type pendingList struct{ q queue[pendingRec] }

// note adds off, wanted from at on. Offsets come in increasing order
// (acknowledgements of one partition are in order); one out of order is
// merged into the last entry.
func (l *pendingList) note(off int64, at time.Time) {
	if l.q.len() > 0 {
		last := l.q.back()
		if off <= last.off {
			if at.Before(last.at) {
				last.at = at
			}
			return
		}
		if at.Sub(last.at) < pendingCoalesce {
			last.off = off
			if at.Before(last.at) {
				last.at = at
			}
			return
		}
	}
	l.q.push(pendingRec{off, at})
}

// fetched drops the entries below next (the offset after the last record
// fetched).
func (l *pendingList) fetched(next int64) {
	for l.q.len() > 0 && l.q.front().off < next {
		l.q.pop()
	}
}

// wantedBy reports whether a pending record is wanted by now.
func (l *pendingList) wantedBy(now time.Time) bool {
	return l.q.len() > 0 && !l.q.front().at.After(now)
}

// fetchState is which topics are held from fetching and why. Guarded by
// pipeline.mu.
type fetchState struct {
	// held: the main topic is held for the tiers, since heldSince;
	// released is when it was last released.
	held                bool
	heldSince, released time.Time
	// lineMain, lineTiers: the line (breaker, pause codes, guard, manual
	// pause) stops the main topic, the tiers. appliedMain, appliedTiers:
	// what the client was last told.
	lineMain, lineTiers       bool
	appliedMain, appliedTiers bool
}

// noteTierWriteLocked records a retry the pipeline wrote (rec,
// acknowledged) that is due at due, if its partition is ours. p.mu held.
func (p *pipeline) noteTierWriteLocked(rec *kgo.Record, due time.Time) {
	if ps := p.parts[tp{rec.Topic, rec.Partition}]; ps != nil && !ps.gone && rec.Offset >= ps.next {
		ps.pending.note(rec.Offset, due.Add(-pendingLead))
	}
}

// noteTierFetch records a tier partition's fetch: next is the offset after
// its last record, end where its fetchable records end (the last stable
// offset: records after next are there, wanted at once). p.mu held.
func (p *pipeline) noteTierFetch(ps *partState, next, end int64, now time.Time) {
	ps.next = max(ps.next, next)
	ps.pending.fetched(ps.next)
	if end > ps.next {
		ps.pending.note(end-1, now)
	}
}

// tiersWantedLocked reports whether an owned tier partition that is not
// paused holds a pending record wanted by now. p.mu held.
func (p *pipeline) tiersWantedLocked(now time.Time) bool {
	for _, ps := range p.parts {
		if ps.tier >= 0 && !ps.paused && !ps.revoking && !ps.gone && ps.pending.wantedBy(now) {
			return true
		}
	}
	return false
}

// holdMainLocked holds or releases the main topic for the tiers (see
// mainHoldMax) and applies it with the line's pauses. p.mu held.
func (p *pipeline) holdMainLocked(now time.Time) {
	if len(p.tiers) == 0 {
		return
	}
	f := &p.fetch
	switch want := p.tiersWantedLocked(now); {
	case f.held && (!want || now.Sub(f.heldSince) >= mainHoldMax):
		f.held, f.released = false, now
		p.hot.mainHeld.Add(now.Sub(f.heldSince).Seconds())
	case !f.held && want && now.Sub(f.released) >= mainHoldGap:
		f.held, f.heldSince = true, now
	}
	p.applyFetchLocked()
}

// applyFetchLocked tells the client which topics not to fetch: the main
// topic while the line stops it or it is held for the tiers, the tiers
// while the line stops them. p.mu held.
func (p *pipeline) applyFetchLocked() {
	f := &p.fetch
	if main := f.lineMain || f.held; main != f.appliedMain {
		f.appliedMain = main
		if main {
			p.cl.PauseFetchTopics(p.cfg.Topic)
		} else {
			p.cl.ResumeFetchTopics(p.cfg.Topic)
		}
	}
	if f.lineTiers != f.appliedTiers && len(p.tiers) > 0 {
		f.appliedTiers = f.lineTiers
		if f.lineTiers {
			p.cl.PauseFetchTopics(p.tiers...)
		} else {
			p.cl.ResumeFetchTopics(p.tiers...)
		}
	}
}

// tierEndsEvery is how often a pipeline at its in-flight bound lists the
// end offsets of its tiers: retries another process wrote to a partition
// this one reads are known only so (or from a fetch of it, which the
// bound delays).
const tierEndsEvery = 250 * time.Millisecond

// tierEndsLoop lists the tiers' last stable offsets (the end of what a
// read_committed consumer can fetch: an open transaction's records are
// not wanted before it commits) every tierEndsEvery while the pipeline is
// at its bound, and notes what lies past each owned tier partition's last
// fetched record as wanted at once.
func (p *pipeline) tierEndsLoop(ctx context.Context) {
	if len(p.tiers) == 0 {
		return
	}
	adm := kadm.NewClient(p.cl)
	t := time.NewTicker(tierEndsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !p.atBound.Load() {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		ends, err := adm.ListCommittedOffsets(lctx, p.tiers...)
		cancel()
		if err != nil {
			continue
		}
		now := p.clk.Now()
		p.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				p.noteTierEndLocked(o.Topic, o.Partition, o.Offset, now)
			}
		})
		p.mu.Unlock()
	}
}

// noteTierEndLocked notes that a tier partition ends at end: records past
// its last fetched one are wanted at once. p.mu held.
func (p *pipeline) noteTierEndLocked(topic string, part int32, end int64, now time.Time) {
	if ps := p.parts[tp{topic, part}]; ps != nil && ps.tier >= 0 && !ps.gone && end > ps.next {
		ps.pending.note(end-1, now)
	}
}
