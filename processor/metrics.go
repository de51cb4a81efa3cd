package processor

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the processor's Prometheus series. Label values are bounded:
// pipeline and topic come from config, outcome/reason/tier from fixed sets,
// and error codes beyond the first maxCodes seen are counted as "other".
type metrics struct {
	consumed         *prometheus.CounterVec   // pipeline, topic
	outcomes         *prometheus.CounterVec   // pipeline, outcome, tier, code
	handlerSeconds   *prometheus.HistogramVec // pipeline, outcome
	inflight         *prometheus.GaugeVec     // pipeline
	waiting          *prometheus.GaugeVec     // pipeline
	retries          *prometheus.CounterVec   // pipeline, tier
	deadLetters      *prometheus.CounterVec   // pipeline, reason, code
	lateness         *prometheus.HistogramVec // pipeline, tier
	hops             *prometheus.CounterVec   // pipeline, tier
	commitFailures   *prometheus.CounterVec   // pipeline
	produceFails     *prometheus.CounterVec   // pipeline, kind (retry, dlq, results)
	lag              *prometheus.GaugeVec     // pipeline, topic
	pausedParts      *prometheus.GaugeVec     // pipeline
	mainHeld         *prometheus.CounterVec   // pipeline
	clamped          *prometheus.CounterVec   // pipeline, time (clampedTimes)
	shareLag         *prometheus.GaugeVec     // pipeline (consume: share)
	shareAckFailures *prometheus.CounterVec   // pipeline
	breakerState     *prometheus.GaugeVec     // pipeline
	breakerTrans     *prometheus.CounterVec   // pipeline, to
	breakerCalls     *prometheus.CounterVec   // pipeline, counted, outcome
	throttleWaits    *prometheus.CounterVec   // pipeline
	paused           *prometheus.GaugeVec     // pipeline, reason
	rateLimited      *prometheus.CounterVec   // pipeline
	learnedRate      *prometheus.GaugeVec     // pipeline
	failovers        *prometheus.CounterVec   // pipeline
	parked           *prometheus.CounterVec   // pipeline
	callbacks        *prometheus.CounterVec   // pipeline, event (cbEventNames)
	callbacksHeld    *prometheus.GaugeVec     // pipeline
	callbackBytes    *prometheus.GaugeVec     // pipeline
	polls            *prometheus.CounterVec   // pipeline
	jobSeconds       *prometheus.HistogramVec // pipeline, via (callback, poll)
	txns             *prometheus.CounterVec   // pipeline, result (committed, aborted)
	txnHeld          *prometheus.GaugeVec     // pipeline
	txnSeconds       *prometheus.HistogramVec // pipeline

	codesMu sync.Mutex
	codes   map[string]bool
}

const maxCodes = 50

// newMetrics makes the series family by family and registers them with
// reg. Each family returns what it made, so a series added to one is
// registered with it.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{codes: map[string]bool{"": true}}
	for _, family := range []func() []prometheus.Collector{m.newFlow, m.newLine, m.newCallbacks, m.newTxns} {
		for _, c := range family() {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// newFlow makes the series of records moving through a pipeline: polled,
// handled, retried, dead-lettered, committed, held back.
func (m *metrics) newFlow() []prometheus.Collector {
	m.consumed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_records_consumed_total", Help: "Records polled, per topic (main and tiers).",
	}, []string{"pipeline", "topic"})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_outcomes_total", Help: "Handled records by outcome (success, transient, not-ready, permanent, invalid, expired), the tier they were read from (main for the main topic) and error code.",
	}, []string{"pipeline", "outcome", "tier", "code"})
	m.handlerSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "redrive_handler_duration_seconds", Help: "Handler call duration by outcome.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"pipeline", "outcome"})
	m.inflight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_inflight_records", Help: "Records dispatched to handlers and not finished (outcome not yet acknowledged).",
	}, []string{"pipeline"})
	m.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_waiting_records", Help: "Tier records held in memory until their due time.",
	}, []string{"pipeline"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_retries_scheduled_total", Help: "Records written to a retry tier (transient and not-ready), per tier.",
	}, []string{"pipeline", "tier"})
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_dead_letters_total", Help: "Records written to the DLQ by reason and error code.",
	}, []string{"pipeline", "reason", "code"})
	m.lateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "redrive_delay_lateness_seconds", Help: "How late a tier record was handled after its redrive-due time.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"pipeline", "tier"})
	m.hops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_tier_hops_total", Help: "Tier records re-queued without a handler call because they were not due yet (minimum delay longer than the tier).",
	}, []string{"pipeline", "tier"})
	m.commitFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_commit_failures_total", Help: "Offset commits that failed.",
	}, []string{"pipeline"})
	m.produceFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_produce_failures_total", Help: "Outcome writes (retry, dlq, results, failover) that failed and are being retried.",
	}, []string{"pipeline", "kind"})
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_consumer_lag", Help: "Consumer group lag in records per topic (main and tiers), from the committed offsets.",
	}, []string{"pipeline", "topic"})
	m.pausedParts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_paused_partitions", Help: "Tier partitions paused because their waiting records reached max_waiting.",
	}, []string{"pipeline"})
	m.mainHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_main_held_seconds_total", Help: "Seconds the main topic was not fetched so that due tier records were fetched first; at most 750ms at a time, then at least 250ms of fetching it.",
	}, []string{"pipeline"})
	m.clamped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_future_times_clamped_total", Help: "Times read from records (record timestamp, redrive-origin-timestamp, redrive-not-ready-since) more than 1s in the future (or an origin timestamp before 1970), taken as now for waits and ages.",
	}, []string{"pipeline", "time"})
	m.shareLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_share_lag", Help: "Records of the main topic its share group has not acknowledged yet (consume: share): what KEDA scales on.",
	}, []string{"pipeline"})
	m.shareAckFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_share_ack_failures_total", Help: "Share group acknowledgements the broker refused (consume: share): their records are delivered again.",
	}, []string{"pipeline"})
	return []prometheus.Collector{m.consumed, m.outcomes, m.handlerSeconds, m.inflight, m.waiting,
		m.retries, m.deadLetters, m.lateness, m.hops, m.commitFailures, m.produceFails, m.lag, m.pausedParts, m.mainHeld, m.clamped,
		m.shareLag, m.shareAckFailures}
}

// newLine makes the series of the line in front of the handler: the
// breaker, the guard's and the operator's stops, throttling, the rate
// limit, failover.
func (m *metrics) newLine() []prometheus.Collector {
	m.breakerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_breaker_state", Help: "The pipeline's circuit breaker: 0 closed, 1 half-open (probing), 2 open.",
	}, []string{"pipeline"})
	m.breakerTrans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_breaker_transitions_total", Help: "Circuit breaker transitions by the state entered (closed, half-open, open).",
	}, []string{"pipeline", "to"})
	m.breakerCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_breaker_calls_total", Help: "Handler calls the circuit breaker judged: counted=yes outcome=success|failure (the service answered, or failed), counted=no outcome=repeat (the record failed with the same code before), request_fault (a handler.codes.request_fault code), learned (a new request failing with a code a second round of probes showed to be the requests'), throttled (a 429) or suspect (a record fetched before the breaker last opened, failing after it closed).",
	}, []string{"pipeline", "counted", "outcome"})
	m.throttleWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_throttle_waits_total", Help: "Waits records took because the service answered 429 (Retry-After, at most 5s, at most 10 per record; waited out of the workers), before calling again with the same attempt.",
	}, []string{"pipeline"})
	m.paused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_paused", Help: "1 while the pipeline's handler calls are stopped for that reason (breaker, pause_code, guard, manual), else 0.",
	}, []string{"pipeline", "reason"})
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_rate_limited_seconds_total", Help: "Seconds records waited for a rate-limit token before their handler call (summed over records).",
	}, []string{"pipeline"})
	m.learnedRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_learned_rate", Help: "Handler calls per second this process learned from the service's 429s (AIMD), which its calls are kept to (with rate_limit, the smaller); 0 while none is learned.",
	}, []string{"pipeline"})
	m.failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_failovers_total", Help: "Records forwarded to breaker.failover_to while the line was stopped (acknowledged).",
	}, []string{"pipeline"})
	m.parked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_parked_total", Help: "Share group records sent to a tier, no attempt spent, because the breaker was open (held, they would stop the group's next poll).",
	}, []string{"pipeline"})
	return []prometheus.Collector{m.breakerState, m.breakerTrans, m.breakerCalls, m.throttleWaits, m.paused, m.rateLimited, m.learnedRate, m.failovers, m.parked}
}

// newCallbacks makes the series of job APIs: callbacks, polls, and how
// long a job took.
func (m *metrics) newCallbacks() []prometheus.Collector {
	m.callbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_callbacks_total", Help: "Callbacks read from the callbacks topic by event: received, matched (a record finished by its callback), duplicate (a second callback for a job), late (a callback for a job this process finished by polling), evicted (dropped unmatched at max_entries or max_bytes), bad (no valid job id).",
	}, []string{"pipeline", "event"})
	m.callbacksHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_callbacks_held", Help: "Callbacks held in memory (waiting for their record, or matched and kept to spot duplicates).",
	}, []string{"pipeline"})
	m.callbackBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_callbacks_held_bytes", Help: "What the callbacks held in memory cost, in bytes, as handler.callback.max_bytes counts it (job ids, results, errors, a fixed overhead each; jobs finished by polling included).",
	}, []string{"pipeline"})
	m.polls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_polls_total", Help: "Handler calls that polled a job (a record with redrive-state), fallback polls of a pipeline with callbacks included.",
	}, []string{"pipeline"})
	m.jobSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "redrive_job_seconds", Help: "From the first not-ready answer (redrive-not-ready-since, the submit) to the success, by what finished the job: its callback or a poll.",
		Buckets: []float64{.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800},
	}, []string{"pipeline", "via"})
	return []prometheus.Collector{m.callbacks, m.callbacksHeld, m.callbackBytes, m.polls, m.jobSeconds}
}

// newTxns makes the series of an exactly-once pipeline's transactions.
func (m *metrics) newTxns() []prometheus.Collector {
	m.txns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redrive_transactions_total", Help: "Transactions of an exactly-once pipeline by result: committed, or aborted (a rebalance, a fenced process, a failed write; the work is redone).",
	}, []string{"pipeline", "result"})
	m.txnHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_transaction_held", Help: "Outcomes of an exactly-once pipeline held in memory until every earlier record of their partition has its outcome and their transaction commits.",
	}, []string{"pipeline"})
	m.txnSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "redrive_transaction_seconds", Help: "How long a transaction of an exactly-once pipeline took, from begin to its end (write, offset commit, end).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"pipeline"})
	return []prometheus.Collector{m.txns, m.txnHeld, m.txnSeconds}
}

// code bounds the code label's cardinality.
func (m *metrics) code(c string) string {
	m.codesMu.Lock()
	defer m.codesMu.Unlock()
	if m.codes[c] {
		return c
	}
	if len(m.codes) < maxCodes && len(c) <= 64 {
		m.codes[c] = true
		return c
	}
	return "other"
}

// hotMetrics caches the series touched once or more per record, so the hot
// path does not hash label values and look them up in the vector on every
// record. Children are created on first use, as WithLabelValues would.
type hotMetrics struct {
	m        *metrics
	pipeline string
	inflight prometheus.Gauge
	waiting  prometheus.Gauge
	// txnHeld and txnSeconds: exactly-once (txn.go).
	txnHeld    prometheus.Gauge
	txnSeconds prometheus.Observer
	consumed   sync.Map // topic → prometheus.Counter
	handler    sync.Map // Kind → prometheus.Observer
	lateness   sync.Map // tier index → prometheus.Observer
	outcomes   sync.Map // outcomeKey → prometheus.Counter

	clamped [len(clampedTimes)]prometheus.Counter // by clampedTimes index

	polls     prometheus.Counter
	mainHeld  prometheus.Counter
	throttled prometheus.Counter
	job       [len(jobVias)]prometheus.Observer // by jobVia - 1
}

type outcomeKey struct {
	kind Kind
	tier int
	code string
}

func (h *hotMetrics) init(m *metrics, pipeline string) {
	h.m, h.pipeline = m, pipeline
	h.inflight = m.inflight.WithLabelValues(pipeline)
	h.waiting = m.waiting.WithLabelValues(pipeline)
	h.throttled = m.throttleWaits.WithLabelValues(pipeline)
	h.txnHeld = m.txnHeld.WithLabelValues(pipeline)
	h.txnSeconds = m.txnSeconds.WithLabelValues(pipeline)
	for i, l := range clampedTimes {
		h.clamped[i] = m.clamped.WithLabelValues(pipeline, l)
	}
	h.polls = m.polls.WithLabelValues(pipeline)
	h.mainHeld = m.mainHeld.WithLabelValues(pipeline)
	for i, v := range jobVias {
		h.job[i] = m.jobSeconds.WithLabelValues(pipeline, v)
	}
}

// jobVias are the via label values of redrive_job_seconds, indexed by
// jobVia - 1.
var jobVias = [...]string{viaCallback - 1: "callback", viaPoll - 1: "poll"}

// observeJob counts a job finished by via, since its submit.
func (h *hotMetrics) observeJob(via jobVia, d time.Duration) {
	if via > 0 && int(via) <= len(jobVias) {
		h.job[via-1].Observe(max(d, 0).Seconds())
	}
}

// callbackCounters are the pipeline's redrive_callbacks_total series, by
// event, and its redrive_callbacks_held.
func (m *metrics) callbackCounters(pipeline string) (events [nCBEvents]prometheus.Counter, held, heldBytes prometheus.Gauge) {
	for i, e := range cbEventNames {
		events[i] = m.callbacks.WithLabelValues(pipeline, e)
	}
	return events, m.callbacksHeld.WithLabelValues(pipeline), m.callbackBytes.WithLabelValues(pipeline)
}

// clampedTimes are the time label values of
// redrive_future_times_clamped_total, indexed by the clamp* constants.
var clampedTimes = [...]string{clampRecordTimestamp: "record_timestamp", clampOriginTimestamp: "origin_timestamp", clampNotReadySince: "not_ready_since"}

// countClamped counts the clamps in mask (bit i: clampedTimes[i]).
func (h *hotMetrics) countClamped(mask clampMask) {
	for i := range clampedTimes {
		if mask&(1<<i) != 0 {
			h.clamped[i].Inc()
		}
	}
}

func (h *hotMetrics) consumedFor(topic string) prometheus.Counter {
	if c, ok := h.consumed.Load(topic); ok {
		return c.(prometheus.Counter)
	}
	c, _ := h.consumed.LoadOrStore(topic, h.m.consumed.WithLabelValues(h.pipeline, topic))
	return c.(prometheus.Counter)
}

func (h *hotMetrics) handlerFor(k Kind) prometheus.Observer {
	if o, ok := h.handler.Load(k); ok {
		return o.(prometheus.Observer)
	}
	o, _ := h.handler.LoadOrStore(k, h.m.handlerSeconds.WithLabelValues(h.pipeline, k.String()))
	return o.(prometheus.Observer)
}

func (h *hotMetrics) latenessFor(tier int, tierLabel string) prometheus.Observer {
	if o, ok := h.lateness.Load(tier); ok {
		return o.(prometheus.Observer)
	}
	o, _ := h.lateness.LoadOrStore(tier, h.m.lateness.WithLabelValues(h.pipeline, tierLabel))
	return o.(prometheus.Observer)
}

// outcomeFor is redrive_outcomes_total for a handler's outcome; code is
// bounded by metrics.code before it becomes a key, so the cache is as
// bounded as the series.
func (h *hotMetrics) outcomeFor(k Kind, tier int, tierLabel, code string) prometheus.Counter {
	if code != "" {
		code = h.m.code(code)
	}
	key := outcomeKey{k, tier, code}
	if c, ok := h.outcomes.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c, _ := h.outcomes.LoadOrStore(key, h.m.outcomes.WithLabelValues(h.pipeline, k.String(), tierLabel, code))
	return c.(prometheus.Counter)
}

// precreate exports every series of pipeline p the dashboard and the alert
// rules read, at zero, before the first record: a panel shows 0 instead of
// "no data", and rate() or absent() over a counter that has never counted
// works. Label values are the known sets (topics, tiers, kinds, reasons);
// codes come only with traffic.
func (h *hotMetrics) precreate(p Pipeline, tiers []string) {
	m, name := h.m, p.Name
	labels := []string{"main"}
	for i := range p.Schedule.Tiers {
		labels = append(labels, p.Schedule.TierName(i))
	}
	h.consumedFor(p.Topic)
	for _, t := range tiers {
		h.consumedFor(t)
	}
	for _, k := range []Kind{Success, Transient, NotReady, Permanent, Invalid} {
		h.handlerFor(k)
		for i, l := range labels {
			h.outcomeFor(k, i-1, l, "")
		}
	}
	for _, l := range labels {
		m.outcomes.WithLabelValues(name, "invalid", l, CodeBadHeader)
		m.outcomes.WithLabelValues(name, "expired", l, CodeTTL)
		m.outcomes.WithLabelValues(name, "expired", l, CodeNotReadyDeadline)
	}
	for i, l := range labels[1:] {
		m.retries.WithLabelValues(name, l)
		m.hops.WithLabelValues(name, l)
		h.latenessFor(i, l)
	}
	for _, r := range []string{reasonExhausted, reasonPermanent, reasonInvalid, reasonExpired, "crashed"} {
		m.deadLetters.WithLabelValues(name, r, "")
	}
	m.commitFailures.WithLabelValues(name)
	for _, k := range []outKind{toRetry, toDLQ, toResults, toFailover} {
		m.produceFails.WithLabelValues(name, string(k))
	}
	for _, t := range append([]string{p.Topic}, tiers...) {
		m.lag.WithLabelValues(name, t)
	}
	m.pausedParts.WithLabelValues(name)
	m.mainHeld.WithLabelValues(name)
	if p.Consume == ConsumeShare {
		m.shareLag.WithLabelValues(name)
		m.shareAckFailures.WithLabelValues(name)
	}
	m.breakerState.WithLabelValues(name)
	for _, to := range []string{"closed", "half-open", "open"} {
		m.breakerTrans.WithLabelValues(name, to)
	}
	for _, v := range verdicts {
		if v.counted != "" {
			m.breakerCalls.WithLabelValues(name, v.counted, v.outcome)
		}
	}
	for _, r := range stopReasons {
		m.paused.WithLabelValues(name, r)
	}
	m.rateLimited.WithLabelValues(name)
	m.learnedRate.WithLabelValues(name)
	m.failovers.WithLabelValues(name)
	m.parked.WithLabelValues(name)
	// Every pipeline's, with callbacks or not: a dashboard over several
	// pipelines shows 0 for one without callbacks, not "no data".
	m.callbackCounters(name)
	// Every pipeline's, exactly-once or not, for the same reason.
	for _, r := range []string{"committed", "aborted"} {
		m.txns.WithLabelValues(name, r)
	}
	m.txnHeld.WithLabelValues(name)
	m.txnSeconds.WithLabelValues(name)
}
