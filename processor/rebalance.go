package processor

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitions come and go with the consumer group's rebalances.

func (p *pipeline) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	<-p.built
	p.mu.Lock()
	for topic, parts := range assigned {
		tier, ok := p.tierOf[topic]
		if !ok {
			continue
		}
		for _, part := range parts {
			p.parts[tp{topic, part}] = p.newPartState(tp{topic, part}, tier, -1)
		}
	}
	p.mu.Unlock()
	if p.totalsStale(assigned) {
		p.learnTotals(context.Background())
	}
	p.reshare()
	// Pauses survive a revoke and a later re-assign: start clean.
	cl.ResumeFetchPartitions(assigned)
	p.joined.Store(true)
	p.ready()
	p.log.Info("partitions assigned", "partitions", assigned)
}

// onRevoked lets in-flight work of the revoked partitions finish for a
// short while, commits what finished, and forgets them.
func (p *pipeline) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	p.drop(ctx, cl, revoked, true)
}

// onLost forgets the partitions at once: they may already be another
// member's, so nothing is committed for them.
func (p *pipeline) onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	p.drop(ctx, cl, lost, false)
	p.joined.Store(false)
	p.ready()
}

// drop forgets partitions revoked (commit: what finished of them is
// committed first, by the committer) or lost.
func (p *pipeline) drop(ctx context.Context, cl *kgo.Client, tps map[string][]int32, commit bool) {
	<-p.built
	states, closing := p.markLeaving(tps)
	// The share shrinks before the partitions go to another process.
	p.reshare()
	p.line.kick() // records of these partitions waiting for the line leave
	if len(states) == 0 {
		return
	}
	committed := p.commits.dropped(ctx, states, commit, closing)
	if commit {
		// Calls over the smaller bound end before the revoke does.
		p.line.awaitCalls(revokeWait)
	}
	cl.ResumeFetchPartitions(tps)
	p.log.Info("partitions dropped", "partitions", tps, "committed", committed)
}

// markLeaving marks the owned partitions of tps revoking: nothing more of
// them is dispatched, and records waiting for the line give up.
func (p *pipeline) markLeaving(tps map[string][]int32) (states []*partState, closing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for topic, parts := range tps {
		for _, part := range parts {
			ps := p.parts[tp{topic, part}]
			if ps == nil {
				continue
			}
			ps.revoking = true
			ps.leaving.Store(true)
			if ps.idle == nil && ps.inflight > 0 {
				ps.idle = make(chan struct{})
			}
			states = append(states, ps)
		}
	}
	p.releaseThrottledLocked(func(w *work) bool { return w.ps.revoking })
	return states, p.closing
}

// awaitIdle waits until no work of states is in flight, at most d.
func (p *pipeline) awaitIdle(states []*partState, d time.Duration) {
	var idle []chan struct{}
	p.mu.Lock()
	for _, ps := range states {
		if ps.idle != nil {
			idle = append(idle, ps.idle)
		}
	}
	p.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, ch := range idle {
		select {
		case <-ch:
		case <-timer.C:
			return
		}
	}
}

// forget drops states (marked leaving): their work is abandoned (its
// context cancelled), their waiting records and job index entries are
// purged, and they are never committed again. It returns their commit
// points that moved.
func (p *pipeline) forget(states []*partState) map[string]map[int32]kgo.EpochOffset {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ps := range states {
		p.forgetLocked(ps)
		delete(p.parts, ps.tp)
		addCommitPoint(offsets, ps)
	}
	p.purgeGoneLocked()
	return offsets
}

// forgetLocked marks ps gone and takes its waiting records out of the
// counts; paused reports it was paused for max_waiting. p.mu held.
func (p *pipeline) forgetLocked(ps *partState) (paused bool) {
	ps.gone = true
	ps.cancel()
	p.waiting -= ps.waiting
	paused = ps.paused
	if paused {
		p.m.pausedParts.WithLabelValues(p.cfg.Name).Dec()
	}
	ps.waiting, ps.paused = 0, false
	return paused
}

// purgeGoneLocked takes the records of gone partitions out of the waiting
// room and the job index (the next owner matches them from its own
// store). p.mu held.
func (p *pipeline) purgeGoneLocked() {
	for _, w := range p.jobs {
		if w.ps.gone {
			p.unindexLocked(w)
		}
	}
	p.room.purge(func(w *work) bool { return w.ps.gone })
	p.releaseThrottledLocked(func(w *work) bool { return w.ps.gone })
	p.hot.waiting.Set(float64(p.waiting))
}

// newPartState is the state of a partition assigned (committed: -1) or
// started over (txnCommitter.resetAll).
func (p *pipeline) newPartState(k tp, tier int, committed int64) *partState {
	ctx, cancel := context.WithCancel(p.hctx)
	return &partState{tp: k, tier: tier, offsets: newOffsetTracker(), ctx: ctx, cancel: cancel, committed: committed}
}
