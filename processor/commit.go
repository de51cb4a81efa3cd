package processor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// committer is how a handled record's outcome reaches Kafka and its offset
// is committed. There are two: offsetCommitter (at-least-once: the worker
// produces the outcome, a loop commits the offsets finished) and
// txnCommitter (exactly-once, txn.go: outcomes are held and written with
// their offsets in one transaction). The pipeline never asks which it has.
type committer interface {
	// finish takes the decision d on w from its worker.
	finish(w *work, d decision)
	// loop runs beside the poll loop until ctx ends.
	loop(ctx context.Context)
	// beforePoll runs on the poll loop before every poll. It returns how
	// long the poll (or a wait at the in-flight bound) may last, and a
	// channel that ends a wait at the bound early (nil: none); an error
	// stops the pipeline.
	beforePoll() (wait time.Duration, kick <-chan struct{}, err error)
	// pollContext bounds one poll; its cancel is called when the poll
	// returns.
	pollContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc)
	// dropped forgets the partitions of states (revoked or lost, already
	// marked leaving). commit: a revoke, whose finished records are
	// committed if the committer can; closing: the pipeline is stopping
	// (in-flight work is not waited for, shutdown's drain does that). It
	// reports whether it committed.
	dropped(ctx context.Context, states []*partState, commit, closing bool) (committed bool)
	// drain waits at shutdown until drained is closed (in-flight work
	// finished): true, or false when graceOver fires first.
	drain(drained <-chan struct{}, graceOver <-chan time.Time) bool
	// final commits what finished, at shutdown.
	final() error
	// failure is why commits fail now (readiness, status); nil when they
	// do not.
	failure() error
	// held counts outcomes waiting to be written (status).
	held() int64
}

// newCommitter builds the pipeline's Kafka client with the committer its
// delivery needs.
func newCommitter(p *pipeline, opts []kgo.Opt) (committer, *kgo.Client, error) {
	if p.cfg.Delivery == ExactlyOnce {
		return newTxnCommitter(p, opts)
	}
	cl, err := kgo.NewClient(opts...)
	return &offsetCommitter{p: p}, cl, err
}

// offsetCommitter is at-least-once: each worker produces its record's
// outcome, and the acknowledgement finishes the record (send); every
// CommitInterval the commit point of each owned partition that moved is
// committed (offsets.go). A crash between the two handles the records
// after the last commit again.
type offsetCommitter struct {
	p *pipeline
	// mu makes commits one at a time, so that a revoke's commit never
	// races the loop's for the same partition.
	mu sync.Mutex
}

func (c *offsetCommitter) finish(w *work, d decision) {
	if d.to == "" {
		c.p.complete(w, true)
		return
	}
	c.p.send(w.ps.ctx, w, d)
}

func (c *offsetCommitter) loop(ctx context.Context) {
	t := time.NewTicker(c.p.pc.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.commitNow(); err != nil {
			c.p.log.Warn("commit failed", "err", err)
		}
	}
}

func (c *offsetCommitter) beforePoll() (time.Duration, <-chan struct{}, error) {
	return pollWait, nil, nil
}

func (c *offsetCommitter) pollContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, wait)
}

// revokeWait bounds how long a revoke waits for in-flight work.
const revokeWait = 5 * time.Second

func (c *offsetCommitter) dropped(ctx context.Context, states []*partState, commit, closing bool) bool {
	if commit && !closing {
		c.p.awaitIdle(states, revokeWait)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	offsets := c.p.forget(states)
	if !commit || len(offsets) == 0 {
		return commit
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.commitOffsets(cctx, offsets); err != nil {
		c.p.log.Warn("commit on revoke failed; the records will be redelivered to the next owner", "err", err)
	}
	return true
}

func (c *offsetCommitter) drain(drained <-chan struct{}, graceOver <-chan time.Time) bool {
	select {
	case <-drained:
		return true
	case <-graceOver:
		return false
	}
}

func (c *offsetCommitter) final() error { return c.commitNow() }

func (c *offsetCommitter) failure() error { return nil }

func (c *offsetCommitter) held() int64 { return 0 }

// commitNow commits every owned partition's commit point that moved.
func (c *offsetCommitter) commitNow() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offsets := c.p.commitPoints()
	if len(offsets) == 0 {
		return nil
	}
	return c.commitOffsets(ctx, offsets)
}

func (c *offsetCommitter) commitOffsets(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	p := c.p
	var cerr error
	p.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if e := kerr.ErrorForCode(pr.ErrorCode); e != nil {
					cerr = fmt.Errorf("commit %s/%d: %w", t.Topic, pr.Partition, e)
					continue
				}
				p.noteCommitted(tp{t.Topic, pr.Partition}, offsets[t.Topic][pr.Partition].Offset)
			}
		}
	})
	if cerr != nil {
		p.m.commitFailures.WithLabelValues(p.cfg.Name).Inc()
	}
	return cerr
}

// commitPoints are the commit points of owned partitions that moved past
// what was committed.
func (p *pipeline) commitPoints() map[string]map[int32]kgo.EpochOffset {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ps := range p.parts {
		if !ps.gone {
			addCommitPoint(offsets, ps)
		}
	}
	return offsets
}

// addCommitPoint adds ps's commit point to offsets if it moved. p.mu held.
func addCommitPoint(offsets map[string]map[int32]kgo.EpochOffset, ps *partState) {
	eo, ok := ps.offsets.commitPoint()
	if !ok || eo.Offset <= ps.committed {
		return
	}
	if offsets[ps.tp.topic] == nil {
		offsets[ps.tp.topic] = map[int32]kgo.EpochOffset{}
	}
	offsets[ps.tp.topic][ps.tp.partition] = eo
}

// noteCommitted records that k's offset is committed, if it is still owned.
func (p *pipeline) noteCommitted(k tp, offset int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps := p.parts[k]; ps != nil && !ps.gone {
		ps.committed = offset
	}
}
