package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	// idle, while revoking, is closed once no work of the partition is in
	// flight (a revoke waits for it before it commits).
	idle chan struct{}
	// Tier partitions (fetchorder.go): next is the offset after the last
	// record fetched (0: none yet); pending what is known to be there
	// after it and when it is wanted.
	next    int64
	pending pendingList
	// share: a main-topic partition read by the share group
	// (sharegroup.go): its records are acknowledged one by one, it has no
	// offsets to commit and no owner.
	share *shareReader
}

// work is one record from poll to finish. Its parts are grouped by who
// uses them; each group is embedded, so its fields read as w's own.
type work struct {
	rec       *kgo.Record
	ps        *partState
	e         *entry
	meta      retry.Meta // the decoded headers; from send on, the outcome record's
	user      []kgo.RecordHeader
	decodeErr error
	decoded   bool
	waitUntil time.Time
	// at is when process last read the clock for w: the decision's time,
	// which the outcome record's times use.
	at      time.Time
	size    int64
	heapIdx int // its place in the waiting room's heap (waitroom.go)
	// deliveries is the share group's delivery count of a main-topic
	// record (consume: share), 0 otherwise. crashed: past max_deliveries
	// with the evidence (sharesolo.go), dead-lettered without a call;
	// alone: it has an alone record on the control topic, to end once it
	// has its outcome.
	deliveries int
	crashed    bool
	alone      bool

	jobWork  // callbacks and polls of a job (callback_match.go)
	txnWork  // exactly-once (txn.go)
	lineWork // the line's hold on it (line.go)
}

// jobWork is what a record's job (a submit/poll API) needs.
type jobWork struct {
	// cb is the callback attached to the record: it is finished with the
	// callback's outcome, no handler call.
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
}

// txnWork is the outcome record held for the next transaction (nil: none,
// the record only commits its offset), its kind, and whether it is in the
// transaction being written; pooled is the pooled record it was built in,
// put back once its transaction commits.
type txnWork struct {
	out    *kgo.Record
	outTo  outKind
	inTxn  bool
	pooled *outRec
}

// lineWork: held says the record failed transiently while the breaker was
// not closed and waits to be called again, heldCode with which code;
// yielded says it was given back to the run queue (enterYield, or after
// a 429's wait) and is processed again from the start (counted once),
// yieldNow that process just did so; throttles counts the waits a 429
// made it take (Outcome.Throttled, throttle.go), at most
// MaxThrottleWaits, and paceFor is the wait process just asked for; seq
// is its number in the order of dispatch (dispatchLocked), which tells
// the breaker whether it was in the pipeline when the breaker last opened.
type lineWork struct {
	heldCode                string
	seq                     uint64
	paceFor                 time.Duration
	throttles               int
	held, yielded, yieldNow bool
}

// pipeline runs one Pipeline: a consumer group over the main topic and the
// tiers, and the producer for outcomes (one kgo client does both). It
// wires the parts, each in its own file:
//
//	poll.go        the poll loop: admits fetched records
//	waitroom.go    tier records held until due (its own lock)
//	fetchorder.go  due tier records fetched ahead of the main topic
//	dispatch.go    the run queue, key lanes and workers
//	process.go     one record through screen, the line, the handler, decide
//	line.go        flow control: rate, breaker, pause codes, guard, manual pause, failover
//	commit.go      outcome writes and offset commits (txn.go: exactly-once)
//	rebalance.go   partitions assigned, revoked, lost
//	callback_*.go  callbacks: reader, store, matching
type pipeline struct {
	cfg    Pipeline
	pol    policy
	pc     *Config
	h      Handler
	cl     *kgo.Client
	log    *slog.Logger
	m      *metrics
	hot    hotMetrics
	tierOf map[string]int
	tiers  []string

	clk     clock     // the wall clock of due times (clock.go)
	room    *waitRoom // tier records until due
	line    *line     // whether a handler call may start
	commits committer // how outcomes are written and offsets committed
	out     outputs   // builds outcome records (deadletter.go)
	// throttled holds records waiting out a 429 (throttle.go).
	throttled throttledRoom
	// cbs reads the pipeline's callbacks (nil without Callbacks).
	cbs *callbacks
	// share reads the main topic in a share group (consume: share; nil
	// otherwise, when the consumer group reads it with the tiers).
	share *shareReader
	// members are the replicas of a share pipeline its status records
	// name (share.go); reshareMu makes reshares one at a time.
	members   shareMembers
	reshareMu sync.Mutex

	capCh chan struct{} // wakes the poll loop at the in-flight bound
	// sentFn is p.sent, made once: the promise of every outcome record.
	sentFn func(*kgo.Record, error)
	hctx   context.Context
	hstop  context.CancelFunc // cancels hctx, the handlers' context, past the shutdown grace
	wg     sync.WaitGroup     // dispatched work not finished

	// mu guards the partitions, the in-flight bound, the dispatcher and
	// the fetch state: they change together.
	mu       sync.Mutex
	parts    map[tp]*partState
	inflight int   // dispatched, not finished
	bytes    int64 // bytes of those
	waiting  int   // tier records in the waiting room
	closing  bool
	disp     dispatcher // run queue, lanes, workers (dispatch.go)
	fetch    fetchState // topics held from fetching (fetchorder.go)
	// jobs indexes the records waiting in the waiting room by job id.
	jobs map[string]*work
	// atBound: the poll loop waits at the in-flight bound (tierEndsLoop).
	atBound atomic.Bool

	// polls, viaCallback, viaPoll count for CallbackStatus.
	polls, viaCallback, viaPoll atomic.Uint64

	// topicMax holds each output topic's max.message.bytes, learned at
	// start (probe); a topic missing from it gets Kafka's default.
	topicMax atomic.Pointer[map[string]int]
	// batchMax is the client's ProducerBatchMaxBytesFn: redrive's (the
	// smaller of the default and the topic's limit) unless ClientOpts set
	// one; brokerMax its BrokerMaxWriteBytes.
	batchMax  func(string) int32
	brokerMax int32
	recreated recreatedTopics // output topics deleted and recreated (recreated.go)

	// built is closed once newPipeline has set every field (or given
	// up): the client starts joining the group as soon as it exists, and
	// the group's callbacks read the client and the committer.
	built chan struct{}

	joined atomic.Bool
	// partCounts and shareNow: the pipeline's partitions and this
	// process's share of its budgets (share.go).
	partCounts  atomic.Pointer[partTotals]
	shareNow    atomic.Pointer[shareState]
	writeFails  atomic.Int64 // outcome writes failing right now
	lastWriteMu sync.Mutex
	lastWrite   error

	// noKind warns once of a handler returning an Outcome without a Kind.
	noKind sync.Once
	// foreignState warns once of a main-topic record with redrive-state.
	foreignState sync.Once
}

// testHookBuilding runs in newPipeline once the client exists (tests of
// group callbacks that come before the pipeline is built).
var testHookBuilding func()

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
		jobs:   map[string]*work{},
		built:  make(chan struct{}),
	}
	p.sentFn = p.sent
	p.disp.lanes = map[string]*lane{}
	if cfg.Callbacks != nil {
		p.cbs = newCallbacks(*cfg.Callbacks, m, cfg.Name)
	}
	for i, t := range p.tiers {
		p.tierOf[t] = i
	}
	p.hot.init(m, cfg.Name)
	p.hot.precreate(cfg, p.tiers)
	p.hctx, p.hstop = context.WithCancel(context.Background())
	p.clk = pc.clock
	if p.clk == nil {
		p.clk = wallClock{}
	}
	p.room = newWaitRoom(p.onDue, p.clk)
	p.throttled.room = newWaitRoom(p.onPaced, p.clk)
	p.line = newLine(cfg, p.log, m, p.pauseFetch)
	p.line.freshQueued = p.disp.runq.freshWaiting
	p.line.freshNewest = p.disp.runq.freshNewest
	p.line.dispatched = p.disp.dispatched.Load
	p.disp.runq.freshFirst = &p.line.notClosed
	opts := append(p.clientOpts(), pc.ClientOpts...)
	opts = append(opts, extra...)
	commits, cl, err := newCommitter(p, opts)
	if err != nil {
		close(p.built)
		return nil, fmt.Errorf("pipeline %s: kafka client: %w", cfg.Name, err)
	}
	p.commits, p.cl = commits, cl
	if testHookBuilding != nil {
		testHookBuilding()
	}
	if cfg.Consume == ConsumeShare {
		if p.share, err = newShareReader(p); err != nil {
			close(p.built) // before Close, which waits for the callbacks
			cl.Close()
			return nil, err
		}
	}
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
	close(p.built)
	return p, nil
}

// clientOpts are the pipeline's kgo options, before Config.ClientOpts.
func (p *pipeline) clientOpts() []kgo.Opt {
	cfg, pc := p.cfg, p.pc
	return []kgo.Opt{
		kgo.SeedBrokers(pc.Brokers...),
		kgo.ClientID("redrive-" + pc.Instance),
		kgo.ConsumerGroup(cfg.GroupID()),
		kgo.ConsumeTopics(p.groupTopics()...),
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
		// A batch never holds more than a topic takes, so that several
		// dead letters batched together are not refused as one. franz-go
		// asks once per partition, on its first produce: after probe.
		// ClientOpts may replace it (then batches are as large as the
		// caller says).
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			return int32(max(minBatchBytes, min(dlq.DefaultProducerBatchBytes, p.topicLimit(topic))))
		}),
	}
}

// groupTopics are the topics the consumer group reads: the tiers, and
// the main topic unless a share group reads it.
func (p *pipeline) groupTopics() []string {
	if p.cfg.Consume == ConsumeShare {
		return p.tiers
	}
	return append([]string{p.cfg.Topic}, p.tiers...)
}

func (p *pipeline) ready() {
	if p.pc.Ready == nil {
		return
	}
	name := "pipeline " + p.cfg.Name
	switch {
	case !p.joined.Load():
		p.pc.Ready(name, errors.New("consumer group "+p.cfg.GroupID()+" not joined yet"))
	case p.commits.failure() != nil:
		p.pc.Ready(name, p.commits.failure())
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
	// /healthz names the pipeline from start: the group may join (and
	// /readyz say ready) while the probe below still runs.
	p.beat()
	p.probe(ctx)
	if p.share != nil {
		p.share.prepare(ctx)
	}
	p.learnTotals(ctx)
	p.reshare() // nothing owned yet: no call until the assignment
	p.ready()
	var loops sync.WaitGroup
	for _, loop := range p.loops() {
		loops.Add(1)
		go func() {
			defer loops.Done()
			loop(ctx)
		}()
	}
	if p.cbs != nil {
		// Records redelivered after a restart find the callbacks that came
		// while no one read them.
		p.awaitCallbacks(ctx)
	}
	err := p.pollLoop(ctx)
	stopAll()
	// Records waiting for a stopped line leave at once (they are
	// redelivered). No new work from here on: every loop (the waiting
	// room's, the callbacks reader's) ends before the drain wait, so
	// nothing calls wg.Add while wg.Wait runs (a record due now simply
	// stays uncommitted and is redelivered).
	p.line.stop()
	loops.Wait()
	p.closeThrottled()
	return p.shutdown(err)
}

// loops are the goroutines that run beside the poll loop, until its ctx
// ends.
func (p *pipeline) loops() []func(context.Context) {
	loops := []func(context.Context){p.room.run, p.throttled.room.run, p.commits.loop, p.lagLoop, p.tierEndsLoop, p.line.run}
	if p.share != nil {
		loops = append(loops, p.share.run)
	}
	if p.cbs != nil {
		loops = append(loops, func(ctx context.Context) { p.readCallbacks(ctx, time.Now()) })
	}
	return loops
}

// shutdown stops fetching, lets in-flight work finish within the grace,
// commits it and leaves the group. err is the poll loop's.
func (p *pipeline) shutdown(err error) error {
	p.log.Info("stopping: finishing in-flight work", "inflight", p.inflightNow(), "grace", p.pc.ShutdownGrace)
	p.cl.PauseFetchTopics(append([]string{p.cfg.Topic}, p.tiers...)...)
	drained := make(chan struct{})
	go func() { p.wg.Wait(); close(drained) }()
	// Transactions go on while it drains (txnCommitter.drain).
	if !p.commits.drain(drained, time.After(p.pc.ShutdownGrace)) {
		p.log.Warn("shutdown grace over: abandoning in-flight work, it will be redelivered", "inflight", p.inflightNow())
		p.hstop()
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
		}
	}
	p.hstop()
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	cerr := p.commits.final()
	if p.share != nil {
		p.share.close()
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

// space is how many more records may be polled, 0 at the bound. While
// the main topic is held for the tiers (fetchorder.go) only tier records
// come, up to a quarter more than the bound.
func (p *pipeline) space() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdMainLocked(p.clk.Now())
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

// mainStopped says the main topic is not to be fetched now: the line
// stops it, or it is held for due tier records.
func (p *pipeline) mainStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fetch.lineMain || p.fetch.held
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
