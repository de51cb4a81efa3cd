package config

import (
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/topics"
)

// ProcessorControl is the control section as the processor takes it
// (enabled: false is Disabled); zero values stay zero for
// processor.Config.WithDefaults.
func (c *Config) ProcessorControl() processor.Control {
	return processor.Control{
		Topic:          c.Control.Topic,
		StatusInterval: c.Control.StatusInterval.D(),
		Disabled:       !c.Control.On(),
	}
}

// ControlSpec is the control topic as `redrive topics ensure` creates it
// (topics.ForControl), replicated as much as the most replicated
// pipeline's topics: losing it loses every pause in force. ok is false
// when control.enabled is false.
func (c *Config) ControlSpec() (spec topics.Spec, ok bool) {
	if !c.Control.On() {
		return topics.Spec{}, false
	}
	var repl int16
	for _, p := range c.Pipelines {
		repl = max(repl, p.Replication)
	}
	return topics.ForControl(c.controlTopic(), repl), true
}

// controlTopic is control.topic, or its default before SetDefaults.
func (c *Config) controlTopic() string {
	if c.Control.Topic != "" {
		return c.Control.Topic
	}
	return control.DefaultTopic
}

func (c *Control) setDefaults() {
	on := c.On()
	c.Enabled = &on
	if c.Topic == "" {
		c.Topic = control.DefaultTopic
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = Duration(control.DefaultStatusInterval)
	}
}

// control checks the control topic's name, and that no pipeline uses it
// as one of its own topics: its records are not requests. Its
// status_interval is the processor's to check (processorKeys).
func (v *validator) control(c *Config) {
	if !c.Control.On() {
		return
	}
	t := c.controlTopic()
	if msg := checkTopic(t); msg != "" {
		v.add("control.topic", "%s", msg)
		return
	}
	for i, p := range c.Pipelines {
		for _, s := range topics.ForPipeline(p.TopicSpec()) {
			if s.Name != t {
				continue
			}
			if v.written("control.topic") {
				v.add("control.topic", "%q is also the %s topic of pipelines[%d]; the control topic must be a topic of its own", t, s.Role, i)
			} else {
				// The default is taken: the pipeline's key is the one written.
				v.add(index("pipelines", i)+"."+roleKeys[s.Role], "%q is the control topic (control.topic, default %s); set control.topic to another topic, or name this one otherwise", t, control.DefaultTopic)
			}
			return
		}
	}
}

// roleKeys are the pipeline keys that name (or make) a topic of a role.
var roleKeys = map[topics.Role]string{
	topics.RoleMain:      "topic",
	topics.RoleRetry:     "retry.tiers",
	topics.RoleDLQ:       "dlq.topic",
	topics.RoleResults:   "results",
	topics.RoleCallbacks: "handler.callback.topic",
}
