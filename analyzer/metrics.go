package analyzer

import (
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrive/redrive/dlq"
)

// Label values taken from records (code, reason) are bounded: at most
// maxCodes (maxReasons) distinct values per pipeline, each at most
// maxLabelBytes of valid UTF-8; the rest are counted as "other". A DLQ
// full of made-up codes or reasons cannot grow /metrics.
const (
	maxCodes      = 50
	maxReasons    = 10
	maxLabelBytes = 64
)

type metrics struct {
	deadLetters       *prometheus.CounterVec // pipeline, reason, code
	depth             *prometheus.GaugeVec   // pipeline
	oldest            *prometheus.GaugeVec   // pipeline
	actions           *prometheus.CounterVec // pipeline, rule, action
	republishFailures *prometheus.CounterVec // pipeline
	transactions      *prometheus.CounterVec // pipeline, result
	undecodable       *prometheus.CounterVec // pipeline
	futureTimestamps  *prometheus.CounterVec // pipeline
	heldBytes         *prometheus.GaugeVec   // pipeline
	alertsFiring      *prometheus.GaugeVec   // alert, pipeline
	alertPosts        *prometheus.CounterVec // alert, result

	mu      sync.Mutex
	codes   map[string]map[string]bool // pipeline → code label values in use
	reasons map[string]map[string]bool // pipeline → reason label values in use
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_dead_letters_total", Help: "Dead letters read from the DLQ (rebuilt from the earliest retained offset on start), by reason and error code.",
		}, []string{"pipeline", "reason", "code"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redrive_analyzer_dlq_depth", Help: "Dead letters not yet handled by the analyzer's rule worker: DLQ end offsets minus its committed offsets.",
		}, []string{"pipeline"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redrive_analyzer_oldest_unhandled_seconds", Help: "Age of the oldest dead letter the rule worker holds but has not handled (waiting for a rule's after); 0 when none.",
		}, []string{"pipeline"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_actions_total", Help: "Dead letters handled by the rule worker, by rule and action (republished, parked, kept, dropped).",
		}, []string{"pipeline", "rule", "action"}),
		republishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_republish_failures_total", Help: "Republish writes that failed and are being retried.",
		}, []string{"pipeline"}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_transactions_total", Help: "Transactions of an exactly-once pipeline's rule worker (its republishes and offset commit) by result: committed, aborted (a failed republish or a rebalance; redone from the committed offsets).",
		}, []string{"pipeline", "result"}),
		undecodable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_undecodable_total", Help: "DLQ records that are not valid redrive dead letters (kept, never republished).",
		}, []string{"pipeline"}),
		futureTimestamps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_future_timestamps_total", Help: "Dead letters dated more than a minute after the analyzer's clock when read; taken as dead-lettered then (rules' after, ages).",
		}, []string{"pipeline"}),
		heldBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redrive_analyzer_held_bytes", Help: "Bytes of the dead letters the rule worker holds unfinished (waiting for a rule's after); a partition is paused at 64 MiB.",
		}, []string{"pipeline"}),
		alertsFiring: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redrive_analyzer_alert_firing", Help: "1 while the alert's condition holds.",
		}, []string{"alert", "pipeline"}),
		alertPosts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_alert_posts_total", Help: "Alert webhook posts by result (ok, failed).",
		}, []string{"alert", "result"}),
		codes:   map[string]map[string]bool{},
		reasons: map[string]map[string]bool{},
	}
	for _, c := range []prometheus.Collector{m.deadLetters, m.depth, m.oldest, m.actions, m.republishFailures, m.transactions, m.undecodable, m.futureTimestamps, m.heldBytes, m.alertsFiring, m.alertPosts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// code is the code label for c, bounded (see maxCodes).
func (m *metrics) code(pipeline, c string) string {
	return m.bound(m.codes, maxCodes, pipeline, c)
}

// reason is the reason label for r, bounded (see maxReasons); the
// reasons redrive writes (dlq.Reasons, precreated) are always themselves.
func (m *metrics) reason(pipeline string, r dlq.Reason) string {
	return m.bound(m.reasons, maxReasons, pipeline, string(r))
}

// bound is v if it is already a value of the label (inUse) for pipeline,
// or a new one that fits (valid UTF-8, at most maxLabelBytes, fewer than
// max in use); else "other".
func (m *metrics) bound(inUse map[string]map[string]bool, max int, pipeline, v string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := inUse[pipeline]
	if seen == nil {
		seen = map[string]bool{}
		inUse[pipeline] = seen
	}
	if seen[v] {
		return v
	}
	if len(seen) >= max || len(v) > maxLabelBytes || !utf8.ValidString(v) {
		return "other"
	}
	seen[v] = true
	return v
}

// precreate exports the series the dashboard and the alert rules read, at
// zero, before the first dead letter: panels show 0 instead of "no data"
// and absent() alerts mean what they say. Label values are the known sets
// (pipelines, reasons, rules, actions, alerts); codes come with traffic.
func (m *metrics) precreate(pipes []*pipe, alerts []Alert) {
	for _, p := range pipes {
		name := p.cfg.Name
		for _, r := range dlq.Reasons {
			m.deadLetters.WithLabelValues(name, m.reason(name, r), m.code(name, ""))
		}
		m.depth.WithLabelValues(name)
		m.oldest.WithLabelValues(name)
		m.republishFailures.WithLabelValues(name)
		if p.cfg.ExactlyOnce {
			m.transactions.WithLabelValues(name, "committed")
			m.transactions.WithLabelValues(name, "aborted")
		}
		m.undecodable.WithLabelValues(name)
		m.futureTimestamps.WithLabelValues(name)
		m.actions.WithLabelValues(name, ruleLabel(""), "kept")
		for _, r := range p.cfg.Rules {
			for _, act := range []string{"republished", "parked", "kept", "dropped"} {
				m.actions.WithLabelValues(name, r.Name, act)
			}
		}
		for _, al := range alerts {
			if al.Pipeline == "" || al.Pipeline == name {
				m.alertsFiring.WithLabelValues(al.Name, name)
			}
		}
	}
	for _, al := range alerts {
		m.alertPosts.WithLabelValues(al.Name, "ok")
		m.alertPosts.WithLabelValues(al.Name, "failed")
	}
}
