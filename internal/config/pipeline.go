package config

import (
	"time"

	"github.com/redrive/redrive/retry"
)

// TierDelays are the retry tiers as durations, in order.
func (p Pipeline) TierDelays() []time.Duration {
	ds := make([]time.Duration, len(p.Retry.Tiers))
	for i, t := range p.Retry.Tiers {
		ds[i] = t.D()
	}
	return ds
}

// Schedule is the pipeline's retry plan.
func (p Pipeline) Schedule() retry.Schedule {
	return retry.Schedule{Tiers: p.TierDelays(), MaxAttempts: p.Retry.MaxAttempts, Jitter: p.Retry.Jitter}
}

// TierTopics name the retry topics, in tier order: "<topic>.retry.<delay>".
func (p Pipeline) TierTopics() []string {
	ts := make([]string, len(p.Retry.Tiers))
	for i, t := range p.Retry.Tiers {
		ts[i] = retry.TierTopic(p.Topic, t.D())
	}
	return ts
}

// DLQTopic is the dead-letter topic: dlq.topic, else "<topic>.dlq".
func (p Pipeline) DLQTopic() string {
	if p.DLQ.Topic != "" {
		return p.DLQ.Topic
	}
	return p.Topic + ".dlq"
}

// GroupID is the processor's consumer group: "redrive.<name>".
func (p Pipeline) GroupID() string { return "redrive." + p.name() }

// AnalyzerGroupID is the analyzer's consumer group: "redrive.<name>.analyzer".
func (p Pipeline) AnalyzerGroupID() string { return "redrive." + p.name() + ".analyzer" }

// name is the name, or the topic before SetDefaults has run.
func (p Pipeline) name() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Topic
}
