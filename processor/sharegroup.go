package processor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/topics"
)

// consume: share. The main topic is read by a share group (KIP-932):
// every replica takes records of every partition, the broker hands each
// record to one of them at a time under an acquisition lock, and counts
// its deliveries. A record is accepted only once its outcome is
// acknowledged (releaseLocked), released when it was not started (a
// shutdown), and its lock is renewed while a call outlives it. The tiers
// stay on the consumer group (pipeline.cl): a tier record waits in
// partition order until it is due, which a share group cannot do (a
// record held until due would hold its lock, and a released one comes
// back at once).
//
// franz-go's share consumer accepts, at the next poll, every record of
// the last poll not yet acknowledged. So the reader polls only once the
// last poll's records all are, and flushes their acknowledgements first
// (flushAccepted): at most a batch (Concurrency) is acquired and not
// accepted at the broker at a time, which is also what a kill -9 can
// make the group deliver again.
//
// A record delivered again (its last delivery ended with no outcome: most
// likely the process died) is a suspect: it may be the one that killed
// it. Its batch's other records are handled first and their
// acknowledgements flushed; then the suspects run one at a time, each
// acknowledged before the next starts, and each after its alone record
// is on the control topic (sharesolo.go). A record that ends the process
// still takes the suspects not started yet with it, which the broker
// counts a delivery of. So the delivery count does not say which record
// killed the process; a record past max_deliveries is dead-lettered
// "crashed" only if its last delivery ran alone (or it is two deliveries
// past it), and otherwise runs alone like any suspect. Suspects run in
// ascending offsets on odd delivery counts and descending on even ones,
// so those a crash held back from one side run before the killer on its
// next delivery.
//
// Nothing else is held while suspects run (holdFetches): the main topic
// is paused in the share client, so franz-go fetches nothing more, and
// what a fetch still open when the suspects' poll returned acquired is
// released before the first suspect runs (a hook sees every record
// franz-go buffers). A released record comes back with its count one
// up; the reader remembers what it released (unrun), and does not count
// those deliveries against the record when it takes it again.

// shareRenewMax bounds how long a record's lock goes without a renew (and
// the share connection without a request, which keeps it from being
// closed as idle: the broker releases a closed session's records).
const shareRenewMax = 10 * time.Second

// shareReader is a pipeline's share group reader.
type shareReader struct {
	p     *pipeline
	cl    *kgo.Client
	batch int

	wake chan struct{} // a record of the last poll finished, or room freed

	// parts are the main topic's partitions as the reader sees them (no
	// ownership: they live as long as the pipeline). Under pipeline.mu.
	parts map[int32]*partState

	// suspects are records delivered again, not dispatched yet: they run
	// one at a time once the rest of their batch is acknowledged. Only the
	// reader's goroutine touches it.
	suspects []*work

	mu   sync.Mutex
	held map[*work]time.Time // acquired, not acknowledged: when to renew next
	// renewEvery is a third of the acquisition lock, learned from a poll.
	renewEvery time.Duration

	// solo is what the control topic says of the records run alone.
	solo *soloLog

	// hold is what the reader holds back while suspects run.
	hold *shareHold

	warned     atomic.Bool
	soloWarned atomic.Bool
	// unflushed: a record was acknowledged since the last flush.
	unflushed atomic.Bool
}

func newShareReader(p *pipeline) (*shareReader, error) {
	s := &shareReader{p: p, batch: p.cfg.Concurrency, wake: make(chan struct{}, 1),
		parts: map[int32]*partState{}, held: map[*work]time.Time{}, renewEvery: shareRenewMax,
		solo: newSoloLog(), hold: newShareHold(p.cfg.Topic)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(p.pc.Brokers...),
		kgo.ClientID("redrive-" + p.pc.Instance),
		kgo.ShareGroup(p.cfg.ShareGroupID()),
		kgo.ConsumeTopics(p.cfg.Topic),
		// Strict: a poll acquires at most a batch, so no more records are
		// locked than can be handled at once.
		kgo.ShareMaxRecords(int32(s.batch)),
		kgo.ShareMaxRecordsStrict(),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.FetchMaxPartitionBytes(fetchPartitionBytes),
		kgo.ShareAckCallback(s.acked),
		kgo.MetadataMaxAge(metadataMaxAge),
		kgo.WithHooks(&brokerLog{log: p.log}, s.hold),
	}
	cl, err := kgo.NewClient(append(opts, p.pc.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: share group client: %w", p.cfg.Name, err)
	}
	s.cl = cl
	return s, nil
}

// prepare sets the share group's configs (it starts at the earliest
// record, reads committed records only) and seeds a new group's start
// offsets from the consumer group's, before anything is fetched.
func (s *shareReader) prepare(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	g := s.p.cfg.ShareGroupID()
	if err := topics.EnsureShareGroup(ctx, s.cl, g); err != nil {
		// A group whose configs someone set (topics ensure) works without
		// the right to alter them; one left at Kafka's defaults starts at
		// the latest record.
		s.p.log.Warn("could not set the share group's configs: run `redrive topics ensure`, or grant ALTER_CONFIGS on the group; at Kafka's defaults a new share group skips what was written before it started",
			"group", g, "err", err)
	}
	// A pipeline switched from consume: group starts where its consumer
	// group left the main topic, not at the earliest record.
	seeded, err := topics.SeedShareGroup(ctx, kadm.NewClient(s.cl), s.p.cfg.Name, s.p.cfg.Topic)
	switch {
	case err != nil:
		s.p.log.Warn("could not seed the share group's start offsets from the consumer group's; a new share group starts at the earliest record", "group", g, "err", err)
	case seeded:
		s.p.log.Info("share group starts where the consumer group left the main topic", "group", g, "consumer_group", s.p.cfg.GroupID())
	}
}

// run polls the share group into the pipeline until ctx ends, then
// stops taking records: those not started are released.
func (s *shareReader) run(ctx context.Context) {
	defer s.leave()
	go s.renewLoop(ctx)
	for ctx.Err() == nil {
		if !s.waitHeld(ctx, len(s.suspects)) {
			return
		}
		if len(s.suspects) > 0 {
			s.runSuspect(ctx)
			continue
		}
		s.fetchAgain()
		n := min(s.p.space(), s.batch)
		if n == 0 || s.p.mainStopped() {
			s.sleep(ctx, time.Second)
			continue
		}
		s.flushAccepted(ctx)
		pctx, cancel := context.WithTimeout(ctx, pollWait)
		fs := s.cl.PollRecords(pctx, n)
		cancel()
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, part int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			s.p.log.Error("share group fetch failed", "topic", topic, "partition", part, "err", err)
		})
		if recs := fs.Records(); len(recs) > 0 {
			s.admit(recs, time.Now())
		}
		if len(s.suspects) > 0 {
			s.holdFetches()
		}
	}
}

// flushAccepted sends the acknowledgements of the last poll's records
// before the next poll. franz-go sends them on a timer (up to a second)
// or with its next fetch, and a poll can return a batch fetched ahead
// while the last one ran, with no fetch: a death then would give the
// group back records whose outcomes are written (each a duplicate), not
// only those acquired with the record that killed the process.
func (s *shareReader) flushAccepted(ctx context.Context) {
	if !s.unflushed.Swap(false) {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.cl.FlushAcks(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		s.p.log.Warn("share group: acknowledgements not flushed before the next poll", "err", err)
	}
}

// holdFetches stops taking records while suspects are pending: the main
// topic is paused (franz-go builds no fetch of it from now on), and the
// records a fetch already open acquired are released, now if buffered,
// else as they land (shareHold). A death then counts a delivery only of
// the suspects.
func (s *shareReader) holdFetches() {
	s.cl.PauseFetchTopics(s.p.cfg.Topic)
	s.hold.start()
}

// fetchAgain resumes the main topic once no suspect is pending.
func (s *shareReader) fetchAgain() {
	if s.hold.stop() {
		s.cl.ResumeFetchTopics(s.p.cfg.Topic)
	}
}

// waitHeld waits until at most n records of the last poll are held (its
// suspects not started yet): every other one is acknowledged. The next
// poll would accept what is not.
func (s *shareReader) waitHeld(ctx context.Context, n int) bool {
	for {
		s.mu.Lock()
		held := len(s.held)
		s.mu.Unlock()
		if held <= n {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-s.wake:
		}
	}
}

// runSuspect starts the next suspect alone, once the broker has every
// acknowledgement sent so far (a crash now costs the others nothing).
func (s *shareReader) runSuspect(ctx context.Context) {
	// A renew queued makes the flush wait for franz-go's fetch loop,
	// which sends acknowledgements only once a fetch in flight has
	// landed (and its records, released by the hook, are in the flush).
	s.suspects[0].rec.Ack(kgo.AckRenew)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.cl.FlushAcks(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		s.p.log.Warn("share group: acknowledgements not flushed before a record delivered again runs alone", "err", err)
	}
	if ctx.Err() != nil {
		return
	}
	w := s.suspects[0]
	s.suspects = s.suspects[1:]
	// The alone record goes first: if w ends the process, its next
	// delivery knows it was w, not a record merely acquired with it.
	if err := s.solo.record(ctx, s.p.cfg.Name, w); err != nil {
		if ctx.Err() != nil {
			s.suspects = append([]*work{w}, s.suspects...)
			return
		}
		if !s.soloWarned.Swap(true) {
			s.p.log.Warn("share group: could not write to the control topic that a record delivered again runs alone; if it ends the process, it is dead-lettered crashed one delivery later than max_deliveries says",
				"partition", w.rec.Partition, "offset", w.rec.Offset, "err", err)
		}
	} else {
		w.alone = true
	}
	s.p.mu.Lock()
	s.p.dispatchLocked(w)
	s.p.mu.Unlock()
}

// suspectOrder sorts suspects: by delivery count, then by partition, then
// by offset, ascending on odd counts and descending on even ones.
func suspectOrder(a, b *work) int {
	if c := cmp.Compare(a.deliveries, b.deliveries); c != 0 {
		return c
	}
	if c := cmp.Compare(a.rec.Partition, b.rec.Partition); c != 0 {
		return c
	}
	if a.deliveries%2 == 0 {
		return cmp.Compare(b.rec.Offset, a.rec.Offset)
	}
	return cmp.Compare(a.rec.Offset, b.rec.Offset)
}

func (s *shareReader) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.wake:
	case <-t.C:
	}
}

func (s *shareReader) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// admit dispatches polled records as main-topic work.
func (s *shareReader) admit(recs []*kgo.Record, now time.Time) {
	p := s.p
	unrun := make([]int, 0, len(recs))
	fresh := recs[:0:0]
	for _, r := range recs {
		if stale, n := s.hold.take(r); !stale {
			fresh = append(fresh, r)
			unrun = append(unrun, n)
		}
	}
	recs = fresh
	if len(recs) == 0 {
		return
	}
	p.hot.consumedFor(p.cfg.Topic).Add(float64(len(recs)))
	if d := recs[0].AcquisitionDeadline(); !d.IsZero() {
		if lock := d.Sub(now); lock > 0 {
			s.mu.Lock() // renewLoop reads it
			s.renewEvery = min(shareRenewMax, max(time.Second, lock/3))
			s.mu.Unlock()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range recs {
		ps := s.parts[r.Partition]
		if ps == nil {
			ps = &partState{tp: tp{r.Topic, r.Partition}, tier: -1, ctx: p.hctx, share: s}
			s.parts[r.Partition] = ps
		}
		w := &work{rec: r, ps: ps, size: int64(len(r.Key) + len(r.Value)), deliveries: int(r.DeliveryCount())}
		s.mu.Lock()
		s.held[w] = now.Add(s.renewEvery)
		s.mu.Unlock()
		p.noteOversize(w)
		// The deliveries this reader released unrun are no attempts:
		// charged are the others, and the last that could have run is
		// the one before them.
		charged := w.deliveries - unrun[i]
		if charged > p.cfg.MaxDeliveries {
			// Past max_deliveries: dead-lettered without a call if its
			// last delivery ran alone, so it ended the process itself;
			// two deliveries further (5 at the default, Kafka's delivery
			// limit: the broker would archive it next), even without.
			if s.solo.ranAlone(r.Partition, r.Offset, charged-1) {
				w.crashed, w.alone = true, true
			} else {
				w.crashed = charged > p.cfg.MaxDeliveries+1
			}
		}
		if charged > 1 && !w.crashed {
			s.suspects = append(s.suspects, w)
			continue
		}
		p.dispatchLocked(w)
	}
	if len(s.suspects) > 0 {
		slices.SortFunc(s.suspects, suspectOrder)
		p.log.Info("share group: records delivered again after a delivery that ended with no outcome (a process died?) run one at a time, after the rest of their batch",
			"records", len(s.suspects))
	}
}

// done acknowledges w: accepted once its outcome is (finished), else
// released for the group to deliver again. p.mu held.
func (s *shareReader) done(w *work, finished bool) {
	if finished {
		w.rec.Ack(kgo.AckAccept)
		if w.alone {
			s.solo.forget(s.p.cfg.Name, w)
		}
	} else {
		w.rec.Ack(kgo.AckRelease)
	}
	s.unflushed.Store(true)
	s.mu.Lock()
	delete(s.held, w)
	s.mu.Unlock()
	s.signal()
}

// heldNow counts the records acquired and not acknowledged.
func (s *shareReader) heldNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// renewLoop renews the lock of every record held past a third of it (a
// call that outlives the lock, or a record waiting for the line), so the
// group does not give it to another replica meanwhile.
func (s *shareReader) renewLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		for w, at := range s.held {
			if now.After(at) {
				// A renew after the record's terminal ack is a no-op.
				w.rec.Ack(kgo.AckRenew)
				s.held[w] = now.Add(s.renewEvery)
			}
		}
		s.mu.Unlock()
	}
}

// acked is franz-go's report of the broker's answer to acknowledgements.
// A refused accept means the record is delivered again (a duplicate):
// counted and logged once.
func (s *shareReader) acked(_ *kgo.Client, rs kgo.ShareAckResults) {
	for _, r := range rs {
		if r.Err == nil {
			continue
		}
		s.p.m.shareAckFailures.WithLabelValues(s.p.cfg.Name).Inc()
		if s.warned.CompareAndSwap(false, true) {
			s.p.log.Warn("share group acknowledgement refused: the records are delivered again (their outcomes may be written twice)",
				"topic", r.Topic, "partition", r.Partition, "err", r.Err)
		}
	}
}

// leave stops taking records: work not started gives up at once and is
// released (process, line.enter); work in a call goes on within the
// shutdown grace.
func (s *shareReader) leave() {
	s.p.mu.Lock()
	for _, ps := range s.parts {
		ps.leaving.Store(true)
	}
	s.p.mu.Unlock()
	s.mu.Lock()
	for _, w := range s.suspects {
		w.rec.Ack(kgo.AckRelease)
		delete(s.held, w)
	}
	s.mu.Unlock()
	s.suspects = nil
}

// close sends what is acknowledged and leaves the group; a record still
// held (past the grace) is released by the broker with the session.
func (s *shareReader) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.cl.FlushAcks(ctx); err != nil {
		s.p.log.Warn("share group: acknowledgements not all sent before leaving; those records are delivered again", "err", err)
	}
	s.cl.Close()
}

// shareLag is the share group's lag on the main topic: the records not
// acknowledged, acquired ones included (topics.ShareAcknowledged; a
// partition not started yet counts from its log start).
func (s *shareReader) shareLag(ctx context.Context, adm *kadm.Client) (int64, bool) {
	topic := s.p.cfg.Topic
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, false
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, false
	}
	acked, err := topics.ShareAcknowledged(ctx, adm, s.p.cfg.ShareGroupID(), topic, ends)
	if err != nil {
		return 0, false
	}
	var lag int64
	for part, end := range ends[topic] {
		if end.Err != nil {
			return 0, false
		}
		at, ok := acked[part]
		if !ok {
			at = starts[topic][part].Offset
		}
		lag += max(0, end.Offset-at)
	}
	return lag, true
}
