package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/topics"
)

// Without a control section or the pipeline keys, a pipeline is one
// pipeline across its replicas: the control topic redrive.control, a
// status every 5s, scope pipeline, no bound on calls in flight.
func TestControlDefaults(t *testing.T) {
	c := mustParse(t, pipe(), nil)
	if got, want := c.ProcessorControl(), (processor.Control{Topic: "redrive.control", StatusInterval: 5 * time.Second}); got != want {
		t.Errorf("ProcessorControl = %+v, want %+v", got, want)
	}
	pp := c.Pipelines[0].ProcessorPipeline(nil)
	if pp.Scope != processor.ScopePipeline || pp.MaxCallsInFlight != 0 {
		t.Errorf("Scope, MaxCallsInFlight = %q, %d; want pipeline, 0", pp.Scope, pp.MaxCallsInFlight)
	}
	spec, ok := c.ControlSpec()
	if want := topics.ForControl("redrive.control", 1); !ok || spec.Name != want.Name || spec.Replication != 1 || spec.Partitions != 1 ||
		spec.Configs[topics.ConfigCleanupPolicy] != "compact" {
		t.Errorf("ControlSpec = %+v, %v; want %+v", spec, ok, want)
	}
	// What the processor fills in is what the file's view says.
	pc := processor.Config{Brokers: c.Brokers, Pipelines: []processor.Pipeline{pp}, Control: c.ProcessorControl()}.WithDefaults()
	if pc.Control.Topic != c.Control.Topic || pc.Control.StatusInterval != c.Control.StatusInterval.D() || string(pc.Pipelines[0].Scope) != c.Pipelines[0].Scope {
		t.Errorf("processor defaults %+v %q differ from the file's %+v %q", pc.Control, pc.Pipelines[0].Scope, c.Control, c.Pipelines[0].Scope)
	}
	if err := pc.Validate(); err != nil {
		t.Errorf("processor.Config.Validate: %v", err)
	}
}

// The keys reach processor.Config.Control and processor.Pipeline; the
// control topic is replicated as much as the most replicated pipeline.
func TestControlKeys(t *testing.T) {
	doc := pipe("replication: 3", "scope: process", "max_calls_in_flight: 10") +
		"  - {topic: other, replication: 2, scope: pipeline}\n" +
		"control:\n  topic: ops.control\n  status_interval: 2s\n"
	c := mustParse(t, doc, nil)
	if got, want := c.ProcessorControl(), (processor.Control{Topic: "ops.control", StatusInterval: 2 * time.Second}); got != want {
		t.Errorf("ProcessorControl = %+v, want %+v", got, want)
	}
	pp := c.Pipelines[0].ProcessorPipeline(nil)
	if pp.Scope != processor.ScopeProcess || pp.MaxCallsInFlight != 10 {
		t.Errorf("Scope, MaxCallsInFlight = %q, %d; want process, 10", pp.Scope, pp.MaxCallsInFlight)
	}
	if s, ok := c.ControlSpec(); !ok || s.Name != "ops.control" || s.Replication != 3 {
		t.Errorf("ControlSpec = %+v, %v; want ops.control replicated 3 times", s, ok)
	}

	// enabled: false is Disabled, and there is no control topic to ensure.
	c = mustParse(t, pipe()+"control: {enabled: false, topic: ops.control}\n", nil)
	if pc := c.ProcessorControl(); !pc.Disabled || pc.Topic != "ops.control" {
		t.Errorf("ProcessorControl with enabled: false = %+v", pc)
	}
	if s, ok := c.ControlSpec(); ok {
		t.Errorf("ControlSpec with enabled: false = %+v", s)
	}
	if c.Control.Enabled == nil || *c.Control.Enabled {
		t.Errorf("control.enabled after SetDefaults = %v", c.Control.Enabled)
	}
	// status_interval: 0 is the default.
	c = mustParse(t, pipe()+"control: {status_interval: 0s}\n", nil)
	if c.Control.StatusInterval.D() != 5*time.Second {
		t.Errorf("status_interval 0s = %s, want the default 5s", c.Control.StatusInterval)
	}
}

// A bad value is reported at its key and line, by the processor's own
// check where it has one.
func TestControlKeyErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		doc   string
		want  string
		kind  error
		field string // the processor's FieldError.Field, if any
	}{
		{"scope", pipe("scope: cluster"),
			`line 4: pipelines[0].scope: "cluster": must be pipeline or process`, ErrInvalid, "Pipelines[0].Scope"},
		{"max_calls_in_flight", pipe("concurrency: 8", "max_calls_in_flight: -1"),
			`line 5: pipelines[0].max_calls_in_flight: -1: must be 0 (no bound) or more`, ErrInvalid, "Pipelines[0].MaxCallsInFlight"},
		{"max_calls_in_flight not a number", pipe("max_calls_in_flight: many"),
			`line 4: pipelines[0].max_calls_in_flight: want a whole number, got "many"`, ErrType, ""},
		{"status_interval", pipe() + "control:\n  status_interval: -5s\n",
			`line 5: control.status_interval: bad duration "-5s": negative`, ErrType, ""},
		{"topic name", pipe() + "control:\n  topic: 'ops/control'\n",
			`line 5: control.topic: "ops/control": a topic name uses only letters, digits, '.', '_' and '-'`, ErrInvalid, ""},
		{"a pipeline's topic", pipe() + "control: {topic: solve.requests.dlq}\n",
			`line 4: control.topic: "solve.requests.dlq" is also the dlq topic of pipelines[0]; the control topic must be a topic of its own`, ErrInvalid, ""},
		{"a pipeline uses the default", "brokers: [h:1]\npipelines:\n  - topic: redrive.control\n",
			`line 3: pipelines[0].topic: "redrive.control" is the control topic (control.topic, default redrive.control); set control.topic to another topic, or name this one otherwise`, ErrInvalid, ""},
		{"a pipeline's results use the default", pipe("results: redrive.control"),
			`line 4: pipelines[0].results: "redrive.control" is the control topic (control.topic, default redrive.control); set control.topic to another topic, or name this one otherwise`, ErrInvalid, ""},
		{"unknown key", pipe() + "control:\n  interval: 5s\n",
			`line 5: control.interval: unknown key (known: enabled, topic, status_interval)`, ErrUnknownKey, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, nil)
			if got := err.Error(); got != tt.want {
				t.Errorf("error:\n%s\nwant:\n%s", got, tt.want)
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
	// A disabled control topic's name is not checked: it is not used.
	if _, err := Parse([]byte(pipe()+"control: {enabled: false, topic: solve.requests}\n"), nil); err != nil && strings.Contains(err.Error(), "control.topic") {
		t.Errorf("a disabled control topic is checked: %v", err)
	}
}
