package dlq

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrBadRule is wrapped by every CompileRules error.
var ErrBadRule = errors.New("bad analyzer rule")

// Action is what happens to a dead letter.
type Action string

const (
	// ActionNone is the zero Decision's: nothing decided (Decide returns
	// it only for a nil dead letter).
	ActionNone Action = ""
	// ActionRepublish writes the request back (Republish) to
	// Decision.Topic, not before Decision.NotBefore.
	ActionRepublish Action = "republish"
	// ActionKeep leaves it in the DLQ; it is counted. No rule matching
	// means keep.
	ActionKeep Action = "keep"
	// ActionDrop counts it as dropped; it is never republished (the DLQ
	// record itself stays until retention removes it).
	ActionDrop Action = "drop"
	// ActionPark is a republish rule's decision for a dead letter that
	// reached the rule's MaxRedrives: counted, never republished again.
	// Rules cannot ask for it.
	ActionPark Action = "park"
)

// ParseAction reads a rule's action: republish, keep or drop.
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case ActionRepublish, ActionKeep, ActionDrop:
		return a, nil
	}
	return "", fmt.Errorf("action %q: want republish, keep or drop", s)
}

// DefaultMaxRedrives is a republish rule's MaxRedrives when it has none.
const DefaultMaxRedrives = 3

// RuleConfig is a rule as configured (internal/config's AnalyzerRule, or a
// Go program's), before CompileRules checks it. This package does not
// import internal/config: that package imports processor, which imports
// this one.
type RuleConfig struct {
	Name        string
	Pipeline    string
	Match       Filter
	Action      string
	To          string
	After       time.Duration
	MaxRedrives int
}

// Rule is one rule for automatic republish. Decide takes rules in order;
// the first whose Match matches decides.
type Rule struct {
	// Name identifies the rule in metrics and statistics.
	Name string
	// Pipeline, when set, limits the rule to that pipeline's DLQ; Decide
	// does not look at it: pick a pipeline's rules with RulesFor.
	Pipeline string
	// Match selects the dead letters the rule is for (the zero Filter
	// matches every one).
	Match Filter
	// Action is ActionRepublish, ActionKeep or ActionDrop.
	Action Action
	// To is the topic a republish writes to; empty means the pipeline's
	// main topic.
	To string
	// After delays a republish: not before the dead-lettering time
	// (DeadLetter.Timestamp) plus After.
	After time.Duration
	// MaxRedrives parks instead of republishing a dead letter whose
	// Redrives (redrive-redrives: times republished already, by any rule
	// or by hand) is at least MaxRedrives. 0 or less means
	// DefaultMaxRedrives; there is no "unlimited".
	MaxRedrives int
}

// Decision is what the rules say about one dead letter.
type Decision struct {
	// Rule is the name of the rule that decided; empty when none matched
	// (count it as NoRule).
	Rule   string
	Action Action
	// Topic is where to republish; set only for ActionRepublish.
	Topic string
	// NotBefore is the earliest time to republish (dead-lettering time +
	// After); zero for at once and for other actions.
	NotBefore time.Time
}

// Due reports whether the decision may be carried out at now.
func (d Decision) Due(now time.Time) bool { return !now.Before(d.NotBefore) }

// Decide returns the decision of the first rule that matches d:
//
//   - republish: to the rule's To, else mainTopic, not before
//     d.Timestamp + After; but when d.Redrives >= the rule's MaxRedrives,
//     park (the rule still decides: later rules are not tried);
//   - keep or drop: as the rule says.
//
// No rule matching means keep, with an empty Rule. A nil d gets the zero
// Decision. Decide is pure: the same rules and dead letter always give the
// same decision, so an analyzer that restarts and reads the DLQ again
// decides the same way (and can count the decisions it made before without
// acting on them again).
func Decide(rules []Rule, d *DeadLetter, mainTopic string) Decision {
	if d == nil {
		return Decision{}
	}
	for i := range rules {
		r := &rules[i]
		if !r.Match.Match(d) {
			continue
		}
		if r.Action != ActionRepublish {
			return Decision{Rule: r.Name, Action: r.Action}
		}
		limit := r.MaxRedrives
		if limit <= 0 {
			limit = DefaultMaxRedrives
		}
		if d.Redrives >= limit {
			return Decision{Rule: r.Name, Action: ActionPark}
		}
		dec := Decision{Rule: r.Name, Action: ActionRepublish, Topic: r.To}
		if dec.Topic == "" {
			dec.Topic = mainTopic
		}
		if r.After > 0 {
			dec.NotBefore = d.Timestamp.Add(r.After)
		}
		return dec
	}
	return Decision{Action: ActionKeep}
}

// RulesFor returns the rules that apply to the pipeline named pipeline:
// those without a Pipeline and those for it, in their order.
func RulesFor(rules []Rule, pipeline string) []Rule {
	var out []Rule
	for _, r := range rules {
		if r.Pipeline == "" || r.Pipeline == pipeline {
			out = append(out, r)
		}
	}
	return out
}

// CompileRules turns the configuration's analyzer rules into Rules. It
// checks what Decide relies on, also for a configuration built in Go that
// config.Validate never saw: a known action, unique names (an empty name
// becomes "rule-<n>", n counting from 1, as config.SetDefaults does),
// known reasons and classes, no empty codes, origins or header names, and
// To, After and MaxRedrives (not negative) only with republish. Every
// problem is reported, joined; each wraps ErrBadRule and names the rule by
// its index and name. A zero MaxRedrives becomes DefaultMaxRedrives.
func CompileRules(cfg []RuleConfig) ([]Rule, error) {
	var errs []error
	out := make([]Rule, 0, len(cfg))
	seen := map[string]int{}
	for i, c := range cfg {
		name := c.Name
		if name == "" {
			name = "rule-" + strconv.Itoa(i+1)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: analyzer.rules[%d] (%q): %s", ErrBadRule, i, name, fmt.Sprintf(format, args...)))
		}
		if j, dup := seen[name]; dup {
			bad("the name is also that of analyzer.rules[%d]; names must be unique", j)
		} else {
			seen[name] = i
		}
		r := Rule{
			Name: name, Pipeline: c.Pipeline, To: c.To, After: c.After, MaxRedrives: c.MaxRedrives, Match: c.Match,
		}
		a, err := ParseAction(c.Action)
		if err != nil {
			bad("%v", err)
		}
		r.Action = a
		for _, p := range r.Match.problems() {
			bad("match: %s", p)
		}
		if a != ActionRepublish && (c.To != "" || c.After != 0 || c.MaxRedrives != 0) {
			bad("to, after and max_redrives are only for action republish")
		}
		if c.After < 0 {
			bad("after %s: must not be negative", c.After)
		}
		switch {
		case c.MaxRedrives < 0:
			bad("max_redrives %d: must not be negative", c.MaxRedrives)
		case c.MaxRedrives == 0 && a == ActionRepublish:
			r.MaxRedrives = DefaultMaxRedrives
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
