package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq/dlqread"
	"github.com/redrive/redrive/internal/topicread"
	"github.com/redrive/redrive/processor/control"
)

// controlPlane is a processor's side of the control topic (package
// control): it reads the topic from its start and follows it, applying
// what it holds to the pipelines' lines (line_shared.go), writes what
// the lines publish, and publishes each pipeline's status every
// StatusInterval (a tombstone at a clean exit).
//
// The control topic is not in the path of a record: unreachable or
// denied, the lines go on with the last state read, the problem is
// logged once and shown in /readyz detail and the status, and what
// could not be written is written once it can (the latest of each key).
type controlPlane struct {
	cfg      Control
	writer   string // control records' writer: instance and a random suffix
	inst     string // status records' instance
	log      *slog.Logger
	conn     []kgo.Opt
	pipes    map[string]*pipeline
	degraded func(name, detail string)

	cl *kgo.Client // the writer's client

	mu      sync.Mutex
	pending map[string]control.Record // to write: the latest record of each key
	wake    chan struct{}
	readErr error // reading the topic (nil: fine)
	wrErr   error // writing it
	warned  map[string]bool

	caughtUp chan struct{} // closed once the topic was read to its end at start (or given up on)
	caught   atomic.Bool
	skipped  atomic.Int64 // malformed records
}

// controlWait bounds how long a processor waits, at start, to read the
// control topic before its pipelines call anything (a pipeline paused
// stays paused across restarts); past it, they start with no pause known.
const controlWait = 10 * time.Second

func newControlPlane(cfg *Config, pipes []*pipeline) (*controlPlane, error) {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	c := &controlPlane{cfg: cfg.Control, inst: cfg.Instance, writer: cfg.Instance + "#" + hex.EncodeToString(suffix[:]),
		log: cfg.Logger.With("control_topic", cfg.Control.Topic), pipes: map[string]*pipeline{}, degraded: cfg.Degraded,
		pending: map[string]control.Record{}, wake: make(chan struct{}, 1), warned: map[string]bool{},
		caughtUp: make(chan struct{})}
	c.conn = append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("redrive-" + cfg.Instance + "-control")}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(append(c.conn, kgo.ProducerLinger(0), kgo.DefaultProduceTopic(cfg.Control.Topic),
		kgo.RecordDeliveryTimeout(10*time.Second))...)
	if err != nil {
		return nil, fmt.Errorf("control topic client: %w", err)
	}
	c.cl = cl
	for _, p := range pipes {
		c.pipes[p.cfg.Name] = p
		if p.share != nil {
			p.share.solo.attach(c.writer, func(ctx context.Context, r control.Record) error {
				return control.Publish(ctx, c.cl, c.cfg.Topic, r)
			}, c.publish)
		}
		if p.cfg.Scope != ScopeProcess {
			p.line.mu.Lock()
			p.line.shared = &sharedLine{writer: c.writer, publish: c.publish}
			p.line.mu.Unlock()
		}
	}
	return c, nil
}

// publish queues r to be written; a newer record of the same key
// replaces one not yet written.
func (c *controlPlane) publish(r control.Record) {
	c.mu.Lock()
	c.pending[r.Key()] = r
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run reads and writes the control topic until ctx ends.
func (c *controlPlane) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){c.read, c.write, c.statusLoop} {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	wg.Wait()
}

// awaitCaughtUp waits until the topic was read to its end, at most
// controlWait.
func (c *controlPlane) awaitCaughtUp(ctx context.Context) {
	t := time.NewTimer(controlWait)
	defer t.Stop()
	select {
	case <-c.caughtUp:
	case <-ctx.Done():
	case <-t.C:
		c.problem("read", errors.New("not read to its end within "+controlWait.String()+"; the pipelines start with no pause known"))
		c.markCaught()
	}
}

func (c *controlPlane) markCaught() {
	if c.caught.CompareAndSwap(false, true) {
		close(c.caughtUp)
	}
}

// problem notes what is wrong reading or writing the topic (err nil:
// fine again), logging each change once.
func (c *controlPlane) problem(what string, err error) {
	c.mu.Lock()
	prev := c.readErr
	if what == "write" {
		prev = c.wrErr
		c.wrErr = err
	} else {
		c.readErr = err
	}
	c.mu.Unlock()
	switch {
	case err != nil && prev == nil:
		c.log.Warn("control topic: cannot "+what+" it; the pipelines go on with the last state read (pauses, breakers of other processes); run `redrive topics ensure`, or grant the ACLs in docs/operations.md", "err", err)
	case err == nil && prev != nil:
		c.log.Info("control topic: can " + what + " it again")
	}
	if c.degraded != nil {
		c.degraded("control topic", c.trouble())
	}
}

// trouble is what is wrong with the control topic ("" when nothing).
func (c *controlPlane) trouble() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	if c.readErr != nil {
		s = append(s, "read: "+c.readErr.Error())
	}
	if c.wrErr != nil {
		s = append(s, "write: "+c.wrErr.Error())
	}
	return strings.Join(s, "; ")
}

// read follows the topic from its start, applying every record.
func (c *controlPlane) read(ctx context.Context) {
	list := func(ctx context.Context) (topicread.Start, error) {
		bounds, err := dlqread.Offsets(ctx, c.cl, c.cfg.Topic)
		return dlqread.StartOf(bounds), err
	}
	f, err := topicread.Open(ctx, c.cfg.Topic, c.conn, list,
		topicread.RetryList(time.Second, func(err error) {
			// Missing or denied, the topic holds no pause this process
			// can know of: the pipelines start, and the topic is read
			// once it can be.
			c.problem("read", err)
			c.markCaught()
		}),
		topicread.FetchMaxWait(100*time.Millisecond),
		topicread.PollWait(time.Second),
		topicread.MaxRecords(1000))
	if err != nil {
		if ctx.Err() == nil {
			c.problem("read", err)
		}
		c.markCaught()
		return
	}
	defer f.Close()
	c.problem("read", nil)
	st := control.NewState()
	live := false // records are applied as they come once the topic was read to its end
	for ctx.Err() == nil {
		b, err := f.Poll(ctx)
		if err != nil {
			return
		}
		var ferr error
		for _, fe := range b.Errs {
			ferr = fe.Err
		}
		c.problem("read", ferr)
		now := time.Now()
		for _, rec := range b.Records {
			r, derr := control.Decode(rec.Key, rec.Value)
			if derr != nil {
				if c.skipped.Add(1) <= 10 {
					c.log.Warn("control topic: record ignored", "partition", rec.Partition, "offset", rec.Offset, "err", derr)
				}
				continue
			}
			st.Apply(r)
			if live {
				c.apply(r, now)
			}
		}
		if !live && f.CaughtUp() {
			live = true
			c.applyState(st, now)
			c.markCaught()
		}
	}
}

// apply hands a record read live to its pipeline's line.
func (c *controlPlane) apply(r control.Record, now time.Time) {
	p := c.pipes[r.Pipeline]
	if p == nil {
		return
	}
	switch r.Kind {
	case control.KindStatus:
		p.noteMember(r.Instance, r.At, r.Status, now)
		return
	case control.KindAlone:
		if p.share != nil {
			p.share.solo.note(r)
		}
		return
	}
	p.line.applyControl(r, r.Instance == c.writer, now)
}

// applyState applies what the topic held at start: the pause and the
// stops in force (control.State.InForce); the rest is history, ignored.
func (c *controlPlane) applyState(st *control.State, now time.Time) {
	for _, r := range st.Replicas(now) {
		if p := c.pipes[r.Pipeline]; p != nil && !r.Stale {
			p.noteMember(r.Instance, r.Seen, &r.Status, now)
		}
	}
	for name, p := range c.pipes {
		if p.share != nil {
			for _, r := range st.Alone(name) {
				p.share.solo.note(r)
			}
		}
		if r, ok := st.Paused(name); ok {
			p.line.applyControl(r, false, now)
		}
		for _, k := range []control.Kind{control.KindBreaker, control.KindPauseCode, control.KindGuard} {
			if r, ok := st.InForce(k, name, now); ok {
				p.line.applyControl(r, false, now)
			} else if r, ok := st.Get(k, name); ok {
				c.log.Debug("control topic: a stop no longer in force ignored", "key", r.Key(), "at", r.At)
			}
		}
	}
}

// write writes what publish queued, the latest record of each key,
// retrying what fails every second.
func (c *controlPlane) write(ctx context.Context) {
	for {
		c.mu.Lock()
		batch := c.pending
		c.pending = map[string]control.Record{}
		c.mu.Unlock()
		var failed []control.Record
		for _, r := range batch {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := control.Publish(wctx, c.cl, c.cfg.Topic, r)
			cancel()
			if err != nil && ctx.Err() == nil {
				failed = append(failed, r)
				c.problem("write", err)
			}
		}
		if len(failed) == 0 && len(batch) > 0 {
			c.problem("write", nil)
		}
		c.mu.Lock()
		for _, r := range failed {
			if _, newer := c.pending[r.Key()]; !newer {
				c.pending[r.Key()] = r
			}
		}
		c.mu.Unlock()
		var retry <-chan time.Time
		if len(failed) > 0 {
			retry = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-retry:
		}
	}
}

// statusLoop publishes every pipeline's status every StatusInterval.
func (c *controlPlane) statusLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.StatusInterval)
	defer t.Stop()
	last := map[string]int64{}
	prev := time.Now()
	// The first status goes out at once: the replicas of a share
	// pipeline count each other by it (share.go).
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		now := time.Now()
		for name, p := range c.pipes {
			n := p.line.started.Load()
			rate := 0.0
			if !first {
				rate = float64(n-last[name]) / now.Sub(prev).Seconds()
			}
			last[name] = n
			if p.cfg.Consume == ConsumeShare {
				p.reshare() // replicas not heard of for long drop out
			}
			c.publish(control.Record{Kind: control.KindStatus, Pipeline: name, Instance: c.inst, At: now, Status: c.status(p, rate, now)})
		}
		prev = now
	}
}

// status is p's status record.
func (c *controlPlane) status(p *pipeline, callsPerSec float64, now time.Time) *control.Status {
	ls := p.line.status(now)
	var why []string
	for _, r := range ls.Reasons {
		why = append(why, r.Reason+": "+r.Detail)
	}
	if ls.Breaker == "half-open" || ls.Breaker == "open" {
		why = append(why, "breaker "+ls.Breaker+": "+ls.Why)
	}
	s := &control.Status{Line: ls.State, Why: strings.Join(why, "; "), Breaker: ls.Breaker, Scope: string(p.cfg.Scope), Consume: string(p.cfg.Consume),
		Inflight: int64(p.inflightNow()), CallsPerSecond: callsPerSec, Control: c.trouble(), Every: c.cfg.StatusInterval.String()}
	capN, n := p.line.callsCap()
	s.CallsInFlight = n
	if sh := p.shareNow.Load(); sh != nil {
		s.Partitions, s.MainPartitions, s.TotalPartitions, s.Share, s.Members = sh.all, sh.main, sh.totals.all, sh.share, sh.members
	}
	s.RateLimit = p.cfg.RateLimit * s.Share
	s.LearnedRate = ls.LearnedRate
	s.MaxCallsInFlight = capN
	return s
}

// leave writes a tombstone for every pipeline's status (a clean exit),
// waiting at most 3s, and closes the client.
func (c *controlPlane) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, r := range pending {
		if r.Kind != control.KindStatus {
			_ = control.Publish(ctx, c.cl, c.cfg.Topic, r) // a stop published as it left
		}
	}
	for name := range c.pipes {
		r := control.Record{Kind: control.KindStatus, Pipeline: name, Instance: c.inst, Tombstone: true}
		if err := control.Publish(ctx, c.cl, c.cfg.Topic, r); err != nil {
			c.log.Warn("control topic: could not say this process left; `redrive status` shows it until it is stale", "pipeline", name, "err", err)
		}
	}
	c.cl.Close()
}
