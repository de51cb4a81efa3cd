package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Pipeline is one main topic with its tiers, DLQ and optional results topic.
type Pipeline struct {
	// Name identifies the pipeline; the consumer group is "redrive.<Name>".
	Name string
	// Topic is the main topic.
	Topic string
	// Results is the results topic; empty: results are not written.
	Results string
	// DLQ is the dead-letter topic (default "<Topic>.dlq").
	DLQ string
	// Schedule is the tier plan.
	Schedule retry.Schedule
	// TTL: a request older than this (from its origin timestamp) is
	// dead-lettered as expired without calling the handler. 0: no expiry.
	TTL time.Duration
	// NotReadyDeadline: polling a not-ready request stops this long after
	// its first not-ready answer (DLQ "expired"). Default 10m.
	NotReadyDeadline time.Duration
	// Concurrency bounds handler calls in flight for this pipeline. Default 64.
	Concurrency int
	// MaxInflight bounds records polled and not finished (waiting tier
	// records excluded, see MaxWaiting). Default 4×Concurrency.
	MaxInflight int
	// MaxInflightBytes bounds the bytes of those records. Default 64 MiB.
	MaxInflightBytes int64
	// MaxWaiting bounds the tier records held in memory per partition while
	// they wait for their due time; at the bound that partition is paused
	// until half are handled or the last is nearly due. Default 2000.
	MaxWaiting int
	// OrderByKey handles records with the same key one after another.
	OrderByKey bool
	// RedactHeaders are replaced by "[redacted]" on dead letters.
	RedactHeaders []string
	// DLQHeaderStyle adds compatibility headers: "", "spring" or "connect".
	DLQHeaderStyle string
	// Handler handles this pipeline's records; nil: the processor's default.
	Handler Handler
}

// Config configures a Processor.
type Config struct {
	// Brokers are the seed brokers.
	Brokers []string
	// ClientOpts are added to every Kafka client (SASL, TLS, logging).
	ClientOpts []kgo.Opt
	// Pipelines to run; at least one.
	Pipelines []Pipeline
	// Instance names this process in redrive-instance (default: hostname).
	Instance string
	// SessionTimeout is the consumer group session timeout (default 45s).
	SessionTimeout time.Duration
	// ShutdownGrace bounds how long Run waits for in-flight work after its
	// context is cancelled (default 30s).
	ShutdownGrace time.Duration
	// CommitInterval is how often finished offsets are committed (default 500ms).
	CommitInterval time.Duration
	// Registerer receives the processor's metrics and kprom's client
	// metrics (default: a private registry).
	Registerer prometheus.Registerer
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Ready is told, per check name, whether the processor is ready
	// (nil error) or why not. Optional.
	Ready func(name string, err error)
	// Beat is called on every turn of each poll loop (liveness). Optional.
	Beat func(name string)
}

// Errors returned by New for a bad configuration.
var ErrConfig = errors.New("processor: bad config")

func (c *Config) setDefaults() error {
	if len(c.Brokers) == 0 {
		return fmt.Errorf("%w: no brokers", ErrConfig)
	}
	if len(c.Pipelines) == 0 {
		return fmt.Errorf("%w: no pipelines", ErrConfig)
	}
	if c.Instance == "" {
		c.Instance, _ = os.Hostname()
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 500 * time.Millisecond
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	names := map[string]bool{}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		if p.Name == "" || p.Topic == "" {
			return fmt.Errorf("%w: pipeline %d needs a name and a topic", ErrConfig, i)
		}
		if names[p.Name] {
			return fmt.Errorf("%w: pipeline %q twice", ErrConfig, p.Name)
		}
		names[p.Name] = true
		if err := p.Schedule.Validate(); err != nil {
			return fmt.Errorf("%w: pipeline %q: %w", ErrConfig, p.Name, err)
		}
		if p.DLQ == "" {
			p.DLQ = p.Topic + ".dlq"
		}
		if p.NotReadyDeadline == 0 {
			p.NotReadyDeadline = 10 * time.Minute
		}
		if p.Concurrency <= 0 {
			p.Concurrency = 64
		}
		if p.MaxInflight <= 0 {
			p.MaxInflight = 4 * p.Concurrency
		}
		if p.MaxInflightBytes <= 0 {
			p.MaxInflightBytes = 64 << 20
		}
		if p.MaxWaiting <= 0 {
			p.MaxWaiting = 2000
		}
	}
	return nil
}

// GroupID is the pipeline's consumer group: "redrive.<name>".
func (p Pipeline) GroupID() string { return "redrive." + p.Name }

// TierTopics names the pipeline's retry topics, in tier order.
func (p Pipeline) TierTopics() []string {
	ts := make([]string, len(p.Schedule.Tiers))
	for i, d := range p.Schedule.Tiers {
		ts[i] = retry.TierTopic(p.Topic, d)
	}
	return ts
}
