package processor

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redrive/redrive/processor/control"
)

// A pipeline's budgets (RateLimit, MaxCallsInFlight) are the whole
// pipeline's when its scope is pipeline: each process takes a share, from
// what the consumer group's assignment says and nothing else.
//
// The share follows where the calls come from: mainWeight of it by the
// main topic's partitions a process owns (new requests, most of the
// calls), the rest by all the pipeline's partitions it owns (so that a
// process the balancer gave only retry tiers still calls its due
// retries). Both parts add up to the whole over the processes, because a
// partition has one owner at a time: a revoke lowers the old owner's
// share (and waits, with the revoke, for its calls over the new bound)
// before the partition is assigned again. While a rebalance is in
// progress, the partitions in flight between owners count for no one:
// the pipeline runs below its budget, never above it. A process killed
// holding partitions keeps its share until the group's session timeout
// gives them to the others.
const mainWeight = 0.9

// partTotals are the partitions of the main topic and of all the
// pipeline's topics (main and tiers), as the topics' metadata says.
type partTotals struct{ main, all int }

// shareOf is the share of a process owning main of the main topic's
// partitions and all of all of them.
func shareOf(main, all int, t partTotals) float64 {
	if t.main <= 0 || t.all <= 0 {
		return 0
	}
	if t.all == t.main {
		return float64(main) / float64(t.main)
	}
	return mainWeight*float64(main)/float64(t.main) + (1-mainWeight)*float64(all)/float64(t.all)
}

// owned counts the partitions this process owns and is not giving up.
func (p *pipeline) owned() (main, all int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ps := range p.parts {
		if ps.revoking || ps.gone {
			continue
		}
		all++
		if ps.tier < 0 {
			main++
		}
	}
	return main, all
}

// reshare sets the line's share of the budgets from the partitions owned
// now (scope pipeline; with scope process the line keeps all of them),
// and keeps it with what it came from for the status.
func (p *pipeline) reshare() {
	// One at a time: the rebalance callbacks, the control topic's reader
	// and the status loop all reshare, and the last share set must be the
	// last computed.
	p.reshareMu.Lock()
	defer p.reshareMu.Unlock()
	main, all := p.owned()
	t := p.totals()
	s, members := 1.0, 0
	if p.cfg.Consume == ConsumeShare {
		members = p.members.count(p.pc.Instance, time.Now())
	}
	if p.cfg.Scope != ScopeProcess {
		if members > 0 {
			s = 1 / float64(members)
		} else {
			s = shareOf(main, all, t)
		}
		// Every status record of a share pipeline reshares it: a share
		// set again unchanged would refill the rate limiter's bucket and
		// wake the callers waiting for a token.
		if old := p.shareNow.Load(); old == nil || math.Abs(old.share-s) > 1e-9 {
			p.line.setShare(s)
		}
	}
	p.shareNow.Store(&shareState{share: s, main: main, all: all, totals: t, members: members})
}

// shareState is the last share and what it came from (the status).
type shareState struct {
	share     float64
	main, all int
	totals    partTotals
	members   int // a share pipeline's replicas counted
}

// shareMembers are the replicas of a share pipeline, as their status
// records on the control topic say. A share group has no assignment to
// split the budgets by (every replica takes records of every partition),
// so each live replica takes an equal share. A replica starting counts
// the others it read and itself at once; the others count it once its
// first status (published at start) reaches them. A replica killed counts
// until its status is stale (three status intervals): the pipeline runs
// below its budget meanwhile, never above it.
type shareMembers struct {
	mu   sync.Mutex
	seen map[string]memberSeen
}

type memberSeen struct {
	at    time.Time
	every time.Duration
}

// noteMember records a status record of the pipeline's replica inst (a
// tombstone: st nil, it left), and reshares a share pipeline.
func (p *pipeline) noteMember(inst string, at time.Time, st *control.Status, now time.Time) {
	if p.cfg.Consume != ConsumeShare {
		return
	}
	m := &p.members
	m.mu.Lock()
	if m.seen == nil {
		m.seen = map[string]memberSeen{}
	}
	if st == nil {
		delete(m.seen, inst)
	} else {
		every, err := time.ParseDuration(st.Every)
		if err != nil || every <= 0 {
			every = control.DefaultStatusInterval
		}
		m.seen[inst] = memberSeen{at: at, every: every}
	}
	m.mu.Unlock()
	p.reshare()
}

// count is the live replicas, self always among them.
func (m *shareMembers) count(self string, now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 1
	for inst, s := range m.seen {
		if inst != self && now.Sub(s.at) <= 3*s.every {
			n++
		}
	}
	return n
}

// totals are the partition counts learned from metadata; until they are
// known, at least what the assignment shows.
func (p *pipeline) totals() partTotals {
	if t := p.partCounts.Load(); t != nil {
		return *t
	}
	return partTotals{}
}

// learnTotals reads the partition counts of the pipeline's topics (the
// shares; the status shows them in either scope). It is
// called at start and again when an assignment names a partition past
// them (partitions were added).
func (p *pipeline) learnTotals(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	names := append([]string{p.cfg.Topic}, p.tiers...)
	details, err := kadm.NewClient(p.cl).ListTopics(ctx, names...)
	if err != nil {
		if p.cfg.Scope != ScopeProcess {
			p.log.Warn("could not learn the pipeline's partition counts: its budgets are not shared until it can", "err", err)
		}
		return
	}
	var t partTotals
	for _, n := range names {
		d, ok := details[n]
		if !ok || d.Err != nil {
			continue
		}
		t.all += len(d.Partitions)
		if n == p.cfg.Topic {
			t.main = len(d.Partitions)
		}
	}
	p.partCounts.Store(&t)
}

// totalsStale reports an assigned partition past the counts learned.
func (p *pipeline) totalsStale(assigned map[string][]int32) bool {
	t := p.totals()
	if t.main == 0 {
		return true
	}
	for topic, parts := range assigned {
		if topic != p.cfg.Topic {
			continue
		}
		for _, part := range parts {
			if int(part) >= t.main {
				return true
			}
		}
	}
	return false
}
