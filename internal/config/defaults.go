package config

import (
	"strings"
	"time"
)

// The defaults SetDefaults fills in.
const (
	DefaultHTTPAddr         = "127.0.0.1:9090"
	DefaultAnalyzerHTTPAddr = "127.0.0.1:9091"
	DefaultSessionTimeout   = 45 * time.Second
	DefaultShutdownGrace    = 30 * time.Second

	DefaultPartitions       = 6
	DefaultReplication      = 1
	DefaultMaxAttempts      = 4
	DefaultJitter           = 0.1
	DefaultDLQRetention     = 168 * time.Hour
	DefaultNotReadyDeadline = 10 * time.Minute
	DefaultConcurrency      = 64
	DefaultInflightPerSlot  = 4 // max_inflight is this times concurrency
	DefaultMaxInflightBytes = 64 << 20

	DefaultHTTPTimeout      = 30 * time.Second
	DefaultHTTPMaxBodyBytes = 1 << 20

	DefaultMaxRedrives = 3         // analyzer.rules[].max_redrives of a republish rule
	DefaultAlertRepeat = time.Hour // analyzer.alerts[].repeat
)

// DefaultTiers are the retry tiers of a pipeline whose retry.tiers is
// absent: 5s, 30s, 5m.
func DefaultTiers() []Duration {
	return []Duration{Duration(5 * time.Second), Duration(30 * time.Second), Duration(5 * time.Minute)}
}

// SetDefaults fills in every value left empty or zero (see the Default*
// constants): nil retry.tiers become DefaultTiers; a zero jitter becomes
// 0.1 unless JitterSet (which it then sets); an empty dlq.topic becomes
// "<topic>.dlq"; an empty pipeline name becomes its topic; an unnamed
// analyzer rule or alert is named "rule-<n>" or "alert-<n>" (n counting
// from 1), a republish rule's zero max_redrives becomes 3 and an alert's
// zero repeat 1h. It also upper-cases sasl.mechanism. It is idempotent,
// and Parse calls it.
func (c *Config) SetDefaults() {
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.Analyzer.HTTPAddr == "" {
		c.Analyzer.HTTPAddr = DefaultAnalyzerHTTPAddr
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = Duration(DefaultSessionTimeout)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(DefaultShutdownGrace)
	}
	if c.SASL != nil {
		c.SASL.Mechanism = strings.ToUpper(strings.TrimSpace(c.SASL.Mechanism))
	}
	for i := range c.Pipelines {
		c.Pipelines[i].setDefaults()
	}
	c.Analyzer.setDefaults()
}

func (p *Pipeline) setDefaults() {
	if p.Name == "" {
		p.Name = p.Topic
	}
	if p.Partitions == 0 {
		p.Partitions = DefaultPartitions
	}
	if p.Replication == 0 {
		p.Replication = DefaultReplication
	}
	if p.Retry.Tiers == nil {
		p.Retry.Tiers = DefaultTiers()
	}
	if p.Retry.MaxAttempts == 0 {
		p.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if !p.Retry.JitterSet {
		if p.Retry.Jitter == 0 {
			p.Retry.Jitter = DefaultJitter
		}
		p.Retry.JitterSet = true
	}
	if p.DLQ.Topic == "" && p.Topic != "" {
		p.DLQ.Topic = p.Topic + ".dlq"
	}
	if p.DLQ.Retention == 0 {
		p.DLQ.Retention = Duration(DefaultDLQRetention)
	}
	if p.NotReadyDeadline == 0 {
		p.NotReadyDeadline = Duration(DefaultNotReadyDeadline)
	}
	if p.Concurrency == 0 {
		p.Concurrency = DefaultConcurrency
	}
	if p.MaxInflight == 0 && p.Concurrency > 0 {
		p.MaxInflight = DefaultInflightPerSlot * p.Concurrency
	}
	if p.MaxInflightBytes == 0 {
		p.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if h := p.Handler.HTTP; h != nil {
		if h.Timeout == 0 {
			h.Timeout = Duration(DefaultHTTPTimeout)
		}
		if h.MaxBodyBytes == 0 {
			h.MaxBodyBytes = DefaultHTTPMaxBodyBytes
		}
	}
}
