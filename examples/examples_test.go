package examples_test

import (
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/redrive/redrive/examples"
	"github.com/redrive/redrive/internal/config"
)

// env is what a user of each preset exports (the variables its comment
// names); the presets' other variables have defaults.
var env = map[string]string{
	"CAPTCHA_API_KEY": "captcha-key",
	"SMM_API_URL":     "https://panel.example/api/v2",
	"SMM_API_KEY":     "smm-key",
	"WEBHOOK_URL":     "https://hooks.partner.example/redrive",
	"WEBHOOK_TOKEN":   "webhook-token",
}

// TestEveryPresetLoads: each file in examples/ loads with the variables
// its comment names, holds one pipeline, and talks to no placeholder host
// (example.com and the like) unless a variable put it there.
func TestEveryPresetLoads(t *testing.T) {
	names := examples.Names()
	for _, want := range []string{"minimal", "captchaai", "smm-panel", "webhook", "exactly-once"} {
		if _, ok := examples.File(want); !ok {
			t.Errorf("no preset %s (have %v)", want, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			data, _ := examples.File(name)
			c, err := config.Parse(data, func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("%s.yaml: %v", name, err)
			}
			if len(c.Pipelines) != 1 {
				t.Fatalf("%s.yaml has %d pipelines: a starter config has one, so no command asks for --pipeline", name, len(c.Pipelines))
			}
			p := c.Pipelines[0]
			if p.Handler.HTTP == nil {
				t.Fatalf("%s.yaml has no HTTP handler", name)
			}
			u, err := url.Parse(p.Handler.HTTP.URL)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(u.Hostname(), ".example") && !strings.Contains(string(data), "${") {
				t.Errorf("%s.yaml names the placeholder host %s", name, u.Hostname())
			}
			if strings.Contains(string(data), "example.com") {
				t.Errorf("%s.yaml names example.com", name)
			}
		})
	}
}

// TestMinimalNeedsNothingSet: the default preset loads with an empty
// environment and calls the demo solver, so `redrive init` and the demo
// solver are all a newcomer needs.
func TestMinimalNeedsNothingSet(t *testing.T) {
	data, _ := examples.File(examples.Default)
	c, err := config.Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pipelines[0].Handler.HTTP.URL; got != "http://127.0.0.1:8080/solve" {
		t.Errorf("url = %q, want the demo solver's", got)
	}
	c, err = config.Parse(data, func(k string) string {
		return map[string]string{"SOLVER_URL": "https://solver.internal/v1/solve"}[k]
	})
	if err != nil || c.Pipelines[0].Handler.HTTP.URL != "https://solver.internal/v1/solve" {
		t.Errorf("SOLVER_URL does not point it elsewhere: %v", err)
	}
}

// TestPresetsMatchTheReference: the presets that redrive.example.yaml also
// shows (as pipelines of the same name) say the same about the service:
// schedule, deadlines, codes, answers, polling and callbacks. Only
// addresses and secrets may differ.
func TestPresetsMatchTheReference(t *testing.T) {
	ref, err := os.ReadFile("../redrive.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	refEnv := map[string]string{"REDRIVE_ANALYZER_TOKEN": "analyzer-token-0123456789", "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/x"}
	rc, err := config.Parse(ref, func(k string) string { return refEnv[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"captchaai", "smm-panel", "webhook"} {
		data, _ := examples.File(name)
		c, err := config.Parse(data, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		var want *config.Pipeline
		for i := range rc.Pipelines {
			if rc.Pipelines[i].Name == name {
				want = &rc.Pipelines[i]
			}
		}
		if want == nil {
			t.Fatalf("redrive.example.yaml has no pipeline %s", name)
		}
		got := c.Pipelines[0]
		same := func(what string, a, b any) {
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s: %s differs from redrive.example.yaml's:\n got %+v\nwant %+v", name, what, a, b)
			}
		}
		same("topic", got.Topic, want.Topic)
		same("results", got.Results, want.Results)
		same("retry", got.Retry, want.Retry)
		same("not_ready_deadline", got.NotReadyDeadline, want.NotReadyDeadline)
		same("codes", got.Handler.Codes, want.Handler.Codes)
		h, wh := *got.Handler.HTTP, *want.Handler.HTTP
		same("timeout", h.Timeout, wh.Timeout)
		same("json", h.JSON, wh.JSON)
		same("header names", keys(h.Headers), keys(wh.Headers))
		same("query fields", keys(h.Query), keys(wh.Query))
		same("form fields", keys(h.Form), keys(wh.Form))
		if (h.Poll == nil) != (wh.Poll == nil) {
			t.Fatalf("%s: poll in one and not the other", name)
		}
		if h.Poll != nil {
			p, wp := *h.Poll, *wh.Poll
			p.URL, wp.URL, p.Body, wp.Body = "", "", "", ""
			same("poll", p, wp)
		}
		if (got.Handler.Callback == nil) != (want.Handler.Callback == nil) {
			t.Fatalf("%s: callback in one and not the other", name)
		}
		if got.Handler.Callback != nil {
			cb, wcb := *got.Handler.Callback, *want.Handler.Callback
			cb.Token, wcb.Token = "", ""
			same("callback", cb, wcb)
		}
	}
}

func keys(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}
