package dlq

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

func TestDecide(t *testing.T) {
	const main = "solve.requests"
	noSlot := spec{code: "ERROR_NO_SLOT_AVAILABLE", class: retry.ClassTransient}
	republish := func(name string, f Filter) Rule { return Rule{Name: name, Match: f, Action: ActionRepublish} }
	tests := []struct {
		name  string
		rules []Rule
		d     spec
		want  Decision
	}{
		{"no rules keep", nil, noSlot, Decision{Action: ActionKeep}},
		{"no match keeps", []Rule{republish("r", Filter{Codes: []string{"http_503"}})}, noSlot, Decision{Action: ActionKeep}},
		{"republish to the main topic", []Rule{republish("r", Filter{})}, noSlot, Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"republish to another topic", []Rule{{Name: "r", Action: ActionRepublish, To: "solve.failover"}}, noSlot,
			Decision{Rule: "r", Action: ActionRepublish, Topic: "solve.failover"}},
		{"after sets not-before", []Rule{{Name: "r", Action: ActionRepublish, After: 10 * time.Minute}}, noSlot,
			Decision{Rule: "r", Action: ActionRepublish, Topic: main, NotBefore: t0.Add(10 * time.Minute)}},
		{"keep", []Rule{{Name: "k", Action: ActionKeep}}, noSlot, Decision{Rule: "k", Action: ActionKeep}},
		{"drop", []Rule{{Name: "d", Action: ActionDrop, To: "ignored", After: time.Hour}}, noSlot, Decision{Rule: "d", Action: ActionDrop}},
		{"first match wins", []Rule{{Name: "d", Action: ActionDrop}, republish("r", Filter{})}, noSlot, Decision{Rule: "d", Action: ActionDrop}},
		{"order matters", []Rule{republish("r", Filter{}), {Name: "d", Action: ActionDrop}}, noSlot, Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"a non-matching rule is skipped", []Rule{{Name: "d", Match: Filter{Reasons: []string{"permanent"}}, Action: ActionDrop}, republish("r", Filter{})}, noSlot,
			Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"code", []Rule{republish("r", Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}})}, noSlot, Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"code prefix", []Rule{republish("r", Filter{Codes: []string{"http_5*"}})}, spec{code: "http_502"}, Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"reason", []Rule{{Name: "d", Match: Filter{Reasons: []string{"permanent"}}, Action: ActionDrop}}, spec{reason: ReasonPermanent}, Decision{Rule: "d", Action: ActionDrop}},
		{"reason no match", []Rule{{Name: "d", Match: Filter{Reasons: []string{"permanent"}}, Action: ActionDrop}}, noSlot, Decision{Action: ActionKeep}},
		{"class", []Rule{{Name: "d", Match: Filter{Classes: []string{"transient", "not-ready"}}, Action: ActionDrop}}, noSlot, Decision{Rule: "d", Action: ActionDrop}},
		{"class no match", []Rule{{Name: "d", Match: Filter{Classes: []string{"permanent"}}, Action: ActionDrop}}, noSlot, Decision{Action: ActionKeep}},
		{"origin", []Rule{{Name: "d", Match: Filter{Origins: []string{"solve.requests"}}, Action: ActionDrop}}, noSlot, Decision{Rule: "d", Action: ActionDrop}},
		{"origin no match", []Rule{{Name: "d", Match: Filter{Origins: []string{"captcha.*"}}, Action: ActionDrop}}, noSlot, Decision{Action: ActionKeep}},
		{"header", []Rule{{Name: "d", Match: Filter{Headers: map[string]string{"plan": "free"}}, Action: ActionDrop}},
			spec{user: []kgo.RecordHeader{hdr("Plan", "free")}}, Decision{Rule: "d", Action: ActionDrop}},
		{"header other value", []Rule{{Name: "d", Match: Filter{Headers: map[string]string{"plan": "free"}}, Action: ActionDrop}},
			spec{user: []kgo.RecordHeader{hdr("plan", "enterprise")}}, Decision{Action: ActionKeep}},
		{"redrive header", []Rule{{Name: "d", Match: Filter{Headers: map[string]string{"redrive-instance": "pod-1"}}, Action: ActionDrop}}, noSlot,
			Decision{Rule: "d", Action: ActionDrop}},
		{"all fields and", []Rule{{Name: "d", Match: Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}, Reasons: []string{"exhausted"}, Classes: []string{"transient"},
			Origins: []string{"solve.requests"}, Headers: map[string]string{"plan": "free"}}, Action: ActionDrop}},
			spec{code: "ERROR_NO_SLOT_AVAILABLE", class: retry.ClassTransient, user: []kgo.RecordHeader{hdr("plan", "free")}}, Decision{Rule: "d", Action: ActionDrop}},
		{"all fields, one off", []Rule{{Name: "d", Match: Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}, Reasons: []string{"exhausted"}, Classes: []string{"transient"},
			Origins: []string{"solve.requests"}, Headers: map[string]string{"plan": "free"}}, Action: ActionDrop}}, noSlot, Decision{Action: ActionKeep}},
		{"below the default cap", []Rule{republish("r", Filter{})}, spec{redrives: 2}, Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"at the default cap parks", []Rule{republish("r", Filter{})}, spec{redrives: 3}, Decision{Rule: "r", Action: ActionPark}},
		{"at a set cap parks", []Rule{{Name: "r", Action: ActionRepublish, MaxRedrives: 1, After: time.Hour}}, spec{redrives: 1}, Decision{Rule: "r", Action: ActionPark}},
		{"below a set cap", []Rule{{Name: "r", Action: ActionRepublish, MaxRedrives: 5}}, spec{redrives: 4}, Decision{Rule: "r", Action: ActionRepublish, Topic: main}},
		{"a parked dead letter does not fall through", []Rule{{Name: "r", Action: ActionRepublish, MaxRedrives: 1}, republish("other", Filter{})}, spec{redrives: 1},
			Decision{Rule: "r", Action: ActionPark}},
		{"the cap is only for republish", []Rule{{Name: "k", Action: ActionKeep, MaxRedrives: 1}}, spec{redrives: 9}, Decision{Rule: "k", Action: ActionKeep}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.rules, tt.d.build(t), main); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := Decide([]Rule{{Action: ActionDrop}}, nil, main); got != (Decision{}) || got.Action != ActionNone {
		t.Errorf("Decide(nil) = %+v", got)
	}
}

func TestDecisionDue(t *testing.T) {
	d := Decide([]Rule{{Name: "r", Action: ActionRepublish, After: 10 * time.Minute}}, spec{}.build(t), "m")
	if d.Due(t0.Add(10*time.Minute-time.Millisecond)) || !d.Due(t0.Add(10*time.Minute)) {
		t.Errorf("Due around %v wrong", d.NotBefore)
	}
	if !(Decision{Action: ActionRepublish}).Due(t0) {
		t.Errorf("a decision without NotBefore is not due")
	}
}

func TestRulesFor(t *testing.T) {
	rules := []Rule{{Name: "all"}, {Name: "solve", Pipeline: "solve"}, {Name: "hooks", Pipeline: "hooks"}, {Name: "all2"}}
	names := func(rs []Rule) (out []string) {
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	if got := names(RulesFor(rules, "solve")); !slices.Equal(got, []string{"all", "solve", "all2"}) {
		t.Errorf("RulesFor(solve) = %v", got)
	}
	if got := names(RulesFor(rules, "other")); !slices.Equal(got, []string{"all", "all2"}) {
		t.Errorf("RulesFor(other) = %v", got)
	}
}

func TestCompileRules(t *testing.T) {
	rules, err := CompileRules([]RuleSpec{
		{Name: "no-slot", Pipeline: "solve", Match: map[string][]string{"codes": {"ERROR_NO_SLOT_AVAILABLE"}, "reasons": {"exhausted"},
			"classes": {"transient"}, "origins": {"solve.*"}, "headers.plan": {"free"}},
			Action: "republish", To: "solve.failover", After: 10 * time.Minute, MaxRedrives: 2},
		{Action: "republish"},
		{Action: "drop"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Name: "no-slot", Pipeline: "solve", Match: Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}, Reasons: []string{"exhausted"},
			Classes: []string{"transient"}, Origins: []string{"solve.*"}, Headers: map[string]string{"plan": "free"}},
			Action: ActionRepublish, To: "solve.failover", After: 10 * time.Minute, MaxRedrives: 2},
		{Name: "rule-2", Action: ActionRepublish, MaxRedrives: DefaultMaxRedrives},
		{Name: "rule-3", Action: ActionDrop},
	}
	if fmt.Sprintf("%+v", rules) != fmt.Sprintf("%+v", want) {
		t.Errorf("CompileRules =\n%+v\nwant\n%+v", rules, want)
	}
	if rules, err := CompileRules(nil); err != nil || len(rules) != 0 {
		t.Errorf("CompileRules(nil) = %v, %v", rules, err)
	}

	bad := []struct {
		name  string
		rules []RuleSpec
		want  []string
	}{
		{"no action", []RuleSpec{{Name: "x"}}, []string{`rules[0] ("x"): action: required: republish, keep or drop`}},
		{"park is not an action", []RuleSpec{{Action: "park"}}, []string{`rules[0] ("rule-1"): action: "park": want republish, keep or drop`}},
		{"duplicate", []RuleSpec{{Name: "rule-2", Action: "keep"}, {Action: "keep"}}, []string{`rules[1] ("rule-2"): name: also that of rules[0]`}},
		{"bad match", []RuleSpec{{Action: "keep", Match: map[string][]string{"reasons": {"tired"}, "classes": {"fatal"}, "codes": {""}}}}, []string{
			`rules[0] ("rule-1"): match.reasons[0]: unknown dead-letter reason "tired"`, `match.classes[0]: unknown error class "fatal"`, "match.codes[0]: empty code"}},
		{"time bounds", []RuleSpec{{Action: "keep", Match: map[string][]string{"since": {"1h"}}}}, []string{"match.since: a rule's match takes no time bounds"}},
		{"unknown match key", []RuleSpec{{Action: "keep", Match: map[string][]string{"colour": {"red"}}}}, []string{"match.colour: unknown filter key"}},
		{"to with drop", []RuleSpec{{Action: "drop", To: "x"}}, []string{"to: only with action: republish (this rule's action is drop)"}},
		{"negative", []RuleSpec{{Action: "republish", MaxRedrives: -1, After: -1}}, []string{"max_redrives: -1: must not be negative", "after: -1ns: must not be negative"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			rules, err := CompileRules(tt.rules)
			if rules != nil || err == nil || !errors.Is(err, ErrBadRule) {
				t.Fatalf("CompileRules = %v, %v", rules, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// CompileRule's problems name the field and the value's index, so that a
// configuration loader can point at the line.
func TestCompileRuleFieldErrors(t *testing.T) {
	_, errs := CompileRule(RuleSpec{Action: "keep", To: "x", Match: map[string][]string{"reasons": {"exhausted", "tired"}, "headers.": {"x"}}})
	var got []string
	for _, e := range errs {
		got = append(got, e.Path()+" | "+e.Msg)
		if !errors.Is(e, ErrBadRule) {
			t.Errorf("%v is not ErrBadRule", e)
		}
	}
	want := []string{
		`match.reasons[1] | unknown dead-letter reason "tired": want exhausted, permanent, invalid, expired or crashed`,
		"match.headers | empty header name",
		"to | only with action: republish (this rule's action is keep)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems\n%q\nwant\n%q", got, want)
	}
}

// A republished dead letter comes back with its key, value and user
// headers, redrives + 1 and a fresh attempt count; when it dies again its
// redrives survive the DLQ, and at the cap the rule parks it.
func TestRepublishRoundTrip(t *testing.T) {
	rules := []Rule{{Name: "no-slot", Match: Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}}, Action: ActionRepublish, After: 10 * time.Minute, MaxRedrives: 2}}
	user := []kgo.RecordHeader{hdr("idempotency-key", "req-1"), hdr("plan", "free")}
	d := spec{code: "ERROR_NO_SLOT_AVAILABLE", class: retry.ClassTransient, key: "user-7", user: user, style: StyleSpring}.build(t)
	for round := 0; ; round++ {
		dec := Decide(rules, d, "solve.requests")
		if round == 2 {
			if dec.Action != ActionPark || dec.Rule != "no-slot" {
				t.Fatalf("round %d: %+v; want parked at max_redrives 2", round, dec)
			}
			return
		}
		if dec.Action != ActionRepublish || dec.Topic != "solve.requests" || !dec.NotBefore.Equal(d.Timestamp.Add(10*time.Minute)) {
			t.Fatalf("round %d: %+v", round, dec)
		}
		rec, err := Republish(d, dec.Topic)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(rec)
		if !errors.Is(err, ErrNotDeadLetter) {
			t.Fatalf("round %d: the republished record reads as a dead letter: %v", round, err)
		}
		if back.Redrives != round+1 || back.Attempt != 0 || back.Polls != 0 || back.Code != "" || back.Class != "" || back.Error != "" ||
			back.Reason != "" || back.Group != "" || !back.FirstErrorAt.IsZero() {
			t.Errorf("round %d: republished %+v; want redrives %d and nothing of the failure", round, back, round+1)
		}
		if back.ID != d.ID || back.OriginTopic != d.OriginTopic || back.OriginOffset != d.OriginOffset || !back.OriginTimestamp.Equal(d.OriginTimestamp) {
			t.Errorf("round %d: id/origin changed: %+v", round, back)
		}
		if rec.Topic != "solve.requests" || !bytes.Equal(rec.Key, []byte("user-7")) || !bytes.Equal(rec.Value, d.Value) {
			t.Errorf("round %d: topic/key/value %s %q %q", round, rec.Topic, rec.Key, rec.Value)
		}
		if fmt.Sprint(back.UserHeaders) != fmt.Sprint(user) {
			t.Errorf("round %d: user headers %v, want %v (no compatibility headers)", round, back.UserHeaders, user)
		}
		// The processor fails it again and dead-letters it once more.
		m, hs, err := retry.Decode(rec.Headers)
		if err != nil {
			t.Fatal(err)
		}
		m.Attempt, m.ErrorCode, m.ErrorClass, m.Error, m.Reason = 4, "ERROR_NO_SLOT_AVAILABLE", retry.ClassTransient, "no slot", string(ReasonExhausted)
		dead := Build(rec, m, hs, BuildOptions{Topic: "solve.requests.dlq", HeaderStyle: StyleSpring})
		dead.Timestamp = d.Timestamp.Add(time.Hour)
		if d, err = Decode(dead); err != nil {
			t.Fatal(err)
		}
		if d.Redrives != round+1 {
			t.Fatalf("round %d: dead again with redrives %d", round, d.Redrives)
		}
	}
}

func ExampleDecide() {
	rules := []Rule{
		{Name: "wrong-key", Match: Filter{Codes: []string{"ERROR_WRONG_USER_KEY"}}, Action: ActionDrop},
		{Name: "no-slot", Match: Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE", "http_5*"}}, Action: ActionRepublish, After: 10 * time.Minute},
	}
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, d := range []*DeadLetter{
		{Timestamp: at, Code: "http_503"},
		{Timestamp: at, Code: "http_503", Redrives: 3},
		{Timestamp: at, Code: "ERROR_WRONG_USER_KEY"},
		{Timestamp: at, Code: "ERROR_ZERO_BALANCE"},
	} {
		dec := Decide(rules, d, "solve.requests")
		fmt.Printf("%s (redrives %d): %s by %q", d.Code, d.Redrives, dec.Action, dec.Rule)
		if dec.Action == ActionRepublish {
			fmt.Printf(" to %s not before %s", dec.Topic, dec.NotBefore.Format(time.TimeOnly))
		}
		fmt.Println()
	}
	// Output:
	// http_503 (redrives 0): republish by "no-slot" to solve.requests not before 10:10:00
	// http_503 (redrives 3): park by "no-slot"
	// ERROR_WRONG_USER_KEY (redrives 0): drop by "wrong-key"
	// ERROR_ZERO_BALANCE (redrives 0): keep by ""
}
