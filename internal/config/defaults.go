package config

import (
	"strings"
	"time"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// The defaults of the file's own keys. Every other default belongs to the
// package that uses the value (processor, processor/httphandler, topics,
// retry, dlq); SetDefaults takes it from there.
const (
	DefaultHTTPAddr         = "127.0.0.1:9090"
	DefaultAnalyzerHTTPAddr = "127.0.0.1:9091"

	DefaultMaxRedrives = dlq.DefaultMaxRedrives // analyzer.rules[].max_redrives of a republish rule
	DefaultAlertRepeat = time.Hour              // analyzer.alerts[].repeat
)

// DefaultTiers are the retry tiers of a pipeline whose retry.tiers is
// absent: retry.DefaultTiers, named 5s, 30s, 5m.
func DefaultTiers() []Tier { return tiersOf(retry.DefaultTiers()) }

// SetDefaults fills in every value left empty or zero: the file's own
// (http_addr, analyzer.http_addr), session_timeout and shutdown_grace
// (processor.Default*), a pipeline's partitions, replication and
// dlq.retention (topics.Default*), its retry plan (retry.Default*: nil
// retry.tiers become DefaultTiers; a zero jitter becomes 0.1 unless
// JitterSet, which it then sets), what processor.Pipeline.WithDefaults
// fills (dlq.topic "<topic>.dlq", not_ready_deadline, concurrency,
// max_inflight, max_inflight_bytes, rate_limit_burst, scope, consume,
// max_deliveries, and the settings of an enabled breaker and guard, whose
// absent enabled becomes true) and
// handler.http's timeout and max_body_bytes, and its poll's method (GET,
// upper-cased), first_after and every (httphandler.Options.WithDefaults),
// and handler.callback's (see Callback.setDefaults; callback_addr becomes
// DefaultCallbackAddr when a pipeline has one). An empty pipeline name becomes its
// topic; an unnamed analyzer rule or alert is named "rule-<n>" or
// "alert-<n>" (n counting from 1), a republish rule's zero max_redrives
// becomes 3 and an alert's zero repeat 1h. The control section gets
// control.Default* (topic, status_interval) and an absent enabled becomes
// true. It also upper-cases
// sasl.mechanism. It is idempotent, and Parse calls it.
func (c *Config) SetDefaults() {
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.CallbackAddr == "" && c.HasCallbacks() {
		c.CallbackAddr = DefaultCallbackAddr
	}
	if c.Analyzer.HTTPAddr == "" {
		c.Analyzer.HTTPAddr = DefaultAnalyzerHTTPAddr
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = Duration(processor.DefaultSessionTimeout)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(processor.DefaultShutdownGrace)
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = Duration(processor.DefaultCommitInterval)
	}
	if c.SASL != nil {
		c.SASL.Mechanism = strings.ToUpper(strings.TrimSpace(c.SASL.Mechanism))
	}
	c.Control.setDefaults()
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
		p.Partitions = topics.DefaultPartitions
	}
	if p.Replication == 0 {
		p.Replication = topics.DefaultReplication
	}
	if p.Retry.Tiers == nil {
		p.Retry.Tiers = DefaultTiers()
	}
	if p.Retry.MaxAttempts == 0 {
		p.Retry.MaxAttempts = retry.DefaultMaxAttempts
	}
	if !p.Retry.JitterSet {
		if p.Retry.Jitter == 0 {
			p.Retry.Jitter = retry.DefaultJitter
		}
		p.Retry.JitterSet = true
	}
	if p.DLQ.Retention == 0 {
		p.DLQ.Retention = Duration(topics.DefaultDLQRetention)
	}
	if p.Handler.Callback != nil {
		p.Handler.Callback.setDefaults(p.Topic)
	}
	// The processor's own defaults, on the processor's view of p.
	pp := p.processorPipeline().WithDefaults()
	if p.DLQ.Topic == "" {
		p.DLQ.Topic = pp.DLQ
	}
	p.NotReadyDeadline = Duration(pp.NotReadyDeadline)
	p.Concurrency = pp.Concurrency
	p.MaxInflight = pp.MaxInflight
	p.MaxInflightBytes = pp.MaxInflightBytes
	p.RateLimitBurst = pp.RateBurst
	p.Scope = string(pp.Scope)
	p.Consume = string(pp.Consume)
	p.MaxDeliveries = pp.MaxDeliveries
	p.Breaker.setDefaults(pp.Breaker)
	p.Guard.setDefaults(pp.Guard)
	if h := p.Handler.HTTP; h != nil {
		o := httphandler.Options{Timeout: h.Timeout.D(), MaxBodyBytes: h.MaxBodyBytes}.WithDefaults()
		h.Timeout, h.MaxBodyBytes = Duration(o.Timeout), o.MaxBodyBytes
		if pc := h.Poll; pc != nil {
			d := httphandler.Poll{Method: pc.Method, FirstAfter: pc.FirstAfter.D(), Every: pc.Every.D()}.WithDefaults()
			pc.Method, pc.FirstAfter, pc.Every = d.Method, Duration(d.FirstAfter), Duration(d.Every)
		}
	}
}

// setDefaults takes the processor's defaults of an enabled breaker (d is
// b's processorBreaker after WithDefaults) and sets an absent enabled to
// true. A disabled breaker's values stay as they are.
func (b *Breaker) setDefaults(d processor.Breaker) {
	on := b.On()
	b.Enabled = &on
	if !on {
		return
	}
	b.FailureRatio, b.MinCalls, b.Consecutive, b.Probes = d.FailureRatio, d.MinCalls, d.Consecutive, d.Probes
	b.Window, b.OpenFor, b.MaxOpen = Duration(d.Window), Duration(d.OpenFor), Duration(d.MaxOpen)
}

// setDefaults takes the processor's defaults of an enabled guard (d is
// g's processorGuard after WithDefaults) and sets an absent enabled to
// true. A disabled guard's values stay as they are.
func (g *Guard) setDefaults(d processor.Guard) {
	on := g.On()
	g.Enabled = &on
	if !on {
		return
	}
	g.PermanentRatio, g.MinCalls, g.Window = d.PermanentRatio, d.MinCalls, Duration(d.Window)
}
