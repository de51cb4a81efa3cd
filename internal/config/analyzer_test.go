package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
)

// analyzerDoc is a valid file with two pipelines and the analyzer lines given.
func analyzerDoc(lines ...string) string {
	doc := "brokers: [h:1]\npipelines:\n  - {name: solve, topic: solve.requests}\n  - {name: hooks, topic: hooks.out}\nanalyzer:\n"
	for _, l := range lines {
		doc += "  " + l + "\n"
	}
	return doc
}

func TestAnalyzerParse(t *testing.T) {
	doc := analyzerDoc(
		"rules:",
		"  - match: {codes: 'ERROR_NO_SLOT_AVAILABLE, http_5*', reasons: [exhausted], headers: {X-Tenant: acme}}",
		"    action: republish",
		"    after: 10m",
		"  - name: failover",
		"    pipeline: solve",
		"    match: {classes: [permanent], origins: ['solve.*']}",
		"    action: republish",
		"    to: solve.failover",
		"    max_redrives: 1",
		"  - {action: drop, match: {codes: [ERROR_WRONG_USER_KEY]}}",
		"alerts:",
		"  - {kind: rate, threshold: 0, window: 1m, webhook: '${HOOK}', match: {reasons: [permanent]}}",
		"  - {name: deep, pipeline: hooks, kind: depth, threshold: 10, webhook: 'http://127.0.0.1:1/alert', repeat: 5m}",
		"  - {kind: oldest, age: 1h, webhook: 'http://127.0.0.1:1/alert'}",
	)
	c := mustParse(t, doc, env("HOOK", "https://hooks.slack.com/services/T/B/x"))
	wantRules := []AnalyzerRule{
		{Name: "rule-1", Match: RuleMatch{Codes: []string{"ERROR_NO_SLOT_AVAILABLE", "http_5*"}, Reasons: []string{"exhausted"}, Headers: map[string]string{"X-Tenant": "acme"}},
			Action: ActionRepublish, After: dur("10m"), MaxRedrives: DefaultMaxRedrives},
		{Name: "failover", Pipeline: "solve", Match: RuleMatch{Classes: []string{"permanent"}, Origins: []string{"solve.*"}},
			Action: ActionRepublish, To: "solve.failover", MaxRedrives: 1},
		{Name: "rule-3", Match: RuleMatch{Codes: []string{"ERROR_WRONG_USER_KEY"}}, Action: ActionDrop},
	}
	if !reflect.DeepEqual(c.Analyzer.Rules, wantRules) {
		t.Errorf("rules:\n%#v\nwant\n%#v", c.Analyzer.Rules, wantRules)
	}
	wantAlerts := []AlertRule{
		{Name: "alert-1", Kind: AlertRate, ThresholdSet: true, Window: dur("1m"), Webhook: "https://hooks.slack.com/services/T/B/x",
			Repeat: dur("1h"), Match: RuleMatch{Reasons: []string{"permanent"}}},
		{Name: "deep", Pipeline: "hooks", Kind: AlertDepth, Threshold: 10, ThresholdSet: true, Webhook: "http://127.0.0.1:1/alert", Repeat: dur("5m")},
		{Name: "alert-3", Kind: AlertOldest, Age: dur("1h"), Webhook: "http://127.0.0.1:1/alert", Repeat: dur("1h")},
	}
	if !reflect.DeepEqual(c.Analyzer.Alerts, wantAlerts) {
		t.Errorf("alerts:\n%#v\nwant\n%#v", c.Analyzer.Alerts, wantAlerts)
	}
	// SetDefaults is idempotent and Validate agrees.
	before := dump(c)
	c.SetDefaults()
	if dump(c) != before {
		t.Errorf("SetDefaults changed a parsed config")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// Printed and read back, it is the same.
	if c2 := mustParse(t, dump(c), nil); dump(c2) != dump(c) {
		t.Errorf("round trip differs:\n%s\n---\n%s", dump(c), dump(c2))
	}
}

func TestAnalyzerValidationErrors(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"no action", []string{"rules:", "  - match: {codes: [X]}"}, []string{"line 7: analyzer.rules[0].action: required: republish, keep or drop"}},
		{"bad action", []string{"rules: [{action: resend}]"}, []string{`line 6: analyzer.rules[0].action: "resend": want republish, keep or drop`}},
		{"action case", []string{"rules: [{action: Republish}]"}, []string{`analyzer.rules[0].action: "Republish"`}},
		{"duplicate names", []string{"rules:", "  - {name: a, action: keep}", "  - {name: a, action: drop}"}, []string{`line 8: analyzer.rules[1].name: "a" is also the name of analyzer.rules[0]`}},
		{"default name taken", []string{"rules:", "  - {name: rule-2, action: keep}", "  - {action: drop}"}, []string{`line 8: analyzer.rules[1].name: "rule-2" is also the name of analyzer.rules[0]`}},
		{"illegal name", []string{"rules: [{name: 'my rule', action: keep}]"}, []string{`analyzer.rules[0].name: "my rule": use letters`}},
		{"unknown pipeline", []string{"rules: [{pipeline: nope, action: keep}]"}, []string{`analyzer.rules[0].pipeline: "nope": no pipeline has this name (pipelines: hooks, solve)`}},
		{"to with keep", []string{"rules: [{action: keep, to: x, after: 1m, max_redrives: 2}]"}, []string{
			"analyzer.rules[0].to: only with action: republish (this rule's action is keep)", "analyzer.rules[0].after: only with", "analyzer.rules[0].max_redrives: only with"}},
		{"to illegal", []string{"rules: [{action: republish, to: 'a b'}]"}, []string{"analyzer.rules[0].to: \"a b\": a topic name uses only"}},
		{"to is the dlq", []string{"rules: [{action: republish, to: solve.requests.dlq}]"}, []string{`analyzer.rules[0].to: "solve.requests.dlq" is the DLQ of pipelines[0]`}},
		{"to is another pipeline's dlq", []string{"rules: [{pipeline: hooks, action: republish, to: hooks.out.dlq}]"}, []string{`"hooks.out.dlq" is the DLQ of pipelines[1]`}},
		{"max_redrives negative", []string{"rules: [{action: republish, max_redrives: -1}]"}, []string{"analyzer.rules[0].max_redrives: -1: must not be negative (0: the default, 3)"}},
		{"bad reason", []string{"rules:", "  - action: keep", "    match:", "      reasons: [exhausted, tired]"}, []string{`line 9: analyzer.rules[0].match.reasons[1]: unknown dead-letter reason "tired": want exhausted, permanent, invalid, expired or crashed`}},
		{"bad class", []string{"rules: [{action: keep, match: {classes: [retryable]}}]"}, []string{`analyzer.rules[0].match.classes[0]: unknown error class "retryable": want transient`}},
		{"empty class", []string{"rules: [{action: keep, match: {classes: ['']}}]"}, []string{`analyzer.rules[0].match.classes[0]: unknown error class "": want`}},
		{"empty code", []string{"rules: [{action: keep, match: {codes: [X, '']}}]"}, []string{"analyzer.rules[0].match.codes[1]: empty code"}},
		{"bad origin", []string{"rules: [{action: keep, match: {origins: ['a b', 'c d*', '']}}]"}, []string{
			"analyzer.rules[0].match.origins[0]: \"a b\": a topic name", "match.origins[1]: \"c d*\": a topic prefix", "match.origins[2]: empty topic"}},
		{"empty header name", []string{"rules: [{action: keep, match: {headers: {'': x}}}]"}, []string{"analyzer.rules[0].match.headers: empty header name"}},

		{"alert no kind", []string{"alerts: [{webhook: 'http://h/'}]"}, []string{"line 6: analyzer.alerts[0].kind: required: rate, depth or oldest"}},
		{"alert bad kind", []string{"alerts: [{kind: lag, webhook: 'http://h/'}]"}, []string{`analyzer.alerts[0].kind: "lag": want rate, depth or oldest`}},
		{"rate needs threshold and window", []string{"alerts:", "  - kind: rate", "    webhook: 'http://h/'"}, []string{
			"line 7: analyzer.alerts[0].threshold: required with kind: rate", "line 7: analyzer.alerts[0].window: required with kind: rate"}},
		{"rate with age", []string{"alerts: [{kind: rate, threshold: 1, window: 1m, age: 1h, webhook: 'http://h/'}]"}, []string{"analyzer.alerts[0].age: only with kind: oldest (this alert's kind is rate)"}},
		{"rate bad match", []string{"alerts: [{kind: rate, threshold: 1, window: 1m, webhook: 'http://h/', match: {reasons: [x]}}]"}, []string{`analyzer.alerts[0].match.reasons[0]: unknown dead-letter reason "x"`}},
		{"negative threshold", []string{"alerts: [{kind: depth, threshold: -1, webhook: 'http://h/'}]"}, []string{"analyzer.alerts[0].threshold: -1: must not be negative"}},
		{"depth needs threshold", []string{"alerts: [{kind: depth, webhook: 'http://h/'}]"}, []string{"analyzer.alerts[0].threshold: required with kind: depth"}},
		{"depth with window and match", []string{"alerts: [{kind: depth, threshold: 1, window: 1m, match: {codes: [X]}, webhook: 'http://h/'}]"}, []string{
			"analyzer.alerts[0].window: only with kind: rate", "analyzer.alerts[0].match: only with kind: rate"}},
		{"oldest needs age", []string{"alerts: [{kind: oldest, webhook: 'http://h/'}]"}, []string{"analyzer.alerts[0].age: required with kind: oldest"}},
		{"oldest with threshold", []string{"alerts: [{kind: oldest, age: 1h, threshold: 3, window: 1m, webhook: 'http://h/'}]"}, []string{
			"analyzer.alerts[0].threshold: only with kind: rate or depth", "analyzer.alerts[0].window: only with kind: rate"}},
		{"no webhook", []string{"alerts: [{kind: oldest, age: 1h, webhook: '${NOPE}'}]"}, []string{"analyzer.alerts[0].webhook: required"}},
		{"relative webhook", []string{"alerts: [{kind: oldest, age: 1h, webhook: /alert}]"}, []string{`analyzer.alerts[0].webhook: "[redacted]": want an absolute http:// or https:// URL`}},
		{"webhook secret not echoed", []string{"alerts: [{kind: oldest, age: 1h, webhook: 'ftp://hooks.example/T0/s3cr3t'}]"}, []string{`"ftp://hooks.example/[redacted]": want an absolute`}},
		{"alert names", []string{"alerts:", "  - {name: x, kind: oldest, age: 1h, webhook: 'http://h/'}", "  - {name: x, kind: oldest, age: 1h, webhook: 'http://h/'}"}, []string{
			`line 8: analyzer.alerts[1].name: "x" is also the name of analyzer.alerts[0]`}},
		{"alert pipeline", []string{"alerts: [{pipeline: nope, kind: oldest, age: 1h, webhook: 'http://h/'}]"}, []string{`analyzer.alerts[0].pipeline: "nope": no pipeline`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := analyzerDoc(tt.lines...)
			err := parseErr(t, doc, nil)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v\n--- file:\n%s", w, err, doc)
				}
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error shows the webhook's secret: %v", err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error is not ErrInvalid: %v", err)
			}
		})
	}

	// A Config built in Go: threshold 0 needs ThresholdSet.
	c := Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{{Topic: "t"}},
		Analyzer: Analyzer{Alerts: []AlertRule{{Kind: AlertDepth, Webhook: "http://h/"}}, Rules: []AnalyzerRule{{Action: ActionKeep}}}}
	c.SetDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "analyzer.alerts[0].threshold: required") {
		t.Errorf("Validate = %v", err)
	}
	c.Analyzer.Alerts[0].ThresholdSet = true
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with ThresholdSet = %v", err)
	}
	if c.Analyzer.Rules[0].Name != "rule-1" || c.Analyzer.Alerts[0].Name != "alert-1" || c.Analyzer.Alerts[0].Repeat != dur("1h") {
		t.Errorf("defaults: %+v %+v", c.Analyzer.Rules[0], c.Analyzer.Alerts[0])
	}
}

func TestAnalyzerUnknownKeys(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  string
	}{
		{"rule", []string{"rules:", "  - action: keep", "    matches: {}"}, "line 8: analyzer.rules[0].matches: unknown key (known: name, pipeline, match, action, to, after, max_redrives)"},
		{"rule match", []string{"rules: [{action: keep, match: {code: [X]}}]"}, "line 6: analyzer.rules[0].match.code: unknown key (known: codes, reasons, classes, origins, headers)"},
		{"alert", []string{"alerts: [{kind: oldest, age: 1h, webhook: 'http://h/', threshhold: 1}]"}, "analyzer.alerts[0].threshhold: unknown key (known: name, pipeline, kind, threshold, window, age, webhook, repeat, match)"},
		{"alert match", []string{"alerts: [{kind: rate, threshold: 1, window: 1m, webhook: 'http://h/', match: {key: x}}]"}, "analyzer.alerts[0].match.key: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, analyzerDoc(tt.lines...), nil)
			if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrUnknownKey) {
				t.Errorf("error does not contain %q:\n%v", tt.want, err)
			}
		})
	}
	// Wrong types name the key too.
	err := parseErr(t, analyzerDoc("rules: [{action: [keep], max_redrives: lots, after: soon, match: x}]"), nil)
	for _, w := range []string{"analyzer.rules[0].action: want a string", "analyzer.rules[0].max_redrives: want a whole number", "analyzer.rules[0].after: bad duration", "analyzer.rules[0].match: want a mapping"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), "action: required") {
		t.Errorf("a key with a decoding error is also reported as missing:\n%v", err)
	}
}

func TestAnalyzerValid(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
	}{
		{"catch-all", []string{"rules: [{action: keep}]"}},
		{"null match", []string{"rules: [{action: drop, match: ~}]"}},
		{"wildcards", []string{"rules: [{action: keep, match: {codes: ['*', 'http_5*'], origins: ['*', 'solve.*']}}]"}},
		{"every reason and class", []string{"rules: [{action: keep, match: {reasons: [exhausted, permanent, invalid, expired, crashed], classes: [transient, not-ready, permanent, invalid, expired]}}]"}},
		{"republish to another topic", []string{"rules: [{action: republish, to: solve.requests, max_redrives: 0}]"}},
		{"republish to another pipeline's dlq", []string{"rules: [{pipeline: solve, action: republish, to: hooks.out.dlq}]"}},
		{"rate threshold 0", []string{"alerts: [{kind: rate, threshold: 0, window: 30s, webhook: 'https://h.example/x?token=1'}]"}},
		{"depth threshold 0", []string{"alerts: [{kind: depth, threshold: 0, webhook: 'http://127.0.0.1:1'}]"}},
		{"rules and alerts share a name", []string{"rules: [{name: x, action: keep}]", "alerts: [{name: x, kind: oldest, age: 1m, webhook: 'http://h/'}]"}},
		{"empty lists", []string{"rules: []", "alerts: []"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, analyzerDoc(tt.lines...), nil)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate again: %v", err)
			}
		})
	}
}

func TestRedactedURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"https://hooks.slack.com/services/T0/B0/XYZ", "https://hooks.slack.com/[redacted]"},
		{"https://alerts.example?token=s", "https://alerts.example/[redacted]"},
		{"https://u:p@alerts.example/", "https://alerts.example/[redacted]"},
		{"https://alerts.example/#frag", "https://alerts.example/[redacted]"},
		{"http://127.0.0.1:9099", "http://127.0.0.1:9099"},
		{"http://127.0.0.1:9099/", "http://127.0.0.1:9099/"},
		{"/relative/secret", "[redacted]"},
		{"http://[::1", "[redacted]"},
		{"not a url with s3cret", "[redacted]"},
	}
	for _, tt := range tests {
		if got := RedactedURL(tt.in); got != tt.want {
			t.Errorf("RedactedURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRedactedWebhooks(t *testing.T) {
	doc := analyzerDoc("alerts:",
		"  - {kind: oldest, age: 1h, webhook: '${HOOK}'}",
		"  - {kind: oldest, age: 1h, webhook: 'https://user:pw@alerts.example/hook?key=s3cr3t-2'}")
	c := mustParse(t, doc, env("HOOK", "https://hooks.slack.com/services/T0/B0/s3cr3t-1"))
	before := dump(c)
	r := c.Redacted()
	out := dump(&r)
	for _, secret := range []string{"s3cr3t", "T0/B0", "user:pw", "key="} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted config shows %q:\n%s", secret, out)
		}
	}
	if r.Analyzer.Alerts[0].Webhook != "https://hooks.slack.com/[redacted]" {
		t.Errorf("webhook = %q", r.Analyzer.Alerts[0].Webhook)
	}
	if dump(c) != before {
		t.Errorf("Redacted changed the original")
	}
}

func TestExampleFileAnalyzer(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	full := regexp.MustCompile(`(?m)^(\s*)#~ ?`).ReplaceAllString(string(data), "$1")
	c := mustParse(t, full, exampleEnv)
	a := c.Analyzer
	if len(a.Rules) != 4 || len(a.Alerts) != 4 {
		t.Fatalf("%d rules, %d alerts", len(a.Rules), len(a.Alerts))
	}
	if r := a.Rules[2]; r.Name != "webhooks-priority" || r.Action != ActionRepublish || r.After != dur("1h") || r.MaxRedrives != 5 || r.Match.Headers["x-priority"] != "high" {
		t.Errorf("rules[2] = %+v", r)
	}
	if al := a.Alerts[1]; al.Kind != AlertRate || al.Threshold != 0 || !al.ThresholdSet || al.Webhook != exampleWebhook || al.Repeat != dur("1h") {
		t.Errorf("alerts[1] = %+v", al)
	}
	if r := c.Redacted(); strings.Contains(dump(&r), "s3cr3t") {
		t.Errorf("the example's webhook shows in Redacted")
	}
}

// The configuration accepts what dlq knows, and dlq.CompileRules takes
// what the configuration accepts (moved from dlq, which no longer imports
// this package).
func TestAnalyzerRulesCompile(t *testing.T) {
	var reasons []string
	for _, r := range dlq.Reasons {
		reasons = append(reasons, string(r))
	}
	doc := fmt.Sprintf(`brokers: [h:1]
pipelines: [{name: solve, topic: solve.requests}]
analyzer:
  rules:
    - {name: every-reason, action: keep, match: {reasons: [%s], classes: [transient, not-ready, permanent, invalid, expired]}}
    - {pipeline: solve, action: republish, after: 10m, match: {codes: ['http_5*'], headers: {plan: free, "a=b": c}}}
    - {action: drop}
  alerts:
    - {kind: rate, threshold: 1, window: 1m, webhook: 'http://h/', match: {origins: ['solve.*'], headers: {plan: free}}}
`, strings.Join(reasons, ", "))
	c, err := Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := dlq.CompileRules(c.Analyzer.RuleSpecs())
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 3 || rules[1].Name != "rule-2" || rules[1].MaxRedrives != dlq.DefaultMaxRedrives || rules[1].After != 10*time.Minute || rules[2].Action != dlq.ActionDrop {
		t.Errorf("rules = %+v", rules)
	}
	if h := rules[1].Match.Headers; len(h) != 2 || h["plan"] != "free" || h["a=b"] != "c" {
		t.Errorf("headers = %v (a name may hold \"=\")", h)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := &dlq.DeadLetter{Timestamp: t0, Code: "http_503", UserHeaders: []kgo.RecordHeader{{Key: "plan", Value: []byte("free")}, {Key: "a=b", Value: []byte("c")}}}
	if got := dlq.Decide(dlq.RulesFor(rules, "solve")[1:], d, "solve.requests"); got.Action != dlq.ActionRepublish || !got.NotBefore.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("Decide = %+v", got)
	}
	f, err := c.Analyzer.Alerts[0].Match.Filter()
	if err != nil || len(f.Origins) != 1 || f.Headers["plan"] != "free" {
		t.Errorf("alert match = %+v, %v", f, err)
	}
	if DefaultMaxRedrives != dlq.DefaultMaxRedrives {
		t.Errorf("DefaultMaxRedrives %d, dlq's %d", DefaultMaxRedrives, dlq.DefaultMaxRedrives)
	}
}
