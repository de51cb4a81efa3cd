package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redrive/redrive/internal/bearer"
	"github.com/redrive/redrive/internal/redact"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// Validate checks a configuration whose defaults are filled in
// (SetDefaults) and reports every problem at once, joined. Each is an
// *Error wrapping ErrInvalid, with the key's path and, when the value came
// from the file, its line (the nearest enclosing key's line for a default).
// It checks values only; it opens no files (TLS) and dials nothing.
func (c *Config) Validate() error { return join(c.validate()) }

func (c *Config) validate() []error {
	v := &validator{src: c.src}
	for i, b := range c.Brokers {
		if msg := checkBroker(b); msg != "" {
			v.add(index("brokers", i), "%s", msg)
		}
	}
	v.addr("http_addr", c.HTTPAddr) // callback_addr: with handler.callback (callbacks)
	if s := c.SASL; s != nil {
		switch strings.ToUpper(s.Mechanism) {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		case "":
			v.add("sasl.mechanism", "required with sasl: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		default:
			v.add("sasl.mechanism", "%q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
		}
		if s.User == "" {
			v.add("sasl.user", "required with sasl (or set %s)", EnvSASLUser)
		}
		if s.Password == "" {
			v.add("sasl.password", "empty (an unset ${VARIABLE}?); set it or %s", EnvSASLPassword)
		}
	}
	if t := c.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			v.add("tls.cert_file", "required with tls.key_file: a client certificate and its key go together")
		} else {
			v.add("tls.key_file", "required with tls.cert_file: a client certificate and its key go together")
		}
	}
	v.processor(c)
	v.control(c)
	for i := range c.Pipelines {
		v.pipeline(i, &c.Pipelines[i])
	}
	v.addr("analyzer.http_addr", c.Analyzer.HTTPAddr)
	v.analyzer(c)
	v.tokens(c)
	return v.errs
}

// tokens checks every configured bearer token against bearer.Check: a
// short or odd one is an error at its key, whoever reads the file (a
// processor refuses a weak analyzer.token too: it is the same file).
// An empty token is no token: the endpoints it guards are off or open
// as each key documents.
func (v *validator) tokens(c *Config) {
	check := func(path, token string) {
		if token == "" {
			return
		}
		if err := bearer.Check(token); err != nil {
			v.addCause(path, err.Error(), err)
		}
	}
	check("processor.token", c.Processor.Token)
	check("analyzer.token", c.Analyzer.Token)
	check("analyzer.read_token", c.Analyzer.ReadToken)
	for i, p := range c.Pipelines {
		if cb := p.Handler.Callback; cb != nil {
			check(index("pipelines", i)+".handler.callback.token", cb.Token)
		}
	}
}

type validator struct {
	src  *sources
	errs []error
}

func (v *validator) add(path, format string, args ...any) {
	line, from := v.src.at(path)
	v.errs = append(v.errs, &Error{Line: line, Path: path, Source: from, Msg: redact.Text(fmt.Sprintf(format, args...)), Err: ErrInvalid})
}

// addCause adds msg at path for cause, a package validator's error.
func (v *validator) addCause(path, msg string, cause error) {
	line, from := v.src.at(path)
	v.errs = append(v.errs, &Error{Line: line, Path: path, Source: from, Msg: redact.Text(msg), Err: ErrInvalid, Cause: cause})
}

func (v *validator) positive(path string, d Duration) {
	if d <= 0 {
		v.add(path, "%s: must be more than 0", d)
	}
}

func (v *validator) addr(path, a string) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		v.add(path, "%q: want host:port, e.g. 127.0.0.1:9090", a)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		v.add(path, "%q: bad port %q", a, port)
	}
	if strings.ContainsAny(host, " \t/") {
		v.add(path, "%q: bad host %q", a, host)
	}
}

// processor checks what the processor checks (processor.Config.Validate:
// brokers, pipelines, their names, topics, schedules, bounds), with the
// processor's own validator, and reports each problem at its key.
func (v *validator) processor(c *Config) {
	pc := processor.Config{
		Brokers:        c.Brokers,
		SessionTimeout: c.SessionTimeout.D(),
		ShutdownGrace:  c.ShutdownGrace.D(),
		CommitInterval: c.CommitInterval.D(),
		Control:        c.ProcessorControl(),
	}
	for _, p := range c.Pipelines {
		pc.Pipelines = append(pc.Pipelines, p.processorPipeline().WithDefaults())
	}
	var found []problem
	for _, err := range unjoin(pc.Validate()) {
		var fe *processor.FieldError
		if !errors.As(err, &fe) {
			v.addCause("", err.Error(), err)
			continue
		}
		field, at := fe.Field, ""
		if rest, ok := strings.CutPrefix(field, "Pipelines["); ok {
			n, after, _ := strings.Cut(rest, "].")
			i, _ := strconv.Atoi(n)
			if i < len(c.Pipelines) && field == "Pipelines["+n+"].Name" && c.Pipelines[i].Name == "" && c.Pipelines[i].Topic == "" {
				continue // the name defaults to the topic: the topic's error says it
			}
			field, at = after, index("pipelines", i)+"."
		}
		path, ok := processorKeys[field]
		switch {
		case field == "Schedule":
			var se *retry.ScheduleError
			if errors.As(fe, &se) {
				found = append(found, problem{at + "retry." + se.Field, se.Msg, fe})
				continue
			}
			path = "retry"
		case field == "Brokers":
			v.addCause("brokers", fmt.Sprintf("%s (brokers in the file, %s or --brokers)", fe.Msg, EnvBrokers), fe)
			continue
		case !ok:
			v.addCause(strings.TrimSuffix(at, "."), fe.Error(), fe)
			continue
		}
		found = append(found, problem{fieldPath(at+path, fe), fe.Msg, fe})
	}
	// handler.callback's problems, but where the processor found one at
	// the same key.
	seen := map[string]bool{}
	for _, p := range found {
		seen[p.path] = true
	}
	for _, p := range v.callbacks(c) {
		if !seen[p.path] {
			found = append(found, p)
		}
	}
	v.attribute(c, found)
}

// problem is a package validator's problem at a key's path.
type problem struct {
	path, msg string
	cause     error
}

// derivedKeys are the pipeline keys whose default comes from another key,
// with that key and how: a problem with such a value is the other key's
// when the file does not set this one (concurrency: -5 is one problem, at
// concurrency, not also one at a max_inflight the file does not have).
var derivedKeys = map[string]struct{ from, how string }{
	"name":         {"topic", "the topic"},
	"dlq.topic":    {"topic", `"<topic>.dlq"`},
	"max_inflight": {"concurrency", "the larger of " + strconv.Itoa(processor.DefaultMaxInflight) + " and " + strconv.Itoa(processor.DefaultInflightPerSlot) + " × concurrency"},
	// handler.callback.topic's default is filled in only with a callback.
	"handler.callback.topic": {"topic", `"<topic>.callbacks"`},
}

// attribute reports the pipelines' problems, each at a key the user
// wrote: a problem with a derived default (derivedKeys) the file does not
// set goes to the key it derives from (for a DLQ that is the results
// topic too, to results), and is left out when that key has a problem of
// its own, so that each key gets one error. A Config built in Go (no
// sources) gets every problem where it is.
func (v *validator) attribute(c *Config, found []problem) {
	derived := func(p problem) (i int, key string, ok bool) {
		if v.src == nil || v.written(p.path) {
			return 0, "", false
		}
		rest, isPipe := strings.CutPrefix(p.path, "pipelines[")
		n, key, _ := strings.Cut(rest, "].")
		i, err := strconv.Atoi(n)
		if !isPipe || err != nil || i < 0 || i >= len(c.Pipelines) {
			return 0, "", false
		}
		_, ok = derivedKeys[key]
		return i, key, ok
	}
	has := map[string]bool{}
	for _, p := range found {
		if _, _, ok := derived(p); !ok {
			has[p.path] = true
		}
	}
	for _, p := range found {
		i, key, ok := derived(p)
		if !ok {
			v.addCause(p.path, p.msg, p.cause)
			continue
		}
		d := derivedKeys[key]
		to := index("pipelines", i) + "." + d.from
		if pl := c.Pipelines[i]; key == "dlq.topic" && pl.Results != "" && pl.Results == pl.DLQ.Topic {
			to = index("pipelines", i) + ".results"
		}
		if has[to] {
			continue
		}
		has[to] = true
		v.addCause(to, fmt.Sprintf("%s (not in the file; default %s): %s; set %s", key, d.how, p.msg, key), p.cause)
	}
}

// written reports whether the file or an override set the key at path.
func (v *validator) written(path string) bool {
	if v.src == nil {
		return true
	}
	_, inFile := v.src.lines[path]
	_, set := v.src.from[path]
	return inFile || set
}

// processorKeys are the file's keys of processor.Config and
// processor.Pipeline fields (a pipeline's relative to the pipeline).
var processorKeys = map[string]string{
	"Brokers":          "brokers",
	"SessionTimeout":   "session_timeout",
	"CommitInterval":   "commit_interval",
	"ShutdownGrace":    "shutdown_grace",
	"Pipelines":        "pipelines",
	"Name":             "name",
	"Topic":            "topic",
	"Results":          "results",
	"DLQ":              "dlq.topic",
	"DLQHeaderStyle":   "dlq.header_style",
	"RedactHeaders":    "dlq.redact_headers",
	"TTL":              "ttl",
	"NotReadyDeadline": "not_ready_deadline",
	"Concurrency":      "concurrency",
	"MaxInflight":      "max_inflight",
	"MaxInflightBytes": "max_inflight_bytes",
	"RateLimit":        "rate_limit",
	"RateBurst":        "rate_limit_burst",
	"MaxCallsInFlight": "max_calls_in_flight",
	"Scope":            "scope",
	"Delivery":         "delivery",
	"MaxBatch":         "max_batch",
	"Consume":          "consume",
	"MaxDeliveries":    "max_deliveries",

	"Control.StatusInterval": "control.status_interval",

	"Breaker.FailureRatio":    "breaker.failure_ratio",
	"Breaker.MinCalls":        "breaker.min_calls",
	"Breaker.Consecutive":     "breaker.consecutive",
	"Breaker.Window":          "breaker.window",
	"Breaker.OpenFor":         "breaker.open_for",
	"Breaker.MaxOpen":         "breaker.max_open",
	"Breaker.Probes":          "breaker.probes",
	"Breaker.FailoverTo":      "breaker.failover_to",
	"Breaker.FailoverRetries": "breaker.failover_retries",
	"Guard.PermanentRatio":    "guard.permanent_ratio",
	"Guard.MinCalls":          "guard.min_calls",
	"Guard.Window":            "guard.window",
	"Guard.AutoResumeAfter":   "guard.auto_resume_after",

	"Callbacks.Topic":      "handler.callback.topic",
	"Callbacks.Wait":       "handler.callback.wait",
	"Callbacks.MaxEntries": "handler.callback.max_entries",
	"Callbacks.MaxBytes":   "handler.callback.max_bytes",
}

// httpKeys are the file's keys of httphandler.Options fields, relative to
// the pipeline.
var httpKeys = map[string]string{
	"URL":                 "handler.http.url",
	"Timeout":             "handler.http.timeout",
	"MaxBodyBytes":        "handler.http.max_body_bytes",
	"Headers":             "handler.http.headers",
	"JSON.OKField":        "handler.http.json.ok_field",
	"JSON.OKValue":        "handler.http.json.ok_value",
	"JSON.CodeField":      "handler.http.json.code_field",
	"Query":               "handler.http.query",
	"Form":                "handler.http.form",
	"Poll.URL":            "handler.http.poll.url",
	"Poll.Method":         "handler.http.poll.method",
	"Poll.Body":           "handler.http.poll.body",
	"Poll.StateField":     "handler.http.poll.state_field",
	"Poll.ResultField":    "handler.http.poll.result_field",
	"Poll.FirstAfter":     "handler.http.poll.first_after",
	"Poll.Every":          "handler.http.poll.every",
	"Poll.Status.Field":   "handler.http.poll.status.field",
	"Poll.Status.Done":    "handler.http.poll.status.done",
	"Poll.Status.Pending": "handler.http.poll.status.pending",
	"Poll.Status.Failed":  "handler.http.poll.status.failed",
	"Poll.Resubmit":       "handler.http.poll.resubmit",
	"Codes.Transient":     "handler.codes.transient",
	"Codes.RequestFault":  "handler.codes.request_fault",
	"Codes.NotReady":      "handler.codes.not_ready",
	"Codes.Permanent":     "handler.codes.permanent",
	"Codes.MinDelay":      "handler.codes.min_delay",
	"Codes.Pause":         "handler.codes.pause",
}

// fieldPath is path with fe's list index or map key.
func fieldPath(path string, fe *processor.FieldError) string {
	switch {
	case fe.Key != "":
		return mapPath(path, fe.Key)
	case fe.Index >= 0:
		return index(path, fe.Index)
	}
	return path
}

// pipeline checks what only the file has (partitions, replication,
// dlq.retention, ordering) and the built-in HTTP handler's options, with
// the handler's own validator (handler.codes even without handler.http).
func (v *validator) pipeline(i int, p *Pipeline) {
	at := index("pipelines", i)
	if p.Partitions < 1 {
		v.add(at+".partitions", "%d: must be at least 1", p.Partitions)
	}
	if p.Replication < 1 {
		v.add(at+".replication", "%d: must be at least 1", p.Replication)
	}
	switch p.Ordering {
	case "", "key":
	default:
		v.add(at+".ordering", "%q: want \"key\" or nothing", p.Ordering)
	}
	v.positive(at+".dlq.retention", p.DLQ.Retention)

	o := p.HTTPOptions()
	var err error
	if p.Handler.HTTP != nil {
		err = o.Validate()
	} else {
		err = o.Codes.Validate()
	}
	for _, e := range unjoin(err) {
		var fe *processor.FieldError
		if !errors.As(e, &fe) {
			v.addCause(at+".handler", e.Error(), e)
			continue
		}
		key, ok := httpKeys[fe.Field]
		if !ok {
			v.addCause(at+".handler", fe.Error(), fe)
			continue
		}
		v.addCause(fieldPath(at+"."+key, fe), fe.Msg, fe)
	}
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// checkTopic says what is wrong with a Kafka topic name, or "".
func checkTopic(t string) string {
	if err := topics.ValidateName(t); err != nil {
		return err.Error()
	}
	return ""
}

// legalName: the characters Kafka allows in a topic name, [a-zA-Z0-9._-].
func legalName(s string) bool { return topics.LegalChars(s) }

// checkBroker says what is wrong with a seed broker, or "". A broker
// without a port is allowed (the client's default, 9092).
func checkBroker(b string) string {
	if b == "" {
		return "empty broker"
	}
	if strings.ContainsAny(b, " \t\r\n,/") {
		return fmt.Sprintf("%q: want host:port", b)
	}
	if !strings.Contains(b, ":") {
		return ""
	}
	host, port, err := net.SplitHostPort(b)
	if err != nil || host == "" {
		return fmt.Sprintf("%q: want host:port ([::1]:9092 for IPv6)", b)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Sprintf("%q: bad port %q", b, port)
	}
	return ""
}
