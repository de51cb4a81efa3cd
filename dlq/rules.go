package dlq

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// RuleSpec is a rule as written (the configuration's analyzer.rules[]
// entry, or a Go program's), before CompileRule checks it: plain Go types,
// the match as ParseFilter's key → values.
type RuleSpec struct {
	// Name; empty becomes "rule-<n>" in CompileRules, n its place from 1.
	Name     string
	Pipeline string
	// Match is the filter as key → values (ParseFilter; the
	// configuration's keys: codes, reasons, classes, origins, and
	// headers.NAME for each header). Empty matches every dead letter.
	// since and until are refused: a rule runs for ever, and a time
	// relative to when it was loaded would quietly change meaning.
	Match       map[string][]string
	Action      string
	To          string
	After       time.Duration
	MaxRedrives int
}

// CompileRule checks one rule and makes it a Rule: a known action (empty:
// "required"), a valid match, To, After and MaxRedrives only with
// republish, After and MaxRedrives not negative. A zero MaxRedrives of a
// republish rule becomes DefaultMaxRedrives; Name is taken as it is. Every
// problem is a *FieldError wrapping ErrBadRule (and, for the match,
// ErrBadFilter), keyed by the field: "action", "to", "after",
// "max_redrives", "match.<key>" with the index of the value; the
// configuration loader turns those into file paths and lines.
func CompileRule(s RuleSpec) (Rule, []*FieldError) {
	var errs []*FieldError
	bad := func(key string, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Index: -1, Msg: fmt.Sprintf(format, args...), Err: ErrBadRule})
	}
	r := Rule{Name: s.Name, Pipeline: s.Pipeline, To: s.To, After: s.After, MaxRedrives: s.MaxRedrives}
	m := make(map[string][]string, len(s.Match))
	for k, v := range s.Match {
		if t := strings.TrimPrefix(k, "--"); t == "since" || t == "until" {
			bad("match."+k, "a rule's match takes no time bounds (a rule applies to every dead letter as it comes)")
			continue
		}
		m[k] = v
	}
	f, err := ParseFilter(m, time.Time{})
	for _, fe := range FieldErrors(err) {
		errs = append(errs, &FieldError{Key: "match." + fe.Key, Index: fe.Index, Msg: fe.Msg, Err: fmt.Errorf("%w: %w", ErrBadRule, fe.Err)})
	}
	r.Match = f
	switch s.Action {
	case "":
		bad("action", "required: republish, keep or drop")
	default:
		a, err := ParseAction(s.Action)
		if err != nil {
			bad("action", "%q: want republish, keep or drop", s.Action)
		}
		r.Action = a
	}
	switch r.Action {
	case ActionRepublish:
		if s.After < 0 {
			bad("after", "%s: must not be negative", s.After)
		}
		switch {
		case s.MaxRedrives < 0:
			bad("max_redrives", "%d: must not be negative (0: the default, %d)", s.MaxRedrives, DefaultMaxRedrives)
		case s.MaxRedrives == 0:
			r.MaxRedrives = DefaultMaxRedrives
		}
	case ActionKeep, ActionDrop:
		for _, f := range []struct {
			key string
			set bool
		}{{"to", s.To != ""}, {"after", s.After != 0}, {"max_redrives", s.MaxRedrives != 0}} {
			if f.set {
				bad(f.key, "only with action: republish (this rule's action is %s)", s.Action)
			}
		}
	}
	return r, errs
}

// CompileRules checks rules (CompileRule) and makes them Rules, also for
// rules a Go program built that no configuration loader saw: names are
// unique (an empty name becomes "rule-<n>", n counting from 1, as the
// configuration's defaults do). Every problem is reported, joined; each
// wraps ErrBadRule and names the rule by its index and name:
// `bad analyzer rule: rules[0] ("x"): action: required: ...`.
func CompileRules(specs []RuleSpec) ([]Rule, error) {
	var errs []error
	out := make([]Rule, 0, len(specs))
	seen := map[string]int{}
	for i, s := range specs {
		if s.Name == "" {
			s.Name = "rule-" + strconv.Itoa(i+1)
		}
		at := fmt.Sprintf("rules[%d] (%q)", i, s.Name)
		if j, dup := seen[s.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: %s: name: also that of rules[%d]; names must be unique", ErrBadRule, at, j))
		} else {
			seen[s.Name] = i
		}
		r, problems := CompileRule(s)
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("%w: %s: %s: %s", ErrBadRule, at, p.Path(), p.Msg))
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
