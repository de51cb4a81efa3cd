package processor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

func validPipeline(name, topic string) Pipeline {
	return Pipeline{Name: name, Topic: topic, Schedule: retry.Schedule{Tiers: retry.DefaultTiers(), MaxAttempts: 3}}
}

func TestPipelineWithDefaults(t *testing.T) {
	p := validPipeline("p", "t").WithDefaults()
	if p.DLQ != topics.DefaultDLQ("t") || p.DLQ != "t.dlq" || p.NotReadyDeadline != DefaultNotReadyDeadline ||
		p.Concurrency != DefaultConcurrency || p.MaxInflight != max(DefaultMaxInflight, DefaultInflightPerSlot*DefaultConcurrency) ||
		p.MaxInflightBytes != DefaultMaxInflightBytes || p.MaxWaiting != DefaultMaxWaiting {
		t.Errorf("WithDefaults = %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	q := validPipeline("p", "t")
	q.Concurrency, q.DLQ = 8, "dead"
	if q = q.WithDefaults(); q.MaxInflight != DefaultMaxInflight || q.DLQ != "dead" {
		t.Errorf("WithDefaults keeps what is set (MaxInflight at least %d): %+v", DefaultMaxInflight, q)
	}
	big := validPipeline("p", "t")
	big.Concurrency = 2000
	if big = big.WithDefaults(); big.MaxInflight != 4*2000 {
		t.Errorf("MaxInflight for concurrency 2000 = %d, want 4 × concurrency", big.MaxInflight)
	}
	if p.GroupID() != "redrive.p" || p.GroupID() != topics.GroupID("p") {
		t.Errorf("GroupID = %q", p.GroupID())
	}
}

// A negative value is an error, never silently the default.
func TestPipelineValidate(t *testing.T) {
	for _, tt := range []struct {
		field string
		mod   func(p *Pipeline)
		msg   string
	}{
		{"Name", func(p *Pipeline) { p.Name = "a b" }, `"a b": use letters`},
		{"Topic", func(p *Pipeline) { p.Topic = "a/b" }, "a topic name uses only"},
		{"Schedule", func(p *Pipeline) { p.Schedule.Tiers = []time.Duration{time.Minute, time.Second} }, "tiers[1]: 1s after 1m: tiers must strictly increase"},
		{"DLQ", func(p *Pipeline) { p.DLQ = "t" }, `"t" is the main topic too`},
		{"Results", func(p *Pipeline) { p.Results = "t.retry.5s" }, "is a tier topic too"},
		{"DLQHeaderStyle", func(p *Pipeline) { p.DLQHeaderStyle = "kafka" }, `"kafka": want "spring", "connect" or nothing`},
		{"TTL", func(p *Pipeline) { p.TTL = -time.Second }, "-1s: must not be negative"},
		{"Concurrency", func(p *Pipeline) { p.Concurrency = -1 }, "-1: must be at least 1"},
		{"MaxInflight", func(p *Pipeline) { p.MaxInflight = -1 }, "-1: must be at least 1"},
		{"MaxInflightBytes", func(p *Pipeline) { p.MaxInflightBytes = -1 }, "-1: must be at least 1"},
		{"MaxWaiting", func(p *Pipeline) { p.MaxWaiting = -1 }, "-1: must be at least 1"},
	} {
		p := validPipeline("p", "t")
		tt.mod(&p)
		err := p.WithDefaults().Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(fe.Msg, tt.msg) {
			t.Errorf("%s: Validate = %v", tt.field, err)
		}
	}
	p := validPipeline("p", "t")
	p.RedactHeaders = []string{"a", ""}
	var fe *FieldError
	if err := p.WithDefaults().Validate(); !errors.As(err, &fe) || fe.Field != "RedactHeaders" || fe.Index != 1 || fe.Error() != "RedactHeaders[1]: empty header name" {
		t.Errorf("RedactHeaders: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{
		validPipeline("a", "t"), validPipeline("a", "u"), validPipeline("c", "t.retry.30s"), {Name: "d", Topic: "v"},
	}}
	err := c.WithDefaults().Validate()
	for _, w := range []string{
		`Pipelines[1].Name: "a" is also the name of pipelines[0]`,
		`Pipelines[2].Topic: "t.retry.30s" is consumed by pipelines[0] too`,
		"Pipelines[3].Schedule: bad retry schedule: tiers: at least one tier is required",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
	if _, err := New(Config{Pipelines: []Pipeline{validPipeline("a", "t")}}, nil); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Brokers: at least one broker is required") {
		t.Errorf("New without brokers: %v", err)
	}
	if _, err := New(Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{{Name: "a", Topic: "t", Concurrency: -4, Schedule: retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 1}}}}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New with concurrency -4: %v", err)
	}
}

func TestCallbacksDefaultsAndValidate(t *testing.T) {
	p := validPipeline("p", "t")
	orig := &Callbacks{}
	p.Callbacks = orig
	d := p.WithDefaults()
	if c := d.Callbacks; c == orig || c.Topic != "t.callbacks" || c.Topic != topics.CallbacksTopic("t") || c.Wait != DefaultCallbackWait || c.MaxEntries != DefaultCallbackEntries {
		t.Errorf("WithDefaults: %+v (the caller's %+v must stay as it was)", c, orig)
	}
	if *orig != (Callbacks{}) {
		t.Errorf("WithDefaults changed the caller's Callbacks: %+v", orig)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, tt := range []struct {
		field string
		cb    Callbacks
		msg   string
	}{
		{"Callbacks.Wait", Callbacks{Wait: -time.Second}, "-1s: must be more than 0"},
		{"Callbacks.Wait", Callbacks{Wait: 10 * time.Minute}, "must be less than not_ready_deadline (10m0s)"},
		{"Callbacks.MaxEntries", Callbacks{MaxEntries: -1}, "-1: must be at least 1"},
		{"Callbacks.Topic", Callbacks{Topic: "t.retry.5s"}, "is one of this pipeline's other topics"},
		{"Callbacks.Topic", Callbacks{Topic: "t.dlq"}, "is one of this pipeline's other topics"},
		{"Callbacks.Topic", Callbacks{Topic: "a/b"}, "a topic name uses only"},
	} {
		p := validPipeline("p", "t")
		cb := tt.cb
		p.Callbacks = &cb
		err := p.WithDefaults().Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(fe.Msg, tt.msg) {
			t.Errorf("%+v: Validate = %v, want %s: %s", tt.cb, err, tt.field, tt.msg)
		}
	}
	c := Config{Brokers: []string{"h:1"}, Pipelines: []Pipeline{validPipeline("a", "t"), validPipeline("b", "u")}}
	c.Pipelines[1].Callbacks = &Callbacks{Topic: "t"}
	if err := c.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `Pipelines[1].Callbacks.Topic: "t" is consumed by pipelines[0]`) {
		t.Errorf("a callbacks topic that is another pipeline's main topic: %v", err)
	}
}
