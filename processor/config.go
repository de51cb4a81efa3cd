package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// Pipeline is one main topic with its tiers, DLQ and optional results topic.
type Pipeline struct {
	// Name identifies the pipeline; the consumer group is
	// topics.GroupID(Name), "redrive.<Name>".
	Name string
	// Topic is the main topic.
	Topic string
	// Results is the results topic; empty: results are not written.
	Results string
	// DLQ is the dead-letter topic (default topics.DefaultDLQ(Topic),
	// "<Topic>.dlq").
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
	// records excluded, see MaxWaiting). Default the larger of
	// DefaultMaxInflight and 4×Concurrency.
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

	// Breaker stops handler calls while the service fails (the zero value:
	// on, with the Default* settings; Breaker.Disabled turns it off).
	Breaker Breaker
	// RateLimit bounds handler calls per second (a token bucket; waiting
	// for a token is not an attempt). 0: no limit. With Scope
	// ScopePipeline (the default) it is the whole pipeline's, shared by
	// every process that runs it (share.go); with ScopeProcess, each
	// process's.
	RateLimit float64
	// MaxCallsInFlight bounds handler calls running at once toward the
	// service (a CAPTCHA service's "threads"): the whole pipeline's, or
	// each process's with ScopeProcess. 0: no bound but Concurrency.
	MaxCallsInFlight int
	// Scope says who the line and the budgets are for: ScopePipeline (the
	// default, "") shares the breaker, pause codes, the guard's stop and
	// the budgets with every process running the pipeline through the
	// control topic (Config.Control, controlplane.go); ScopeProcess keeps them to this
	// process. An operator's pause (`redrive pause`) reaches both.
	Scope Scope
	// RateBurst is how many calls may start at once above the rate
	// (default 1: evenly spaced).
	RateBurst int
	// Guard stops the line when nearly every call fails permanently (a
	// wrong API key): the zero value is on, with the Default* settings.
	Guard Guard
	// Callbacks, when set, makes submitted jobs wait for the service's
	// callback before they are polled (callback.go).
	Callbacks *Callbacks

	// Delivery is AtLeastOnce (the default, "") or ExactlyOnce: every
	// outcome record (result, retry, dead letter, failover) and the
	// consumed offsets are written in one Kafka transaction (txn.go), so a
	// read_committed consumer sees each once, even across a crash. The
	// handler's call itself stays at least once.
	Delivery Delivery
	// MaxBatch bounds the outcomes of one transaction (ExactlyOnce): a
	// transaction is written every CommitInterval, or sooner once this
	// many outcomes are ready. Default 2000.
	MaxBatch int

	// Consume says how the main topic is read: ConsumeGroup (the default,
	// "") in the pipeline's consumer group, a partition per replica at a
	// time, or ConsumeShare in a share group (sharegroup.go): any number of
	// replicas take records of one partition, each record accepted once
	// its outcome is acknowledged. The tiers are read by the consumer
	// group in both.
	Consume Consume
	// MaxDeliveries (ConsumeShare): a main-topic record the share group
	// delivered more than this many times without an outcome (its handling
	// killed the process each time) is dead-lettered "crashed" before it is
	// handled again, if its delivery before ran it alone (sharesolo.go;
	// one delivery later without the control topic's word). Default
	// DefaultMaxDeliveries; it + 1 must stay below the broker's
	// group.share.delivery.count.limit (5 by default), which archives the
	// record silently.
	MaxDeliveries int
}

// Consume is how a pipeline reads its main topic.
type Consume string

// Ways to consume.
const (
	ConsumeGroup Consume = "group"
	ConsumeShare Consume = "share"
)

// DefaultMaxDeliveries is Pipeline.MaxDeliveries' default: a record that
// crashed the process three times is dead-lettered at its fourth delivery
// (its fifth without the control topic's word that it ran alone, the last
// before Kafka's default delivery count limit archives it).
const DefaultMaxDeliveries = 3

// Scope is who a pipeline's line and budgets are for.
type Scope string

// Scopes.
const (
	ScopePipeline Scope = "pipeline"
	ScopeProcess  Scope = "process"
)

// Delivery is a pipeline's delivery guarantee for its outcome records.
type Delivery string

// Deliveries.
const (
	AtLeastOnce Delivery = "at-least-once"
	ExactlyOnce Delivery = "exactly-once"
)

// DefaultMaxBatch is Pipeline.MaxBatch's default.
const DefaultMaxBatch = 2000

// Breaker is a pipeline's circuit breaker (line_breaker.go): it judges whether
// the service fails, not whether some requests do. It counts transient
// outcomes as the service's failures, except a record's failure with the
// code it failed with before and codes marked Outcome.RequestFault; any
// other answer counts as the service working. At FailureRatio of at least
// MinCalls counted calls in a rolling Window, or Consecutive counted
// failures in a row, it opens: no call starts, fetching pauses, no attempt
// is spent. After OpenFor it lets Probes calls through, fresh work first;
// once FailureRatio of them failed it opens again for twice as long (up
// to MaxOpen), once enough succeeded that this cannot happen it closes.
type Breaker struct {
	// Disabled turns the breaker off (YAML: enabled: false).
	Disabled     bool
	FailureRatio float64       // default 0.5
	MinCalls     int           // default 100
	Consecutive  int           // default 20; 0 after defaults never happens
	Window       time.Duration // default 30s
	OpenFor      time.Duration // default 30s
	MaxOpen      time.Duration // default 5m
	Probes       int           // default 5
	// FailoverTo: while the breaker is open (or a pause code holds the
	// line), main-topic records are forwarded unchanged to this topic
	// (another pipeline's main topic), redrive-failovers + 1, instead of
	// waiting. Empty: they wait.
	FailoverTo string
	// FailoverRetries forwards tier records too.
	FailoverRetries bool
}

// Guard stops the line when Permanent outcomes reach PermanentRatio of the
// last MinCalls calls with an answer, all made within Window, until an
// operator resumes it (or AutoResumeAfter, when set). The last calls, not
// a time span: a key rotated after a busy hour is caught within MinCalls
// calls.
type Guard struct {
	// Disabled turns the guard off (YAML: enabled: false).
	Disabled        bool
	PermanentRatio  float64       // default 0.9
	MinCalls        int           // default 50
	Window          time.Duration // default 1m
	AutoResumeAfter time.Duration // 0 (default): only an operator resumes
}

// Defaults of Breaker and Guard.
const (
	DefaultBreakerFailureRatio = 0.5
	DefaultBreakerMinCalls     = 100
	DefaultBreakerConsecutive  = 20
	DefaultBreakerWindow       = 30 * time.Second
	DefaultBreakerOpenFor      = 30 * time.Second
	DefaultBreakerMaxOpen      = 5 * time.Minute
	DefaultBreakerProbes       = 5
	DefaultGuardPermanentRatio = 0.9
	DefaultGuardMinCalls       = 50
	DefaultGuardWindow         = time.Minute
	DefaultRateBurst           = 1
	// MaxFailovers: a record already forwarded this many times
	// (redrive-failovers) is not forwarded again; it waits for its
	// pipeline's line, so two pipelines failing over to each other do
	// not pass records back and forth.
	MaxFailovers = 3
)

// WithDefaults fills the zero settings of an enabled breaker.
func (b Breaker) WithDefaults() Breaker {
	if b.Disabled {
		return b
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = DefaultBreakerFailureRatio
	}
	if b.MinCalls == 0 {
		b.MinCalls = DefaultBreakerMinCalls
	}
	if b.Consecutive == 0 {
		b.Consecutive = DefaultBreakerConsecutive
	}
	if b.Window == 0 {
		b.Window = DefaultBreakerWindow
	}
	if b.OpenFor == 0 {
		b.OpenFor = DefaultBreakerOpenFor
	}
	if b.MaxOpen == 0 {
		b.MaxOpen = max(DefaultBreakerMaxOpen, b.OpenFor)
	}
	if b.Probes == 0 {
		b.Probes = DefaultBreakerProbes
	}
	return b
}

// WithDefaults fills the zero settings of an enabled guard.
func (g Guard) WithDefaults() Guard {
	if g.Disabled {
		return g
	}
	if g.PermanentRatio == 0 {
		g.PermanentRatio = DefaultGuardPermanentRatio
	}
	if g.MinCalls == 0 {
		g.MinCalls = DefaultGuardMinCalls
	}
	if g.Window == 0 {
		g.Window = DefaultGuardWindow
	}
	return g
}

// ParseRate reads a rate limit: "50/s", "3000/m", "100000/h", or a plain
// number of calls per second ("50", "2.5"). "" and "0" are no limit (0).
func ParseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, unit, hasUnit := strings.Cut(s, "/")
	per := 1.0
	if hasUnit {
		switch strings.TrimSpace(unit) {
		case "s", "1s", "sec", "second":
		case "m", "1m", "min", "minute":
			per = 60
		case "h", "1h", "hour":
			per = 3600
		default:
			return 0, fmt.Errorf("rate %q: the unit after / must be s, m or h", s)
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("rate %q: want calls per unit, e.g. 50/s or 3000/m", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("rate %q: must not be negative", s)
	}
	if n > 0 && n/per < 1e-6 {
		return 0, fmt.Errorf("rate %q: below one call in 11 days", s)
	}
	return n / per, nil
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
	// Principal is who the broker's authorizer sees ("User:redrive" for
	// sasl.user redrive), named in the ACL a refused write or read asks
	// for; "" when not known.
	Principal string
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
	// Degraded is told, per part, what works in a degraded way without
	// making the process unready ("" when nothing): the control topic
	// unreachable or denied. Optional.
	Degraded func(name, detail string)
	// Control is the control topic the processes of a pipeline share
	// (controlplane.go).
	Control Control

	// clock is the wall clock due times are compared with (clock.go);
	// nil: the system's. Set only by tests.
	clock clock
}

// Control configures the control topic (package control): every process
// reads it from its start and follows it, and publishes its status and
// its line's stops there.
type Control struct {
	// Topic is the control topic (default control.DefaultTopic,
	// "redrive.control"): compacted, one partition, created by `redrive
	// topics ensure`.
	Topic string
	// StatusInterval is how often each process publishes a status record
	// per pipeline (default control.DefaultStatusInterval, 5s).
	StatusInterval time.Duration
	// Disabled: no control topic. Every pipeline runs as ScopeProcess and
	// `redrive pause` does not reach it (tests of one process, embedders
	// with no such topic).
	Disabled bool
}

// ErrConfig is wrapped by the error New returns for a bad configuration.
var ErrConfig = errors.New("processor: bad config")

// Defaults that WithDefaults fills in for zero values.
const (
	DefaultSessionTimeout   = 45 * time.Second
	DefaultShutdownGrace    = 30 * time.Second
	DefaultCommitInterval   = 500 * time.Millisecond
	DefaultNotReadyDeadline = 10 * time.Minute
	DefaultConcurrency      = 64
	DefaultInflightPerSlot  = 4 // MaxInflight is at least this times Concurrency
	// DefaultMaxInflight is MaxInflight's least default: measured
	// (BENCHMARKS.md), the happy path's throughput levels off between 4096
	// and 16384 records in flight while memory keeps growing, and 256 (4 ×
	// the default concurrency) made a sixth of it.
	DefaultMaxInflight      = 4096
	DefaultMaxInflightBytes = 64 << 20
	DefaultMaxWaiting       = 2000
)

// FieldError is one problem with one field of a Config, a Pipeline or
// (package httphandler) its Options. A loader that knows where the field
// came from (internal/config: the YAML key and line) maps Field to that.
type FieldError struct {
	// Field is the Go field, dotted from the struct that was validated:
	// "Concurrency", "Pipelines[1].Topic", "Codes.Permanent", "Schedule".
	Field string
	// Index is the element of a list field at fault, or -1.
	Index int
	// Key is the key of a map field at fault, if any ("" otherwise).
	Key string
	// Msg says what is wrong, starting with the value when it helps
	// ("-1: must be at least 1").
	Msg string
	// Err is the cause, if another package's validator found the problem
	// (a *retry.ScheduleError, topics.ErrBadName); it may be nil.
	Err error
}

func (e *FieldError) Error() string {
	f := e.Field
	switch {
	case e.Key != "":
		f += "[" + strconv.Quote(e.Key) + "]"
	case e.Index >= 0:
		f += "[" + strconv.Itoa(e.Index) + "]"
	}
	return f + ": " + e.Msg
}

// Unwrap gives the cause, if any.
func (e *FieldError) Unwrap() error { return e.Err }

// fieldErrs collects FieldErrors.
type fieldErrs []error

func (fe *fieldErrs) add(field, format string, args ...any) {
	*fe = append(*fe, &FieldError{Field: field, Index: -1, Msg: fmt.Sprintf(format, args...)})
}

// addErr adds err, found by another package's validator, as field's error.
func (fe *fieldErrs) addErr(field string, err error) {
	*fe = append(*fe, &FieldError{Field: field, Index: -1, Msg: err.Error(), Err: err})
}

// WithDefaults is p with every zero value that has a default filled in:
// DLQ (topics.DefaultDLQ(Topic)), NotReadyDeadline, Concurrency,
// MaxInflight (the larger of DefaultMaxInflight and DefaultInflightPerSlot
// × Concurrency, + MaxBatch for
// ExactlyOnce), MaxInflightBytes,
// MaxWaiting, Delivery (AtLeastOnce), MaxBatch, a copy of Callbacks with
// its defaults (Callbacks.WithDefaults).
// Name and Schedule have no default.
func (p Pipeline) WithDefaults() Pipeline {
	if p.DLQ == "" && p.Topic != "" {
		p.DLQ = topics.DefaultDLQ(p.Topic)
	}
	if p.NotReadyDeadline == 0 {
		p.NotReadyDeadline = DefaultNotReadyDeadline
	}
	if p.Concurrency == 0 {
		p.Concurrency = DefaultConcurrency
	}
	if p.Delivery == "" {
		p.Delivery = AtLeastOnce
	}
	if p.MaxBatch == 0 {
		p.MaxBatch = DefaultMaxBatch
	}
	if p.MaxInflight == 0 && p.Concurrency > 0 {
		// A concurrency so large that 4 × it overflows leaves 0, which
		// Validate reports (at concurrency, in a config file).
		if per := DefaultInflightPerSlot * p.Concurrency; per/DefaultInflightPerSlot == p.Concurrency {
			p.MaxInflight = max(DefaultMaxInflight, per)
		}
		if p.Delivery == ExactlyOnce && p.MaxBatch > 0 {
			// Held outcomes are in flight until their transaction: room
			// for a batch besides the records being handled.
			p.MaxInflight += p.MaxBatch
		}
	}
	if p.MaxInflightBytes == 0 {
		p.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if p.MaxWaiting == 0 {
		p.MaxWaiting = DefaultMaxWaiting
	}
	if p.RateBurst == 0 {
		p.RateBurst = DefaultRateBurst
	}
	if p.Scope == "" {
		p.Scope = ScopePipeline
	}
	if p.Consume == "" {
		p.Consume = ConsumeGroup
	}
	if p.MaxDeliveries == 0 {
		p.MaxDeliveries = DefaultMaxDeliveries
	}
	p.Breaker = p.Breaker.WithDefaults()
	p.Guard = p.Guard.WithDefaults()
	if p.Callbacks != nil {
		cb := p.Callbacks.WithDefaults(p.Topic)
		p.Callbacks = &cb // a copy: the caller's Callbacks stays as it was
	}
	return p
}

// WithDefaults fills the zero settings of a pipeline's Callbacks: Topic
// (topics.CallbacksTopic(main), "<main>.callbacks"), Wait
// (DefaultCallbackWait), MaxEntries (DefaultCallbackEntries), MaxBytes
// (DefaultCallbackBytes).
func (c Callbacks) WithDefaults(main string) Callbacks {
	if c.Topic == "" && main != "" {
		c.Topic = topics.CallbacksTopic(main)
	}
	if c.Wait == 0 {
		c.Wait = DefaultCallbackWait
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultCallbackEntries
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultCallbackBytes
	}
	return c
}

// Validate checks a pipeline whose defaults are filled in (WithDefaults)
// on its own; Config.Validate also checks pipelines against each other.
// It reports every problem, each a *FieldError, joined with errors.Join.
func (p Pipeline) Validate() error { return errors.Join(p.validate()...) }

// validate reports p's problems section by section. The order of the
// calls is the order of the errors, which users and tests read as a list:
// keep it.
func (p Pipeline) validate() []error {
	tiers := p.TierTopics()
	var errs fieldErrs
	errs = append(errs, p.validateName()...)
	errs = append(errs, p.validateTopics(tiers)...)
	errs = append(errs, p.validateDeadLetters()...)
	errs = append(errs, p.validateTimes()...)
	errs = append(errs, p.validateBounds()...)
	errs = append(errs, p.validateRate()...)
	errs = append(errs, p.validateDelivery()...)
	errs = append(errs, p.validateBreaker(tiers)...)
	errs = append(errs, p.validateCallbacks(tiers)...)
	errs = append(errs, p.validateFailoverRetries()...)
	errs = append(errs, p.validateGuard()...)
	return errs
}

func (p Pipeline) validateName() fieldErrs {
	var errs fieldErrs
	switch {
	case p.Name == "":
		errs.add("Name", "required")
	case !topics.LegalChars(p.Name):
		errs.add("Name", "%q: use letters, digits, '.', '_' and '-'", p.Name)
	}
	return errs
}

// validateTopics checks the main topic, the schedule and the topics named
// from them (tiers), the results topic and the DLQ: legal names, none
// used twice.
func (p Pipeline) validateTopics(tiers []string) fieldErrs {
	var errs fieldErrs
	topicErr := topics.ValidateName(p.Topic)
	if topicErr != nil {
		errs.addErr("Topic", topicErr)
	}
	if err := p.Schedule.Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs.addErr("Schedule", e)
		}
	}
	if topicErr == nil {
		for _, t := range tiers {
			if len(t) > topics.MaxNameLen {
				errs.add("Topic", "tier topic %q is longer than %d characters", t, topics.MaxNameLen)
				break
			}
		}
	}
	if p.Results != "" {
		if err := topics.ValidateName(p.Results); err != nil {
			errs.addErr("Results", err)
		} else if p.Results == p.Topic {
			errs.add("Results", "%q is the main topic too", p.Results)
		} else if slices.Contains(tiers, p.Results) {
			errs.add("Results", "%q is a tier topic too", p.Results)
		}
	}
	if p.DLQ == "" && p.Topic == "" {
		// it defaults from the topic: the topic's error says it
	} else if err := topics.ValidateName(p.DLQ); err != nil {
		errs.addErr("DLQ", err)
	} else if p.DLQ == p.Topic {
		errs.add("DLQ", "%q is the main topic too", p.DLQ)
	} else if slices.Contains(tiers, p.DLQ) {
		errs.add("DLQ", "%q is a tier topic too", p.DLQ)
	} else if p.DLQ == p.Results {
		errs.add("DLQ", "%q is the results topic too", p.DLQ)
	}
	return errs
}

// validateDeadLetters checks what dead letters carry: the header style
// and the headers redacted.
func (p Pipeline) validateDeadLetters() fieldErrs {
	var errs fieldErrs
	switch p.DLQHeaderStyle {
	case "", dlq.StyleSpring, dlq.StyleConnect:
	default:
		errs.add("DLQHeaderStyle", "%q: want %q, %q or nothing", p.DLQHeaderStyle, dlq.StyleSpring, dlq.StyleConnect)
	}
	for j, h := range p.RedactHeaders {
		if h == "" {
			errs = append(errs, &FieldError{Field: "RedactHeaders", Index: j, Msg: "empty header name"})
		}
	}
	return errs
}

// validateTimes checks how long a request may live.
func (p Pipeline) validateTimes() fieldErrs {
	var errs fieldErrs
	if p.TTL < 0 {
		errs.add("TTL", "%s: must not be negative", p.TTL)
	}
	if p.NotReadyDeadline <= 0 {
		errs.add("NotReadyDeadline", "%s: must be more than 0", p.NotReadyDeadline)
	}
	return errs
}

// validateBounds checks the limits on calls and records in flight.
func (p Pipeline) validateBounds() fieldErrs {
	var errs fieldErrs
	if p.Concurrency < 1 {
		errs.add("Concurrency", "%d: must be at least 1", p.Concurrency)
	}
	if p.MaxInflight < 1 {
		errs.add("MaxInflight", "%d: must be at least 1", p.MaxInflight)
	}
	if p.MaxInflightBytes < 1 {
		errs.add("MaxInflightBytes", "%d: must be at least 1", p.MaxInflightBytes)
	}
	if p.MaxWaiting < 1 {
		errs.add("MaxWaiting", "%d: must be at least 1", p.MaxWaiting)
	}
	return errs
}

func (p Pipeline) validateRate() fieldErrs {
	var errs fieldErrs
	if p.RateLimit < 0 || math.IsNaN(p.RateLimit) || math.IsInf(p.RateLimit, 0) {
		errs.add("RateLimit", "%v: must be 0 (no limit) or more", p.RateLimit)
	}
	if p.MaxCallsInFlight < 0 {
		errs.add("MaxCallsInFlight", "%d: must be 0 (no bound) or more", p.MaxCallsInFlight)
	}
	if p.Scope != ScopePipeline && p.Scope != ScopeProcess {
		errs.add("Scope", "%q: must be pipeline or process", p.Scope)
	}
	if p.RateBurst < 1 {
		errs.add("RateBurst", "%d: must be at least 1", p.RateBurst)
	}
	return errs
}

func (p Pipeline) validateDelivery() fieldErrs {
	var errs fieldErrs
	switch p.Delivery {
	case AtLeastOnce, ExactlyOnce:
	default:
		errs.add("Delivery", "%q: want %q or %q", p.Delivery, AtLeastOnce, ExactlyOnce)
	}
	if p.MaxBatch < 1 {
		errs.add("MaxBatch", "%d: must be at least 1", p.MaxBatch)
	}
	switch p.Consume {
	case ConsumeGroup:
	case ConsumeShare:
		// Share groups have no transactions: an accepted record is not
		// part of the transaction that writes its outcome.
		if p.Delivery == ExactlyOnce {
			errs.add("Consume", "share cannot be used with delivery exactly-once: Kafka's share groups have no transactions (use consume: group)")
		}
		// A share group hands records of one key to any member at once.
		if p.OrderByKey {
			errs.add("Consume", "share cannot keep key order (ordering: key): a share group hands records of one key to several replicas at once (use consume: group)")
		}
	default:
		errs.add("Consume", "%q: want %q or %q", p.Consume, ConsumeGroup, ConsumeShare)
	}
	if p.MaxDeliveries < 1 || p.MaxDeliveries > MaxMaxDeliveries {
		errs.add("MaxDeliveries", "%d: must be 1 to %d (below the broker's group.share.delivery.count.limit, at most 10)", p.MaxDeliveries, MaxMaxDeliveries)
	}
	return errs
}

// MaxMaxDeliveries is the largest MaxDeliveries: Kafka's
// group.share.delivery.count.limit is at most 10, and the record must be
// delivered once more to be dead-lettered.
const MaxMaxDeliveries = 9

// validateBreaker checks an enabled breaker's settings and its failover
// topic, which must be another pipeline's (tiers: this one's tier topics).
func (p Pipeline) validateBreaker(tiers []string) fieldErrs {
	b := p.Breaker
	if b.Disabled {
		return nil
	}
	var errs fieldErrs
	if !(b.FailureRatio > 0 && b.FailureRatio <= 1) {
		errs.add("Breaker.FailureRatio", "%v: must be more than 0 and at most 1", b.FailureRatio)
	}
	if b.MinCalls < 1 {
		errs.add("Breaker.MinCalls", "%d: must be at least 1", b.MinCalls)
	}
	if b.Consecutive < 1 {
		errs.add("Breaker.Consecutive", "%d: must be at least 1", b.Consecutive)
	}
	if b.Window < time.Second {
		errs.add("Breaker.Window", "%s: must be at least 1s", b.Window)
	}
	if b.OpenFor < 100*time.Millisecond {
		errs.add("Breaker.OpenFor", "%s: must be at least 100ms", b.OpenFor)
	}
	if b.MaxOpen < b.OpenFor {
		errs.add("Breaker.MaxOpen", "%s: must be at least open_for (%s)", b.MaxOpen, b.OpenFor)
	}
	if b.Probes < 1 || b.Probes > 1000 {
		errs.add("Breaker.Probes", "%d: must be 1 to 1000", b.Probes)
	}
	if b.FailoverTo != "" {
		if err := topics.ValidateName(b.FailoverTo); err != nil {
			errs.addErr("Breaker.FailoverTo", err)
		} else if p.ownTopic(b.FailoverTo, tiers) {
			errs.add("Breaker.FailoverTo", "%q is one of this pipeline's own topics; name another pipeline's main topic", b.FailoverTo)
		}
	}
	return errs
}

// validateCallbacks checks the callbacks' topic, which must be theirs
// alone (tiers: this pipeline's tier topics), and their bounds.
func (p Pipeline) validateCallbacks(tiers []string) fieldErrs {
	c := p.Callbacks
	if c == nil {
		return nil
	}
	var errs fieldErrs
	if c.Topic == "" && p.Topic == "" {
		// it defaults from the topic: the topic's error says it
	} else if err := topics.ValidateName(c.Topic); err != nil {
		errs.addErr("Callbacks.Topic", err)
	} else if p.ownTopic(c.Topic, tiers) {
		errs.add("Callbacks.Topic", "%q is one of this pipeline's other topics (main, tier, DLQ or results); callbacks need a topic of their own", c.Topic)
	}
	if c.Wait <= 0 {
		errs.add("Callbacks.Wait", "%s: must be more than 0", c.Wait)
	} else if p.NotReadyDeadline > 0 && c.Wait >= p.NotReadyDeadline {
		errs.add("Callbacks.Wait", "%s: must be less than not_ready_deadline (%s), or a job without a callback expires before its first poll", c.Wait, p.NotReadyDeadline)
	}
	if c.MaxEntries < 1 {
		errs.add("Callbacks.MaxEntries", "%d: must be at least 1", c.MaxEntries)
	}
	if c.MaxBytes < MinCallbackBytes {
		errs.add("Callbacks.MaxBytes", "%d: must be at least %d (1MiB)", c.MaxBytes, MinCallbackBytes)
	}
	return errs
}

// validateFailoverRetries is not part of validateBreaker: failover_retries
// without failover_to is wrong with the breaker off too.
func (p Pipeline) validateFailoverRetries() fieldErrs {
	var errs fieldErrs
	if b := p.Breaker; b.FailoverRetries && b.FailoverTo == "" {
		errs.add("Breaker.FailoverRetries", "needs failover_to")
	}
	return errs
}

// validateGuard checks an enabled guard's settings.
func (p Pipeline) validateGuard() fieldErrs {
	g := p.Guard
	if g.Disabled {
		return nil
	}
	var errs fieldErrs
	if !(g.PermanentRatio > 0 && g.PermanentRatio <= 1) {
		errs.add("Guard.PermanentRatio", "%v: must be more than 0 and at most 1", g.PermanentRatio)
	}
	if g.MinCalls < 1 {
		errs.add("Guard.MinCalls", "%d: must be at least 1", g.MinCalls)
	}
	if g.Window < time.Second {
		errs.add("Guard.Window", "%s: must be at least 1s", g.Window)
	}
	if g.AutoResumeAfter < 0 {
		errs.add("Guard.AutoResumeAfter", "%s: must not be negative", g.AutoResumeAfter)
	}
	return errs
}

// ownTopic says whether t is one of p's topics: main, tier (tiers), DLQ or
// results.
func (p Pipeline) ownTopic(t string, tiers []string) bool {
	return t == p.Topic || slices.Contains(tiers, t) || t == p.DLQ || t == p.Results
}

// WithDefaults is c with every zero value that has a default filled in,
// its pipelines' too (Pipeline.WithDefaults): Instance (the host name),
// SessionTimeout, ShutdownGrace, CommitInterval, Registerer (a private
// registry), Logger (slog.Default()).
func (c Config) WithDefaults() Config {
	if c.Instance == "" {
		c.Instance, _ = os.Hostname()
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Control.Topic == "" {
		c.Control.Topic = control.DefaultTopic
	}
	if c.Control.StatusInterval == 0 {
		c.Control.StatusInterval = control.DefaultStatusInterval
	}
	c.Pipelines = slices.Clone(c.Pipelines)
	for i := range c.Pipelines {
		c.Pipelines[i] = c.Pipelines[i].WithDefaults()
	}
	return c
}

// Validate checks a Config whose defaults are filled in (WithDefaults): at
// least one broker and one pipeline, each pipeline valid (its errors'
// Field is "Pipelines[i].<field>"), pipeline names unique, and no topic
// consumed (main or tier) by two pipelines. It reports every problem, each
// a *FieldError, joined with errors.Join.
func (c Config) Validate() error {
	var errs fieldErrs
	if len(c.Brokers) == 0 {
		errs.add("Brokers", "at least one broker is required")
	}
	if c.SessionTimeout <= 0 {
		errs.add("SessionTimeout", "%s: must be more than 0", c.SessionTimeout)
	}
	if c.ShutdownGrace <= 0 {
		errs.add("ShutdownGrace", "%s: must be more than 0", c.ShutdownGrace)
	}
	if c.CommitInterval <= 0 {
		errs.add("CommitInterval", "%s: must be more than 0", c.CommitInterval)
	}
	if len(c.Pipelines) == 0 {
		errs.add("Pipelines", "at least one pipeline is required")
	}
	if c.Control.StatusInterval < 0 {
		errs.add("Control.StatusInterval", "%s: must be more than 0", c.Control.StatusInterval)
	}
	names := map[string]int{}
	consumed := map[string]int{} // main and tier topics → the index of the pipeline that consumes them
	for i, p := range c.Pipelines {
		at := "Pipelines[" + strconv.Itoa(i) + "]."
		for _, e := range p.validate() {
			fe := e.(*FieldError)
			fe.Field = at + fe.Field
			errs = append(errs, fe)
		}
		if j, dup := names[p.Name]; dup && p.Name != "" {
			errs.add(at+"Name", "%q is also the name of pipelines[%d]; pipeline names must be unique", p.Name, j)
		} else {
			names[p.Name] = i
		}
		if topics.ValidateName(p.Topic) != nil {
			continue
		}
		if j, dup := consumed[p.Topic]; dup {
			errs.add(at+"Topic", "%q is consumed by pipelines[%d] too; a topic belongs to one pipeline", p.Topic, j)
			continue
		}
		consumed[p.Topic] = i
		for _, t := range p.TierTopics() {
			if j, dup := consumed[t]; dup && j != i {
				errs.add(at+"Topic", "tier topic %q is consumed by pipelines[%d] too; a topic belongs to one pipeline", t, j)
			}
			consumed[t] = i
		}
	}
	// A callbacks topic holds callbacks only: never another pipeline's
	// main or tier topic.
	for i, p := range c.Pipelines {
		if p.Callbacks == nil || p.Callbacks.Topic == "" {
			continue
		}
		if j, dup := consumed[p.Callbacks.Topic]; dup && j != i {
			errs.add("Pipelines["+strconv.Itoa(i)+"].Callbacks.Topic", "%q is consumed by pipelines[%d]; callbacks need a topic of their own", p.Callbacks.Topic, j)
		}
	}
	return errors.Join(errs...)
}

// setDefaults is what New does with its Config: fill defaults, validate.
func (c *Config) setDefaults() error {
	*c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// GroupID is the pipeline's consumer group: topics.GroupID(Name).
func (p Pipeline) GroupID() string { return topics.GroupID(p.Name) }

// TierTopics names the pipeline's retry topics, in tier order.
func (p Pipeline) TierTopics() []string {
	ts := make([]string, len(p.Schedule.Tiers))
	for i := range p.Schedule.Tiers {
		ts[i] = p.Schedule.TierTopic(p.Topic, i)
	}
	return ts
}

// ShareGroupID is the share group of a pipeline with consume: share.
func (p Pipeline) ShareGroupID() string { return topics.ShareGroupID(p.Name) }
