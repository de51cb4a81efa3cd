package topics

import (
	"errors"
	"fmt"
	"strconv"
	"time"

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
	// RoleCallbacks is where the callback intake writes the service's
	// callbacks (processor/intake), read by every processor.
	RoleCallbacks Role = "callbacks"
	// RoleControl is the control topic (processor/control) the processes
	// of every pipeline share: one per cluster, no pipeline's own.
	RoleControl Role = "control"
)

// Defaults applied by ForPipeline where a PipelineSpec leaves a value zero;
// the configuration file's defaults are these (internal/config uses them).
// A spec without tiers gets retry.DefaultTiers.
const (
	DefaultPartitions   int32 = 6
	DefaultReplication  int16 = 1
	DefaultDLQRetention       = 7 * 24 * time.Hour
	// CallbacksRetention is the least retention.ms a callbacks topic is
	// created with (more when PipelineSpec.CallbacksKeep is longer): a
	// processor needs a callback for processor.Callbacks.Wait plus
	// processor.CallbackMargin at most; the rest is for looking back at
	// what a service sent.
	CallbacksRetention = 7 * 24 * time.Hour
)

// GroupID is the processor's consumer group of a pipeline: "redrive.<pipeline>".
func GroupID(pipeline string) string { return "redrive." + pipeline }

// AnalyzerGroupID is the analyzer's consumer group of a pipeline:
// "redrive.<pipeline>.analyzer".
func AnalyzerGroupID(pipeline string) string { return GroupID(pipeline) + ".analyzer" }

// DefaultDLQ is the dead-letter topic of a main topic that configures none:
// "<main>.dlq".
func DefaultDLQ(main string) string { return main + ".dlq" }

// CallbacksTopic is the callbacks topic of a main topic whose pipeline has
// a callback intake and configures no topic: "<main>.callbacks".
func CallbacksTopic(main string) string { return main + ".callbacks" }

// MaxNameLen is Kafka's limit on the length of a topic name.
const MaxNameLen = 249

// ErrBadName is wrapped by ValidateName's errors.
var ErrBadName = errors.New("bad topic name")

// nameError reads well after the key it is about ("topic: required"); it
// is an ErrBadName.
type nameError struct{ msg string }

func (e *nameError) Error() string { return e.msg }
func (e *nameError) Unwrap() error { return ErrBadName }

// ValidateName says what is wrong with a Kafka topic name, or nil.
func ValidateName(name string) error {
	bad := func(format string, args ...any) error { return &nameError{fmt.Sprintf(format, args...)} }
	switch {
	case name == "":
		return bad("required")
	case name == "." || name == "..":
		return bad("%q is not a legal topic name", name)
	case len(name) > MaxNameLen:
		return bad("%q is longer than %d characters", name, MaxNameLen)
	case !LegalChars(name):
		return bad("%q: a topic name uses only letters, digits, '.', '_' and '-'", name)
	}
	return nil
}

// LegalChars reports whether s is not empty and uses only the characters
// Kafka allows in a topic name, [a-zA-Z0-9._-]. Pipeline names follow the
// same rule because they name consumer groups and metrics.
func LegalChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '.' || c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return s != ""
}

// PipelineSpec is what ForPipeline needs to know about a pipeline. Zero
// values get the defaults above.
type PipelineSpec struct {
	// Topic is the main topic.
	Topic string
	// Tiers are the retry delays, in order (default retry.DefaultTiers).
	Tiers []time.Duration
	// TierNames name the tiers' topics, `<topic>.retry.<name>`, as
	// retry.Schedule.Names does: empty, all of it or one name, is the
	// delay's shortest form (retry.FormatDelay).
	TierNames []string
	// DLQ is the dead-letter topic (default DefaultDLQ(Topic)).
	DLQ string
	// DLQRetention is the DLQ's retention.ms (default DefaultDLQRetention).
	DLQRetention time.Duration
	// Results is the results topic; empty: none.
	Results string
	// Partitions and Replication of every topic created (defaults
	// DefaultPartitions, DefaultReplication).
	Partitions  int32
	Replication int16
	// Callbacks is the callbacks topic (CallbacksTopic) of a pipeline with
	// a callback intake; empty: none.
	Callbacks string
	// CallbacksKeep is how long a callback must stay readable: the wait
	// for it plus processor.CallbackMargin. The callbacks topic is created
	// with the larger of it and CallbacksRetention, and Check reports one
	// that keeps records for less. 0: no minimum is checked.
	CallbacksKeep time.Duration
	// Share says the main topic is read by the pipeline's share group
	// (ShareGroupID, processor.ConsumeShare) instead of its consumer
	// group; the tiers stay in the consumer group. ForPipeline's topics
	// are the same either way: the share group's configs and start
	// offsets are EnsureShare's and CheckShare's, which need the
	// pipeline's name.
	Share bool
}

// Topic config keys this package sets and checks.
const (
	ConfigCleanupPolicy = "cleanup.policy"
	ConfigRetentionMs   = "retention.ms"
	ConfigSegmentMs     = "segment.ms"
)

// ControlSegment is the segment.ms the control topic is created with.
// Compaction never touches the segment being written, and with the
// broker's default of 7 days every status record of a week (one per
// replica and pipeline every few seconds) would stay for every process
// to read at start.
const ControlSegment = time.Hour

// ForControl is the control topic: one partition, so that every reader
// sees its records in one order; cleanup.policy=compact and nothing else,
// so that the latest record of each key (a pause, a pipeline's line, a
// replica's status) stays for as long as the topic does, and a pause
// never ends because retention deleted it; segment.ms ControlSegment.
// Replication 0 or less gets DefaultReplication.
func ForControl(name string, replication int16) Spec {
	if replication <= 0 {
		replication = DefaultReplication
	}
	return Spec{
		Name:        name,
		Role:        RoleControl,
		Partitions:  1,
		Replication: replication,
		Configs: map[string]string{
			ConfigCleanupPolicy: "compact",
			ConfigSegmentMs:     strconv.FormatInt(ControlSegment.Milliseconds(), 10),
		},
	}
}

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
	// MinRetention is the least retention.ms Check accepts (a callbacks
	// topic's PipelineSpec.CallbacksKeep); 0: none.
	MinRetention time.Duration
	// Main is the main topic of the pipeline this topic belongs to; empty
	// for the main topic itself. Check holds a tier's or a DLQ's partition
	// count against it, and Ensure creates a tier or DLQ with at least as
	// many partitions as the main topic already has.
	Main string
}

// ForPipeline is every topic of a pipeline, in order: the main topic, one
// per tier (`<topic>.retry.<name>`), the DLQ (`<topic>.dlq` unless
// configured), the results topic when one is configured and the callbacks
// topic when the pipeline has a callback intake.
//
// Every topic gets cleanup.policy=delete and the pipeline's partitions
// (default 6) and replication (default 1). Tiers get retention.ms =
// TierRetention(delay); the DLQ gets the configured retention (default 7
// days); the callbacks topic the larger of CallbacksRetention (7 days) and
// CallbacksKeep. The main and results topics get no retention override:
// they are the user's, and their retention is the user's choice.
func ForPipeline(p PipelineSpec) []Spec {
	parts := p.Partitions
	if parts <= 0 {
		parts = DefaultPartitions
	}
	repl := p.Replication
	if repl <= 0 {
		repl = DefaultReplication
	}
	sched := retry.Schedule{Tiers: p.Tiers, Names: p.TierNames}
	if len(sched.Tiers) == 0 {
		sched = retry.Schedule{Tiers: retry.DefaultTiers()}
	}
	dlq := p.DLQ
	if dlq == "" {
		dlq = DefaultDLQ(p.Topic)
	}
	dlqRetention := p.DLQRetention
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
	for i, d := range sched.Tiers {
		s := spec(sched.TierTopic(p.Topic, i), RoleRetry, TierRetention(d))
		s.Delay = d
		specs = append(specs, s)
	}
	specs = append(specs, spec(dlq, RoleDLQ, dlqRetention))
	if p.Results != "" {
		specs = append(specs, spec(p.Results, RoleResults, 0))
	}
	if p.Callbacks != "" {
		s := spec(p.Callbacks, RoleCallbacks, max(CallbacksRetention, p.CallbacksKeep))
		s.MinRetention = max(p.CallbacksKeep, 0)
		specs = append(specs, s)
	}
	return specs
}
