// Package config is redrive's YAML configuration: the types, the loader,
// defaults and validation.
//
// Loading a file ([Load], [Parse]) goes through four steps, in this order:
//
//  1. Decode, strictly. The file is walked as a YAML node tree: an unknown
//     key, a duplicate key or a value of the wrong type is an [*Error] that
//     names the key's path and line ("line 12: pipelines[0].retry.tierz:
//     unknown key (known: tiers, max_attempts, jitter, max_due)"). All problems are
//     reported at once, joined with [errors.Join]. Anchors, aliases and
//     merge keys (<<) work as in YAML.
//  2. Expand ${NAME} in every string value (before it is typed, so
//     "partitions: ${PARTS}" works) with the environment; see [Parse].
//  3. Override from REDRIVE_* environment variables ([Config.ApplyEnv]).
//  4. Fill defaults ([Config.SetDefaults]) and validate ([Config.Validate]).
//     Both use the packages' own: processor, processor/httphandler,
//     topics and retry define the defaults and the checks, and this
//     package reports each of their problems at its key and line (the
//     package's error is the [Error]'s Cause).
//
// A key that is absent, or null, gets its default. For numbers and
// durations a zero also means the default, except where zero means
// something: retry.jitter (0: no jitter), ttl (0: no expiry), an
// analyzer alert's threshold (0: any dead letter), rate_limit (0: no
// limit), max_calls_in_flight (0: no bound) and guard.auto_resume_after
// (0: only an operator resumes).
//
// A pipeline without handler.http is valid: a Go program that embeds the
// processor supplies its own handler for it.
//
// The package only describes and validates. It never connects to anything
// and never opens a file other than the one it is asked to load (TLS files
// are checked where they are used, in internal/kafkaconn).
package config

// Config is the whole file.
type Config struct {
	// Brokers are the seed brokers, host:port. A single string is split at
	// commas, so "brokers: ${KAFKA_BROKERS}" works. Required.
	Brokers []string `yaml:"brokers" config:"csv"`
	// HTTPAddr serves /metrics, /healthz and /readyz (default 127.0.0.1:9090).
	HTTPAddr string `yaml:"http_addr"`
	// CallbackAddr serves the callback paths of the pipelines that have
	// handler.callback (public-facing, apart from HTTPAddr); default
	// 0.0.0.0:8443 when a pipeline has a callback.
	CallbackAddr string `yaml:"callback_addr"`
	// ClientID is the Kafka client id (default: franz-go's).
	ClientID string `yaml:"client_id"`
	// Instance is written to redrive-instance on dead letters (default: the
	// host name, filled in by the processor).
	Instance  string     `yaml:"instance"`
	SASL      *SASL      `yaml:"sasl"`
	TLS       *TLS       `yaml:"tls"`
	Pipelines []Pipeline `yaml:"pipelines"`
	Analyzer  Analyzer   `yaml:"analyzer"`
	// SessionTimeout is the consumer group session timeout (default 45s).
	SessionTimeout Duration `yaml:"session_timeout"`
	// ShutdownGrace bounds how long SIGTERM waits for in-flight work (default 30s).
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// CommitInterval is processor.Config.CommitInterval (default 500ms):
	// how often offsets are committed, or, exactly-once, transactions
	// written.
	CommitInterval Duration `yaml:"commit_interval"`
	// Processor is the settings of `redrive process` that are not a
	// pipeline's.
	Processor Processor `yaml:"processor"`
	// Control is the control topic every process running a pipeline
	// reads and writes (processor.Control), and `redrive pause`, `resume`
	// and `status` use.
	Control Control `yaml:"control"`

	// src remembers where values came from (file lines, environment
	// variables) so that Validate can point at them. Nil for a Config built
	// in Go.
	src *sources
}

// SASL authenticates to the brokers.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, in any case;
	// SetDefaults upper-cases it.
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
}

// TLS encrypts broker connections.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`   // default: the system roots
	CertFile           string `yaml:"cert_file"` // client certificate; needs key_file
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	ServerName         string `yaml:"server_name"`
}

// Pipeline is one main topic with its tiers, DLQ and results topic.
type Pipeline struct {
	Name             string   `yaml:"name"` // default: the topic
	Topic            string   `yaml:"topic"`
	Results          string   `yaml:"results"`
	Partitions       int32    `yaml:"partitions"`  // default 6
	Replication      int16    `yaml:"replication"` // default 1
	Retry            Retry    `yaml:"retry"`
	DLQ              DLQ      `yaml:"dlq"`
	TTL              Duration `yaml:"ttl"`                // 0: no expiry
	NotReadyDeadline Duration `yaml:"not_ready_deadline"` // default 10m
	Concurrency      int      `yaml:"concurrency"`        // default 64
	MaxInflight      int      `yaml:"max_inflight"`       // records polled but unfinished; default max(4096, 4*concurrency)
	// MaxInflightBytes bounds the bytes of those records (default 64 MiB).
	// The file may say 67108864 or "64MiB".
	MaxInflightBytes int64  `yaml:"max_inflight_bytes" config:"bytes"`
	Ordering         string `yaml:"ordering"` // "" (none) or "key"
	// Breaker is the pipeline's circuit breaker (processor.Breaker).
	Breaker Breaker `yaml:"breaker"`
	// RateLimit bounds handler calls per second
	// (processor.Pipeline.RateLimit): the whole pipeline's, shared by the
	// processes running it, unless Scope is "process"; 0: no limit. The
	// file may say "50/s", "3000/m", "100000/h" or a number of calls per
	// second (processor.ParseRate).
	RateLimit float64 `yaml:"rate_limit" config:"rate"`
	// RateLimitBurst is processor.Pipeline.RateBurst (default 1).
	RateLimitBurst int `yaml:"rate_limit_burst"`
	// MaxCallsInFlight bounds handler calls running at once
	// (processor.Pipeline.MaxCallsInFlight), shared like RateLimit; 0
	// (default): no bound but concurrency.
	MaxCallsInFlight int `yaml:"max_calls_in_flight"`
	// Scope is processor.Pipeline.Scope: "pipeline" (default; the line and
	// the budgets are shared through the control topic) or "process".
	Scope string `yaml:"scope"`
	// Guard stops the pipeline when nearly every call fails permanently
	// (processor.Guard).
	Guard   Guard   `yaml:"guard"`
	Handler Handler `yaml:"handler"`
	// Delivery is processor.Pipeline.Delivery: "at-least-once" (default)
	// or "exactly-once".
	Delivery string `yaml:"delivery"`
	// MaxBatch is processor.Pipeline.MaxBatch (default 2000).
	MaxBatch int `yaml:"max_batch"`
	// Consume is processor.Pipeline.Consume: "group" (default) reads the
	// main topic in the consumer group, a partition per replica; "share"
	// in the share group topics.ShareGroupID (Kafka 4.2+), any number of
	// replicas per partition. Share refuses delivery: exactly-once and
	// ordering: key.
	Consume string `yaml:"consume"`
	// MaxDeliveries is processor.Pipeline.MaxDeliveries (default 3, 1 to
	// 9; consume: share only): a record delivered more often without an
	// outcome is dead-lettered "crashed".
	MaxDeliveries int `yaml:"max_deliveries"`

	// httpSecrets are the values of the ${NAME}s expanded in handler.http
	// (Parse): an API key in a URL path has no secret-looking name, so
	// the handler is told its value (httphandler.Options.Secrets).
	httpSecrets []string
}

// Breaker is processor.Breaker in the file. Zero values get the
// processor's defaults (processor.Breaker.WithDefaults).
type Breaker struct {
	// Enabled: nil (absent) or true is on; false turns the breaker off
	// (processor.Breaker.Disabled). SetDefaults sets a nil one to true.
	Enabled         *bool    `yaml:"enabled"`
	FailureRatio    float64  `yaml:"failure_ratio"` // default 0.5
	MinCalls        int      `yaml:"min_calls"`     // default 20
	Consecutive     int      `yaml:"consecutive"`   // default 10
	Window          Duration `yaml:"window"`        // default 30s
	OpenFor         Duration `yaml:"open_for"`      // default 30s
	MaxOpen         Duration `yaml:"max_open"`      // default 5m (at least open_for)
	Probes          int      `yaml:"probes"`        // default 3
	FailoverTo      string   `yaml:"failover_to"`   // another pipeline's main topic; "": none
	FailoverRetries bool     `yaml:"failover_retries"`
}

// On reports whether the breaker is on: enabled is absent or true.
func (b Breaker) On() bool { return b.Enabled == nil || *b.Enabled }

// Guard is processor.Guard in the file. Zero values get the processor's
// defaults (processor.Guard.WithDefaults).
type Guard struct {
	// Enabled: nil (absent) or true is on; false turns the guard off
	// (processor.Guard.Disabled). SetDefaults sets a nil one to true.
	Enabled         *bool    `yaml:"enabled"`
	PermanentRatio  float64  `yaml:"permanent_ratio"`   // default 0.9
	MinCalls        int      `yaml:"min_calls"`         // default 50
	Window          Duration `yaml:"window"`            // default 1m
	AutoResumeAfter Duration `yaml:"auto_resume_after"` // 0: only an operator resumes
}

// On reports whether the guard is on: enabled is absent or true.
func (g Guard) On() bool { return g.Enabled == nil || *g.Enabled }

// Processor is the settings of `redrive process` that are not a
// pipeline's.
type Processor struct {
	// Token is the bearer token of POST /api/pipelines/<name>/pause and
	// /resume (processor.Processor.PipelinesHandler); without one they
	// are off.
	Token string `yaml:"token"`
}

// Control is processor.Control in the file.
type Control struct {
	// Enabled: nil (absent) or true is on; false runs without a control
	// topic (processor.Control.Disabled): every pipeline as scope
	// "process", out of reach of `redrive pause`. SetDefaults sets a nil
	// one to true.
	Enabled *bool `yaml:"enabled"`
	// Topic is the control topic (default control.DefaultTopic,
	// "redrive.control"), created by `redrive topics ensure`.
	Topic string `yaml:"topic"`
	// StatusInterval is how often each process publishes its status per
	// pipeline (default control.DefaultStatusInterval, 5s).
	StatusInterval Duration `yaml:"status_interval"`
}

// On reports whether the control topic is used: enabled is absent or true.
func (c Control) On() bool { return c.Enabled == nil || *c.Enabled }

// Retry is the tier schedule.
type Retry struct {
	Tiers       []Tier  `yaml:"tiers"`        // strictly increasing, default [5s, 30s, 5m]
	MaxAttempts int     `yaml:"max_attempts"` // default 4
	Jitter      float64 `yaml:"jitter"`       // default 0.1
	// MaxDue bounds how far ahead a tier record's redrive-due may lie
	// (retry.Schedule.MaxDue); 0: the processor's default, the largest
	// tier with its jitter plus ttl, not_ready_deadline or 24h.
	MaxDue Duration `yaml:"max_due"`
	// JitterSet says Jitter was given, so that an explicit 0 is kept by
	// SetDefaults. The loader sets it; set it when building a Config in Go
	// with Jitter 0.
	JitterSet bool `yaml:"-"`
}

// DLQ is the dead-letter topic.
type DLQ struct {
	Topic         string   `yaml:"topic"`     // default <topic>.dlq
	Retention     Duration `yaml:"retention"` // default 168h
	RedactHeaders []string `yaml:"redact_headers"`
	HeaderStyle   string   `yaml:"header_style"` // "", "spring", "connect"
}

// Handler says how records are handled.
type Handler struct {
	HTTP  *HTTPHandler `yaml:"http"` // nil: a handler embedded in Go
	Codes Codes        `yaml:"codes"`
	// Callback: the service calls back with the job's answer; records
	// wait for it (up to Wait) before they are polled.
	Callback *Callback `yaml:"callback"`
}

// Callback is the callback intake of a pipeline (processor/intake) and
// how long a submitted job waits for its callback (processor.Callbacks).
type Callback struct {
	Path        string   `yaml:"path"`         // served on callback_addr; required, starts with /
	Token       string   `yaml:"token"`        // shared secret: ?token= or Redrive-Callback-Token; "": none
	IDField     string   `yaml:"id_field"`     // default "id"
	ResultField string   `yaml:"result_field"` // default "code"
	ErrorField  string   `yaml:"error_field"`  // optional
	Wait        Duration `yaml:"wait"`         // default 2m
	Topic       string   `yaml:"topic"`        // default <topic>.callbacks
	MaxEntries  int      `yaml:"max_entries"`  // callbacks held per process; default 100000
	// MaxBytes bounds the memory of the callbacks held per process
	// (default 16 MiB, at least 1 MiB): the oldest go first, as at
	// max_entries.
	MaxBytes int64 `yaml:"max_bytes" config:"bytes"`
	// MaxBodyBytes bounds a callback request's body (default 64 KiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes" config:"bytes"`
	// MaxResultBytes bounds the result field (default 32 KiB, at most
	// max_body_bytes): a longer callback is answered 413, not written.
	MaxResultBytes int64 `yaml:"max_result_bytes" config:"bytes"`
	// InsecurePublic serves the callback path without a token on a
	// callback_addr that is not loopback: anyone who reaches it can then
	// answer any job. Without it such a config is refused.
	InsecurePublic bool `yaml:"insecure_public"`
}

// HTTPHandler is the built-in HTTP handler.
type HTTPHandler struct {
	URL     string            `yaml:"url"`     // absolute http or https URL; required
	Timeout Duration          `yaml:"timeout"` // default 30s
	Headers map[string]string `yaml:"headers"` // static request headers
	JSON    *JSONMode         `yaml:"json"`
	// MaxBodyBytes bounds the response body read (default 1 MiB). The file
	// may say 1048576 or "1MiB".
	MaxBodyBytes int64 `yaml:"max_body_bytes" config:"bytes"`
	// Query fields are added to the submit URL's query (api key, json=1,
	// pingback), values URL-escaped.
	Query map[string]string `yaml:"query"`
	// Form fields are added to a form body (application/x-www-form-urlencoded
	// records and records without a content type).
	Form map[string]string `yaml:"form"`
	// Poll makes the handler speak a job API: the submit's answer gives a
	// job id, which is then polled.
	Poll *Poll `yaml:"poll"`
}

// Poll is the poll side of a job API (httphandler.Poll).
type Poll struct {
	URL         string      `yaml:"url"`          // template: {state} is the job id; required
	Method      string      `yaml:"method"`       // GET (default) or POST
	Body        string      `yaml:"body"`         // POST: form body template, {state} expanded
	StateField  string      `yaml:"state_field"`  // JSON path of the job id in the submit answer; required
	ResultField string      `yaml:"result_field"` // JSON path of the result in a done answer; "": the whole answer
	FirstAfter  Duration    `yaml:"first_after"`  // default 5s
	Every       Duration    `yaml:"every"`        // default 5s
	Status      *PollStatus `yaml:"status"`       // a status field's values (SMM panels)
	// Resubmit: codes of a poll answer or callback meaning the job failed
	// and is submitted again (httphandler.Poll.Resubmit).
	Resubmit []string `yaml:"resubmit"`
}

// PollStatus reads a poll answer's status field; values match without case.
type PollStatus struct {
	Field   string   `yaml:"field"` // JSON path; required
	Done    []string `yaml:"done"`
	Pending []string `yaml:"pending"`
	Failed  []string `yaml:"failed"`
}

// JSONMode reads the ok flag and the code from a JSON body (2captcha style).
type JSONMode struct {
	OKField   string `yaml:"ok_field"`   // dotted path; without it, ok is code_field absent
	OKValue   any    `yaml:"ok_value"`   // a string, bool or number; required
	CodeField string `yaml:"code_field"` // dotted path, optional
}

// Codes override the class of an outcome by its error code.
type Codes struct {
	Transient []string `yaml:"transient"`
	// RequestFault: transient codes that are the request's own fault; the
	// circuit breaker never counts them (httphandler.Codes.RequestFault).
	RequestFault []string            `yaml:"request_fault"`
	NotReady     []string            `yaml:"not_ready"`
	Permanent    []string            `yaml:"permanent"`
	MinDelay     map[string]Duration `yaml:"min_delay"`
	// Pause: an answer with one of these codes stops the pipeline's calls
	// for the duration (httphandler.Codes.Pause), whatever its status.
	Pause map[string]Duration `yaml:"pause"`
}

// Analyzer is the DLQ analyzer's settings.
type Analyzer struct {
	HTTPAddr string `yaml:"http_addr"` // default 127.0.0.1:9091
	// Token is the analyzer's full-access bearer token: every /api/ call
	// (reads and POST /api/replay) with it. Without Token and ReadToken
	// the API is open to whoever reaches it and replay is off.
	Token string `yaml:"token"`
	// ReadToken is a read-only bearer token: the GET /api/ calls (the
	// dashboard's data) but not replay.
	ReadToken string `yaml:"read_token"`
	// InsecurePublic lets `redrive analyze` listen on an address that is
	// not loopback without Token or ReadToken (CheckAnalyzerListen).
	InsecurePublic bool `yaml:"insecure_public"`
	// HideValues shows a dead letter's value as its size and SHA-256 in
	// the API and the dashboard, never its bytes (and makes `redrive dlq
	// export` hide them by default, and `redrive tail` hide every topic's).
	HideValues bool `yaml:"hide_values"`
	// Rules decide, in order, what happens to each dead letter; see
	// AnalyzerRule.
	Rules []AnalyzerRule `yaml:"rules"`
	// Alerts post to a webhook while their condition holds; see AlertRule.
	Alerts []AlertRule `yaml:"alerts"`
	// RecentValueBytes, RecentBytes, ResponseBytes and MaxRequests bound
	// the analyzer's memory by bytes (analyzer.Limits; 0: its default).
	// The file may say 1024 or "1KiB".
	RecentValueBytes int64 `yaml:"recent_value_bytes" config:"bytes"`
	RecentBytes      int64 `yaml:"recent_bytes" config:"bytes"`
	ResponseBytes    int64 `yaml:"response_bytes" config:"bytes"`
	MaxRequests      int   `yaml:"max_requests"`
	// AllowedHosts are the host names (no port) the dashboard and API
	// answer to besides HTTPAddr's host, localhost, 127.0.0.1 and ::1;
	// "*" allows any. Others get 421 (a DNS-rebinding page sends its own).
	AllowedHosts []string `yaml:"allowed_hosts" config:"csv"`
}
