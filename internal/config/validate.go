package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/retry"
)

// maxTopicLen is Kafka's limit on a topic name.
const maxTopicLen = 249

// Validate checks a configuration whose defaults are filled in
// (SetDefaults) and reports every problem at once, joined. Each is an
// *Error wrapping ErrInvalid, with the key's path and, when the value came
// from the file, its line (the nearest enclosing key's line for a default).
// It checks values only; it opens no files (TLS) and dials nothing.
func (c *Config) Validate() error { return join(c.validate()) }

func (c *Config) validate() []error {
	v := &validator{src: c.src}
	if len(c.Brokers) == 0 {
		v.add("brokers", "at least one broker is required (brokers in the file, %s or --brokers)", EnvBrokers)
	}
	for i, b := range c.Brokers {
		if msg := checkBroker(b); msg != "" {
			v.add(index("brokers", i), "%s", msg)
		}
	}
	v.addr("http_addr", c.HTTPAddr)
	v.positive("session_timeout", c.SessionTimeout)
	v.positive("shutdown_grace", c.ShutdownGrace)
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
	if len(c.Pipelines) == 0 {
		v.add("pipelines", "at least one pipeline is required")
	}
	names := map[string]int{}
	consumed := map[string]string{} // main and tier topics → the pipeline path that consumes them
	for i := range c.Pipelines {
		v.pipeline(i, &c.Pipelines[i], names, consumed)
	}
	v.addr("analyzer.http_addr", c.Analyzer.HTTPAddr)
	v.analyzer(c)
	return v.errs
}

type validator struct {
	src  *sources
	errs []error
}

func (v *validator) add(path, format string, args ...any) {
	line, from := v.src.at(path)
	v.errs = append(v.errs, &Error{Line: line, Path: path, Source: from, Msg: fmt.Sprintf(format, args...), Err: ErrInvalid})
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

func (v *validator) pipeline(i int, p *Pipeline, names map[string]int, consumed map[string]string) {
	at := index("pipelines", i)
	switch {
	case p.Name == "" && p.Topic == "":
		// it defaults to the topic: the topic's error says it
	case p.Name == "":
		v.add(at+".name", "required (SetDefaults makes it the topic)")
	case !legalName(p.Name):
		v.add(at+".name", "%q: use letters, digits, '.', '_' and '-'", p.Name)
	}
	if j, dup := names[p.Name]; dup && p.Name != "" {
		v.add(at+".name", "%q is also the name of %s; pipeline names must be unique", p.Name, index("pipelines", j))
	} else {
		names[p.Name] = i
	}

	topicOK := true
	if msg := checkTopic(p.Topic); msg != "" {
		v.add(at+".topic", "%s", msg)
		topicOK = false
	}
	v.tiers(at, p)
	tiers := p.TierTopics()
	if topicOK {
		if other, dup := consumed[p.Topic]; dup {
			v.add(at+".topic", "%q is consumed by %s too; a topic belongs to one pipeline", p.Topic, other)
		} else {
			consumed[p.Topic] = at
			for _, t := range tiers {
				if len(t) > maxTopicLen {
					v.add(at+".topic", "tier topic %q is longer than %d characters", t, maxTopicLen)
					break
				}
				if other, dup := consumed[t]; dup && other != at {
					v.add(at+".topic", "tier topic %q is consumed by %s too; a topic belongs to one pipeline", t, other)
				}
				consumed[t] = at
			}
		}
	}
	if p.Results != "" {
		if msg := checkTopic(p.Results); msg != "" {
			v.add(at+".results", "%s", msg)
		} else if p.Results == p.Topic {
			v.add(at+".results", "%q is the main topic too", p.Results)
		} else if slices.Contains(tiers, p.Results) {
			v.add(at+".results", "%q is a tier topic too", p.Results)
		}
	}
	dlq := p.DLQTopic()
	if msg := checkTopic(dlq); msg != "" {
		v.add(at+".dlq.topic", "%s", msg)
	} else if dlq == p.Topic {
		v.add(at+".dlq.topic", "%q is the main topic too", dlq)
	} else if slices.Contains(tiers, dlq) {
		v.add(at+".dlq.topic", "%q is a tier topic too", dlq)
	} else if dlq == p.Results {
		v.add(at+".dlq.topic", "%q is the results topic too", dlq)
	}

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
	switch p.DLQ.HeaderStyle {
	case "", "spring", "connect":
	default:
		v.add(at+".dlq.header_style", "%q: want \"spring\", \"connect\" or nothing", p.DLQ.HeaderStyle)
	}
	v.positive(at+".dlq.retention", p.DLQ.Retention)
	for j, h := range p.DLQ.RedactHeaders {
		if h == "" {
			v.add(index(at+".dlq.redact_headers", j), "empty header name")
		}
	}
	if p.TTL < 0 {
		v.add(at+".ttl", "%s: must not be negative", p.TTL)
	}
	v.positive(at+".not_ready_deadline", p.NotReadyDeadline)
	if p.Concurrency < 1 {
		v.add(at+".concurrency", "%d: must be at least 1", p.Concurrency)
	}
	if p.MaxInflight < 1 {
		v.add(at+".max_inflight", "%d: must be at least 1", p.MaxInflight)
	}
	if p.MaxInflightBytes < 1 {
		v.add(at+".max_inflight_bytes", "%d: must be at least 1", p.MaxInflightBytes)
	}
	if h := p.Handler.HTTP; h != nil {
		v.httpHandler(at+".handler.http", h)
	}
	v.codes(at+".handler.codes", &p.Handler.Codes)
}

func (v *validator) tiers(at string, p *Pipeline) {
	r := p.Retry
	before := len(v.errs)
	tp := at + ".retry.tiers"
	if len(r.Tiers) == 0 {
		v.add(tp, "at least one tier is required")
	}
	named := map[string]int{}
	for j, t := range r.Tiers {
		d := t.D()
		switch {
		case d <= 0:
			v.add(index(tp, j), "%s: a tier delay must be more than 0", t)
			continue
		case d < time.Second || d%time.Second != 0:
			v.add(index(tp, j), "%s: a tier delay is a whole number of seconds, at least 1s (it names the topic)", t)
			continue
		case j > 0 && t <= r.Tiers[j-1]:
			v.add(index(tp, j), "%s after %s: tiers must strictly increase", t, r.Tiers[j-1])
		}
		name := retry.FormatDelay(d)
		if k, dup := named[name]; dup {
			v.add(index(tp, j), "%s names the same tier topic as tiers[%d]", t, k)
		}
		named[name] = j
	}
	if r.MaxAttempts < 1 {
		v.add(at+".retry.max_attempts", "%d: must be at least 1 (1: no retries)", r.MaxAttempts)
	}
	if math.IsNaN(r.Jitter) || r.Jitter < 0 || r.Jitter > 1 {
		v.add(at+".retry.jitter", "%v: must be between 0 and 1", r.Jitter)
	}
	if len(v.errs) == before {
		if err := p.Schedule().Validate(); err != nil { // the processor's own check, in case it is stricter
			v.add(at+".retry", "%v", err)
		}
	}
}

func (v *validator) httpHandler(at string, h *HTTPHandler) {
	if h.URL == "" {
		v.add(at+".url", "required with handler.http")
	} else if u, err := url.Parse(h.URL); err != nil {
		v.add(at+".url", "%v", err)
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(at+".url", "%q: want an absolute http:// or https:// URL", u.Redacted())
	}
	v.positive(at+".timeout", h.Timeout)
	if h.MaxBodyBytes < 1 {
		v.add(at+".max_body_bytes", "%d: must be at least 1", h.MaxBodyBytes)
	}
	canon := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(h.Headers)) {
		hp := mapPath(at+".headers", k)
		if !validToken(k) {
			v.add(hp, "%q is not a valid HTTP header name", k)
			continue
		}
		if strings.ContainsFunc(h.Headers[k], func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			v.add(hp, "the value holds control characters (a newline?)")
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if other, dup := canon[ck]; dup {
			v.add(hp, "the same header as %q (header names ignore case)", other)
		}
		canon[ck] = k
	}
	if j := h.JSON; j != nil {
		if j.OKField == "" {
			v.add(at+".json.ok_field", "required with json: the path of the ok flag, e.g. status")
		} else if !dottedPath(j.OKField) {
			v.add(at+".json.ok_field", "%q: a dotted path without empty parts", j.OKField)
		}
		if j.CodeField != "" && !dottedPath(j.CodeField) {
			v.add(at+".json.code_field", "%q: a dotted path without empty parts", j.CodeField)
		}
		switch x := j.OKValue.(type) {
		case string, bool, int, int64, uint64:
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				v.add(at+".json.ok_value", "%v: want a finite number", x)
			}
		case nil:
			v.add(at+".json.ok_value", "required with json: the value that means ok, e.g. 1")
		default:
			v.add(at+".json.ok_value", "want a string, a bool or a number, got %T", x)
		}
	}
}

func (v *validator) codes(at string, c *Codes) {
	in := map[string]string{}
	for _, l := range []struct {
		name  string
		codes []string
	}{{"transient", c.Transient}, {"not_ready", c.NotReady}, {"permanent", c.Permanent}} {
		for j, code := range l.codes {
			cp := index(at+"."+l.name, j)
			if code == "" {
				v.add(cp, "empty code")
				continue
			}
			if other, dup := in[code]; dup && other != l.name {
				v.add(cp, "%q is in %s too; a code has one class", code, other)
			}
			in[code] = l.name
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.MinDelay)) {
		if k == "" {
			v.add(at+".min_delay", "empty code")
		}
		if d := c.MinDelay[k]; d < 0 {
			v.add(mapPath(at+".min_delay", k), "%s: must not be negative", d)
		}
	}
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// checkTopic says what is wrong with a Kafka topic name, or "".
func checkTopic(t string) string {
	switch {
	case t == "":
		return "required"
	case t == "." || t == "..":
		return fmt.Sprintf("%q is not a legal topic name", t)
	case len(t) > maxTopicLen:
		return fmt.Sprintf("%q is longer than %d characters", t, maxTopicLen)
	case !legalName(t):
		return fmt.Sprintf("%q: a topic name uses only letters, digits, '.', '_' and '-'", t)
	}
	return ""
}

// legalName: the characters Kafka allows in a topic name, [a-zA-Z0-9._-].
func legalName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '.' || c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return s != ""
}

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

func dottedPath(p string) bool {
	return p != "" && !slices.Contains(strings.Split(p, "."), "")
}

// validToken: an HTTP header name (RFC 9110 token).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
