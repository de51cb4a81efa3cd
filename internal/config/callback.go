package config

import (
	"errors"
	"fmt"
	"net"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/intake"
	"github.com/redrive/redrive/topics"
)

// DefaultCallbackAddr is callback_addr when a pipeline has
// handler.callback and the file sets none: every interface, as the
// services that call back are outside.
const DefaultCallbackAddr = "0.0.0.0:8443"

// HasCallbacks reports whether any pipeline has handler.callback.
func (c *Config) HasCallbacks() bool {
	for _, p := range c.Pipelines {
		if p.Handler.Callback != nil {
			return true
		}
	}
	return false
}

// CallbacksTopic is the pipeline's callbacks topic: handler.callback.topic,
// else topics.CallbacksTopic ("<topic>.callbacks"); "" without
// handler.callback.
func (p Pipeline) CallbacksTopic() string {
	cb := p.Handler.Callback
	switch {
	case cb == nil:
		return ""
	case cb.Topic != "":
		return cb.Topic
	}
	return topics.CallbacksTopic(p.Topic)
}

// CallbackOptions are the options of the pipeline's callback intake
// (intake.New) but Client, Logger, Registerer and Instance, which the
// command supplies. Zero without handler.callback.
func (p Pipeline) CallbackOptions() intake.Options {
	cb := p.Handler.Callback
	if cb == nil {
		return intake.Options{}
	}
	return intake.Options{
		Pipeline:       p.name(),
		Path:           cb.Path,
		Token:          cb.Token,
		IDField:        cb.IDField,
		ResultField:    cb.ResultField,
		ErrorField:     cb.ErrorField,
		Topic:          p.CallbacksTopic(),
		DLQ:            p.DLQTopic(),
		DLQHeaderStyle: p.DLQ.HeaderStyle,
		MaxBodyBytes:   cb.MaxBodyBytes,
		MaxResultBytes: int(cb.MaxResultBytes),
	}
}

// processorCallbacks is handler.callback as the processor takes it; nil
// without one. Zero values stay zero for the processor's defaults.
func (p Pipeline) processorCallbacks() *processor.Callbacks {
	cb := p.Handler.Callback
	if cb == nil {
		return nil
	}
	return &processor.Callbacks{Topic: p.CallbacksTopic(), Wait: cb.Wait.D(), MaxEntries: cb.MaxEntries, MaxBytes: cb.MaxBytes}
}

// setDefaults fills handler.callback from the packages' defaults:
// id_field, result_field, max_body_bytes and max_result_bytes
// (intake.Options.WithDefaults), wait, max_entries and max_bytes
// (processor.DefaultCallbackWait, DefaultCallbackEntries,
// DefaultCallbackBytes) and topic (topics.CallbacksTopic).
func (cb *Callback) setDefaults(mainTopic string) {
	o := intake.Options{IDField: cb.IDField, ResultField: cb.ResultField, MaxBodyBytes: cb.MaxBodyBytes, MaxResultBytes: int(cb.MaxResultBytes)}.WithDefaults()
	cb.IDField, cb.ResultField, cb.MaxBodyBytes, cb.MaxResultBytes = o.IDField, o.ResultField, o.MaxBodyBytes, int64(o.MaxResultBytes)
	if cb.MaxBytes == 0 {
		cb.MaxBytes = processor.DefaultCallbackBytes
	}
	if cb.Wait == 0 {
		cb.Wait = Duration(processor.DefaultCallbackWait)
	}
	if cb.MaxEntries == 0 {
		cb.MaxEntries = processor.DefaultCallbackEntries
	}
	if cb.Topic == "" && mainTopic != "" {
		cb.Topic = topics.CallbacksTopic(mainTopic)
	}
}

// callbackKeys are the file's keys of intake.Options fields, relative
// to the pipeline. Pipeline, DLQ and DLQHeaderStyle are the pipeline's
// own keys, checked there.
var callbackKeys = map[string]string{
	"Path":           "handler.callback.path",
	"IDField":        "handler.callback.id_field",
	"ResultField":    "handler.callback.result_field",
	"ErrorField":     "handler.callback.error_field",
	"Topic":          "handler.callback.topic",
	"MaxBodyBytes":   "handler.callback.max_body_bytes",
	"MaxResultBytes": "handler.callback.max_result_bytes",
}

// callbacks checks callback_addr and every handler.callback: the
// intake's options (intake.Options.Validate), wait and max_entries,
// handler.http.poll beside it, and that no two pipelines share a path and
// no callbacks topic is another topic of any pipeline. It returns the
// problems for attribute, which reports a default topic's at the
// pipeline's topic.
func (v *validator) callbacks(c *Config) []problem {
	var found []problem
	has := map[string]bool{} // one problem per key
	keep := func(p problem) {
		if !has[p.path] {
			has[p.path] = true
			found = append(found, p)
		}
	}
	add := func(path, format string, args ...any) {
		keep(problem{path: path, msg: fmt.Sprintf(format, args...)})
	}
	if c.HasCallbacks() || c.CallbackAddr != "" {
		v.addr("callback_addr", c.CallbackAddr)
		if _, port, err := net.SplitHostPort(c.CallbackAddr); err == nil && port != "0" && c.CallbackAddr == c.HTTPAddr {
			add("callback_addr", "%q is http_addr too: callbacks are served apart from /metrics", c.CallbackAddr)
		}
	}

	// Every topic a pipeline has, by name, to tell a callbacks topic that
	// is one of them.
	owner := map[string]string{}
	for i, p := range c.Pipelines {
		at := index("pipelines", i)
		for _, t := range append([]string{p.Topic, p.DLQTopic(), p.Results}, p.TierTopics()...) {
			if t != "" {
				if _, ok := owner[t]; !ok {
					owner[t] = at
				}
			}
		}
	}
	paths := map[string]string{}
	cbTopics := map[string]string{}
	for i, p := range c.Pipelines {
		cb := p.Handler.Callback
		if cb == nil {
			continue
		}
		at := index("pipelines", i) + "."
		if h := p.Handler.HTTP; h != nil && h.Poll == nil {
			add(at+"handler.callback", "handler.callback needs handler.http.poll: a job whose callback never comes is polled")
		}
		if cb.Wait < 0 {
			add(at+"handler.callback.wait", "%s: must be more than 0", cb.Wait)
		}
		if cb.MaxEntries < 1 {
			add(at+"handler.callback.max_entries", "%d: must be at least 1", cb.MaxEntries)
		}
		if cb.MaxBytes < processor.MinCallbackBytes {
			add(at+"handler.callback.max_bytes", "%d: must be at least %d (1MiB)", cb.MaxBytes, processor.MinCallbackBytes)
		}
		if _, _, err := net.SplitHostPort(c.CallbackAddr); err == nil && cb.Token == "" && !cb.InsecurePublic && !LoopbackAddr(c.CallbackAddr) {
			add(at+"handler.callback.token", "required: callback_addr %q is not a loopback address, and without a token anyone who reaches it can answer any job (job ids are often sequential); "+
				"set handler.callback.token (e.g. ${CALLBACK_TOKEN}), listen on 127.0.0.1, or set handler.callback.insecure_public: true to serve it open anyway", c.CallbackAddr)
		}
		o := p.CallbackOptions().WithDefaults()
		for _, e := range unjoin(o.Validate()) {
			var fe *processor.FieldError
			if !errors.As(e, &fe) {
				keep(problem{at + "handler.callback", e.Error(), e})
				continue
			}
			key, ok := callbackKeys[fe.Field]
			if !ok {
				continue // the pipeline's own key: its check reports it
			}
			if fe.Field == "Topic" && topics.ValidateName(p.Topic) != nil && !v.written(at+key) {
				continue // "<topic>.callbacks" of a bad topic: the topic's error says it
			}
			keep(problem{at + key, fe.Msg, fe})
		}
		if cb.Path != "" {
			if j, dup := paths[cb.Path]; dup {
				add(at+"handler.callback.path", "%q is also the callback path of %s; each pipeline needs its own", cb.Path, j)
			} else {
				paths[cb.Path] = index("pipelines", i)
			}
		}
		t := p.CallbacksTopic()
		if topics.ValidateName(t) != nil {
			continue
		}
		if j, dup := cbTopics[t]; dup {
			add(at+"handler.callback.topic", "%q is also the callbacks topic of %s; a topic belongs to one pipeline", t, j)
		} else if j, ok := owner[t]; ok && j != index("pipelines", i) {
			// This pipeline's own topics: processor.Pipeline.Validate says so.
			add(at+"handler.callback.topic", "%q is a topic of %s already (main, tier, DLQ or results); the callbacks topic must be its own", t, j)
		}
		cbTopics[t] = index("pipelines", i)
	}
	return found
}
