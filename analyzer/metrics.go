package analyzer

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrive/redrive/dlq"
)

// maxCodes bounds the code label; codes beyond it are counted as "other".
const maxCodes = 50

type metrics struct {
	deadLetters       *prometheus.CounterVec // pipeline, reason, code
	depth             *prometheus.GaugeVec   // pipeline
	oldest            *prometheus.GaugeVec   // pipeline
	actions           *prometheus.CounterVec // pipeline, rule, action
	republishFailures *prometheus.CounterVec // pipeline
	undecodable       *prometheus.CounterVec // pipeline
	alertsFiring      *prometheus.GaugeVec   // alert, pipeline
	alertPosts        *prometheus.CounterVec // alert, result

	mu    sync.Mutex
	codes map[string]bool
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
		undecodable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_undecodable_total", Help: "DLQ records that are not valid redrive dead letters (kept, never republished).",
		}, []string{"pipeline"}),
		alertsFiring: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redrive_analyzer_alert_firing", Help: "1 while the alert's condition holds.",
		}, []string{"alert", "pipeline"}),
		alertPosts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_analyzer_alert_posts_total", Help: "Alert webhook posts by result (ok, failed).",
		}, []string{"alert", "result"}),
		codes: map[string]bool{},
	}
	for _, c := range []prometheus.Collector{m.deadLetters, m.depth, m.oldest, m.actions, m.republishFailures, m.undecodable, m.alertsFiring, m.alertPosts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// code bounds the code label's cardinality.
func (m *metrics) code(c string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.codes[c] {
		return c
	}
	if len(m.codes) >= maxCodes {
		return "other"
	}
	m.codes[c] = true
	return c
}

// precreate exports the series the dashboard and the alert rules read, at
// zero, before the first dead letter: panels show 0 instead of "no data"
// and absent() alerts mean what they say. Label values are the known sets
// (pipelines, reasons, rules, actions, alerts); codes come with traffic.
func (m *metrics) precreate(pipes []*pipe, alerts []Alert) {
	for _, p := range pipes {
		name := p.cfg.Name
		for _, r := range []dlq.Reason{dlq.ReasonExhausted, dlq.ReasonPermanent, dlq.ReasonInvalid, dlq.ReasonExpired} {
			m.deadLetters.WithLabelValues(name, string(r), "")
		}
		m.depth.WithLabelValues(name)
		m.oldest.WithLabelValues(name)
		m.republishFailures.WithLabelValues(name)
		m.undecodable.WithLabelValues(name)
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
