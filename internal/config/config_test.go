package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// designExample is the configuration in the design contract, verbatim.
const designExample = `brokers: ["127.0.0.1:9092"]        # REDRIVE_BROKERS=host:port,host:port or --brokers
http_addr: "127.0.0.1:9090"        # /metrics, /healthz, /readyz
# sasl: {mechanism: SCRAM-SHA-512, user: ..., password: "${KAFKA_PASSWORD}"}
# tls: {enabled: true, ca_file: ..., cert_file: ..., key_file: ...}
pipelines:
  - name: solve
    topic: solve.requests
    results: solve.results         # optional
    partitions: 6                  # used by ` + "`topics ensure`" + `
    replication: 1
    retry:
      tiers: [5s, 30s, 5m]         # topics solve.requests.retry.5s, ...
      max_attempts: 4              # handler attempts in all, the first included
      jitter: 0.1                  # up to +10% of the tier delay
    dlq:
      topic: solve.requests.dlq    # default <topic>.dlq
      retention: 168h
      redact_headers: [authorization]
    ttl: 0s                        # 0: no expiry
    not_ready_deadline: 10m
    concurrency: 64
    handler:
      http:
        url: http://127.0.0.1:8080/solve
        timeout: 30s
        headers: {Authorization: "Bearer ${SOLVER_TOKEN}"}
        # json: {ok_field: status, ok_value: 1, code_field: request}
      codes:
        transient: [ERROR_NO_SLOT_AVAILABLE]
        not_ready: [CAPCHA_NOT_READY]
        permanent: [ERROR_WRONG_USER_KEY]
        min_delay: {ERROR_NO_SLOT_AVAILABLE: 5s}
analyzer:
  http_addr: "127.0.0.1:9091"
  token: "${REDRIVE_ANALYZER_TOKEN}"
  rules: []                        # see the analyzer's documentation
  alerts: []
`

// env is a fake environment.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func dur(s string) Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return Duration(d)
}

// tiers are the tiers the file writes as ss.
func tiers(ss ...string) []Tier {
	out := make([]Tier, len(ss))
	for i, s := range ss {
		t, err := ParseTier(s)
		if err != nil {
			panic(err)
		}
		out[i] = t
	}
	return out
}

func mustParse(t *testing.T, doc string, getenv func(string) string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc), getenv)
	if err != nil {
		t.Fatalf("Parse: %v\n--- file:\n%s", err, doc)
	}
	return c
}

func parseErr(t *testing.T, doc string, getenv func(string) string) error {
	t.Helper()
	c, err := Parse([]byte(doc), getenv)
	if err == nil {
		t.Fatalf("Parse succeeded, want an error\n--- file:\n%s\n--- config:\n%s", doc, dump(c))
	}
	if c != nil {
		t.Errorf("Parse returned a config with its error")
	}
	return err
}

func dump(c *Config) string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// same compares configs, ignoring where their values came from.
func same(a, b *Config) bool {
	x, y := *a, *b
	x.src, y.src = nil, nil
	return reflect.DeepEqual(x, y)
}

func TestParseDesignExample(t *testing.T) {
	c := mustParse(t, designExample, env("SOLVER_TOKEN", "tok", "REDRIVE_ANALYZER_TOKEN", "atok-0123456789abcdef"))
	want := &Config{
		Brokers:  []string{"127.0.0.1:9092"},
		HTTPAddr: "127.0.0.1:9090",
		Pipelines: []Pipeline{{
			Name:        "solve",
			Topic:       "solve.requests",
			Results:     "solve.results",
			Partitions:  6,
			Replication: 1,
			Retry:       Retry{Tiers: tiers("5s", "30s", "5m"), MaxAttempts: 4, Jitter: 0.1, JitterSet: true},
			DLQ: DLQ{
				Topic:         "solve.requests.dlq",
				Retention:     dur("168h"),
				RedactHeaders: []string{"authorization"},
			},
			TTL:              0,
			NotReadyDeadline: dur("10m"),
			Concurrency:      64,
			MaxInflight:      4096,
			MaxInflightBytes: 64 << 20,
			Breaker:          defaultBreaker(),
			RateLimitBurst:   1,
			Scope:            "pipeline",
			Guard:            defaultGuard(),
			Consume:          "group",
			MaxDeliveries:    3,
			Handler: Handler{
				HTTP: &HTTPHandler{
					URL:          "http://127.0.0.1:8080/solve",
					Timeout:      dur("30s"),
					Headers:      map[string]string{"Authorization": "Bearer tok"},
					MaxBodyBytes: 1 << 20,
				},
				Codes: Codes{
					Transient: []string{"ERROR_NO_SLOT_AVAILABLE"},
					NotReady:  []string{"CAPCHA_NOT_READY"},
					Permanent: []string{"ERROR_WRONG_USER_KEY"},
					MinDelay:  map[string]Duration{"ERROR_NO_SLOT_AVAILABLE": dur("5s")},
				},
			},
			httpSecrets: []string{"tok"}, // ${SOLVER_TOKEN}
		}},
		Analyzer:       Analyzer{HTTPAddr: "127.0.0.1:9091", Token: "atok-0123456789abcdef", Rules: []AnalyzerRule{}, Alerts: []AlertRule{}},
		SessionTimeout: dur("45s"),
		ShutdownGrace:  dur("30s"),
		CommitInterval: dur("500ms"),
		Control:        defaultControl(),
	}
	if !same(c, want) {
		t.Errorf("got\n%s\nwant\n%s", dump(c), dump(want))
	}

	p := c.Pipelines[0]
	if got, want := p.TierTopics(), []string{"solve.requests.retry.5s", "solve.requests.retry.30s", "solve.requests.retry.5m"}; !slices.Equal(got, want) {
		t.Errorf("TierTopics = %q, want %q", got, want)
	}
	if got := p.DLQTopic(); got != "solve.requests.dlq" {
		t.Errorf("DLQTopic = %q", got)
	}
	if got := p.GroupID(); got != "redrive.solve" {
		t.Errorf("GroupID = %q", got)
	}
	if got := p.AnalyzerGroupID(); got != "redrive.solve.analyzer" {
		t.Errorf("AnalyzerGroupID = %q", got)
	}
	wantS := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, Names: []string{"5s", "30s", "5m"}, MaxAttempts: 4, Jitter: 0.1}
	if got := p.Schedule(); !reflect.DeepEqual(got, wantS) {
		t.Errorf("Schedule = %+v, want %+v", got, wantS)
	}
	if err := p.Schedule().Validate(); err != nil {
		t.Errorf("Schedule().Validate: %v", err)
	}
	if got := p.TierDelays(); !slices.Equal(got, wantS.Tiers) {
		t.Errorf("TierDelays = %v", got)
	}
}

// defaultBreaker and defaultGuard are what SetDefaults makes of absent
// breaker and guard sections: the processor's defaults, enabled.
func defaultBreaker() Breaker {
	on := true
	return Breaker{Enabled: &on, FailureRatio: 0.5, MinCalls: 100, Consecutive: 20, Window: dur("30s"), OpenFor: dur("30s"), MaxOpen: dur("5m"), Probes: 5}
}

// defaultControl is what SetDefaults makes of an absent control section.
func defaultControl() Control {
	on := true
	return Control{Enabled: &on, Topic: "redrive.control", StatusInterval: dur("5s")}
}

func defaultGuard() Guard {
	on := true
	return Guard{Enabled: &on, PermanentRatio: 0.9, MinCalls: 50, Window: dur("1m")}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, "brokers: [127.0.0.1:9092]\npipelines: [{topic: t}]\n", nil)
	want := &Config{
		Brokers:  []string{"127.0.0.1:9092"},
		HTTPAddr: "127.0.0.1:9090",
		Pipelines: []Pipeline{{
			Name:             "t",
			Topic:            "t",
			Partitions:       6,
			Replication:      1,
			Retry:            Retry{Tiers: tiers("5s", "30s", "5m"), MaxAttempts: 4, Jitter: 0.1, JitterSet: true},
			DLQ:              DLQ{Topic: "t.dlq", Retention: dur("168h")},
			NotReadyDeadline: dur("10m"),
			Concurrency:      64,
			MaxInflight:      4096,
			MaxInflightBytes: 64 << 20,
			Breaker:          defaultBreaker(),
			RateLimitBurst:   1,
			Scope:            "pipeline",
			Guard:            defaultGuard(),
			Consume:          "group",
			MaxDeliveries:    3,
		}},
		Analyzer:       Analyzer{HTTPAddr: "127.0.0.1:9091"},
		SessionTimeout: dur("45s"),
		ShutdownGrace:  dur("30s"),
		CommitInterval: dur("500ms"),
		Control:        defaultControl(),
	}
	if !same(c, want) {
		t.Errorf("got\n%s\nwant\n%s", dump(c), dump(want))
	}
	if p := c.Pipelines[0]; p.Handler.HTTP != nil {
		t.Errorf("handler.http = %+v, want nil (an embedded Go handler)", p.Handler.HTTP)
	}

	tests := []struct {
		name  string
		extra string
		check func(p Pipeline) bool
	}{
		{"jitter absent", "", func(p Pipeline) bool { return p.Retry.Jitter == 0.1 }},
		{"jitter null", "retry: {jitter: ~}", func(p Pipeline) bool { return p.Retry.Jitter == 0.1 }},
		{"jitter 0 kept", "retry: {jitter: 0}", func(p Pipeline) bool { return p.Retry.Jitter == 0 && p.Retry.JitterSet }},
		{"jitter 0.0 kept", "retry: {jitter: 0.0}", func(p Pipeline) bool { return p.Retry.Jitter == 0 }},
		{"jitter 1", "retry: {jitter: 1}", func(p Pipeline) bool { return p.Retry.Jitter == 1 }},
		{"tiers null", "retry: {tiers: null}", func(p Pipeline) bool { return len(p.Retry.Tiers) == 3 }},
		{"one tier", "retry: {tiers: [1h30m]}", func(p Pipeline) bool {
			return slices.Equal(p.TierTopics(), []string{"t.retry.1h30m"})
		}},
		{"max_attempts 1", "retry: {max_attempts: 1}", func(p Pipeline) bool { return p.Retry.MaxAttempts == 1 }},
		{"max_attempts 0 is the default", "retry: {max_attempts: 0}", func(p Pipeline) bool { return p.Retry.MaxAttempts == 4 }},
		{"max_due absent is 0 (the processor's default)", "", func(p Pipeline) bool { return p.Retry.MaxDue == 0 && p.Schedule().MaxDue == 0 }},
		{"max_due set", "retry: {max_due: 2h}", func(p Pipeline) bool {
			return p.Retry.MaxDue.D() == 2*time.Hour && p.ProcessorPipeline(nil).Schedule.MaxDue == 2*time.Hour
		}},
		{"max_inflight at least 4096", "concurrency: 10", func(p Pipeline) bool { return p.MaxInflight == 4096 }},
		{"max_inflight follows a large concurrency", "concurrency: 2000", func(p Pipeline) bool { return p.MaxInflight == 8000 }},
		{"max_inflight set", "concurrency: 10\n    max_inflight: 11", func(p Pipeline) bool { return p.MaxInflight == 11 }},
		{"name given", "name: other", func(p Pipeline) bool { return p.Name == "other" && p.GroupID() == "redrive.other" }},
		{"dlq topic given", "dlq: {topic: dead}", func(p Pipeline) bool { return p.DLQTopic() == "dead" }},
		{"ttl", "ttl: 1h", func(p Pipeline) bool { return p.TTL == dur("1h") }},
		{"http defaults", "handler: {http: {url: 'http://127.0.0.1:1/x'}}", func(p Pipeline) bool {
			h := p.Handler.HTTP
			return h.Timeout == dur("30s") && h.MaxBodyBytes == 1<<20
		}},
		{"byte sizes with units", "max_inflight_bytes: 2MiB\n    handler: {http: {url: 'http://127.0.0.1:1/x', max_body_bytes: 512 KiB}}", func(p Pipeline) bool {
			return p.MaxInflightBytes == 2<<20 && p.Handler.HTTP.MaxBodyBytes == 512<<10
		}},
		{"byte sizes as numbers", "max_inflight_bytes: 1_000_000\n    handler: {http: {url: 'http://127.0.0.1:1/x', max_body_bytes: 1MB}}", func(p Pipeline) bool {
			return p.MaxInflightBytes == 1000000 && p.Handler.HTTP.MaxBodyBytes == 1000000
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "brokers: [127.0.0.1:9092]\npipelines:\n  - topic: t\n"
			if tt.extra != "" {
				doc += "    " + tt.extra + "\n"
			}
			c := mustParse(t, doc, nil)
			if !tt.check(c.Pipelines[0]) {
				t.Errorf("check failed for\n%s\ngot\n%s", doc, dump(c))
			}
		})
	}

	// SetDefaults on a Config built in Go, and twice.
	g := Config{Brokers: []string{"b"}, Pipelines: []Pipeline{{Topic: "x", Retry: Retry{Jitter: 0, JitterSet: true}}, {Topic: "y", Retry: Retry{Jitter: 0.3}}}}
	g.SetDefaults()
	again := g
	again.Pipelines = slices.Clone(g.Pipelines)
	again.SetDefaults()
	if !same(&g, &again) {
		t.Errorf("SetDefaults is not idempotent")
	}
	if g.Pipelines[0].Retry.Jitter != 0 || g.Pipelines[1].Retry.Jitter != 0.3 {
		t.Errorf("jitter = %v, %v; want 0 (JitterSet) and 0.3", g.Pipelines[0].Retry.Jitter, g.Pipelines[1].Retry.Jitter)
	}
	if err := g.Validate(); err != nil {
		t.Errorf("Validate after SetDefaults: %v", err)
	}
}

func TestEnvExpansion(t *testing.T) {
	getenv := env("A", "alpha", "P", "12", "J", "0.5", "OK", "1", "T", "true", "BROKERS", "h1:9092, h2:9092", "DOLLAR", "${A}")
	tests := []struct {
		name  string
		value string // the value of pipelines[0].name, as written
		want  string
		err   string
	}{
		{"plain", "n", "n", ""},
		{"whole", "${A}", "alpha", ""},
		{"inside", "x-${A}-y", "x-alpha-y", ""},
		{"twice", "${A}${A}", "alphaalpha", ""},
		{"quoted", `"${A}"`, "alpha", ""},
		{"escaped", "$${A}", "${A}", ""},
		{"escaped then var", "$${A}${A}", "${A}alpha", ""},
		{"lone dollar", "a$b", "a$b", ""},
		{"double dollar", "a$$b", "a$$b", ""},
		{"not expanded again", "${DOLLAR}", "${A}", ""},
		{"unset inside", "x${NOPE}y", "xy", ""},
		{"unset whole is absent", "${NOPE}", "t", ""}, // name then defaults to the topic
		{"unterminated", "${A", "", `line 3: pipelines[0].name: unterminated "${"`},
		{"unterminated later", "${A}-${B", "", "unterminated"},
		{"empty name", "${}", "", "bad variable name"},
		{"bad name", "${A-B}", "", `bad variable name "A-B"`},
		{"digit first", "${1A}", "", "bad variable name"},
		{"default unused", "${A:-other}", "alpha", ""},
		{"default for unset", "${NOPE:-other}", "other", ""},
		{"default inside", "x-${NOPE:-b}-y", "x-b-y", ""},
		{"default taken literally", "${NOPE:-$A}", "$A", ""},
		{"empty default is absent", "${NOPE:-}", "t", ""},
		{"default with a bad name", "${A-B:-x}", "", `bad variable name "A-B"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "brokers: [127.0.0.1:9092]\npipelines:\n  - name: " + tt.value + "\n    topic: t\n"
			if tt.err != "" {
				err := parseErr(t, doc, getenv)
				if !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %q does not contain %q", err, tt.err)
				}
				if !errors.Is(err, ErrExpand) {
					t.Errorf("error %q is not ErrExpand", err)
				}
				return
			}
			c, err := Parse([]byte(doc), getenv)
			if strings.ContainsAny(tt.want, "${}") {
				// names with $ { } are not legal pipeline names: check the
				// expansion through a header value instead.
				doc = "brokers: [127.0.0.1:9092]\npipelines:\n  - topic: t\n    handler:\n      http:\n        url: http://127.0.0.1:1/\n        headers:\n          X: " + tt.value + "\n"
				c, err = Parse([]byte(doc), getenv)
				if err != nil {
					t.Fatal(err)
				}
				if got := c.Pipelines[0].Handler.HTTP.Headers["X"]; got != tt.want {
					t.Errorf("header = %q, want %q", got, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Pipelines[0].Name; got != tt.want {
				t.Errorf("name = %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("before typing", func(t *testing.T) {
		doc := `brokers: ${BROKERS}
pipelines:
  - topic: t
    partitions: ${P}
    replication: ${NOPE}
    retry: {jitter: "${J}", max_attempts: "${NOPE}"}
    ttl: ${NOPE}
    handler:
      http:
        url: http://127.0.0.1:1/${A}
        json:
          ok_field: status
          ok_value: ${OK}
          code_field: "${A}"
tls:
  enabled: ${T}
analyzer:
  rules:
    - name: "${A}"
      match: {codes: "${A}", headers: {n: "${P}", literal: '$${A}'}}
      action: republish
      max_redrives: ${P}
      after: "${NOPE}"

`
		c := mustParse(t, doc, getenv)
		p := c.Pipelines[0]
		if !slices.Equal(c.Brokers, []string{"h1:9092", "h2:9092"}) {
			t.Errorf("brokers = %q", c.Brokers)
		}
		if p.Partitions != 12 || p.Replication != 1 || p.Retry.Jitter != 0.5 || p.Retry.MaxAttempts != 4 || p.TTL != 0 {
			t.Errorf("partitions %d replication %d jitter %v max_attempts %d ttl %s", p.Partitions, p.Replication, p.Retry.Jitter, p.Retry.MaxAttempts, p.TTL)
		}
		if p.Handler.HTTP.URL != "http://127.0.0.1:1/alpha" {
			t.Errorf("url = %q", p.Handler.HTTP.URL)
		}
		if j := p.Handler.HTTP.JSON; j.OKValue != 1 || j.CodeField != "alpha" {
			t.Errorf("json = %#v; want ok_value the number 1", j)
		}
		if !c.TLS.Enabled {
			t.Errorf("tls.enabled = false")
		}
		wantRule := AnalyzerRule{Name: "alpha", Match: RuleMatch{Codes: []string{"alpha"}, Headers: map[string]string{"n": "12", "literal": "${A}"}},
			Action: "republish", MaxRedrives: 12}
		if len(c.Analyzer.Rules) != 1 || !reflect.DeepEqual(c.Analyzer.Rules[0], wantRule) {
			t.Errorf("rules = %#v, want [%#v]", c.Analyzer.Rules, wantRule)
		}
	})

	t.Run("keys are not expanded", func(t *testing.T) {
		doc := "brokers: [127.0.0.1:9092]\npipelines:\n  - topic: t\n    handler: {codes: {min_delay: {'X${A}': 5s}}}\n"
		c := mustParse(t, doc, getenv)
		if _, ok := c.Pipelines[0].Handler.Codes.MinDelay["X${A}"]; !ok {
			t.Errorf("min_delay = %v", c.Pipelines[0].Handler.Codes.MinDelay)
		}
	})

	t.Run("block scalar", func(t *testing.T) {
		doc := "brokers: [127.0.0.1:9092]\npipelines:\n  - topic: t\n    handler:\n      http:\n        url: 'http://127.0.0.1:1/'\n        headers:\n          X: |-\n            a ${A}\n            ok ${A\n"
		err := parseErr(t, doc, getenv)
		if !strings.Contains(err.Error(), "line 8: pipelines[0].handler.http.headers.X: unterminated") {
			t.Errorf("error = %q", err)
		}
	})

	t.Run("wrong type after expansion", func(t *testing.T) {
		doc := "brokers: [127.0.0.1:9092]\npipelines:\n  - topic: t\n    partitions: ${A}\n"
		err := parseErr(t, doc, getenv)
		if !strings.Contains(err.Error(), `line 4: pipelines[0].partitions: want a whole number, got "alpha"`) {
			t.Errorf("error = %q", err)
		}
	})
}

func TestEnvOverrides(t *testing.T) {
	const doc = `brokers: [file:9092]
http_addr: 127.0.0.1:1
instance: file
client_id: file
pipelines: [{topic: t}]
analyzer: {token: file-0123456789abcdef}
`
	all := env(
		"REDRIVE_BROKERS", " a:1, b:2 ,,",
		"REDRIVE_HTTP_ADDR", "127.0.0.1:2",
		"REDRIVE_INSTANCE", "pod-1",
		"REDRIVE_CLIENT_ID", "cid",
		"REDRIVE_SASL_MECHANISM", "scram-sha-256",
		"REDRIVE_SASL_USER", "u",
		"REDRIVE_SASL_PASSWORD", "p w",
		"REDRIVE_ANALYZER_TOKEN", "tok-0123456789abcdef",
		"REDRIVE_PROCESSOR_TOKEN", "ptok-0123456789abcdef",
	)

	t.Run("every REDRIVE_ variable overrides the file", func(t *testing.T) {
		c := mustParse(t, doc, all)
		if !slices.Equal(c.Brokers, []string{"a:1", "b:2"}) || c.HTTPAddr != "127.0.0.1:2" || c.Instance != "pod-1" || c.ClientID != "cid" || c.Analyzer.Token != "tok-0123456789abcdef" || c.Processor.Token != "ptok-0123456789abcdef" {
			t.Errorf("overrides not applied:\n%s", dump(c))
		}
		if c.SASL == nil || *c.SASL != (SASL{Mechanism: "SCRAM-SHA-256", User: "u", Password: "p w"}) {
			t.Errorf("sasl = %+v; want it created from the environment, mechanism upper-cased", c.SASL)
		}
	})

	t.Run("unset or empty variables leave the file alone", func(t *testing.T) {
		c := mustParse(t, doc, env("REDRIVE_BROKERS", ""))
		if !slices.Equal(c.Brokers, []string{"file:9092"}) || c.Instance != "file" || c.SASL != nil {
			t.Errorf("empty environment changed the file:\n%s", dump(c))
		}
	})

	t.Run("a lone password creates the sasl section and its problems", func(t *testing.T) {
		err := parseErr(t, doc, env("REDRIVE_SASL_PASSWORD", "p"))
		for _, want := range []string{"sasl.mechanism: required", "sasl.user: required"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
	})

	t.Run("a bad override names the variable not the file line", func(t *testing.T) {
		err := parseErr(t, doc, env("REDRIVE_HTTP_ADDR", "nope"))
		if !strings.Contains(err.Error(), `http_addr (from REDRIVE_HTTP_ADDR): "nope"`) || strings.Contains(err.Error(), "line") {
			t.Errorf("error = %q", err)
		}
		err = parseErr(t, doc, env("REDRIVE_BROKERS", ",,"))
		if !strings.Contains(err.Error(), "brokers (from REDRIVE_BROKERS): at least one broker") {
			t.Errorf("error = %q", err)
		}
	})

	t.Run("the file sasl section is overridden key by key", func(t *testing.T) {
		c := mustParse(t, doc+"sasl: {mechanism: plain, user: fu, password: fp}\n", env("REDRIVE_SASL_USER", "eu"))
		if *c.SASL != (SASL{Mechanism: "PLAIN", User: "eu", Password: "fp"}) {
			t.Errorf("sasl = %+v", *c.SASL)
		}
	})

	t.Run("SetBrokers wins over file and environment and is validated", func(t *testing.T) {
		c := mustParse(t, doc, all)
		c.SetBrokers("x:1,y:2")
		if !slices.Equal(c.Brokers, []string{"x:1", "y:2"}) {
			t.Errorf("brokers = %q", c.Brokers)
		}
		c.SetBrokers(" , ")
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "brokers (from --brokers)") {
			t.Errorf("Validate after SetBrokers(\" , \") = %v", err)
		}
		c.SetBrokers("bad host:1")
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "brokers[0] (from --brokers)") {
			t.Errorf("Validate after SetBrokers(bad) = %v", err)
		}
	})

	t.Run("ApplyEnv works on a Config built in Go", func(t *testing.T) {
		var g Config
		g.ApplyEnv(all)
		g.ApplyEnv(nil)
		if !slices.Equal(g.Brokers, []string{"a:1", "b:2"}) {
			t.Errorf("ApplyEnv on a Go config: brokers = %q", g.Brokers)
		}
	})
}

// pipe is a file with one pipeline (topic on line 3) and extra lines for it
// from line 4 on.
func pipe(extra ...string) string {
	doc := "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: solve.requests\n"
	for _, e := range extra {
		doc += "    " + e + "\n"
	}
	return doc
}

func TestValidationErrors(t *testing.T) {
	long := strings.Repeat("a", 250)
	tests := []struct {
		name string
		doc  string
		want []string // each must be in the error
	}{
		{"no brokers", "pipelines: [{topic: t}]\n", []string{"brokers: at least one broker is required"}},
		{"empty brokers", "brokers: []\npipelines: [{topic: t}]\n", []string{"line 1: brokers: at least one broker"}},
		{"broker with space", "brokers: [\"a b:1\"]\npipelines: [{topic: t}]\n", []string{"line 1: brokers[0]: \"a b:1\": want host:port"}},
		{"broker bad port", "brokers: [\"h:0\"]\npipelines: [{topic: t}]\n", []string{"line 1: brokers[0]", "bad port"}},
		{"broker empty", "brokers: [\"\", h:1]\npipelines: [{topic: t}]\n", []string{"line 1: brokers[0]: empty broker"}},
		{"no pipelines", "brokers: [h:1]\n", []string{"pipelines: at least one pipeline is required"}},
		{"pipelines empty", "brokers: [h:1]\npipelines: []\n", []string{"line 2: pipelines: at least one pipeline"}},
		{"no topic", "brokers: [h:1]\npipelines:\n  - results: r\n", []string{"line 3: pipelines[0].topic: required"}},
		{"topic chars", pipe("name: ok") + "  - topic: a/b\n", []string{"line 5: pipelines[1].topic", `"a/b": a topic name uses only`}},
		{"topic dot", "brokers: [h:1]\npipelines:\n  - {name: x, topic: \".\"}\n", []string{"line 3: pipelines[0].topic", "not a legal topic name"}},
		{"topic dotdot", "brokers: [h:1]\npipelines:\n  - {name: x, topic: \"..\"}\n", []string{"pipelines[0].topic", "not a legal topic name"}},
		{"topic too long", "brokers: [h:1]\npipelines:\n  - {name: x, topic: " + long + "}\n", []string{"pipelines[0].topic", "longer than 249"}},
		{"tier topic too long", "brokers: [h:1]\npipelines:\n  - {name: x, topic: " + long[:242] + "}\n", []string{"pipelines[0].topic: tier topic", "longer than 249"}},
		{"name chars", pipe("name: a b"), []string{"line 4: pipelines[0].name", "use letters"}},
		{"duplicate names", pipe("name: x") + "  - name: x\n    topic: other\n", []string{"line 5: pipelines[1].name: \"x\" is also the name of pipelines[0]"}},
		{"duplicate topics", pipe() + "  - topic: solve.requests\n    name: two\n", []string{"line 4: pipelines[1].topic: \"solve.requests\" is consumed by pipelines[0] too"}},
		{"topic is another's tier", pipe() + "  - topic: solve.requests.retry.5s\n", []string{"line 4: pipelines[1].topic: \"solve.requests.retry.5s\" is consumed by pipelines[0]"}},
		{"tiers empty", pipe("retry: {tiers: []}"), []string{"line 4: pipelines[0].retry.tiers: at least one tier is required"}},
		{"tier zero", pipe("retry: {tiers: [0s]}"), []string{"line 4: pipelines[0].retry.tiers[0]: 0s: a tier delay must be more than 0"}},
		{"tier below 1s", pipe("retry: {tiers: [500ms]}"), []string{"line 4: pipelines[0].retry.tiers[0]: 500ms: a tier delay is a whole number of seconds"}},
		{"tier fraction", pipe("retry:", "  tiers:", "    - 5s", "    - 1.5m", "    - 2.5s"), []string{"line 8: pipelines[0].retry.tiers[2]: 2.5s: a tier delay is a whole number"}},
		{"tiers decrease", pipe("retry:", "  tiers:", "    - 5m", "    - 30s"), []string{"line 7: pipelines[0].retry.tiers[1]: 30s after 5m: tiers must strictly increase"}},
		{"tiers equal", pipe("retry: {tiers: [60s, 1m]}"), []string{"line 4: pipelines[0].retry.tiers[1]: 1m after 1m"}},
		{"max_attempts negative", pipe("retry: {max_attempts: -1}"), []string{"line 4: pipelines[0].retry.max_attempts: -1: must be at least 1"}},
		{"jitter above 1", pipe("retry:", "  jitter: 1.5"), []string{"line 5: pipelines[0].retry.jitter: 1.5: must be between 0 and 1"}},
		{"max_due below the longest wait", pipe("retry:", "  max_due: 5m"), []string{"line 5: pipelines[0].retry.max_due: 5m0s: must be at least the largest tier plus its jitter, 5m30s"}},
		{"max_attempts above 1000", pipe("retry: {max_attempts: 9223372036854775807}"), []string{"line 4: pipelines[0].retry.max_attempts: 9223372036854775807: must be at most 1000"}},
		{"jitter negative", pipe("retry: {jitter: -0.1}"), []string{"pipelines[0].retry.jitter: -0.1"}},
		{"partitions", pipe("partitions: -1"), []string{"line 4: pipelines[0].partitions: -1: must be at least 1"}},
		{"replication", pipe("replication: -2"), []string{"line 4: pipelines[0].replication: -2"}},
		{"ordering", pipe("ordering: fifo"), []string{"line 4: pipelines[0].ordering: \"fifo\""}},
		{"header_style", pipe("dlq: {header_style: kafka}"), []string{"line 4: pipelines[0].dlq.header_style: \"kafka\""}},
		{"dlq is main", pipe("dlq: {topic: solve.requests}"), []string{"line 4: pipelines[0].dlq.topic: \"solve.requests\" is the main topic too"}},
		{"dlq is tier", pipe("dlq: {topic: solve.requests.retry.30s}"), []string{"pipelines[0].dlq.topic: \"solve.requests.retry.30s\" is a tier topic too"}},
		{"dlq is results", pipe("results: r", "dlq: {topic: r}"), []string{"line 5: pipelines[0].dlq.topic: \"r\" is the results topic too"}},
		{"default dlq is results", pipe("results: solve.requests.dlq"), []string{"line 4: pipelines[0].results: dlq.topic (not in the file; default \"<topic>.dlq\"): \"solve.requests.dlq\" is the results topic too; set dlq.topic"}},
		{"dlq illegal", pipe("dlq: {topic: 'a b'}"), []string{"pipelines[0].dlq.topic", "a topic name uses only"}},
		{"results is main", pipe("results: solve.requests"), []string{"line 4: pipelines[0].results: \"solve.requests\" is the main topic too"}},
		{"results is tier", pipe("results: solve.requests.retry.5m"), []string{"pipelines[0].results", "is a tier topic too"}},
		{"results illegal", pipe("results: 'r!'"), []string{"pipelines[0].results", "a topic name uses only"}},
		{"redact empty", pipe("dlq: {redact_headers: ['']}"), []string{"pipelines[0].dlq.redact_headers[0]: empty header name"}},
		{"concurrency", pipe("concurrency: -1"), []string{"line 4: pipelines[0].concurrency: -1"}},
		{"max_inflight", pipe("max_inflight: -1"), []string{"pipelines[0].max_inflight: -1"}},
		{"max_inflight_bytes", pipe("max_inflight_bytes: -1"), []string{"pipelines[0].max_inflight_bytes: -1"}},
		{"url missing", pipe("handler:", "  http: {timeout: 5s}"), []string{"line 5: pipelines[0].handler.http.url: required"}},
		{"url relative", pipe("handler: {http: {url: /solve}}"), []string{"line 4: pipelines[0].handler.http.url: \"/solve\": want an absolute"}},
		{"url ftp", pipe("handler: {http: {url: 'ftp://h/x'}}"), []string{"pipelines[0].handler.http.url", "want an absolute http"}},
		{"url no host", pipe("handler: {http: {url: 'http:///x'}}"), []string{"pipelines[0].handler.http.url"}},
		{"url unparsable", pipe("handler: {http: {url: 'http://[::1'}}"), []string{"pipelines[0].handler.http.url"}},
		{"url password not echoed", pipe("handler: {http: {url: 'ftp://u:secret@h/'}}"), []string{"pipelines[0].handler.http.url", "ftp://u:xxxxx@h/"}},
		{"header name", pipe("handler: {http: {url: 'http://h/', headers: {'a b': v}}}"), []string{`line 4: pipelines[0].handler.http.headers["a b"]: "a b" is not a valid HTTP header name`}},
		{"header value", pipe("handler: {http: {url: 'http://h/', headers: {X: \"a\\nb\"}}}"), []string{"pipelines[0].handler.http.headers.X: the value holds control characters"}},
		{"header twice", pipe("handler: {http: {url: 'http://h/', headers: {Authorization: a, authorization: b}}}"), []string{"pipelines[0].handler.http.headers.authorization: the same header as \"Authorization\""}},
		{"json no ok_field", pipe("handler: {http: {url: 'http://h/', json: {ok_value: 1}}}"), []string{"pipelines[0].handler.http.json.ok_field: required"}},
		{"json no ok_value", pipe("handler: {http: {url: 'http://h/', json: {ok_field: status}}}"), []string{"pipelines[0].handler.http.json.ok_value: required"}},
		{"json ok_value list", pipe("handler: {http: {url: 'http://h/', json: {ok_field: s, ok_value: [1]}}}"), []string{"pipelines[0].handler.http.json.ok_value: want a string, a bool or a number"}},
		{"json bad path", pipe("handler: {http: {url: 'http://h/', json: {ok_field: a..b, ok_value: 1, code_field: .c}}}"), []string{"json.ok_field: \"a..b\"", "json.code_field: \".c\""}},
		{"code twice", pipe("handler:", "  codes:", "    transient: [X]", "    permanent: [Y, X]"), []string{"line 7: pipelines[0].handler.codes.permanent[1]: \"X\" is in transient too"}},
		{"code empty", pipe("handler: {codes: {not_ready: ['']}}"), []string{"pipelines[0].handler.codes.not_ready[0]: empty code"}},
		{"request_fault code transient too", pipe("handler:", "  codes:", "    transient: [X]", "    request_fault: [Y, X]"),
			[]string{"line 7: pipelines[0].handler.codes.request_fault[1]: \"X\" is in transient too"}},
		{"request_fault code permanent too", pipe("handler:", "  codes:", "    request_fault: [X]", "", "    permanent: [X]"),
			[]string{"line 8: pipelines[0].handler.codes.permanent[0]: \"X\" is in request_fault too"}},
		{"request_fault code paused too", pipe("handler:", "  codes:", "    request_fault: [X]", "    pause: {X: 1m}"),
			[]string{"line 7: pipelines[0].handler.codes.pause.X: \"X\" is in request_fault too"}},
		{"request_fault code empty", pipe("handler: {codes: {request_fault: [A, '']}}"), []string{"line 4: pipelines[0].handler.codes.request_fault[1]: empty code"}},
		{"sasl bad mechanism", pipe() + "sasl: {mechanism: GSSAPI, user: u, password: p}\n", []string{"line 4: sasl.mechanism: \"GSSAPI\": want PLAIN"}},
		{"sasl no mechanism", pipe() + "sasl:\n  user: u\n  password: p\n", []string{"line 4: sasl.mechanism: required"}},
		{"sasl no user", pipe() + "sasl: {mechanism: PLAIN, password: p}\n", []string{"line 4: sasl.user: required"}},
		{"sasl no password", pipe() + "sasl: {mechanism: PLAIN, user: u, password: '${NOPE}'}\n", []string{"line 4: sasl.password: empty"}},
		{"tls cert without key", pipe() + "tls: {enabled: true, cert_file: c.pem}\n", []string{"line 4: tls.key_file: required with tls.cert_file"}},
		{"tls key without cert", pipe() + "tls: {enabled: true, key_file: k.pem}\n", []string{"tls.cert_file: required with tls.key_file"}},
		{"http_addr", pipe() + "http_addr: nope\n", []string{"line 4: http_addr: \"nope\": want host:port"}},
		{"http_addr port", pipe() + "http_addr: 127.0.0.1:99999\n", []string{"http_addr: \"127.0.0.1:99999\": bad port"}},
		{"analyzer http_addr", pipe() + "analyzer:\n  http_addr: x\n", []string{"line 5: analyzer.http_addr"}},
		{"analyzer allowed_hosts", pipe() + "analyzer:\n  allowed_hosts: ['http://x', 'a:80', '', 'b c']\n", []string{"analyzer.allowed_hosts[0]: \"http://x\": want a host name", "analyzer.allowed_hosts[1]", "analyzer.allowed_hosts[2]", "analyzer.allowed_hosts[3]"}},
		{"several at once", pipe("partitions: -1", "ordering: x") + "http_addr: nope\n", []string{"pipelines[0].partitions", "pipelines[0].ordering", "http_addr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, nil)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v\n--- file:\n%s", w, err, tt.doc)
				}
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error is not ErrInvalid: %v", err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Path == "" {
				t.Errorf("error is not an *Error with a path: %#v", err)
			}
		})
	}

	// A Config built in Go, never parsed: paths, no lines.
	c := Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{{Topic: "t", Retry: Retry{Tiers: []Tier{{Delay: dur("-1s")}}}, TTL: dur("-1s")}}}
	c.SetDefaults()
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "pipelines[0].retry.tiers[0]: -1s") || !strings.Contains(err.Error(), "pipelines[0].ttl: -1s") || strings.Contains(err.Error(), "line ") {
		t.Errorf("Validate = %v", err)
	}
	c = Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{{Topic: "t", Retry: Retry{Jitter: math.NaN()}}}}
	c.SetDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "retry.jitter: NaN") {
		t.Errorf("Validate(NaN jitter) = %v", err)
	}
}

func TestValid(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"sasl lower case", pipe() + "sasl: {mechanism: scram-sha-512, user: u, password: p}\n"},
		{"tls both files", pipe() + "tls: {enabled: true, ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: no, server_name: k}\n"},
		{"broker without port", "brokers: [kafka]\npipelines: [{topic: t}]\n"},
		{"ipv6 broker", "brokers: ['[::1]:9092']\npipelines: [{topic: t}]\n"},
		{"http_addr any port", pipe() + "http_addr: 127.0.0.1:0\n"},
		{"analyzer allowed_hosts", pipe() + "analyzer:\n  allowed_hosts: ['*', dash.example.com, '::1', '[::1]', 10.0.0.7]\n"},
		{"analyzer allowed_hosts csv", pipe() + "analyzer:\n  allowed_hosts: 'a.example, b.example'\n"},
		{"ordering key", pipe("ordering: key")},
		{"spring", pipe("dlq: {header_style: spring}")},
		{"connect", pipe("dlq: {header_style: connect}")},
		{"results and dlq", pipe("results: out", "dlq: {topic: dead}")},
		{"json", pipe("handler: {http: {url: 'https://h/x', json: {ok_field: a.b, ok_value: ok}}}")},
		{"json bool", pipe("handler: {http: {url: 'https://h/x', json: {ok_field: a, ok_value: true}}}")},
		{"same code twice in one list", pipe("handler: {codes: {transient: [X, X]}}")},
		{"min_delay", pipe("handler: {codes: {min_delay: {X: 0s, Y: 1h}}}")},
		{"ttl", pipe("ttl: 24h")},
		{"chained pipelines", pipe("results: next") + "  - topic: next\n"},
		{"many pipelines", pipe() + "  - topic: b\n  - topic: c\n    name: cc\n"},
		{"empty analyzer", pipe() + "analyzer: {}\n"},
		{"nulls", pipe("results: ~", "retry: ~", "dlq: null", "handler: ~") + "sasl: ~\ntls: ~\nanalyzer: ~\n"},
		{"comments and document marker", "---\n# c\n" + pipe() + "...\n"},
		{"trailing empty document", pipe() + "---\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.doc, nil)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate again: %v", err)
			}
		})
	}
	c := mustParse(t, pipe()+"sasl: {mechanism: ' scram-sha-512 ', user: u, password: p}\n", nil)
	if c.SASL.Mechanism != "SCRAM-SHA-512" {
		t.Errorf("mechanism = %q, want it normalised", c.SASL.Mechanism)
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"top", pipe() + "brokerz: [x]\n", "line 4: brokerz: unknown key (known: brokers, http_addr, callback_addr, client_id, instance, sasl, tls, pipelines, analyzer, session_timeout, shutdown_grace, commit_interval, processor, control)"},
		{"pipeline", pipe("topik: x"), "line 4: pipelines[0].topik: unknown key (known: name, topic, results,"},
		{"second pipeline", pipe() + "  - topic: b\n    nam: x\n", "line 5: pipelines[1].nam: unknown key"},
		{"retry", "brokers: [h:1]\npipelines:\n  - topic: t\n    retry:\n      tiers: [5s]\n      max_attempts: 4\n      jitter: 0\n\n\n\n\n      tierz: [1s]\n", "line 12: pipelines[0].retry.tierz: unknown key (known: tiers, max_attempts, jitter, max_due)"},
		{"dlq", pipe("dlq: {retension: 1h}"), "line 4: pipelines[0].dlq.retension: unknown key (known: topic, retention, redact_headers, header_style)"},
		{"handler", pipe("handler: {grpc: {}}"), "pipelines[0].handler.grpc: unknown key (known: http, codes, callback)"},
		{"http", pipe("handler:", "  http:", "    url: http://h/", "    retries: 3"), "line 7: pipelines[0].handler.http.retries: unknown key (known: url, timeout, headers, json, max_body_bytes, query, form, poll)"},
		{"json", pipe("handler: {http: {url: 'http://h/', json: {ok: 1}}}"), "pipelines[0].handler.http.json.ok: unknown key (known: ok_field, ok_value, code_field)"},
		{"codes", pipe("handler: {codes: {fatal: [X]}}"), "pipelines[0].handler.codes.fatal: unknown key (known: transient, request_fault, not_ready, permanent, min_delay, pause)"},
		{"sasl", pipe() + "sasl: {mechanism: PLAIN, user: u, pass: p}\n", "line 4: sasl.pass: unknown key (known: mechanism, user, password)"},
		{"tls", pipe() + "tls: {enable: true}\n", "tls.enable: unknown key (known: enabled, ca_file, cert_file, key_file, insecure_skip_verify, server_name)"},
		{"analyzer", pipe() + "analyzer: {addr: x}\n", "analyzer.addr: unknown key (known: http_addr, token, read_token, insecure_public, hide_values, rules, alerts, recent_value_bytes, recent_bytes, response_bytes, max_requests, allowed_hosts)"},
		{"in a merge", "base: &b {topic: x}\n" + pipe(), "line 1: base: unknown key"},
		{"merged in", "brokers: [h:1]\npipelines:\n  - &p {topic: a, colour: red}\n  - {<<: *p, topic: b}\n", "line 3: pipelines[0].colour: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, nil)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not contain %q:\n%v", tt.want, err)
			}
			if !errors.Is(err, ErrUnknownKey) {
				t.Errorf("error is not ErrUnknownKey: %v", err)
			}
		})
	}

	// All of them at once, one line each, in file order.
	err := parseErr(t, pipe("a: 1", "retry: {b: 2}", "dlq: {c: 3}")+"d: 4\n", nil)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "line 4: pipelines[0].a:") || !strings.HasPrefix(lines[3], "line 7: d:") {
		t.Errorf("want 4 errors, got:\n%v", err)
	}
}

func TestDecodeAndValidationErrorsTogether(t *testing.T) {
	doc := "brokers: [h:1]\npipelines:\n  - topic: [a]\n    partitions: x\n    retry: {tiers: [5s, 1s]}\n"
	err := parseErr(t, doc, nil)
	want := "line 3: pipelines[0].topic: want a string, got a list\n" +
		"line 4: pipelines[0].partitions: want a whole number, got \"x\"\n" +
		"line 5: pipelines[0].retry.tiers[1]: 1s after 5s: tiers must strictly increase"
	if err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
	if !errors.Is(err, ErrType) || !errors.Is(err, ErrInvalid) {
		t.Errorf("kinds lost: %v", err)
	}
	// A syntax error stops everything else.
	err = parseErr(t, "brokers: [\npipelines: x\n", nil)
	if strings.Count(err.Error(), "\n") != 0 || !errors.Is(err, ErrSyntax) {
		t.Errorf("error = %v", err)
	}
}

func TestTooManyErrors(t *testing.T) {
	doc := pipe()
	for i := 0; i < 80; i++ {
		doc += fmt.Sprintf("k%d: 1\n", i)
	}
	err := parseErr(t, doc, nil)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "and 30 more problems" {
		t.Errorf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

func TestTypeErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
		kind error
	}{
		{"brokers mapping", "brokers: {a: 1}\npipelines: [{topic: t}]\n", "line 1: brokers: want a list, got a mapping", ErrType},
		{"pipelines mapping", "brokers: [h:1]\npipelines: {topic: t}\n", "line 2: pipelines: want a list, got a mapping", ErrType},
		{"pipeline scalar", "brokers: [h:1]\npipelines: [t]\n", `line 2: pipelines[0]: want a mapping (key: value), got "t"`, ErrType},
		{"top list", "- a\n", "want a mapping", ErrType},
		{"partitions word", pipe("partitions: six"), `line 4: pipelines[0].partitions: want a whole number, got "six"`, ErrType},
		{"partitions float", pipe("partitions: 6.5"), `pipelines[0].partitions: want a whole number, got "6.5"`, ErrType},
		{"replication range", pipe("replication: 70000"), "line 4: pipelines[0].replication: 70000 is out of range", ErrType},
		{"tiers scalar", pipe("retry: {tiers: 5s}"), `line 4: pipelines[0].retry.tiers: want a list, got "5s"`, ErrType},
		{"tier word", pipe("retry:", "  tiers: [5s, soon]"), `line 5: pipelines[0].retry.tiers[1]: bad duration "soon"`, ErrType},
		{"tier no unit", pipe("retry: {tiers: [30]}"), `pipelines[0].retry.tiers[0]: bad duration "30" (missing unit)`, ErrType},
		{"ttl negative", pipe("ttl: -5s"), `line 4: pipelines[0].ttl: bad duration "-5s": negative`, ErrType},
		{"jitter word", pipe("retry: {jitter: lots}"), `pipelines[0].retry.jitter: want a number, got "lots"`, ErrType},
		{"jitter nan", pipe("retry: {jitter: .nan}"), `pipelines[0].retry.jitter: want a number`, ErrType},
		{"tls enabled", pipe() + "tls: {enabled: maybe}\n", `line 4: tls.enabled: want true or false, got "maybe"`, ErrType},
		{"tls list", pipe() + "tls: [true]\n", "line 4: tls: want a mapping", ErrType},
		{"retry list", pipe("retry: [5s]"), "line 4: pipelines[0].retry: want a mapping", ErrType},
		{"headers list", pipe("handler: {http: {url: 'http://h/', headers: [a]}}"), "pipelines[0].handler.http.headers: want a mapping", ErrType},
		{"header value list", pipe("handler: {http: {url: 'http://h/', headers: {A: [a]}}}"), "pipelines[0].handler.http.headers.A: want a string, got a list", ErrType},
		{"name list", pipe("name: [a]"), "line 4: pipelines[0].name: want a string, got a list", ErrType},
		{"min_delay", pipe("handler: {codes: {min_delay: {X: fast}}}"), `pipelines[0].handler.codes.min_delay.X: bad duration "fast"`, ErrType},
		{"bytes unit", pipe("max_inflight_bytes: 64 parsecs"), `pipelines[0].max_inflight_bytes: want a byte size such as 1048576 or 1MiB, got "64 parsecs"`, ErrType},
		{"bytes overflow", pipe("max_inflight_bytes: 99999999999GiB"), "pipelines[0].max_inflight_bytes: 99999999999GiB is out of range", ErrType},
		{"duplicate", pipe("partitions: 3", "partitions: 4"), "line 5: pipelines[0].partitions: duplicate key (first on line 4)", ErrDuplicateKey},
		{"duplicate map key", pipe("handler: {http: {url: 'http://h/', headers: {A: a, A: b}}}"), `pipelines[0].handler.http.headers.A: duplicate key (first on line 4)`, ErrDuplicateKey},
		{"key not a string", pipe("? [a]", ": b"), "pipelines[0]: a key must be a string", ErrType},
		{"syntax", "brokers: [a\n", "did not find expected", ErrSyntax},
		{"tab", "brokers:\n\t- a\n", "line 2", ErrSyntax},
		{"two documents", pipe() + "---\nbrokers: [b]\n", "line 4: a second YAML document", ErrSyntax},
		{"bad merge", pipe("<<: 1"), "pipelines[0]: << merges a mapping", ErrType},
		{"bad alias", "a: *nope\n", "unknown anchor", ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, nil)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not contain %q:\n%v", tt.want, err)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error is not %v: %v", tt.kind, err)
			}
		})
	}
}

func TestEmptyFile(t *testing.T) {
	for _, doc := range []string{"", "\n", "# only a comment\n", "~\n", "---\n"} {
		err := parseErr(t, doc, nil)
		if !strings.Contains(err.Error(), "brokers: at least one broker") || !strings.Contains(err.Error(), "pipelines: at least one pipeline") {
			t.Errorf("Parse(%q) = %v", doc, err)
		}
	}
	// An empty file with the environment's brokers still needs pipelines.
	err := parseErr(t, "", env("REDRIVE_BROKERS", "h:1"))
	if strings.Contains(err.Error(), "brokers") {
		t.Errorf("error = %v", err)
	}
}

func TestAnchorsAndMerges(t *testing.T) {
	doc := `brokers: [h:1]
pipelines:
  - &base
    topic: a
    retry: &retry {tiers: [1s, 10s], max_attempts: 3, jitter: 0}
    handler: {http: {url: 'http://127.0.0.1:1/', headers: {A: x}}}
  - <<: *base
    topic: b
    concurrency: 8
  - topic: c
    retry: *retry
  - <<: [{topic: ignored, partitions: 2}, {partitions: 3, replication: 2}]
    topic: d
`
	c := mustParse(t, doc, nil)
	if len(c.Pipelines) != 4 {
		t.Fatalf("%d pipelines", len(c.Pipelines))
	}
	a, b, cc, d := c.Pipelines[0], c.Pipelines[1], c.Pipelines[2], c.Pipelines[3]
	if b.Topic != "b" || b.Concurrency != 8 || b.Retry.MaxAttempts != 3 || b.Handler.HTTP == nil || b.Handler.HTTP.Headers["A"] != "x" {
		t.Errorf("merged pipeline = %+v", b)
	}
	if b.Handler.HTTP == a.Handler.HTTP {
		t.Errorf("merged pipelines share a handler")
	}
	if cc.Retry.Jitter != 0 || !slices.Equal(cc.TierTopics(), []string{"c.retry.1s", "c.retry.10s"}) {
		t.Errorf("aliased retry = %+v", cc.Retry)
	}
	if d.Topic != "d" || d.Partitions != 2 || d.Replication != 2 {
		t.Errorf("list merge = topic %s partitions %d replication %d", d.Topic, d.Partitions, d.Replication)
	}
}

func TestAliasBomb(t *testing.T) {
	// 3000 aliases of a pipeline whose codes are 3000 aliases of a code: a
	// 30 KB file that would be a 9-million-node tree. The walk must stop.
	codes := strings.Repeat("*c, ", 2999) + "*c"
	doc := "brokers: [h:1]\npipelines: [&p {topic: t, handler: {codes: {transient: [&c X, " + codes + "]}}}, " + strings.Repeat("*p, ", 2999) + "*p]\n"
	start := time.Now()
	_, err := Parse([]byte(doc), nil)
	if err == nil || !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "too large once its aliases are expanded") {
		t.Errorf("error = %.300v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	bomb := "brokers: [h:1]\npipelines: [{topic: t}]\nanalyzer:\n  rules:\n"
	bomb += "    - &a [x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := 0; i < 12; i++ {
		name := "a" + strings.Repeat("z", i+1)
		bomb += "    - &" + name + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = name
	}
	if _, err := Parse([]byte(bomb), nil); err == nil {
		t.Errorf("alias bomb in rules: no error")
	}
	cycle := "brokers: [h:1]\npipelines: [{topic: t}]\nanalyzer:\n  rules: &r [*r]\n"
	if _, err := Parse([]byte(cycle), nil); err == nil {
		t.Errorf("alias cycle in rules: no error")
	}
	merge := "brokers: [h:1]\npipelines:\n  - &p {topic: t, <<: *p}\n"
	if _, err := Parse([]byte(merge), nil); err != nil && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrType) {
		t.Errorf("merge cycle: %v", err)
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		str  string // String(); "" when it is in
		err  string
	}{
		{"0", 0, "0s", ""},
		{"0s", 0, "", ""},
		{"5s", 5 * time.Second, "", ""},
		{"30s", 30 * time.Second, "", ""},
		{"90s", 90 * time.Second, "1m30s", ""},
		{"5m", 5 * time.Minute, "", ""},
		{"60m", time.Hour, "1h", ""},
		{"1h30m", 90 * time.Minute, "", ""},
		{"1h0m5s", time.Hour + 5*time.Second, "1h5s", ""},
		{"168h", 168 * time.Hour, "", ""},
		{"1.5s", 1500 * time.Millisecond, "", ""},
		{"500ms", 500 * time.Millisecond, "", ""},
		{"1h0.25s", time.Hour + 250*time.Millisecond, "", ""},
		{"1us", time.Microsecond, "1µs", ""},
		{"7ns", 7, "", ""},
		{" 5s ", 5 * time.Second, "5s", ""},
		{"-5s", 0, "", "negative"},
		{"5", 0, "", "missing unit"},
		{"", 0, "", "bad duration"},
		{"5 s", 0, "", "bad duration"},
		{"1d", 0, "", "bad duration"},
		{"9999999999h", 0, "", "bad duration"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDuration(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("ParseDuration(%q) = %v, %v; want error %q", tt.in, d, err, tt.err)
				}
				return
			}
			if err != nil || d.D() != tt.want {
				t.Fatalf("ParseDuration(%q) = %v, %v; want %v", tt.in, d.D(), err, tt.want)
			}
			str := tt.str
			if str == "" {
				str = tt.in
			}
			if d.String() != str {
				t.Errorf("String() = %q, want %q", d.String(), str)
			}
			back, err := ParseDuration(d.String())
			if err != nil || back != d {
				t.Errorf("String() does not parse back: %v, %v", back, err)
			}
			// yaml.v3 and text round trips.
			out, err := yaml.Marshal(struct{ D Duration }{d})
			if err != nil || string(out) != "d: "+str+"\n" {
				t.Errorf("yaml.Marshal = %q, %v", out, err)
			}
			var in struct{ D Duration }
			if err := yaml.Unmarshal(out, &in); err != nil || in.D != d {
				t.Errorf("yaml.Unmarshal(%q) = %v, %v", out, in.D, err)
			}
			txt, _ := d.MarshalText()
			var u Duration
			if err := u.UnmarshalText(txt); err != nil || u != d {
				t.Errorf("text round trip: %v, %v", u, err)
			}
		})
	}
	for _, d := range []Duration{1, Duration(time.Hour + 1), Duration(math.MaxInt64), Duration(25*time.Hour + time.Minute + time.Second + time.Millisecond)} {
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Errorf("%d: String %q parses to %d, %v", int64(d), d.String(), int64(back), err)
		}
	}
	if s := Duration(-90 * time.Second).String(); s != "-1m30s" {
		t.Errorf("negative String = %q", s)
	}
	if s := Duration(math.MinInt64).String(); s != time.Duration(math.MinInt64).String() {
		t.Errorf("MinInt64 String = %q", s)
	}
	var y struct{ D Duration }
	if err := yaml.Unmarshal([]byte("d: [1]"), &y); err == nil {
		t.Errorf("yaml.Unmarshal of a list: no error")
	}
	if err := yaml.Unmarshal([]byte("d: ~"), &y); err != nil || y.D != 0 {
		t.Errorf("yaml.Unmarshal of null: %v, %v", y.D, err)
	}
}

func TestPipelineHelpers(t *testing.T) {
	p := Pipeline{Topic: "jobs", Retry: Retry{Tiers: tiers("1s", "90s", "1h30m", "3605s", "2.5h"), MaxAttempts: 6, Jitter: 0.2}}
	// Named as written, but for 2.5h: a '.' is not kept.
	if got, want := p.TierTopics(), []string{"jobs.retry.1s", "jobs.retry.90s", "jobs.retry.1h30m", "jobs.retry.3605s", "jobs.retry.2h30m"}; !slices.Equal(got, want) {
		t.Errorf("TierTopics = %q, want %q", got, want)
	}
	if got, want := p.TierNames(), []string{"1s", "90s", "1h30m", "3605s", ""}; !slices.Equal(got, want) {
		t.Errorf("TierNames = %q, want %q", got, want)
	}
	spec := topics.ForPipeline(p.TopicSpec())
	for i := range p.Retry.Tiers {
		if p.Schedule().TierTopic("jobs", i) != p.TierTopics()[i] || spec[1+i].Name != p.TierTopics()[i] {
			t.Errorf("tier %d: TierTopics disagrees with Schedule.TierTopic or topics.ForPipeline", i)
		}
	}
	// Built in Go with delays only: the shortest forms, as before.
	g := Pipeline{Topic: "jobs", Retry: Retry{Tiers: []Tier{{Delay: dur("90s")}, {Delay: dur("3605s")}}}}
	if got, want := g.TierTopics(), []string{"jobs.retry.1m30s", "jobs.retry.1h5s"}; !slices.Equal(got, want) {
		t.Errorf("TierTopics of a Go-built pipeline = %q, want %q", got, want)
	}
	if p.DLQTopic() != "jobs.dlq" || p.GroupID() != "redrive.jobs" || p.AnalyzerGroupID() != "redrive.jobs.analyzer" {
		t.Errorf("before SetDefaults: %q %q %q", p.DLQTopic(), p.GroupID(), p.AnalyzerGroupID())
	}
	s := p.Schedule()
	if s.MaxAttempts != 6 || s.Jitter != 0.2 || len(s.Tiers) != 5 || s.Tiers[2] != 90*time.Minute || s.TierName(1) != "90s" {
		t.Errorf("Schedule = %+v", s)
	}
	empty := Pipeline{}
	if len(empty.TierTopics()) != 0 || len(empty.TierDelays()) != 0 {
		t.Errorf("helpers on an empty pipeline")
	}
}

func TestRedacted(t *testing.T) {
	doc := pipe("handler:", "  http:", "    url: 'http://user:pw@127.0.0.1:1/x'", "    headers: {Authorization: 'Bearer ${T}', X-Empty: ''}") +
		"  - topic: b\n" +
		"sasl: {mechanism: PLAIN, user: u, password: '${P}'}\nanalyzer: {token: '${T}'}\nprocessor: {token: '${T}'}\n"
	c := mustParse(t, doc, env("T", "s3cr3t-token-0123456789", "P", "s3cr3t-pass"))
	before := dump(c)
	r := c.Redacted()
	out := dump(&r)
	for _, secret := range []string{"s3cr3t", ":pw@"} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted config shows %q:\n%s", secret, out)
		}
	}
	if r.SASL.Password != RedactedValue || r.Analyzer.Token != RedactedValue || r.Processor.Token != RedactedValue || r.Pipelines[0].Handler.HTTP.Headers["Authorization"] != RedactedValue {
		t.Errorf("not redacted:\n%s", out)
	}
	if r.Pipelines[0].Handler.HTTP.Headers["X-Empty"] != "" {
		t.Errorf("an empty value should stay empty")
	}
	if !strings.Contains(r.Pipelines[0].Handler.HTTP.URL, "user:") {
		t.Errorf("url = %q; want the user kept", r.Pipelines[0].Handler.HTTP.URL)
	}
	if r.SASL.User != "u" {
		t.Errorf("user = %q", r.SASL.User)
	}
	if dump(c) != before {
		t.Errorf("Redacted changed the original")
	}
	var zero Config
	_ = zero.Redacted()
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(pipe("partitions: x", "topik: y")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if err == nil {
		t.Fatal("no error")
	}
	for _, l := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(l, bad+": line ") {
			t.Errorf("error line %q does not start with the file and line", l)
		}
	}
	if !errors.Is(err, ErrType) || !errors.Is(err, ErrUnknownKey) {
		t.Errorf("errors.Is lost through Load: %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 4 {
		t.Errorf("errors.As: %#v", e)
	}

	missing := filepath.Join(dir, "nope.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}

	one := filepath.Join(dir, "one.yaml")
	if err := os.WriteFile(one, []byte("pipelines: [{topic: t}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(one); err == nil || err.Error() != one+": brokers: at least one broker is required (brokers in the file, REDRIVE_BROKERS or --brokers)" {
		t.Errorf("Load(one) = %v", err)
	}
	c, err := LoadEnv(one, env("REDRIVE_BROKERS", "h:1"))
	if err != nil || c.Brokers[0] != "h:1" {
		t.Errorf("LoadEnv = %v, %v", c, err)
	}
}

// exampleFile is the documented example at the root of the repository.
const exampleFile = "../../redrive.example.yaml"

// exampleEnv answers the ${VARS} the example uses.
var exampleEnv = env("SOLVER_TOKEN", "solver-token", "KAFKA_PASSWORD", "kafka-password", "REDRIVE_ANALYZER_TOKEN", "analyzer-token-0123456789", "SLACK_WEBHOOK_URL", exampleWebhook)

// exampleWebhook stands in for the example's ${SLACK_WEBHOOK_URL}.
const exampleWebhook = "https://hooks.slack.com/services/T0000/B0000/s3cr3tXYZ"

func TestExampleFile(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	// As shipped, with the process environment (cleared of overrides).
	for _, k := range []string{EnvBrokers, EnvHTTPAddr, EnvCallbackAddr, EnvInstance, EnvClientID, EnvSASLMechanism, EnvSASLUser, EnvSASLPassword, EnvAnalyzerToken, EnvAnalyzerReadToken, EnvProcessorToken} {
		t.Setenv(k, "")
	}
	if _, err := Load(exampleFile); err != nil {
		t.Fatalf("Load(%s): %v", exampleFile, err)
	}
	c := mustParse(t, string(data), exampleEnv)
	if c.Pipelines[0].Handler.HTTP.Headers["Authorization"] != "Bearer solver-token" || c.Analyzer.Token != "analyzer-token-0123456789" {
		t.Errorf("${VARS} not expanded:\n%s", dump(c))
	}
	for _, a := range []string{c.HTTPAddr, c.Analyzer.HTTPAddr, c.Brokers[0], c.Pipelines[0].Handler.HTTP.URL, c.Pipelines[1].Handler.HTTP.URL} {
		if !strings.Contains(a, "127.0.0.1:") {
			t.Errorf("%q is not a 127.0.0.1 address", a)
		}
	}

	// With every optional "#~" line switched on.
	full := regexp.MustCompile(`(?m)^(\s*)#~ ?`).ReplaceAllString(string(data), "$1")
	// (REDRIVE_ANALYZER_TOKEN unset here: an override would hide the key.)
	c = mustParse(t, full, env("SOLVER_TOKEN", "solver-token", "KAFKA_PASSWORD", "kafka-password", "SLACK_WEBHOOK_URL", exampleWebhook))
	if c.SASL == nil || c.SASL.Password != "kafka-password" || c.TLS == nil || !c.TLS.Enabled || c.Pipelines[0].Handler.HTTP.JSON == nil {
		t.Errorf("optional sections not parsed:\n%s", dump(c))
	}
	// It sets every key there is, so none can go undocumented.
	set := map[string]bool{}
	for p := range c.src.lines {
		set[regexp.MustCompile(`\[\d+\]`).ReplaceAllString(p, "[]")] = true
	}
	for _, k := range schemaKeys(reflect.TypeFor[Config](), "") {
		if !set[k] {
			t.Errorf("key %s is not in %s", k, exampleFile)
		}
	}
	// Every documented key has a comment: the line before it is one, or it
	// ends with one.
	lines := strings.Split(full, "\n")
	for i, l := range lines {
		trim := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		if trim == "" || strings.HasPrefix(trim, "#") || !regexp.MustCompile(`^[a-z_]+:`).MatchString(trim) {
			continue
		}
		prev := ""
		if i > 0 {
			prev = strings.TrimSpace(lines[i-1])
		}
		if !strings.HasPrefix(prev, "#") && !strings.HasPrefix(prev, "- #") && !strings.Contains(l, " # ") && !containers[strings.TrimSuffix(trim, ":")] {
			t.Errorf("%s:%d: %q has no comment", exampleFile, i+1, l)
		}
	}

	// Marshalled, it parses back to itself.
	out := dump(c)
	c2 := mustParse(t, out, nil)
	if dump(c2) != out {
		t.Errorf("round trip differs:\n%s\n---\n%s", out, dump(c2))
	}
}

// containers are keys that only hold others, documented by their section.
var containers = map[string]bool{"retry": true, "dlq": true, "handler": true, "analyzer": true, "pipelines": true}

// schemaKeys lists every key the decoder knows, lists written as [].
func schemaKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && t.Elem() != tierType {
		return schemaKeys(t.Elem(), prefix+"[]")
	}
	if t.Kind() != reflect.Struct || t == durationType || t == tierType {
		return nil
	}
	var keys []string
	fs := fieldsOf(t)
	for _, name := range strings.Split(fs.known, ", ") {
		k := name
		if prefix != "" {
			k = prefix + "." + name
		}
		keys = append(keys, k)
		keys = append(keys, schemaKeys(t.Field(fs.byName[name].index).Type, k)...)
	}
	return keys
}

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(exampleFile); err == nil {
		f.Add(string(data))
		f.Add(regexp.MustCompile(`(?m)^(\s*)#~ ?`).ReplaceAllString(string(data), "$1"))
	}
	f.Add(designExample)
	f.Add(pipe())
	f.Add(pipe("retry: {tiers: [1s, 1h30m], jitter: 0, max_attempts: ${N}}", "ttl: ${D}"))
	f.Add(pipe("retry: {tiers: [2000ms, 64s, ' 1.5m ', 5400s, 7200000ms]}"))
	f.Add("brokers: ${B}\npipelines: [&p {topic: t}, {<<: *p, topic: u}]\n")
	f.Add(pipe("handler: {http: {url: 'http://h/', json: {ok_field: a, ok_value: ${N}}}}") + "analyzer: {rules: [{a: ${D}}]}\n")
	f.Add(pipe("name: $${x}", "max_inflight_bytes: 1MiB"))
	f.Add(pipe("breaker: {enabled: false, failover_to: other}", "rate_limit: ${N}/m", "rate_limit_burst: ${N}", "guard: {window: ${D}, auto_resume_after: ${D}}",
		"handler: {codes: {pause: {X: ${D}}}}") + "processor: {token: '${X}'}\n")
	f.Add(pipe("breaker: {open_for: ${D}, failure_ratio: 0.1, failover_to: b, failover_retries: true}", "rate_limit: 0.001", "guard: {enabled: false}"))
	f.Add(pipe("scope: process", "max_calls_in_flight: ${N}") + "control: {topic: ops.control, status_interval: ${D}}\n")
	f.Add(pipe("scope: pipeline") + "control: {enabled: false, topic: solve.requests}\n")
	f.Add(pipe("consume: share", "max_deliveries: ${N}", "delivery: exactly-once", "ordering: key"))
	f.Add(analyzerDoc("rules:",
		"  - {name: a, pipeline: solve, action: republish, to: failover, after: 10m, max_redrives: ${N}, match: {codes: 'X, http_5*', reasons: [exhausted], classes: [transient], origins: ['solve.*'], headers: {k: v}}}",
		"  - {action: drop, match: {codes: [ERROR_WRONG_USER_KEY]}}",
		"  - {action: keep}",
		"alerts:",
		"  - {kind: rate, threshold: 0, window: ${D}, webhook: 'https://hooks.slack.com/services/T/B/x', repeat: 5m, match: {reasons: [permanent]}}",
		"  - {name: d, pipeline: hooks, kind: depth, threshold: 10, webhook: 'http://127.0.0.1:1/a?k=1'}",
		"  - {kind: oldest, age: 1h, webhook: 'http://u:p@127.0.0.1:1/'}"))
	f.Add(analyzerDoc("rules: [{action: resend, to: solve.requests.dlq, max_redrives: -1}]", "alerts: [{kind: oldest, threshold: 1, webhook: /x}]"))
	f.Add("a: &a [*a]\n")
	f.Add(pipe("handler:", "  codes: {transient: [A], request_fault: [B, '${X}', A], pause: {B: ${D}}}",
		"  http: {url: 'http://h/', poll: {url: 'http://h/?id={state}', state_field: id, resubmit: [B]}}"))
	f.Fuzz(func(t *testing.T, doc string) {
		getenv := env("N", "3", "D", "90s", "B", "h:1,h:2", "X", "${N}")
		c, err := Parse([]byte(doc), getenv)
		if err != nil {
			if c != nil {
				t.Fatalf("a config with an error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse succeeded but Validate fails: %v", err)
		}
		for _, d := range durations(c) {
			back, err := ParseDuration(d.String())
			if err != nil || back != d {
				t.Fatalf("duration %d: String %q parses back to %d, %v", int64(d), d.String(), int64(back), err)
			}
			out, err := yaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var u Duration
			if err := yaml.Unmarshal(out, &u); err != nil || u != d {
				t.Fatalf("duration %d: yaml %q reads back as %d, %v", int64(d), out, int64(u), err)
			}
		}
		// A tier's name is what its topic and redrive-tier carry: it
		// must read as its delay (Validate holds the schedule to that).
		for _, p := range c.Pipelines {
			s := p.Schedule()
			for i, d := range s.Tiers {
				if back, err := retry.ParseDelay(s.TierName(i)); err != nil || back != d {
					t.Fatalf("tier %d of %s: name %q reads as %v, %v; want %v", i, p.Name, s.TierName(i), back, err, d)
				}
			}
		}
		if _, err := yaml.Marshal(c.Redacted()); err != nil {
			t.Fatalf("yaml.Marshal: %v", err)
		}
		// Printed, it reads back as itself (when no ${ would be expanded).
		out := dump(c)
		if strings.Contains(out, "${") {
			return
		}
		c2, err := Parse([]byte(out), nil)
		if err != nil {
			t.Fatalf("the marshalled config does not parse: %v\n%s", err, out)
		}
		if out2 := dump(c2); out2 != out {
			t.Fatalf("round trip differs:\n%s\n---\n%s", out, out2)
		}
	})
}

// durations lists every Duration in c.
func durations(c *Config) []Duration {
	ds := []Duration{c.SessionTimeout, c.ShutdownGrace}
	for _, p := range c.Pipelines {
		ds = append(ds, p.TTL, p.NotReadyDeadline, p.DLQ.Retention)
		for _, t := range p.Retry.Tiers {
			ds = append(ds, t.Delay)
		}
		if p.Handler.HTTP != nil {
			ds = append(ds, p.Handler.HTTP.Timeout)
		}
		for _, d := range p.Handler.Codes.MinDelay {
			ds = append(ds, d)
		}
		for _, d := range p.Handler.Codes.Pause {
			ds = append(ds, d)
		}
		ds = append(ds, p.Breaker.Window, p.Breaker.OpenFor, p.Breaker.MaxOpen, p.Guard.Window, p.Guard.AutoResumeAfter)
	}
	for _, r := range c.Analyzer.Rules {
		ds = append(ds, r.After)
	}
	for _, a := range c.Analyzer.Alerts {
		ds = append(ds, a.Window, a.Age, a.Repeat)
	}
	return ds
}

// handler.codes.request_fault loads, converts to the handler's
// Codes.RequestFault, and its codes come back transient and marked as the
// request's fault, also when poll.resubmit lists them.
func TestRequestFaultCodes(t *testing.T) {
	c := mustParse(t, pipe(
		"handler:",
		"  http:",
		"    url: http://127.0.0.1:1/in.php",
		"    json: {ok_field: status, ok_value: 1, code_field: request}",
		"    poll: {url: 'http://127.0.0.1:1/res.php?id={state}', state_field: request, resubmit: [ERROR_CAPTCHA_UNSOLVABLE]}",
		"  codes:",
		"    transient: [ERROR_NO_SLOT_AVAILABLE]",
		"    request_fault: [ERROR_CAPTCHA_UNSOLVABLE, '${LINK_CODE}']",
		"    permanent: [ERROR_WRONG_USER_KEY]",
	), env("LINK_CODE", "http_422"))
	p := c.Pipelines[0]
	if want := []string{"ERROR_CAPTCHA_UNSOLVABLE", "http_422"}; !reflect.DeepEqual(p.Handler.Codes.RequestFault, want) {
		t.Errorf("handler.codes.request_fault = %q, want %q", p.Handler.Codes.RequestFault, want)
	}
	o := p.HTTPOptions()
	if want := []string{"ERROR_CAPTCHA_UNSOLVABLE", "http_422"}; !reflect.DeepEqual(o.Codes.RequestFault, want) ||
		!reflect.DeepEqual(o.Codes.Transient, []string{"ERROR_NO_SLOT_AVAILABLE"}) {
		t.Errorf("Codes = %+v, want RequestFault %q", o.Codes, want)
	}
	h, err := httphandler.New(o)
	if err != nil {
		t.Fatalf("httphandler.New: %v", err)
	}
	for _, tt := range []struct {
		cb           processor.Callback
		requestFault bool
	}{
		{processor.Callback{JobID: "1", Result: []byte("ERROR_CAPTCHA_UNSOLVABLE")}, true},
		{processor.Callback{JobID: "1", Error: "http_422"}, true},
		{processor.Callback{JobID: "1", Result: []byte("ERROR_NO_SLOT_AVAILABLE")}, false},
	} {
		if out := h.CallbackOutcome(tt.cb); out.Kind != processor.Transient || out.RequestFault != tt.requestFault {
			t.Errorf("callback %+v: %s, request fault %v; want transient, %v", tt.cb, out.Kind, out.RequestFault, tt.requestFault)
		}
	}
	if got := mustParse(t, pipe(), nil).Pipelines[0].HTTPOptions().Codes.RequestFault; got != nil {
		t.Errorf("request_fault left out: %q, want none", got)
	}
}

// The flow-control keys (breaker, rate_limit, rate_limit_burst,
// guard, handler.codes.pause, processor.token) reach the processor's and
// the handler's fields.
func TestFlowControlKeys(t *testing.T) {
	doc := pipe(
		"breaker: {enabled: true, failure_ratio: 0.25, min_calls: 40, consecutive: 7, window: 1m,",
		"          open_for: 10s, max_open: 2m, probes: 5, failover_to: solve-b.requests, failover_retries: true}",
		"rate_limit: 3000/m",
		"rate_limit_burst: 4",
		"guard:",
		"  enabled: yes",
		"  permanent_ratio: 0.8",
		"  min_calls: 30",
		"  window: 2m",
		"  auto_resume_after: 15m",
		"handler:",
		"  http: {url: 'http://127.0.0.1:1/solve', json: {ok_field: status, ok_value: 1, code_field: request}}",
		"  codes:",
		"    permanent: [ERROR_WRONG_USER_KEY]",
		"    pause: {ERROR_ZERO_BALANCE: 1m, ERROR_IP_BANNED: 5m}",
	) + "processor:\n  token: \"${PTOKEN}\"\n"
	c := mustParse(t, doc, env("PTOKEN", "s3cret-0123456789abcdef"))
	p := c.Pipelines[0]
	pp := p.ProcessorPipeline(nil)
	wantB := processor.Breaker{FailureRatio: 0.25, MinCalls: 40, Consecutive: 7, Window: time.Minute, OpenFor: 10 * time.Second,
		MaxOpen: 2 * time.Minute, Probes: 5, FailoverTo: "solve-b.requests", FailoverRetries: true}
	if pp.Breaker != wantB {
		t.Errorf("Breaker = %+v, want %+v", pp.Breaker, wantB)
	}
	wantG := processor.Guard{PermanentRatio: 0.8, MinCalls: 30, Window: 2 * time.Minute, AutoResumeAfter: 15 * time.Minute}
	if pp.Guard != wantG {
		t.Errorf("Guard = %+v, want %+v", pp.Guard, wantG)
	}
	if pp.RateLimit != 50 || pp.RateBurst != 4 {
		t.Errorf("RateLimit, RateBurst = %v, %d; want 50 (3000/m), 4", pp.RateLimit, pp.RateBurst)
	}
	o := p.HTTPOptions()
	if want := map[string]time.Duration{"ERROR_ZERO_BALANCE": time.Minute, "ERROR_IP_BANNED": 5 * time.Minute}; !reflect.DeepEqual(o.Codes.Pause, want) {
		t.Errorf("Codes.Pause = %v, want %v", o.Codes.Pause, want)
	}
	if _, err := httphandler.New(o); err != nil {
		t.Errorf("httphandler.New: %v", err)
	}
	if err := (processor.Config{Brokers: c.Brokers, Pipelines: []processor.Pipeline{p.ProcessorPipeline(nil)}}).WithDefaults().Validate(); err != nil {
		t.Errorf("processor.Config.Validate: %v", err)
	}
	if c.Processor.Token != "s3cret-0123456789abcdef" || c.Origin("processor.token") != "${PTOKEN} on line 20 of the file" {
		t.Errorf("processor.token = %q from %q", c.Processor.Token, c.Origin("processor.token"))
	}
	if r := c.Redacted(); r.Processor.Token != RedactedValue {
		t.Errorf("Redacted shows processor.token %q", r.Processor.Token)
	}
	// REDRIVE_PROCESSOR_TOKEN overrides the file, like the other tokens.
	c = mustParse(t, doc, env("PTOKEN", "s3cret-0123456789abcdef", EnvProcessorToken, "from-env-0123456789abcdef"))
	if c.Processor.Token != "from-env-0123456789abcdef" || c.Origin("processor.token") != "the environment (REDRIVE_PROCESSOR_TOKEN)" {
		t.Errorf("processor.token = %q from %q", c.Processor.Token, c.Origin("processor.token"))
	}

	// Every form of rate_limit, with processor.ParseRate.
	for _, r := range []struct {
		val  string
		want float64
	}{
		{"50/s", 50}, {"'50/s'", 50}, {"3000/m", 50}, {"180000/h", 50}, {"50", 50}, {"2.5", 2.5}, {"0.5/s", 0.5},
		{"0", 0}, {"~", 0}, {"'${NOPE}'", 0},
	} {
		c := mustParse(t, pipe("rate_limit: "+r.val), nil)
		if got := c.Pipelines[0].ProcessorPipeline(nil).RateLimit; got != r.want {
			t.Errorf("rate_limit: %s = %v calls/s, want %v", r.val, got, r.want)
		}
	}
}

// enabled: false turns the breaker and the guard off (Disabled); absent
// or true keeps them on. A disabled one's other keys are not checked.
func TestFlowControlEnabledKey(t *testing.T) {
	for _, tt := range []struct {
		extra          []string
		breaker, guard bool // on
	}{
		{nil, true, true},
		{[]string{"breaker: {enabled: false}", "guard: {enabled: false}"}, false, false},
		{[]string{"breaker: {enabled: false}"}, false, true},
		{[]string{"guard: {enabled: no}", "breaker: {enabled: true}"}, true, false},
		{[]string{"breaker: {enabled: ~}", "guard: {enabled: '${NOPE}'}"}, true, true},
		{[]string{"breaker: {enabled: false, failure_ratio: 2, probes: -1}", "guard: {enabled: false, permanent_ratio: 7}"}, false, false},
	} {
		c := mustParse(t, pipe(tt.extra...), nil)
		p := c.Pipelines[0]
		pp := p.ProcessorPipeline(nil).WithDefaults()
		if pp.Breaker.Disabled == tt.breaker || pp.Guard.Disabled == tt.guard {
			t.Errorf("%q: Breaker.Disabled %v, Guard.Disabled %v; want %v, %v", tt.extra, pp.Breaker.Disabled, pp.Guard.Disabled, !tt.breaker, !tt.guard)
		}
		if p.Breaker.Enabled == nil || *p.Breaker.Enabled != tt.breaker || p.Guard.Enabled == nil || *p.Guard.Enabled != tt.guard {
			t.Errorf("%q: after SetDefaults enabled is %v, %v", tt.extra, p.Breaker.Enabled, p.Guard.Enabled)
		}
		if !tt.breaker && (pp.Breaker.FailureRatio == processor.DefaultBreakerFailureRatio || pp.Breaker.MinCalls != 0) {
			t.Errorf("%q: a disabled breaker got defaults: %+v", tt.extra, pp.Breaker)
		}
	}
	// A Config built in Go: the zero Breaker and Guard are on, as in the
	// processor, before and after SetDefaults.
	g := Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{{Topic: "t"}}}
	if pp := g.Pipelines[0].ProcessorPipeline(nil); pp.Breaker.Disabled || pp.Guard.Disabled {
		t.Errorf("zero Breaker/Guard in Go are off: %+v %+v", pp.Breaker, pp.Guard)
	}
	off := false
	g.Pipelines[0].Breaker.Enabled = &off
	g.SetDefaults()
	if pp := g.Pipelines[0].ProcessorPipeline(nil); !pp.Breaker.Disabled || pp.Guard.Disabled {
		t.Errorf("Enabled: &false in Go: %+v %+v", pp.Breaker, pp.Guard)
	}
}

// Absent flow-control keys give the processor's defaults
// (processor.Pipeline.WithDefaults), and the file's view after SetDefaults
// shows the same values.
func TestFlowControlDefaultKeys(t *testing.T) {
	c := mustParse(t, pipe(), nil)
	p := c.Pipelines[0]
	pp := p.ProcessorPipeline(nil).WithDefaults()
	wantB := processor.Breaker{
		FailureRatio: processor.DefaultBreakerFailureRatio, MinCalls: processor.DefaultBreakerMinCalls,
		Consecutive: processor.DefaultBreakerConsecutive, Window: processor.DefaultBreakerWindow,
		OpenFor: processor.DefaultBreakerOpenFor, MaxOpen: processor.DefaultBreakerMaxOpen, Probes: processor.DefaultBreakerProbes,
	}
	wantG := processor.Guard{PermanentRatio: processor.DefaultGuardPermanentRatio, MinCalls: processor.DefaultGuardMinCalls, Window: processor.DefaultGuardWindow}
	if pp.Breaker != wantB || pp.Breaker != (processor.Breaker{}).WithDefaults() {
		t.Errorf("Breaker = %+v, want %+v", pp.Breaker, wantB)
	}
	if pp.Guard != wantG || pp.Guard != (processor.Guard{}).WithDefaults() {
		t.Errorf("Guard = %+v, want %+v", pp.Guard, wantG)
	}
	if pp.RateLimit != 0 || pp.RateBurst != processor.DefaultRateBurst {
		t.Errorf("RateLimit, RateBurst = %v, %d; want 0 (none), %d", pp.RateLimit, pp.RateBurst, processor.DefaultRateBurst)
	}
	// What SetDefaults wrote into the file's view converts to the same.
	if got := p.ProcessorPipeline(nil); got.Breaker != wantB || got.Guard != wantG || got.RateBurst != processor.DefaultRateBurst {
		t.Errorf("the file's view after SetDefaults: %+v %+v %d", got.Breaker, got.Guard, got.RateBurst)
	}
	if o := p.HTTPOptions(); o.Codes.Pause != nil {
		t.Errorf("Codes.Pause = %v, want none", o.Codes.Pause)
	}
	if c.Processor.Token != "" {
		t.Errorf("processor.token = %q, want none", c.Processor.Token)
	}
	// A max_open left out is at least open_for (the processor's rule).
	c = mustParse(t, pipe("breaker: {open_for: 10m}"), nil)
	if got := c.Pipelines[0].ProcessorPipeline(nil).WithDefaults().Breaker.MaxOpen; got != 10*time.Minute {
		t.Errorf("max_open with open_for 10m = %s, want 10m", got)
	}
}

// A bad flow-control value is reported at its key and line, by the
// package's own check (its FieldError is the cause) or, for a rate that
// does not parse, by the decoder.
func TestFlowControlKeyErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		doc   string
		want  []string // exactly these errors, in order
		kind  error
		field string // the processor's or the handler's FieldError.Field, if any
	}{
		{"bad rate string", pipe("concurrency: 8", "rate_limit: fast"),
			[]string{`line 5: pipelines[0].rate_limit: rate "fast": want calls per unit, e.g. 50/s or 3000/m`}, ErrType, ""},
		{"bad rate unit", pipe("rate_limit: 50/d"),
			[]string{`line 4: pipelines[0].rate_limit: rate "50/d": the unit after / must be s, m or h`}, ErrType, ""},
		{"negative rate", pipe("rate_limit: -5/s"),
			[]string{`line 4: pipelines[0].rate_limit: rate "-5/s": must not be negative`}, ErrType, ""},
		{"rate list", pipe("rate_limit: [50]"),
			[]string{`line 4: pipelines[0].rate_limit: want a rate such as 50/s, got a list`}, ErrType, ""},
		{"burst", pipe("rate_limit_burst: -1"),
			[]string{`line 4: pipelines[0].rate_limit_burst: -1: must be at least 1`}, ErrInvalid, "Pipelines[0].RateBurst"},
		{"failure_ratio 2", pipe("breaker:", "  enabled: true", "  failure_ratio: 2"),
			[]string{`line 6: pipelines[0].breaker.failure_ratio: 2: must be more than 0 and at most 1`}, ErrInvalid, "Pipelines[0].Breaker.FailureRatio"},
		{"failover_to its own topic", pipe("breaker:", "  failover_to: solve.requests"),
			[]string{`line 5: pipelines[0].breaker.failover_to: "solve.requests" is one of this pipeline's own topics; name another pipeline's main topic`}, ErrInvalid, "Pipelines[0].Breaker.FailoverTo"},
		{"failover_to its own DLQ", pipe("breaker: {failover_to: solve.requests.dlq}"),
			[]string{`line 4: pipelines[0].breaker.failover_to: "solve.requests.dlq" is one of this pipeline's own topics; name another pipeline's main topic`}, ErrInvalid, "Pipelines[0].Breaker.FailoverTo"},
		{"failover_to illegal", pipe("breaker: {failover_to: 'a b'}"),
			[]string{`line 4: pipelines[0].breaker.failover_to: "a b": a topic name uses only letters, digits, '.', '_' and '-'`}, ErrInvalid, "Pipelines[0].Breaker.FailoverTo"},
		{"failover_retries alone", pipe("breaker: {failover_retries: true}"),
			[]string{`line 4: pipelines[0].breaker.failover_retries: needs failover_to`}, ErrInvalid, "Pipelines[0].Breaker.FailoverRetries"},
		{"breaker bounds", pipe("breaker:", "  min_calls: -1", "  consecutive: -2", "  window: 500ms", "  open_for: 1m", "  max_open: 30s", "  probes: 2000"),
			[]string{
				`line 5: pipelines[0].breaker.min_calls: -1: must be at least 1`,
				`line 6: pipelines[0].breaker.consecutive: -2: must be at least 1`,
				`line 7: pipelines[0].breaker.window: 500ms: must be at least 1s`,
				`line 9: pipelines[0].breaker.max_open: 30s: must be at least open_for (1m0s)`,
				`line 10: pipelines[0].breaker.probes: 2000: must be 1 to 1000`,
			}, ErrInvalid, "Pipelines[0].Breaker.MinCalls"},
		{"guard bounds", pipe("guard:", "  permanent_ratio: 1.5", "  min_calls: -1", "  window: 10ms"),
			[]string{
				`line 5: pipelines[0].guard.permanent_ratio: 1.5: must be more than 0 and at most 1`,
				`line 6: pipelines[0].guard.min_calls: -1: must be at least 1`,
				`line 7: pipelines[0].guard.window: 10ms: must be at least 1s`,
			}, ErrInvalid, "Pipelines[0].Guard.PermanentRatio"},
		{"auto_resume_after negative", pipe("guard: {auto_resume_after: -1m}"),
			[]string{`line 4: pipelines[0].guard.auto_resume_after: bad duration "-1m": negative`}, ErrType, ""},
		{"enabled not a bool", pipe("breaker: {enabled: maybe}"),
			[]string{`line 4: pipelines[0].breaker.enabled: want true or false, got "maybe"`}, ErrType, ""},
		{"pause 0s", pipe("handler:", "  codes:", "    pause:", "      ERROR_IP_BANNED: 5m", "      ERROR_ZERO_BALANCE: 0s"),
			[]string{`line 8: pipelines[0].handler.codes.pause.ERROR_ZERO_BALANCE: 0s: must be 1s to 24h`}, ErrInvalid, "Codes.Pause"},
		{"pause above 24h, a key with a dot", pipe("handler: {codes: {pause: {'A.B': 25h}}}"),
			[]string{`line 4: pipelines[0].handler.codes.pause["A.B"]: 25h0m0s: must be 1s to 24h`}, ErrInvalid, "Codes.Pause"},
		{"pause code in another list", pipe("handler:", "  codes:", "    permanent: [ERROR_ZERO_BALANCE]", "    pause: {ERROR_ZERO_BALANCE: 1m}"),
			[]string{`line 7: pipelines[0].handler.codes.pause.ERROR_ZERO_BALANCE: "ERROR_ZERO_BALANCE" is in permanent too; a code has one class`}, ErrInvalid, "Codes.Pause"},
		{"pause not a duration", pipe("handler: {codes: {pause: {X: soon}}}"),
			[]string{`line 4: pipelines[0].handler.codes.pause.X: bad duration "soon": want e.g. 30s, 5m, 1h30m or 0`}, ErrType, ""},
		{"unknown breaker key", pipe("breaker: {ratio: 0.5}"),
			[]string{`line 4: pipelines[0].breaker.ratio: unknown key (known: enabled, failure_ratio, min_calls, consecutive, window, open_for, max_open, probes, failover_to, failover_retries)`}, ErrUnknownKey, ""},
		{"unknown guard key", pipe("guard: {ratio: 0.5}"),
			[]string{`line 4: pipelines[0].guard.ratio: unknown key (known: enabled, permanent_ratio, min_calls, window, auto_resume_after)`}, ErrUnknownKey, ""},
		{"unknown processor key", pipe() + "processor:\n  tokn: x\n",
			[]string{`line 5: processor.tokn: unknown key (known: token)`}, ErrUnknownKey, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, nil)
			if got := err.Error(); got != strings.Join(tt.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s", got, strings.Join(tt.want, "\n"))
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error is not %v: %v", tt.kind, err)
			}
			var fe *processor.FieldError
			if tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field) {
				t.Errorf("cause: %#v, want a FieldError of %s", fe, tt.field)
			}
		})
	}
}
