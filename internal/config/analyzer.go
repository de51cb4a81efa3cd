package config

import (
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
)

// The actions of an AnalyzerRule.
const (
	ActionRepublish = "republish" // write the request back (To, else the pipeline's main topic)
	ActionKeep      = "keep"      // leave it in the DLQ, counted
	ActionDrop      = "drop"      // count it as dropped; never republish it
)

// The kinds of an AlertRule.
const (
	AlertRate   = "rate"   // more than Threshold dead letters within Window
	AlertDepth  = "depth"  // more than Threshold dead letters not yet handled by the analyzer
	AlertOldest = "oldest" // the oldest dead letter not yet handled is older than Age
)

// AnalyzerRule is one rule for automatic republish. The analyzer takes the
// rules in order for each dead letter; the first that matches decides. A
// dead letter no rule matches is kept.
type AnalyzerRule struct {
	// Name identifies the rule in metrics, statistics and logs: unique
	// among the rules; letters, digits, '.', '_' and '-'. Default:
	// "rule-<n>", n its place in the list counting from 1.
	Name string `yaml:"name"`
	// Pipeline limits the rule to one pipeline's DLQ, by the pipeline's
	// name. Default: every pipeline.
	Pipeline string `yaml:"pipeline"`
	// Match selects the dead letters the rule is for. Empty: all of them.
	Match RuleMatch `yaml:"match"`
	// Action is republish, keep or drop. Required.
	Action string `yaml:"action"`
	// To is the topic republish writes to, e.g. a failover provider's
	// main topic. Default: the pipeline's main topic. Only with republish;
	// never the DLQ the rule reads.
	To string `yaml:"to"`
	// After is how long after the dead-lettering time republish waits.
	// Default 0: at once. Only with republish.
	After Duration `yaml:"after"`
	// MaxRedrives caps republishing: a dead letter already republished
	// this many times (redrive-redrives) is parked instead, counted and
	// never republished by the rule. 0 means the default, 3. Only with
	// republish.
	MaxRedrives int `yaml:"max_redrives"`
}

// RuleMatch selects dead letters. Every key that is set must match (AND);
// within a list any entry may (OR). Empty matches everything. A list given
// as a single string is split at commas, so "codes: ${RETRY_CODES}" works.
type RuleMatch struct {
	// Codes match redrive-error-code: exactly, or by prefix with a
	// trailing "*" ("http_5*").
	Codes []string `yaml:"codes" config:"csv"`
	// Reasons match redrive-reason: exhausted, permanent, invalid, expired,
	// crashed.
	Reasons []string `yaml:"reasons" config:"csv"`
	// Classes match redrive-error-class: transient, not-ready, permanent,
	// invalid, expired.
	Classes []string `yaml:"classes" config:"csv"`
	// Origins match redrive-origin-topic, like Codes.
	Origins []string `yaml:"origins" config:"csv"`
	// Headers match header values exactly, header names in any case.
	// Names starting with redrive- match redrive's own headers too.
	Headers map[string]string `yaml:"headers"`
}

// Values is m as dlq.ParseFilter's key → values: the lists under their
// own keys, each header as "headers.<name>" (a name may hold "=").
func (m RuleMatch) Values() map[string][]string {
	kv := map[string][]string{}
	for k, l := range map[string][]string{"codes": m.Codes, "reasons": m.Reasons, "classes": m.Classes, "origins": m.Origins} {
		if l != nil {
			kv[k] = l
		}
	}
	for name, v := range m.Headers {
		kv["headers."+name] = []string{v}
	}
	return kv
}

// Filter is m parsed by dlq.ParseFilter, as the loader validated it.
func (m RuleMatch) Filter() (dlq.Filter, error) {
	return dlq.ParseFilter(m.Values(), time.Time{})
}

// Spec is r as dlq.RuleSpec, for dlq.CompileRules (which also checks it;
// the loader reports the same problems with their lines).
func (r AnalyzerRule) Spec() dlq.RuleSpec {
	return dlq.RuleSpec{Name: r.Name, Pipeline: r.Pipeline, Match: r.Match.Values(), Action: r.Action, To: r.To, After: r.After.D(), MaxRedrives: r.MaxRedrives}
}

// RuleSpecs are the rules as dlq.RuleSpecs, in order.
func (a Analyzer) RuleSpecs() []dlq.RuleSpec {
	out := make([]dlq.RuleSpec, len(a.Rules))
	for i, r := range a.Rules {
		out[i] = r.Spec()
	}
	return out
}

// IsZero reports whether m matches everything.
func (m RuleMatch) IsZero() bool {
	return len(m.Codes) == 0 && len(m.Reasons) == 0 && len(m.Classes) == 0 && len(m.Origins) == 0 && len(m.Headers) == 0
}

// AlertRule is one alert: while its condition holds, the analyzer posts a
// JSON message (with a Slack-compatible "text" field) to Webhook, again
// every Repeat, and once more when it no longer holds.
type AlertRule struct {
	// Name identifies the alert in messages and metrics: unique among the
	// alerts; letters, digits, '.', '_' and '-'. Default: "alert-<n>", n
	// its place in the list counting from 1.
	Name string `yaml:"name"`
	// Pipeline limits the alert to one pipeline, by name. Default: every
	// pipeline, each on its own (each fires and resolves by itself).
	Pipeline string `yaml:"pipeline"`
	// Kind is rate, depth or oldest. Required.
	Kind string `yaml:"kind"`
	// Threshold: rate fires on more than Threshold dead letters within
	// Window, depth on more than Threshold not yet handled. Required with
	// rate and depth; 0 is allowed (any dead letter at all).
	Threshold int `yaml:"threshold"`
	// ThresholdSet says Threshold was given, so that an explicit 0 is
	// kept. The loader sets it; set it when building a Config in Go with
	// Threshold 0.
	ThresholdSet bool `yaml:"-"`
	// Window is the span a rate alert counts over. Required with rate.
	Window Duration `yaml:"window"`
	// Age: an oldest alert fires when the oldest dead letter not yet
	// handled is older than Age. Required with oldest.
	Age Duration `yaml:"age"`
	// Webhook is the absolute http:// or https:// URL posted to. Required.
	// It is a secret (a Slack webhook URL is its own credential): keep it
	// in the environment, webhook: "${SLACK_WEBHOOK_URL}".
	Webhook string `yaml:"webhook"`
	// Repeat is how often a firing alert posts again. Default 1h.
	Repeat Duration `yaml:"repeat"`
	// Match counts only the dead letters it selects. Only with rate.
	Match RuleMatch `yaml:"match"`
}

// Limits are the analyzer's memory bounds as analyzer.Limits (zero fields
// take the analyzer's defaults).
func (a Analyzer) Limits() analyzer.Limits {
	return analyzer.Limits{RecentValueBytes: a.RecentValueBytes, RecentBytes: a.RecentBytes, ResponseBytes: a.ResponseBytes, MaxRequests: a.MaxRequests}
}

// limitKeys are the file's keys of analyzer.Limits fields.
var limitKeys = map[string]string{
	"RecentValueBytes": "analyzer.recent_value_bytes",
	"RecentBytes":      "analyzer.recent_bytes",
	"ResponseBytes":    "analyzer.response_bytes",
	"MaxRequests":      "analyzer.max_requests",
}

func (a *Analyzer) setDefaults() {
	for i := range a.Rules {
		r := &a.Rules[i]
		if r.Name == "" {
			r.Name = "rule-" + strconv.Itoa(i+1)
		}
		if r.Action == ActionRepublish && r.MaxRedrives == 0 {
			r.MaxRedrives = DefaultMaxRedrives
		}
	}
	for i := range a.Alerts {
		al := &a.Alerts[i]
		if al.Name == "" {
			al.Name = "alert-" + strconv.Itoa(i+1)
		}
		if al.Repeat == 0 {
			al.Repeat = Duration(DefaultAlertRepeat)
		}
	}
}

func (v *validator) analyzer(c *Config) {
	// What analyzer.Limits checks, the analyzer says, at its key.
	for _, p := range c.Analyzer.Limits().Problems() {
		v.addCause(limitKeys[p.Field], p.Msg, p)
	}
	pipes := map[string]int{}
	for i, p := range c.Pipelines {
		if _, dup := pipes[p.Name]; !dup {
			pipes[p.Name] = i
		}
	}
	names := map[string]int{}
	for i := range c.Analyzer.Rules {
		at := index("analyzer.rules", i)
		r := &c.Analyzer.Rules[i]
		v.ruleName(at, "analyzer.rules", r.Name, names, i)
		v.pipelineRef(at+".pipeline", r.Pipeline, pipes)
		// What dlq checks (action, match, after, max_redrives, the fields
		// only republish takes), dlq says, each problem at its path.
		_, problems := dlq.CompileRule(r.Spec())
		for _, p := range problems {
			v.add(at+"."+p.Path(), "%s", p.Msg)
		}
		// What needs the configuration: the topic written to.
		if r.Action == ActionRepublish && r.To != "" {
			if msg := checkTopic(r.To); msg != "" {
				v.add(at+".to", "%s", msg)
			}
			for j, p := range c.Pipelines {
				if (r.Pipeline == "" || r.Pipeline == p.Name) && r.To == p.DLQTopic() {
					v.add(at+".to", "%q is the DLQ of %s: a republished dead letter would come straight back", r.To, index("pipelines", j))
				}
			}
		}
	}

	for i, h := range c.Analyzer.AllowedHosts {
		ipv6 := strings.Contains(h, ":") && net.ParseIP(strings.Trim(h, "[]")) != nil
		if h == "" || strings.ContainsAny(h, " \t/@?#") || strings.Contains(h, ":") && !ipv6 {
			v.add(index("analyzer.allowed_hosts", i), "%q: want a host name or address without scheme or port (or \"*\" for any)", h)
		}
	}

	names = map[string]int{}
	for i := range c.Analyzer.Alerts {
		at := index("analyzer.alerts", i)
		a := &c.Analyzer.Alerts[i]
		v.ruleName(at, "analyzer.alerts", a.Name, names, i)
		v.pipelineRef(at+".pipeline", a.Pipeline, pipes)
		thresholdSet := a.ThresholdSet || a.Threshold != 0
		notWith := func(key string, set bool, kinds string) {
			if set {
				v.add(at+"."+key, "only with kind: %s (this alert's kind is %s)", kinds, a.Kind)
			}
		}
		switch a.Kind {
		case AlertRate, AlertDepth:
			if !thresholdSet {
				v.add(at+".threshold", "required with kind: %s (the alert fires above it; 0: on any dead letter)", a.Kind)
			} else if a.Threshold < 0 {
				v.add(at+".threshold", "%d: must not be negative", a.Threshold)
			}
			notWith("age", a.Age != 0, AlertOldest)
			if a.Kind == AlertRate {
				if a.Window <= 0 {
					v.add(at+".window", "required with kind: rate, more than 0: the span dead letters are counted over, e.g. 5m")
				}
				v.match(at+".match", &a.Match)
			} else {
				notWith("window", a.Window != 0, AlertRate)
				notWith("match", !a.Match.IsZero(), AlertRate)
			}
		case AlertOldest:
			if a.Age <= 0 {
				v.add(at+".age", "required with kind: oldest, more than 0: how old the oldest dead letter may get, e.g. 1h")
			}
			notWith("threshold", a.Threshold != 0, "rate or depth")
			notWith("window", a.Window != 0, AlertRate)
			notWith("match", !a.Match.IsZero(), AlertRate)
		case "":
			v.add(at+".kind", "required: rate, depth or oldest")
		default:
			v.add(at+".kind", "%q: want rate, depth or oldest", a.Kind)
		}
		if a.Webhook == "" {
			v.add(at+".webhook", "required: the http:// or https:// URL to post to (an unset ${VARIABLE}?)")
		} else if u, err := url.Parse(a.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(at+".webhook", "%q: want an absolute http:// or https:// URL", RedactedURL(a.Webhook))
		}
		v.positive(at+".repeat", a.Repeat)
	}
}

// ruleName checks the name of a rule or alert: legal and unique in list.
func (v *validator) ruleName(at, list, name string, names map[string]int, i int) {
	switch {
	case name == "":
		v.add(at+".name", "required (SetDefaults names it after its place in the list)")
		return
	case !legalName(name):
		v.add(at+".name", "%q: use letters, digits, '.', '_' and '-'", name)
	}
	if j, dup := names[name]; dup {
		v.add(at+".name", "%q is also the name of %s; names must be unique", name, index(list, j))
		return
	}
	names[name] = i
}

func (v *validator) pipelineRef(at, name string, pipes map[string]int) {
	if name == "" {
		return
	}
	if _, ok := pipes[name]; !ok {
		v.add(at, "%q: no pipeline has this name (pipelines: %s)", name, strings.Join(slices.Sorted(maps.Keys(pipes)), ", "))
	}
}

// match checks m with dlq.ParseFilter, each problem at its path.
func (v *validator) match(at string, m *RuleMatch) {
	_, err := m.Filter()
	for _, p := range dlq.FieldErrors(err) {
		v.add(at+"."+p.Path(), "%s", p.Msg)
	}
}

// RedactedURL is u fit for logs and errors: a URL with anything after its
// host (path, query, user info, fragment) shows as
// "https://hooks.slack.com/[redacted]", since webhook URLs carry their
// secret in the path; one that does not parse as a URL shows as
// "[redacted]". An empty URL stays empty.
func RedactedURL(u string) string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.Scheme == "" {
		return RedactedValue
	}
	if (p.Path == "" || p.Path == "/") && p.RawQuery == "" && p.User == nil && p.Fragment == "" && p.Opaque == "" && !p.ForceQuery {
		return u
	}
	return p.Scheme + "://" + p.Host + "/" + RedactedValue
}

// CheckAnalyzerListen is the analyzer's listen rule, which `redrive
// analyze` (and dev's analyzer) apply before serving: without
// analyzer.token and analyzer.read_token, analyzer.http_addr must be a
// loopback address (127.0.0.0/8, ::1, localhost), unless
// analyzer.insecure_public is true. Its error is an *Error at
// analyzer.http_addr wrapping ErrInvalid. It is not part of Validate: the
// processors read the same file without the analyzer's Secret, and their
// own endpoints show no dead letter.
func (c *Config) CheckAnalyzerListen() error {
	a := c.Analyzer
	if a.Token != "" || a.ReadToken != "" || a.InsecurePublic || LoopbackAddr(a.HTTPAddr) {
		return nil
	}
	v := &validator{src: c.src}
	v.add("analyzer.http_addr", "%q is not a loopback address and no token is set: the dashboard and API would show every dead letter to anyone who reaches it; "+
		"set analyzer.token (%s) or analyzer.read_token (%s), listen on 127.0.0.1, or set analyzer.insecure_public: true to serve them open anyway",
		a.HTTPAddr, EnvAnalyzerToken, EnvAnalyzerReadToken)
	return join(v.errs)
}

// LoopbackAddr reports whether the host of addr (host:port) is a loopback
// address or "localhost". An empty host (":9091"), 0.0.0.0, :: and any
// other name or address are not: they may be reached from elsewhere.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Access is the analyzer's tokens (analyzer.Access).
func (a Analyzer) Access() analyzer.Access {
	return analyzer.Access{Token: a.Token, ReadToken: a.ReadToken}
}
