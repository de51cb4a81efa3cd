package config

import (
	"slices"
	"time"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// TierDelays are the retry tiers as durations, in order.
func (p Pipeline) TierDelays() []time.Duration {
	ds := make([]time.Duration, len(p.Retry.Tiers))
	for i, t := range p.Retry.Tiers {
		ds[i] = t.D()
	}
	return ds
}

// TierNames are the retry tiers' names, in order (Tier.Name; "" for the
// delay's shortest form).
func (p Pipeline) TierNames() []string {
	ns := make([]string, len(p.Retry.Tiers))
	for i, t := range p.Retry.Tiers {
		ns[i] = t.Name
	}
	return ns
}

// Schedule is the pipeline's retry plan, its tiers named.
func (p Pipeline) Schedule() retry.Schedule {
	return retry.Schedule{Tiers: p.TierDelays(), Names: p.TierNames(), MaxAttempts: p.Retry.MaxAttempts, Jitter: p.Retry.Jitter, MaxDue: p.Retry.MaxDue.D()}
}

// TierTopics name the retry topics, in tier order: "<topic>.retry.<name>"
// (retry.Schedule.TierTopic).
func (p Pipeline) TierTopics() []string {
	s := p.Schedule()
	ts := make([]string, len(s.Tiers))
	for i := range s.Tiers {
		ts[i] = s.TierTopic(p.Topic, i)
	}
	return ts
}

// DLQTopic is the dead-letter topic: dlq.topic, else topics.DefaultDLQ
// ("<topic>.dlq").
func (p Pipeline) DLQTopic() string {
	if p.DLQ.Topic != "" {
		return p.DLQ.Topic
	}
	return topics.DefaultDLQ(p.Topic)
}

// GroupID is the processor's consumer group: topics.GroupID ("redrive.<name>").
func (p Pipeline) GroupID() string { return topics.GroupID(p.name()) }

// AnalyzerGroupID is the analyzer's consumer group: topics.AnalyzerGroupID
// ("redrive.<name>.analyzer").
func (p Pipeline) AnalyzerGroupID() string { return topics.AnalyzerGroupID(p.name()) }

// name is the name, or the topic before SetDefaults has run.
func (p Pipeline) name() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Topic
}

// ProcessorPipeline is p as the processor runs it, with h as its handler
// (nil: the processor's default handler). Zero values stay zero: the
// processor fills its defaults (processor.Pipeline.WithDefaults).
func (p Pipeline) ProcessorPipeline(h processor.Handler) processor.Pipeline {
	pp := p.processorPipeline()
	pp.DLQ = p.DLQTopic()
	pp.Handler = h
	return pp
}

// processorPipeline is ProcessorPipeline without a handler and with
// dlq.topic as given (empty stays empty, for WithDefaults to fill).
func (p Pipeline) processorPipeline() processor.Pipeline {
	return processor.Pipeline{
		Name:             p.Name,
		Topic:            p.Topic,
		Results:          p.Results,
		DLQ:              p.DLQ.Topic,
		Schedule:         p.Schedule(),
		TTL:              p.TTL.D(),
		NotReadyDeadline: p.NotReadyDeadline.D(),
		Concurrency:      p.Concurrency,
		MaxInflight:      p.MaxInflight,
		MaxInflightBytes: p.MaxInflightBytes,
		OrderByKey:       p.Ordering == "key",
		RedactHeaders:    p.DLQ.RedactHeaders,
		DLQHeaderStyle:   p.DLQ.HeaderStyle,
		Breaker:          p.Breaker.processorBreaker(),
		RateLimit:        p.RateLimit,
		RateBurst:        p.RateLimitBurst,
		MaxCallsInFlight: p.MaxCallsInFlight,
		Scope:            processor.Scope(p.Scope),
		Guard:            p.Guard.processorGuard(),
		Callbacks:        p.processorCallbacks(),
		Delivery:         processor.Delivery(p.Delivery),
		MaxBatch:         p.MaxBatch,
		Consume:          processor.Consume(p.Consume),
		MaxDeliveries:    p.MaxDeliveries,
	}
}

// processorBreaker is b as the processor takes it (enabled: false is
// Disabled); zero values stay zero for processor.Breaker.WithDefaults.
func (b Breaker) processorBreaker() processor.Breaker {
	return processor.Breaker{
		Disabled:        !b.On(),
		FailureRatio:    b.FailureRatio,
		MinCalls:        b.MinCalls,
		Consecutive:     b.Consecutive,
		Window:          b.Window.D(),
		OpenFor:         b.OpenFor.D(),
		MaxOpen:         b.MaxOpen.D(),
		Probes:          b.Probes,
		FailoverTo:      b.FailoverTo,
		FailoverRetries: b.FailoverRetries,
	}
}

// processorGuard is g as the processor takes it (enabled: false is
// Disabled); zero values stay zero for processor.Guard.WithDefaults.
func (g Guard) processorGuard() processor.Guard {
	return processor.Guard{
		Disabled:        !g.On(),
		PermanentRatio:  g.PermanentRatio,
		MinCalls:        g.MinCalls,
		Window:          g.Window.D(),
		AutoResumeAfter: g.AutoResumeAfter.D(),
	}
}

// HTTPOptions are the options of the pipeline's built-in HTTP handler
// (httphandler.New): handler.http (its query and form fields and its poll
// included), the code rules of handler.codes (pause codes included), and
// the pipeline's concurrency. Without handler.http only Codes and
// Concurrency are set. Zero values stay zero: the handler fills its
// defaults (httphandler.Options.WithDefaults).
func (p Pipeline) HTTPOptions() httphandler.Options {
	o := httphandler.Options{Concurrency: p.Concurrency}
	if hc := p.Handler.HTTP; hc != nil {
		o.Secrets = slices.Clone(p.httpSecrets)
		o.URL, o.Timeout, o.Headers, o.MaxBodyBytes = hc.URL, hc.Timeout.D(), hc.Headers, hc.MaxBodyBytes
		o.Query, o.Form = hc.Query, hc.Form
		if hc.JSON != nil {
			o.JSON = &httphandler.JSONRule{OKField: hc.JSON.OKField, OKValue: hc.JSON.OKValue, CodeField: hc.JSON.CodeField}
		}
		if pc := hc.Poll; pc != nil {
			o.Poll = &httphandler.Poll{URL: pc.URL, Method: pc.Method, Body: pc.Body, StateField: pc.StateField, ResultField: pc.ResultField,
				FirstAfter: pc.FirstAfter.D(), Every: pc.Every.D(), Resubmit: pc.Resubmit}
			if st := pc.Status; st != nil {
				o.Poll.Status = &httphandler.StatusTable{Field: st.Field, Done: st.Done, Pending: st.Pending, Failed: st.Failed}
			}
		}
	}
	cr := p.Handler.Codes
	o.Codes.Transient, o.Codes.NotReady, o.Codes.Permanent = cr.Transient, cr.NotReady, cr.Permanent
	o.Codes.RequestFault = cr.RequestFault
	if len(cr.MinDelay) > 0 {
		o.Codes.MinDelay = make(map[string]time.Duration, len(cr.MinDelay))
		for k, v := range cr.MinDelay {
			o.Codes.MinDelay[k] = v.D()
		}
	}
	if len(cr.Pause) > 0 {
		o.Codes.Pause = make(map[string]time.Duration, len(cr.Pause))
		for k, v := range cr.Pause {
			o.Codes.Pause[k] = v.D()
		}
	}
	return o
}

// TopicSpec is what topics.ForPipeline needs to know about the pipeline.
func (p Pipeline) TopicSpec() topics.PipelineSpec {
	return topics.PipelineSpec{
		Topic:        p.Topic,
		Tiers:        p.TierDelays(),
		TierNames:    p.TierNames(),
		DLQ:          p.DLQ.Topic,
		DLQRetention: p.DLQ.Retention.D(),
		Results:      p.Results,
		Partitions:   p.Partitions,
		Replication:  p.Replication,
		Callbacks:    p.CallbacksTopic(),
		// A callback is needed for the wait and its margin (a processor
		// reads that far back at start).
		CallbacksKeep: p.callbacksKeep(),
		Share:         processor.Consume(p.Consume) == processor.ConsumeShare,
	}
}

// callbacksKeep is how long a callback must stay readable: wait +
// processor.CallbackMargin; 0 without handler.callback.
func (p Pipeline) callbacksKeep() time.Duration {
	cb := p.Handler.Callback
	if cb == nil {
		return 0
	}
	w := cb.Wait.D()
	if w <= 0 {
		w = processor.DefaultCallbackWait
	}
	return w + processor.CallbackMargin
}
