package analyzer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/dlqread"
	"github.com/redrive/redrive/internal/topicread"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/topics"
)

// Pipeline is one DLQ the analyzer reads.
type Pipeline struct {
	// Name is the pipeline's name; the rule worker's group is
	// topics.AnalyzerGroupID(Name), "redrive.<Name>.analyzer".
	Name string
	// Topic is the pipeline's main topic, where republish writes by default.
	Topic string
	// DLQ is the dead-letter topic.
	DLQ string
	// Rules decide per dead letter; first match wins, no match keeps.
	Rules []dlq.Rule
	// Tiers and Results complete the flow view (GET /api/pipelines); the
	// processors' group is "redrive.<Name>".
	Tiers   []Tier
	Results string
	// ExactlyOnce (the pipeline's delivery: exactly-once) makes the rule
	// worker write each transaction's republished records and its offset
	// commit in one Kafka transaction (txn.go), with the transactional id
	// TransactionalID(Options.Instance): a read_committed reader of the
	// republish targets sees every republish once, even across kill -9.
	ExactlyOnce bool
	// Share (consume: share): the main topic is read by the share group
	// topics.ShareGroupID(Name); the flow view reads its start offsets.
	Share bool
}

// GroupID is the rule worker's consumer group.
func (p Pipeline) GroupID() string { return topics.AnalyzerGroupID(p.Name) }

// TransactionalID is the rule worker's transactional id in exactly-once
// mode: "redrive.<Name>.analyzer.<instance>".
func (p Pipeline) TransactionalID(instance string) string { return p.GroupID() + "." + instance }

// Options configure an Analyzer.
type Options struct {
	// ClientOpts connect to the brokers (seed brokers, SASL, TLS).
	ClientOpts []kgo.Opt
	// Principal is who the broker's authorizer sees ("User:redrive"),
	// named in the ACL a refused read asks for; "" when not known.
	Principal string
	Pipelines []Pipeline
	// Alerts are evaluated every AlertEvery (default 10s).
	Alerts     []Alert
	AlertEvery time.Duration
	// Registerer receives the analyzer's metrics (default: a private registry).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Ready and Beat report into /readyz and /healthz. Optional.
	Ready func(name string, err error)
	Beat  func(name string)
	// Recent is how many dead letters per pipeline are kept for browsing
	// (default 10000); Limits bound them, and the API, by bytes.
	Recent int
	Limits
	// FlowEvery is how often the flow view samples the pipelines' offsets
	// (default 3s).
	FlowEvery time.Duration
	// Processors are base URLs of processors (their http_addr) whose
	// GET /api/pipelines the flow view adds: in flight, records held per
	// tier, p99s. Optional: rates and waiting come from Kafka alone.
	Processors []string
	// AllowedHosts are the names (no port) a request's Host may carry to
	// reach the dashboard and API, besides localhost, 127.0.0.1 and ::1;
	// "*" allows any. Others are answered 421 (DNS rebinding).
	AllowedHosts []string
	// HideValues shows every dead letter's value as its size and
	// ValueHash, never its bytes, in the API and so the dashboard (the
	// recent list, GET /api/deadletters/{partition}/{offset}, the replay
	// sample); the recent list keeps no byte of a value then.
	// Replay still republishes the values: it reads them from Kafka.
	HideValues bool
	// OpenReads lets the reads (GET /api/*) through without a token even
	// when Access has one: only `redrive dev` sets it, on loopback, when
	// the token is the one dev picked itself to turn replay on.
	OpenReads bool
	// Now is the clock (tests).
	Now func() time.Time
	// Instance names this process in the transactional id of the rule
	// workers of ExactlyOnce pipelines (default: the host name). Two live
	// analyzers must not share one: each fences the other's transactions.
	Instance string
	// SessionTimeout is the rule worker's consumer group session timeout
	// (default: franz-go's, 45s): how long its group waits for a silent
	// member (a killed analyzer) before giving its partitions to others.
	SessionTimeout time.Duration
	// DemoOutage, set only by `redrive dev`, makes its demo solver fail
	// every call for d (0 ends an outage): POST /api/dev/outage calls it,
	// and the dashboard shows a button for it. Nil: that endpoint is a 404.
	DemoOutage func(ctx context.Context, d time.Duration) error
	// ControlTopic is the control topic the pipelines' processors share
	// (package control; default control.DefaultTopic, "redrive.control"):
	// the analyzer follows it to show every replica (GET /api/control) and
	// writes an operator's pause and resume to it. One it cannot read is
	// reported there and in the log; the analyzer runs on without it.
	ControlTopic string
}

// Analyzer runs the readers, workers and alerts of every pipeline.
type Analyzer struct {
	o     Options
	m     *metrics
	log   *slog.Logger
	pipes []*pipe
	// admin is created in New, not Run, so that the API (served before
	// Run starts) never reads it while Run writes it; Run closes it.
	admin *kgo.Client
	procs processorPoll // Options.Processors' last answers
	busy  chan struct{} // one per expensive request being answered (limit.go)
	ctl   *controlView  // the control topic read so far (control.go)
}

// pipe is one pipeline's state.
type pipe struct {
	cfg   Pipeline
	stats *dlq.Stats
	mu    sync.Mutex
	// recent is a ring of the newest dead letters, newest at head-1: at
	// most len(recent) of them (Options.Recent), n now, costing bytes in
	// all, at most Limits.RecentBytes; the oldest go first.
	recent []*kept
	head   int
	n      int
	bytes  int64
	ready  bool // the statistics reader reached the end offsets seen at start

	depth        int64     // DLQ records not yet handled by the rule worker
	oldestUnseen time.Time // dead-lettering time of the oldest not yet handled

	flow flowState // offsets sampled for GET /api/pipelines
}

// New checks the options and creates the Kafka client it shares between
// Run and the API; nothing connects before the first request (kgo dials
// lazily). Run closes the client when it returns.
func New(o Options) (*Analyzer, error) {
	if len(o.Pipelines) == 0 {
		return nil, errors.New("analyzer: no pipelines")
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Recent <= 0 {
		o.Recent = 10000
	}
	if err := o.Limits.Validate(); err != nil {
		return nil, err
	}
	o.Limits = o.Limits.WithDefaults()
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AlertEvery <= 0 {
		o.AlertEvery = 10 * time.Second
	}
	if o.FlowEvery <= 0 {
		o.FlowEvery = 3 * time.Second
	}
	if o.Instance == "" {
		o.Instance, _ = os.Hostname()
	}
	if o.ControlTopic == "" {
		o.ControlTopic = control.DefaultTopic
	}
	if o.SessionTimeout < 0 {
		return nil, fmt.Errorf("analyzer: session timeout %v: must not be negative", o.SessionTimeout)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Analyzer{o: o, m: m, log: o.Logger.With("component", "analyzer"), busy: make(chan struct{}, o.MaxRequests),
		ctl: newControlView(o.ControlTopic)}
	for _, p := range o.Pipelines {
		if p.Name == "" || p.DLQ == "" {
			return nil, fmt.Errorf("analyzer: pipeline %q needs a name and a DLQ", p.Name)
		}
		if p.ExactlyOnce && o.Instance == "" {
			return nil, fmt.Errorf("analyzer: pipeline %q is exactly-once: it needs an instance (the host name is unknown)", p.Name)
		}
		a.pipes = append(a.pipes, &pipe{cfg: p, stats: dlq.NewStats(10000), recent: make([]*kept, o.Recent)})
	}
	m.precreate(a.pipes, o.Alerts)
	admin, err := kgo.NewClient(o.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("analyzer: kafka client: %w", err)
	}
	a.admin = admin
	return a, nil
}

// Run reads, decides and alerts until ctx is done, or until a reader or
// worker fails (an error no retry fixes, such as a revoked ACL): then
// every loop stops and Run returns the errors.
func (a *Analyzer) Run(ctx context.Context) error {
	defer a.admin.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2*len(a.pipes))
	stopOn := func(slot *error, err error) {
		if *slot = err; err != nil {
			cancel()
		}
	}
	for i, p := range a.pipes {
		wg.Add(2)
		go func() { defer wg.Done(); stopOn(&errs[2*i], a.readStats(ctx, p)) }()
		go func() { defer wg.Done(); stopOn(&errs[2*i+1], a.work(ctx, p)) }()
	}
	wg.Add(4)
	go func() { defer wg.Done(); a.followControl(ctx) }() // control.go; never stops Run
	go func() { defer wg.Done(); a.flowLoop(ctx) }()
	go func() { defer wg.Done(); a.depthLoop(ctx) }()
	go func() { defer wg.Done(); a.alertLoop(ctx) }()
	wg.Wait()
	return errors.Join(errs...)
}

// readStats rebuilds p's statistics from the earliest retained offset and
// follows new dead letters.
func (a *Analyzer) readStats(ctx context.Context, p *pipe) error {
	name := "analyzer " + p.cfg.Name + " statistics"
	a.ready(name, errors.New("rebuilding statistics from "+p.cfg.DLQ))
	f, err := topicread.Open(ctx, p.cfg.DLQ, a.o.ClientOpts, a.fromEarliest(p.cfg.DLQ),
		topicread.RetryList(2*time.Second, func(err error) {
			a.log.Error("cannot read the DLQ's end offsets; retrying", "dlq", p.cfg.DLQ, "err", err)
			a.ready(name, fmt.Errorf("reading %s: %w", p.cfg.DLQ, err))
		}),
		topicread.ReadCommitted(),
		topicread.FetchMaxWait(500*time.Millisecond),
		topicread.PollWait(2*time.Second),
		topicread.MaxRecords(5000),
	)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("analyzer %s: %w", p.cfg.Name, err)
	}
	defer f.Close()
	start := time.Now()
	rebuilt := func() {
		p.mu.Lock()
		was := p.ready
		p.ready = true
		p.mu.Unlock()
		if !was {
			a.log.Info("statistics rebuilt", "pipeline", p.cfg.Name, "dead_letters", p.stats.Snapshot(a.o.Now(), 0).Total, "took", time.Since(start).Round(time.Millisecond))
			a.ready(name, nil)
		}
	}
	for ctx.Err() == nil {
		if f.CaughtUp() {
			rebuilt()
		}
		a.beat(name)
		b, err := f.Poll(ctx)
		if err != nil {
			return nil
		}
		if fatal := a.fetchErrors(b.Errs, ""); fatal != nil {
			return fatal
		}
		for _, r := range b.Records {
			a.add(p, r)
		}
	}
	return nil
}

// fromEarliest lists where the statistics and control readers start:
// every partition of topic from its earliest retained offset, caught up
// at its end offset.
func (a *Analyzer) fromEarliest(topic string) topicread.Lister {
	return func(ctx context.Context) (topicread.Start, error) {
		bounds, err := a.dlqBounds(ctx, topic)
		if err != nil {
			return topicread.Start{}, err
		}
		return dlqread.StartOf(bounds), nil
	}
}

// add takes one DLQ record into the statistics, the recent list and the
// per-rule counts (decided by the rules, which are deterministic, so every
// replica counts alike). A record that is not a valid dead letter is only
// counted as undecodable, as `redrive dlq stats` counts it: the rule
// worker never republishes one.
func (a *Analyzer) add(p *pipe, r *kgo.Record) {
	d, err := dlq.Decode(r)
	if err != nil {
		a.m.undecodable.WithLabelValues(p.cfg.Name).Inc()
		p.stats.Undecodable()
		a.log.Warn("not a valid dead letter; counted, never republished", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return
	}
	if clampFuture(d, a.o.Now()) { // clock.go
		a.m.futureTimestamps.WithLabelValues(p.cfg.Name).Inc()
		a.log.Warn("dead letter dated in the future; taken as dead-lettered now", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "timestamp", r.Timestamp)
	}
	p.stats.Add(d)
	a.m.deadLetters.WithLabelValues(p.cfg.Name, a.m.reason(p.cfg.Name, d.Reason), a.m.code(p.cfg.Name, d.Code)).Inc()
	dec := dlq.Decide(p.cfg.Rules, d, p.cfg.Topic)
	switch dec.Action {
	case dlq.ActionRepublish:
		if d.Truncated > 0 { // refused by dlq.Republish: the worker keeps it
			p.stats.Kept(dec.Rule)
		} else {
			p.stats.Republished(dec.Rule)
		}
	case dlq.ActionPark:
		p.stats.Parked(dec.Rule)
	case dlq.ActionDrop:
		p.stats.Dropped(dec.Rule)
	default:
		p.stats.Kept(dec.Rule)
	}
	k := keep(d, a.o.RecentValueBytes, a.o.HideValues)
	p.mu.Lock()
	p.push(k, a.o.RecentBytes)
	p.mu.Unlock()
}

// find returns p's kept dead letters matching f, newest (by dead-lettering
// time) first, at most limit.
func (p *pipe) find(f dlq.Filter, limit int) []*kept {
	p.mu.Lock()
	var out []*kept
	for i := 1; i <= p.n; i++ {
		k := p.recent[(p.head-i+len(p.recent))%len(p.recent)]
		if f.Match(k.d) {
			out = append(out, k)
		}
	}
	p.mu.Unlock()
	// Arrival order interleaves partitions; order by time, then offset.
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].d.Timestamp.Equal(out[j].d.Timestamp) {
			return out[i].d.Timestamp.After(out[j].d.Timestamp)
		}
		return out[i].d.Offset > out[j].d.Offset
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

func (a *Analyzer) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	bounds, err := a.dlqBounds(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(bounds))
	for part, b := range bounds {
		out[part] = b.End
	}
	return out, nil
}

// dlqBounds lists every partition of the DLQ topic with its earliest
// retained and its end offset (dlqread.Offsets), within 10s.
func (a *Analyzer) dlqBounds(ctx context.Context, topic string) (map[int32]dlqread.Bounds, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	bounds, err := dlqread.Offsets(ctx, a.admin, topic)
	if errors.Is(err, dlqread.ErrNoTopic) {
		return nil, fmt.Errorf("%w: run `redrive topics ensure`", err)
	}
	return bounds, err
}

// depthLoop publishes each DLQ's depth (end offsets minus the rule
// worker's committed offsets) every few seconds.
func (a *Analyzer) depthLoop(ctx context.Context) {
	adm := kadm.NewClient(a.admin)
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		for _, p := range a.pipes {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			lags, err := adm.Lag(lctx, p.cfg.GroupID())
			cancel()
			if err != nil {
				continue
			}
			gl, ok := lags[p.cfg.GroupID()]
			if !ok || gl.Error() != nil {
				continue
			}
			var depth int64
			for _, pl := range gl.Lag[p.cfg.DLQ] {
				if pl.Err == nil && pl.Lag > 0 {
					depth += pl.Lag
				}
			}
			if gl.Lag[p.cfg.DLQ] == nil { // the group has committed nothing yet
				if ends, err := a.endOffsets(ctx, p.cfg.DLQ); err == nil {
					for _, e := range ends {
						depth += e
					}
				}
			}
			p.mu.Lock()
			p.depth = depth
			oldest := p.oldestUnseen
			p.mu.Unlock()
			a.m.depth.WithLabelValues(p.cfg.Name).Set(float64(depth))
			a.m.oldest.WithLabelValues(p.cfg.Name).Set(age(a.o.Now(), oldest))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Analyzer) ready(name string, err error) {
	if a.o.Ready != nil {
		a.o.Ready(name, err)
	}
}

func (a *Analyzer) beat(name string) {
	if a.o.Beat != nil {
		a.o.Beat(name)
	}
}

// poll polls at most n records, waiting at most wait, and logs fetch errors
// (a timed-out or cancelled poll is not one). closed: the client is closed.
// fatal: a fetch error no retry fixes (fatalFetchErr; group is the
// client's consumer group, "" for none).
func (a *Analyzer) poll(ctx context.Context, cl *kgo.Client, wait time.Duration, n int, group string) (fs kgo.Fetches, closed bool, fatal error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs = cl.PollRecords(pctx, n)
	if fs.IsClientClosed() {
		return fs, true, nil
	}
	return fs, false, a.fetchErrors(fs.Errors(), group)
}

// fetchErrors logs fetch errors (a timed-out or cancelled poll is not one)
// and returns the last that no retry fixes (fatalFetchErr; group as in
// poll), or nil.
func (a *Analyzer) fetchErrors(errs []kgo.FetchError, group string) (fatal error) {
	for _, e := range errs {
		if errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded) {
			continue
		}
		if f := fatalFetchErr(group, e.Topic, a.o.Principal, e.Err); f != nil {
			fatal = f
			continue
		}
		a.log.Error("fetching the DLQ", "topic", e.Topic, "partition", e.Partition, "err", e.Err)
	}
	return fatal
}
