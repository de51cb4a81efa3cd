package processor

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPendingList(t *testing.T) {
	t0 := time.Now()
	var l pendingList
	if l.wantedBy(t0.Add(time.Hour)) {
		t.Fatal("an empty list wants something")
	}
	l.note(10, t0.Add(time.Second))
	l.note(11, t0.Add(time.Second+time.Millisecond)) // merged: within pendingCoalesce
	l.note(20, t0.Add(2*time.Second))
	l.note(15, t0.Add(500*time.Millisecond)) // out of order: merged into the last, wanted sooner
	if got := l.q.s[l.q.head:]; len(got) != 2 || got[0].off != 11 || got[1].off != 20 || !got[1].at.Equal(t0.Add(500*time.Millisecond)) {
		t.Fatalf("entries %+v", got)
	}
	if l.wantedBy(t0.Add(999 * time.Millisecond)) {
		t.Error("wanted before its time")
	}
	if !l.wantedBy(t0.Add(time.Second)) {
		t.Error("not wanted at its time")
	}
	l.fetched(12) // offsets 10 and 11 fetched
	if l.wantedBy(t0.Add(400*time.Millisecond)) || !l.wantedBy(t0.Add(500*time.Millisecond)) {
		t.Errorf("after fetching up to 12: entries %+v", l.q.s[l.q.head:])
	}
	l.fetched(21)
	if l.wantedBy(t0.Add(time.Hour)) || l.q.len() != 0 {
		t.Errorf("after fetching all: entries %+v", l.q.s)
	}
}

// A retry the pipeline wrote to one of its tier partitions holds the main
// topic once it is nearly due, until it is fetched; a hold ends after
// mainHoldMax and starts again only after mainHoldGap; a tier partition
// paused for max_waiting holds nothing.
func TestMainHeldForDueTierRecords(t *testing.T) {
	p, tier := newMatchPipeline(t)
	paused := func() bool { return slices.Contains(p.cl.PauseFetchTopics(), p.cfg.Topic) }
	now := time.Now()
	due := now.Add(time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noteTierWriteLocked(&kgo.Record{Topic: tier.tp.topic, Partition: 0, Offset: 5}, due)
	p.holdMainLocked(now)
	if p.fetch.held || paused() {
		t.Fatal("main topic held for a retry due in a second")
	}
	at := due.Add(-pendingLead)
	p.holdMainLocked(at)
	if !p.fetch.held || !paused() {
		t.Fatal("main topic not held for a retry about to be due and not fetched")
	}
	p.holdMainLocked(at.Add(mainHoldMax))
	if p.fetch.held || paused() {
		t.Fatal("hold lasted past mainHoldMax")
	}
	p.holdMainLocked(at.Add(mainHoldMax + mainHoldGap/2))
	if p.fetch.held {
		t.Fatal("held again within mainHoldGap")
	}
	p.holdMainLocked(at.Add(mainHoldMax + mainHoldGap))
	if !p.fetch.held {
		t.Fatal("not held again after mainHoldGap with the retry still not fetched")
	}
	tier.paused = true
	p.holdMainLocked(at.Add(mainHoldMax + mainHoldGap + time.Millisecond))
	if p.fetch.held {
		t.Fatal("held for a tier partition paused for max_waiting")
	}
	tier.paused = false
	later := at.Add(2 * (mainHoldMax + mainHoldGap))
	p.holdMainLocked(later)
	if !p.fetch.held {
		t.Fatal("not held once the partition resumed")
	}
	p.noteTierFetch(tier, 6, 6, later) // offset 5 fetched, nothing after it
	p.holdMainLocked(later)
	if p.fetch.held || paused() {
		t.Fatal("still held after the retry was fetched")
	}
	// The line's pause of the main topic stays while a hold ends.
	p.fetch.lineMain = true
	p.applyFetchLocked()
	p.noteTierFetch(tier, 6, 9, later) // a fetch shows records after its last: wanted now
	p.holdMainLocked(later.Add(mainHoldGap))
	p.holdMainLocked(later.Add(mainHoldGap + mainHoldMax))
	if !paused() {
		t.Fatal("the end of a hold resumed a main topic the line stopped")
	}
}

// An end offset listed past a tier partition's last fetched record makes
// it wanted at once (retries another process wrote there); one at or
// before it, or of a partition not ours, changes nothing.
func TestTierEndsNoteForeignRetries(t *testing.T) {
	p, tier := newMatchPipeline(t)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noteTierFetch(tier, 10, 10, now) // fetched up to 9, nothing after
	p.noteTierEndLocked(tier.tp.topic, 0, 10, now)
	p.noteTierEndLocked(tier.tp.topic, 7, 50, now) // not ours
	if p.tiersWantedLocked(now.Add(time.Hour)) {
		t.Fatal("wanted with nothing past the last fetched record")
	}
	p.noteTierEndLocked(tier.tp.topic, 0, 12, now)
	if !p.tiersWantedLocked(now) {
		t.Fatal("records past the last fetched one, listed, not wanted at once")
	}
	p.noteTierFetch(tier, 12, 12, now)
	if p.tiersWantedLocked(now) {
		t.Fatal("still wanted after they were fetched")
	}
}
