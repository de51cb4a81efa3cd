package topics

import (
	"strconv"
	"time"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/retry"
)

// Role is what a topic is for in its pipeline.
type Role string

// The roles of a pipeline's topics.
const (
	RoleMain    Role = "main"    // the topic producers write requests to
	RoleRetry   Role = "retry"   // a fixed-delay retry tier
	RoleDLQ     Role = "dlq"     // the dead-letter topic
	RoleResults Role = "results" // where successful results go
)

// Defaults applied by ForPipeline where the configuration leaves a value
// zero. They match the documented configuration defaults.
const (
	DefaultPartitions   int32 = 6
	DefaultReplication  int16 = 1
	DefaultDLQRetention       = 7 * 24 * time.Hour
)

// DefaultTiers are the tier delays used when a pipeline lists none.
var DefaultTiers = []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}

// Topic config keys this package sets and checks.
const (
	ConfigCleanupPolicy = "cleanup.policy"
	ConfigRetentionMs   = "retention.ms"
)

// MinTierRetention is the shortest retention a tier topic is created with;
// see TierRetention.
const MinTierRetention = 7 * 24 * time.Hour

// TierRetention is the retention a tier topic with the given delay is
// created with: four times the delay, at least MinTierRetention, so that a
// record survives a processor that is down for much longer than the delay.
func TierRetention(delay time.Duration) time.Duration {
	return max(MinTierRetention, 4*delay)
}

// Spec is one topic a pipeline needs.
type Spec struct {
	Name        string
	Role        Role
	Partitions  int32 // at creation; 0 or less: the broker's default
	Replication int16 // at creation; 0 or less: the broker's default
	// Configs are set at creation and never changed afterwards.
	Configs map[string]string
	// Delay is a tier's delay (RoleRetry only).
	Delay time.Duration
	// Main is the main topic of the pipeline this topic belongs to; empty
	// for the main topic itself. Check holds a tier's or a DLQ's partition
	// count against it, and Ensure creates a tier or DLQ with at least as
	// many partitions as the main topic already has.
	Main string
}

// ForPipeline is every topic of a pipeline, in order: the main topic, one
// per tier (`<topic>.retry.<delay>`), the DLQ (`<topic>.dlq` unless
// configured) and the results topic when one is configured.
//
// Every topic gets cleanup.policy=delete and the pipeline's partitions
// (default 6) and replication (default 1). Tiers get retention.ms =
// TierRetention(delay); the DLQ gets the configured retention (default 7
// days). The main and results topics get no retention override: they are
// the user's, and their retention is the user's choice.
func ForPipeline(p config.Pipeline) []Spec {
	parts := p.Partitions
	if parts <= 0 {
		parts = DefaultPartitions
	}
	repl := p.Replication
	if repl <= 0 {
		repl = DefaultReplication
	}
	tiers := make([]time.Duration, 0, len(p.Retry.Tiers))
	for _, d := range p.Retry.Tiers {
		tiers = append(tiers, d.D())
	}
	if len(tiers) == 0 {
		tiers = DefaultTiers
	}
	dlq := p.DLQ.Topic
	if dlq == "" {
		dlq = p.Topic + ".dlq"
	}
	dlqRetention := p.DLQ.Retention.D()
	if dlqRetention <= 0 {
		dlqRetention = DefaultDLQRetention
	}

	spec := func(name string, role Role, retention time.Duration) Spec {
		s := Spec{
			Name:        name,
			Role:        role,
			Partitions:  parts,
			Replication: repl,
			Configs:     map[string]string{ConfigCleanupPolicy: "delete"},
		}
		if role != RoleMain {
			s.Main = p.Topic
		}
		if retention > 0 {
			s.Configs[ConfigRetentionMs] = strconv.FormatInt(retention.Milliseconds(), 10)
		}
		return s
	}

	specs := []Spec{spec(p.Topic, RoleMain, 0)}
	for _, d := range tiers {
		s := spec(retry.TierTopic(p.Topic, d), RoleRetry, TierRetention(d))
		s.Delay = d
		specs = append(specs, s)
	}
	specs = append(specs, spec(dlq, RoleDLQ, dlqRetention))
	if p.Results != "" {
		specs = append(specs, spec(p.Results, RoleResults, 0))
	}
	return specs
}
