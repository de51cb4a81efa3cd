package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

type tp struct {
	topic     string
	partition int32
}

// partState is what the pipeline knows of one assigned partition. Guarded
// by pipeline.mu.
type partState struct {
	tp      tp
	tier    int // -1: the main topic
	offsets *offsetTracker
	// ctx is cancelled when the partition is revoked or lost.
	ctx    context.Context
	cancel context.CancelFunc
	// inflight counts dispatched records not finished.
	inflight int
	// waiting counts tier records held until due.
	waiting int
	// lastWait is the latest wait-until among the held records: a paused
	// partition resumes early enough that the records after them arrive
	// before they are due.
	lastWait time.Time
	paused   bool
	// revoking: no new dispatch; gone: dropped, never commit again.
	revoking, gone bool
	committed      int64
	// leaving is revoking, readable without p.mu: a record waiting for
	// the line gives up (line.enter).
	leaving atomic.Bool
	// Tier partitions (duefirst.go): next is the offset after the last
	// record fetched (0: none yet); pending what is known to be there
	// after it and when it is wanted.
	next    int64
	pending pendingList
}

// work is one record from poll to finish.
type work struct {
	rec       *kgo.Record
	ps        *partState
	e         *entry
	meta      retry.Meta // the decoded headers; from send on, the outcome record's
	user      []kgo.RecordHeader
	decodeErr error
	decoded   bool
	waitUntil time.Time
	// req is the handler's request (process): a part of w, one
	// allocation less per record.
	req Request
	// at is when process last read the clock for w: the decision's time,
	// which the outcome record's times use.
	at      time.Time
	size    int64
	heapIdx int

	// Callbacks (callbacks.go). cb is the callback attached to the
	// record: it is finished with the callback's outcome, no handler call.
	cb *Callback
	// indexed is the job id under which w waits in pipeline.jobs.
	indexed string
	cbFate  cbFate
	// polledJob is the job a poll finished (a later callback is late).
	polledJob string
	// via says what finished the job with success; since is its
	// redrive-not-ready-since (redrive_job_seconds).
	via   jobVia
	since time.Time

	// Exactly-once (txn.go): the outcome record held for the next
	// transaction (nil: none, the record only commits its offset), its
	// kind, and whether it is in the transaction being written.
	out   *kgo.Record
	outTo outKind
	inTxn bool

	// The line (line.go): held says the record failed transiently while
	// the breaker was not closed and waits to be called again, heldCode
	// with which code; yielded says it was given back to the run queue
	// (enterYield) and is processed again from the start (counted once),
	// yieldNow that process just did so.
	held              bool
	heldCode          string
	yielded, yieldNow bool
	// throttles counts the waits a 429 made this record take in its
	// worker (Outcome.Throttled), at most MaxThrottleWaits.
	throttles int
}

// pipeline runs one Pipeline: a consumer group over the main topic and the
// tiers, and the producer for outcomes (one kgo client does both).
type pipeline struct {
	cfg    Pipeline
	pol    policy
	pc     *Config
	h      Handler
	cl     *kgo.Client
	log    *slog.Logger
	m      *metrics
	tierOf map[string]int
	tiers  []string
	sched  *scheduler
	capCh  chan struct{}
	hctx   context.Context // handler context; cancelled past the shutdown grace
	hstop  context.CancelFunc
	wg     sync.WaitGroup

	// noKind warns once of a handler returning an Outcome without a Kind.
	noKind sync.Once
	// foreignState warns once of a main-topic record with redrive-state.
	foreignState sync.Once

	mu       sync.Mutex
	parts    map[tp]*partState
	inflight int   // dispatched, not finished
	bytes    int64 // bytes of those
	waiting  int
	lanes    map[string]*lane
	closing  bool
	// runq holds dispatched work no worker has taken yet, due work ahead
	// of the main topic's (runqueue.go); workers counts the worker
	// goroutines (at most Concurrency), each of which takes work from runq
	// until it is empty.
	runq    runQueue
	workers int
	// fetch is which topics are held from fetching: by the line, and the
	// main topic while due tier records wait to be fetched (duefirst.go).
	fetch fetchState
	// atBound: the poll loop waits at the in-flight bound (tierEndsLoop).
	atBound atomic.Bool

	hot hotMetrics

	// cbs reads the pipeline's callbacks (nil without Callbacks); jobs
	// indexes the records waiting in the scheduler by job id (under mu).
	cbs  *callbacks
	jobs map[string]*work
	// polls, viaCallback, viaPoll count for CallbackStatus.
	polls, viaCallback, viaPoll atomic.Uint64

	// line is the flow control: breaker, rate limit, pause codes, guard,
	// manual pause (line.go).
	line *line

	commitMu sync.Mutex

	out outputs // builds outcome records (deadletter.go)
	// topicMax holds each output topic's max.message.bytes, learned at
	// start (probe); a topic missing from it gets Kafka's default.
	topicMax atomic.Pointer[map[string]int]
	// batchMax is the client's ProducerBatchMaxBytesFn: redrive's (the
	// smaller of the default and the topic's limit) unless ClientOpts set
	// one; brokerMax its BrokerMaxWriteBytes.
	batchMax    func(string) int32
	brokerMax   int32
	joined      atomic.Bool
	writeFails  atomic.Int64 // outcome writes failing right now
	lastWriteMu sync.Mutex
	lastWrite   error
	recreated   recreatedTopics // output topics deleted and recreated (recreated.go)

	// Exactly-once (txn.go): eos is Delivery == ExactlyOnce; sess wraps
	// cl. held counts outcomes held for a transaction; txnKick and
	// pollCancel make the poll loop write a transaction at once when
	// MaxBatch are held; txnErr is the last transaction failure (readiness).
	eos        bool
	sess       *kgo.GroupTransactSession
	held       atomic.Int64
	txnKick    chan struct{}
	pollCancel atomic.Pointer[context.CancelFunc]
	txnErrMu   sync.Mutex
	txnErr     error
	refusedMu  sync.Mutex
	refused    map[srcKey]refusal // outcomes refused as too large (txn.go)
}

type lane struct{ queue []*work }

func newPipeline(pc *Config, cfg Pipeline, h Handler, m *metrics, extra ...kgo.Opt) (*pipeline, error) {
	p := &pipeline{
		cfg:    cfg,
		pol:    policyOf(cfg),
		pc:     pc,
		h:      h,
		log:    pc.Logger.With("pipeline", cfg.Name),
		m:      m,
		tierOf: map[string]int{cfg.Topic: -1},
		tiers:  cfg.TierTopics(),
		capCh:  make(chan struct{}, 1),
		parts:  map[tp]*partState{},
		lanes:  map[string]*lane{},
		jobs:   map[string]*work{},
	}
	if cfg.Callbacks != nil {
		p.cbs = newCallbacks(*cfg.Callbacks, m, cfg.Name)
	}
	for i, t := range p.tiers {
		p.tierOf[t] = i
	}
	p.hot.init(m, cfg.Name)
	p.hot.precreate(cfg, p.tiers)
	p.hctx, p.hstop = context.WithCancel(context.Background())
	p.sched = newScheduler(p.onDue)
	p.line = newLine(cfg, p.log, m, p.pauseFetch)
	p.line.freshQueued = p.runq.freshWaiting
	p.runq.freshFirst = &p.line.notClosed
	topics := append([]string{cfg.Topic}, p.tiers...)
	opts := []kgo.Opt{
		kgo.SeedBrokers(pc.Brokers...),
		kgo.ClientID("redrive-" + pc.Instance),
		kgo.ConsumerGroup(cfg.GroupID()),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Records of aborted transactions (a transactional Java or Spring
		// producer) are never handled.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers are records too: the commit point moves past
		// them (admit), or a topic written in transactions (an
		// exactly-once pipeline's tiers) never shows lag 0.
		kgo.KeepControlRecords(),
		kgo.SessionTimeout(pc.SessionTimeout),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		// A resumed partition is fetched after the broker's in-flight fetch
		// returns; a short max wait keeps due tier records from being late.
		kgo.FetchMaxWait(200 * time.Millisecond),
		// Small fetches per partition: the client fetches a partition
		// again only once its buffered fetch is polled, and records are
		// polled only as the in-flight bound frees room, so a large
		// buffered fetch of the main topic delays the tier records fetched
		// with it (and holds memory). franz-go's default is 1 MiB;
		// measured in BENCHMARKS.md.
		kgo.FetchMaxPartitionBytes(fetchPartitionBytes),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(20 * time.Second),
		kgo.UnknownTopicRetries(3),
		kgo.ProducerLinger(2 * time.Millisecond),
		// Partitions added to the main topic (or a tier) are found on a
		// metadata refresh; franz-go's default of 5 minutes would leave
		// them unconsumed that long.
		kgo.MetadataMaxAge(metadataMaxAge),
		kgo.WithHooks(&brokerLog{log: p.log}),
	}
	// A batch never holds more than a topic takes, so that several dead
	// letters batched together are not refused as one. franz-go asks once
	// per partition, on its first produce: after probe. ClientOpts may
	// replace it (then batches are as large as the caller says).
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
		return int32(max(minBatchBytes, min(dlq.DefaultProducerBatchBytes, p.topicLimit(topic))))
	}))
	opts = append(opts, pc.ClientOpts...)
	opts = append(opts, extra...)
	var cl *kgo.Client
	var err error
	if cfg.Delivery == ExactlyOnce {
		p.eos = true
		p.txnKick = make(chan struct{}, 1)
		opts = append(opts, kgo.TransactionalID(TransactionalID(cfg.Name, pc.Instance)), kgo.TransactionTimeout(txnTimeout))
		p.sess, err = kgo.NewGroupTransactSession(opts...)
		if err == nil {
			cl = p.sess.Client()
		}
	} else {
		cl, err = kgo.NewClient(opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: kafka client: %w", cfg.Name, err)
	}
	p.cl = cl
	p.batchMax, _ = cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32)
	p.brokerMax, _ = cl.OptValue(kgo.BrokerMaxWriteBytes).(int32)
	p.out = outputs{
		tiers:    p.tiers,
		results:  cfg.Results,
		failover: cfg.Breaker.FailoverTo,
		dead: dlq.BuildOptions{
			Topic:         cfg.DLQ,
			RedactHeaders: cfg.RedactHeaders,
			Group:         cfg.GroupID(),
			Instance:      pc.Instance,
			HeaderStyle:   cfg.DLQHeaderStyle,
		},
		limit: p.limit,
	}
	return p, nil
}

func (p *pipeline) ready() {
	if p.pc.Ready == nil {
		return
	}
	name := "pipeline " + p.cfg.Name
	switch {
	case !p.joined.Load():
		p.pc.Ready(name, errors.New("consumer group "+p.cfg.GroupID()+" not joined yet"))
	case p.txnFailure() != nil:
		p.pc.Ready(name, p.txnFailure())
	case p.writeFails.Load() > 0:
		p.lastWriteMu.Lock()
		err := p.lastWrite
		p.lastWriteMu.Unlock()
		p.pc.Ready(name, fmt.Errorf("outcome writes failing: %w", err))
	default:
		p.pc.Ready(name, nil)
	}
}

// run polls until ctx is done, then drains within the grace period,
// commits and leaves the group.
func (p *pipeline) run(ctx context.Context) error {
	// The pipeline's goroutines stop with ctx, and also when the poll
	// loop ends with an error (a fenced exactly-once producer).
	ctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	p.probe(ctx)
	p.ready()
	schedCtx, schedStop := context.WithCancel(context.Background())
	schedDone := make(chan struct{})
	go func() { p.sched.run(schedCtx); close(schedDone) }()
	commitDone := make(chan struct{})
	if p.eos {
		close(commitDone) // the poll loop writes the transactions
	} else {
		go func() { p.commitLoop(ctx); close(commitDone) }()
	}
	lagDone := make(chan struct{})
	go func() { p.lagLoop(ctx); close(lagDone) }()
	endsDone := make(chan struct{})
	go func() { p.tierEndsLoop(ctx); close(endsDone) }()
	lineDone := make(chan struct{})
	go func() { p.line.run(ctx); close(lineDone) }()
	cbDone := make(chan struct{})
	if p.cbs != nil {
		go func() { p.readCallbacks(ctx, time.Now()); close(cbDone) }()
		// Records redelivered after a restart find the callbacks that came
		// while no one read them.
		p.awaitCallbacks(ctx)
	} else {
		close(cbDone)
	}

	err := p.pollLoop(ctx)
	stopAll()

	// Records waiting for a stopped line leave at once (they are
	// redelivered); the line no longer pauses or resumes fetching.
	p.line.stop()
	<-lineDone

	// Shutdown: stop fetching, let in-flight work finish within the grace.
	p.log.Info("stopping: finishing in-flight work", "inflight", p.inflightNow(), "grace", p.pc.ShutdownGrace)
	p.cl.PauseFetchTopics(append([]string{p.cfg.Topic}, p.tiers...)...)
	// No new work from here on: the scheduler stops before the drain wait,
	// so nothing calls wg.Add while wg.Wait runs (a record due now simply
	// stays uncommitted and is redelivered).
	schedStop()
	<-schedDone
	// Nor does the callbacks reader (matchWaiting dispatches).
	<-cbDone
	drained := make(chan struct{})
	go func() { p.wg.Wait(); close(drained) }()
	graceOver := time.After(p.pc.ShutdownGrace)
	if p.eos && !p.drainTxns(drained, graceOver) { // transactions go on while it drains
		g := make(chan time.Time, 1)
		g <- time.Now()
		graceOver = g // drainTxns took the grace's tick
	}
	select {
	case <-drained:
	case <-graceOver:
		p.log.Warn("shutdown grace over: abandoning in-flight work, it will be redelivered", "inflight", p.inflightNow())
		p.hstop()
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
		}
	}
	p.hstop()
	<-commitDone
	<-lagDone
	<-endsDone
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cerr error
	if p.eos {
		cerr = p.txnCycle() // its own timeout
	} else {
		p.commitMu.Lock()
		cerr = p.commit(cctx)
		p.commitMu.Unlock()
	}
	p.cl.Close() // leaves the group
	if cerr != nil && err == nil {
		err = fmt.Errorf("pipeline %s: final commit: %w", p.cfg.Name, cerr)
	}
	return err
}

func (p *pipeline) inflightNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}

func (p *pipeline) beat() {
	if p.pc.Beat != nil {
		p.pc.Beat("pipeline " + p.cfg.Name)
	}
}

// room is how many more records may be polled, 0 at the bound. While the
// main topic is held for the tiers (duefirst.go) only tier records come,
// up to a quarter more than the bound.
func (p *pipeline) room() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdMainLocked(time.Now())
	limit, limitBytes := p.cfg.MaxInflight, p.cfg.MaxInflightBytes
	if p.fetch.held {
		limit += max(1, limit/4)
		limitBytes += limitBytes / 4
	}
	if p.bytes >= limitBytes {
		return 0
	}
	return max(0, limit-p.inflight)
}

// metadataMaxAge is how often the pipeline's client refreshes metadata at
// the latest: new partitions of the main topic and tiers are consumed
// (and the group rebalanced to spread them) within about this long.
const metadataMaxAge = 15 * time.Second

// noteOversize logs a record larger than MaxInflightBytes: it is admitted
// (the bound is checked before a poll, so it never deadlocks) but nothing
// more is polled until it is finished, so throughput drops to that one
// record meanwhile. p.mu held.
func (p *pipeline) noteOversize(w *work) {
	if w.size <= p.cfg.MaxInflightBytes {
		return
	}
	p.log.Warn("record larger than max_inflight_bytes: handled with no more records fetched until it is finished",
		"src", srcOf(w), "bytes", w.size, "max_inflight_bytes", p.cfg.MaxInflightBytes)
}

// fetchPartitionBytes is the most a fetch takes from one partition.
const fetchPartitionBytes = 256 << 10

// pollWait bounds one poll, so the loop beats at least this often when idle.
const pollWait = 2 * time.Second

func (p *pipeline) pollLoop(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// At the bound the loop looks this often whether to hold the main
	// topic for due tier records (duefirst.go).
	var check <-chan time.Time
	if len(p.tiers) > 0 {
		t := time.NewTicker(holdCheck)
		defer t.Stop()
		check = t.C
	}
	lastTxn := time.Now()
	for ctx.Err() == nil {
		p.beat()
		wait := pollWait
		if p.eos {
			// Exactly-once: this goroutine also writes the transactions,
			// never while a poll runs (franz-go's GroupTransactSession).
			if time.Since(lastTxn) >= p.pc.CommitInterval || p.held.Load() >= p.batchAt() {
				select {
				case <-p.txnKick:
				default:
				}
				if err := p.txnCycle(); err != nil {
					return err
				}
				lastTxn = time.Now()
			}
			wait = max(time.Millisecond, p.pc.CommitInterval-time.Since(lastTxn))
		}
		n := p.room()
		p.atBound.Store(n == 0)
		if n == 0 { // at the bound: stop fetching until work finishes
			var txnDue <-chan time.Time
			var t *time.Timer
			if p.eos {
				t = time.NewTimer(wait)
				txnDue = t.C
			}
			select {
			case <-p.capCh:
			case <-tick.C:
			case <-check:
			case <-txnDue:
			case <-p.txnKick:
			case <-ctx.Done():
			}
			if t != nil {
				t.Stop()
			}
			continue
		}
		// A bounded poll, so an idle loop still beats (liveness).
		pctx, cancel := context.WithTimeout(ctx, wait)
		if p.eos {
			p.pollCancel.Store(&cancel)
		}
		fs := p.cl.PollRecords(pctx, n)
		if p.eos {
			p.pollCancel.Store(nil)
		}
		cancel()
		if fs.IsClientClosed() {
			return errors.New("kafka client closed")
		}
		var fatal error
		fs.EachError(func(topic string, part int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			if f := fatalPollErr(p.cfg.GroupID(), topic, p.pc.Principal, err); f != nil {
				fatal = f
				return
			}
			p.log.Error("fetch failed", "topic", topic, "partition", part, "err", err)
		})
		if fatal != nil {
			return fatal
		}
		now := time.Now()
		fs.EachPartition(func(f kgo.FetchTopicPartition) {
			if len(f.Records) > 0 {
				// What can be fetched ends at the last stable offset:
				// records of an open transaction past it are not (yet).
				end := f.HighWatermark
				if f.LastStableOffset >= 0 && f.LastStableOffset < end {
					end = f.LastStableOffset
				}
				p.admit(f.Topic, f.Partition, f.Records, end, now)
			}
		})
	}
	return nil
}

// admit takes polled records in: main-topic records are dispatched at once,
// tier records when due.
// end is where the partition's fetchable records end (a tier's pending
// records, duefirst.go).
func (p *pipeline) admit(topic string, part int32, recs []*kgo.Record, end int64, now time.Time) {
	data := len(recs)
	if recs[len(recs)-1].Attrs.IsControl() || recs[0].Attrs.IsControl() {
		data = 0
		for _, r := range recs {
			if !r.Attrs.IsControl() {
				data++
			}
		}
	}
	p.hot.consumedFor(topic).Add(float64(data))
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.parts[tp{topic, part}]
	if ps == nil || ps.revoking || ps.gone {
		// Not ours (any more): the next owner reads them from the committed offset.
		return
	}
	for _, r := range recs {
		if r.Attrs.IsControl() {
			// A transaction marker: finished as it comes.
			ps.offsets.finish(ps.offsets.add(r))
			continue
		}
		w := &work{rec: r, ps: ps, e: ps.offsets.add(r), size: int64(len(r.Key) + len(r.Value))}
		p.noteOversize(w)
		if ps.tier < 0 {
			p.dispatchLocked(w)
			continue
		}
		w.decode()
		if w.decodeErr == nil {
			w.waitUntil = p.waitUntil(ps.tier, w, now)
		}
		// A job whose callback came before its record: finished at once.
		p.takeCallback(w)
		if w.cb != nil || w.decodeErr != nil || !w.waitUntil.After(now) {
			p.dispatchLocked(w)
			continue
		}
		ps.waiting++
		p.waiting++
		if w.waitUntil.After(ps.lastWait) {
			ps.lastWait = w.waitUntil
		}
		if p.waitsForCallback(w) {
			p.indexLocked(w) // before the push: matchWaiting holds p.mu too
		}
		p.sched.push(w)
		if ps.waiting >= p.cfg.MaxWaiting && !ps.paused {
			ps.paused = true
			p.cl.PauseFetchPartitions(map[string][]int32{topic: {part}})
			p.m.pausedParts.WithLabelValues(p.cfg.Name).Inc()
		}
	}
	if ps.tier >= 0 {
		p.noteTierFetch(ps, recs[len(recs)-1].Offset+1, end, now)
	}
	p.hot.waiting.Set(float64(p.waiting))
}

// waitUntil is when a tier record may be handled: its due time, but no later
// than the tier's delay (plus jitter) after the record was written. A record
// due later than that (a minimum delay longer than the largest tier, or a
// foreign producer's far due time) is looked at then and hops through the
// tier again, so it never holds up the records behind it. A record
// timestamp more than clockSkew in the future counts as now (counted in
// redrive_future_times_clamped_total), or it would
// hold the record, and the partition's commit point, until then.
func (p *pipeline) waitUntil(tier int, w *work, now time.Time) time.Time {
	d := p.cfg.Schedule.Tiers[tier]
	written := w.rec.Timestamp
	if written.After(now.Add(clockSkew)) {
		written = now
		p.hot.countClamped(1 << clampRecordTimestamp)
	}
	limit := written.Add(d + time.Duration(float64(d)*p.cfg.Schedule.Jitter) + 10*time.Millisecond)
	if w.meta.Due.After(limit) {
		return limit
	}
	return w.meta.Due
}

func (w *work) decode() {
	if w.decoded {
		return
	}
	w.decoded = true
	// The record's header bytes are never changed and live as long as w.
	w.meta, w.user, w.decodeErr = retry.DecodeView(w.rec.Headers)
}

// onDue is called by the scheduler when a waiting record is due.
func (p *pipeline) onDue(w *work) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unindexLocked(w)
	if w.ps.gone || w.ps.revoking {
		return
	}
	p.dueLocked(w)
}

// dueLocked dispatches w, taken out of the scheduler (due, or its
// callback came), and resumes its partition when few records wait. p.mu
// held; w.ps is neither gone nor revoking.
func (p *pipeline) dueLocked(w *work) {
	ps := w.ps
	ps.waiting--
	p.waiting--
	p.hot.waiting.Set(float64(p.waiting))
	p.dispatchLocked(w)
	if ps.paused && (ps.waiting <= p.cfg.MaxWaiting/2 || time.Until(ps.lastWait) < resumeLead) {
		ps.paused = false
		p.cl.ResumeFetchPartitions(map[string][]int32{ps.tp.topic: {ps.tp.partition}})
		p.m.pausedParts.WithLabelValues(p.cfg.Name).Dec()
	}
}

// dispatchLocked starts w, or queues it behind its key's lane. p.mu held.
func (p *pipeline) dispatchLocked(w *work) {
	p.inflight++
	p.bytes += w.size
	w.ps.inflight++
	p.hot.inflight.Set(float64(p.inflight))
	if p.cfg.OrderByKey && w.rec.Key != nil {
		k := string(w.rec.Key)
		if l := p.lanes[k]; l != nil {
			l.queue = append(l.queue, w)
			return
		}
		p.lanes[k] = &lane{}
	}
	p.startLocked(w)
}

// startLocked queues w for a worker, starting one if fewer than
// Concurrency run; due work goes ahead of the main topic's (runQueue).
// p.mu held.
func (p *pipeline) startLocked(w *work) {
	p.wg.Add(1)
	p.runq.push(w)
	if p.workers < p.cfg.Concurrency {
		p.workers++
		go p.worker()
	}
}

// worker handles queued work until the queue is empty, then exits. At most
// Concurrency workers run, so at most Concurrency handler calls are in
// flight; a worker lives across records, so its stack is grown once rather
// than once per record.
func (p *pipeline) worker() {
	for {
		p.mu.Lock()
		w := p.runq.pop()
		if w == nil {
			p.workers--
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.work(w)
	}
}

// work handles w on a worker. The worker moves on to the next record as
// soon as the outcome record is handed to the producer; w stays in flight
// until the broker acknowledges it. Work of a revoked partition (or past
// the shutdown grace) is abandoned: process sees its cancelled context.
func (p *pipeline) work(w *work) {
	d, ok := p.process(w)
	switch {
	case !ok && w.yieldNow:
		w.yieldNow = false
		p.mu.Lock()
		p.runq.pushDue(w) // not fresh work: it failed before, or it would not yield
		p.mu.Unlock()
	case !ok:
		p.complete(w, false)
	case p.eos:
		p.hold(w, d) // written in the next transaction (txn.go)
	case d.to == "":
		p.complete(w, true)
	default:
		p.send(w.ps.ctx, w, d)
	}
}

// complete records the end of w: finished means its outcome is acknowledged
// and its offset may be committed.
func (p *pipeline) complete(w *work, finished bool) { p.completeWith(w, finished, nil) }

// completeWith is complete for w whose retry record (its outcome) was
// acknowledged, when retry is not nil: the tier partition it went to
// notes it (noteTierWriteLocked).
func (p *pipeline) completeWith(w *work, finished bool, retry *kgo.Record) {
	if w.cb != nil || w.via != viaNone || w.polledJob != "" {
		p.finishJob(w, finished)
	}
	p.mu.Lock()
	if retry != nil {
		p.noteTierWriteLocked(retry, w.meta.Due) // w.meta: the outcome record's (outcomeRecord)
	}
	p.releaseLocked(w, finished)
	p.nextInLaneLocked(w)
	p.mu.Unlock()
	p.signalCap()
	p.wg.Done()
}

// releaseLocked takes w out of flight; finished marks its tracker entry
// (its outcome is written, its offset may be committed). p.mu held.
func (p *pipeline) releaseLocked(w *work, finished bool) {
	ps := w.ps
	if finished && !ps.gone {
		ps.offsets.finish(w.e)
	}
	ps.inflight--
	p.inflight--
	p.bytes -= w.size
	p.hot.inflight.Set(float64(p.inflight))
}

// nextInLaneLocked starts the next record of w's key (ordering: key), if
// one waits. p.mu held.
func (p *pipeline) nextInLaneLocked(w *work) {
	if !p.cfg.OrderByKey || w.rec.Key == nil {
		return
	}
	k := string(w.rec.Key)
	l := p.lanes[k]
	if l == nil {
		return
	}
	if len(l.queue) == 0 {
		delete(p.lanes, k)
		return
	}
	var next *work
	next, l.queue = l.queue[0], l.queue[1:]
	p.startLocked(next)
}

// signalCap wakes a poll loop waiting at the in-flight bound.
func (p *pipeline) signalCap() {
	select {
	case p.capCh <- struct{}{}:
	default:
	}
}

func (p *pipeline) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	p.mu.Lock()
	for topic, parts := range assigned {
		tier, ok := p.tierOf[topic]
		if !ok {
			continue
		}
		for _, part := range parts {
			ctx, cancel := context.WithCancel(p.hctx)
			p.parts[tp{topic, part}] = &partState{
				tp: tp{topic, part}, tier: tier, offsets: newOffsetTracker(),
				ctx: ctx, cancel: cancel, committed: -1,
			}
		}
	}
	p.mu.Unlock()
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

// resumeLead is how long before its last held record is due a paused tier
// partition resumes, to cover the fetch round trip.
const resumeLead = 300 * time.Millisecond

// revokeWait bounds how long a revoke waits for in-flight work.
const revokeWait = 5 * time.Second

func (p *pipeline) drop(ctx context.Context, cl *kgo.Client, tps map[string][]int32, commit bool) {
	var states []*partState
	p.mu.Lock()
	for topic, parts := range tps {
		for _, part := range parts {
			if ps := p.parts[tp{topic, part}]; ps != nil {
				ps.revoking = true
				ps.leaving.Store(true)
				states = append(states, ps)
			}
		}
	}
	closing := p.closing
	p.mu.Unlock()
	p.line.kick() // records of these partitions waiting for the line leave
	if len(states) == 0 {
		return
	}
	if p.eos {
		// Exactly-once: nothing is committed here. franz-go's session
		// aborts a transaction across this rebalance, and calling End
		// from this callback would deadlock; held outcomes of these
		// partitions are dropped and their records redelivered.
		commit = false
	}
	if commit && !closing {
		deadline := time.Now().Add(revokeWait)
		for time.Now().Before(deadline) {
			p.mu.Lock()
			busy := 0
			for _, ps := range states {
				busy += ps.inflight
			}
			p.mu.Unlock()
			if busy == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	p.commitMu.Lock()
	defer p.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	for _, ps := range states {
		ps.gone = true
		ps.cancel()
		p.waiting -= ps.waiting
		if ps.paused {
			p.m.pausedParts.WithLabelValues(p.cfg.Name).Dec()
		}
		ps.waiting, ps.paused = 0, false
		delete(p.parts, ps.tp)
		if eo, ok := ps.offsets.commitPoint(); ok && eo.Offset > ps.committed {
			if offsets[ps.tp.topic] == nil {
				offsets[ps.tp.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[ps.tp.topic][ps.tp.partition] = eo
		}
	}
	for _, w := range p.jobs {
		if w.ps.gone {
			p.unindexLocked(w) // the next owner matches it from its own store
		}
	}
	p.sched.purge(func(w *work) bool { return w.ps.gone })
	p.hot.waiting.Set(float64(p.waiting))
	var held []*work
	if p.eos {
		for _, ps := range states {
			held = p.takeHeldLocked(ps, held)
		}
	}
	p.mu.Unlock()
	p.settle(held, false)
	cl.ResumeFetchPartitions(tps)
	if commit && len(offsets) > 0 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := p.commitOffsets(cctx, offsets); err != nil {
			p.log.Warn("commit on revoke failed; the records will be redelivered to the next owner", "err", err)
		}
	}
	p.log.Info("partitions dropped", "partitions", tps, "committed", commit)
}

func (p *pipeline) commitLoop(ctx context.Context) {
	t := time.NewTicker(p.pc.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.commitMu.Lock()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.commit(cctx); err != nil {
			p.log.Warn("commit failed", "err", err)
		}
		cancel()
		p.commitMu.Unlock()
	}
}

// commit commits every owned partition's commit point that moved. Callers
// hold commitMu, so no revoke runs meanwhile.
func (p *pipeline) commit(ctx context.Context) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	for _, ps := range p.parts {
		if ps.gone {
			continue
		}
		if eo, ok := ps.offsets.commitPoint(); ok && eo.Offset > ps.committed {
			if offsets[ps.tp.topic] == nil {
				offsets[ps.tp.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[ps.tp.topic][ps.tp.partition] = eo
		}
	}
	p.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	return p.commitOffsets(ctx, offsets)
}

func (p *pipeline) commitOffsets(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
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
				p.mu.Lock()
				if ps := p.parts[tp{t.Topic, pr.Partition}]; ps != nil {
					ps.committed = offsets[t.Topic][pr.Partition].Offset
				}
				p.mu.Unlock()
			}
		}
	})
	if cerr != nil {
		p.m.commitFailures.WithLabelValues(p.cfg.Name).Inc()
	}
	return cerr
}

// pauseFetch is the line's: stop or resume fetching the main topic and
// the tiers. Topic pauses are the client's and outlive rebalances;
// partition pauses (MaxWaiting, onAssigned's resume) are separate.
func (p *pipeline) pauseFetch(main, tiers bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fetch.lineMain, p.fetch.lineTiers = main, tiers
	p.applyFetchLocked()
}

// setWriteErr records that an outcome write fails; clearWriteErr that it
// went through after all.
func (p *pipeline) setWriteErr(err error) {
	p.lastWriteMu.Lock()
	p.lastWrite = err
	p.lastWriteMu.Unlock()
	p.writeFails.Add(1)
	p.ready()
}

func (p *pipeline) clearWriteErr() {
	p.writeFails.Add(-1)
	p.ready()
}
