package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor/control"
)

// statusJSON is `redrive status --json` as a script reads it: the field
// names are the contract.
type statusJSON struct {
	Topic     string `json:"topic"`
	Skipped   int    `json:"skipped"`
	Pipelines []struct {
		Name   string `json:"name"`
		Scope  string `json:"scope"`
		Paused *struct {
			Reason string    `json:"reason"`
			By     string    `json:"by"`
			Since  time.Time `json:"since"`
		} `json:"paused"`
		Line []struct {
			Kind  string    `json:"kind"`
			State string    `json:"state"`
			Until time.Time `json:"until"`
			Code  string    `json:"code"`
			By    string    `json:"by"`
		} `json:"line"`
		Replicas []struct {
			Instance         string    `json:"instance"`
			Line             string    `json:"line"`
			Partitions       int       `json:"partitions"`
			TotalPartitions  int       `json:"total_partitions"`
			Share            float64   `json:"share"`
			RateLimit        float64   `json:"rate_limit"`
			LearnedRate      float64   `json:"learned_rate"`
			MaxCallsInFlight int       `json:"max_calls_in_flight"`
			CallsInFlight    int       `json:"calls_in_flight"`
			LastSeen         time.Time `json:"last_seen"`
			Stale            bool      `json:"stale"`
		} `json:"replicas"`
	} `json:"pipelines"`
}

func controlStatusOf(t *testing.T, ctx context.Context, args ...string) statusJSON {
	t.Helper()
	code, out, errs := runSplit(ctx, append([]string{"status", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s%s", code, out, errs)
	}
	var v statusJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("status --json did not print one JSON object: %v\n%s", err, out)
	}
	return v
}

func controlCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Before `topics ensure` the commands name the fix; after it, a pause is
// in the control topic, status shows it with its reason, and a resume
// ends it.
func TestPauseStatusResume(t *testing.T) {
	c := kafkatest.New(t)
	ctx := controlCtx(t)
	topic := kafkatest.Topic(t, "ctl")
	cfg := writeConfig(t, c.Brokers, topic, "", "")

	for _, args := range [][]string{{"pause", topic}, {"status"}} {
		// Against a real broker shared by other tests the topic may exist.
		if c.Kind != kafkatest.KindKfake {
			break
		}
		code, out, errs := runSplit(ctx, append(args, "-c", cfg)...)
		if code != 1 || !strings.Contains(errs, "the control topic redrive.control does not exist: create it with `redrive topics ensure -c "+cfg+"`") {
			t.Errorf("%v before topics ensure: exit %d, want 1 naming the fix: %s%s", args, code, out, errs)
		}
	}
	code, out := runOut(ctx, "topics", "ensure", "-c", cfg)
	if code != 0 || !strings.Contains(out, control.DefaultTopic) {
		t.Fatalf("topics ensure: exit %d, want 0 with the control topic listed:\n%s", code, out)
	}

	code, out, errs := runSplit(ctx, "pause", "-c", cfg, topic, "--reason", "provider outage")
	if code != 0 || !strings.Contains(out, "stays paused across restarts until `redrive resume "+topic+"`") || !strings.Contains(out, "within a second") {
		t.Fatalf("pause: exit %d: %s%s", code, out, errs)
	}
	v := controlStatusOf(t, ctx, "-c", cfg)
	if len(v.Pipelines) != 1 || v.Topic != control.DefaultTopic {
		t.Fatalf("status: %+v", v)
	}
	p := v.Pipelines[0]
	if p.Name != topic || p.Scope != "pipeline" || p.Paused == nil || p.Paused.Reason != "provider outage" || p.Paused.By == "" ||
		time.Since(p.Paused.Since) > time.Minute || len(p.Line) != 0 || len(p.Replicas) != 0 {
		t.Errorf("status after pause: %+v", p)
	}
	code, out, errs = runSplit(ctx, "status", "-c", cfg, "--pipeline", topic)
	if code != 0 || !strings.Contains(out, topic+" (scope pipeline): PAUSED by "+p.Paused.By) || !strings.Contains(out, ": provider outage") ||
		!strings.Contains(out, "replicas: none has published a status") {
		t.Errorf("status: exit %d:\n%s%s", code, out, errs)
	}

	code, out, errs = runSplit(ctx, "resume", "-c", cfg, topic)
	if code != 0 || !strings.Contains(out, "resumed "+topic) {
		t.Fatalf("resume: exit %d: %s%s", code, out, errs)
	}
	if p := controlStatusOf(t, ctx, "-c", cfg).Pipelines[0]; p.Paused != nil {
		t.Errorf("still paused after resume: %+v", p.Paused)
	}
	if _, out, _ := runSplit(ctx, "status", "-c", cfg); !strings.Contains(out, topic+" (scope pipeline): not paused") {
		t.Errorf("status after resume:\n%s", out)
	}
}

// status shows the replicas that publish their status, one stale, and
// the shared stops in force; a record it cannot read is one line on
// stderr.
func TestStatusListsReplicas(t *testing.T) {
	c := kafkatest.New(t)
	ctx := controlCtx(t)
	topic := kafkatest.Topic(t, "ctlr")
	// A control topic of its own: the malformed record below must not
	// reach the other tests' processors on a shared broker.
	controlTopic := kafkatest.Topic(t, "control")
	cfg := writeConfig(t, c.Brokers, topic, "", "control: {topic: "+controlTopic+"}\n")
	if code, out := runOut(ctx, "topics", "ensure", "-c", cfg); code != 0 || !strings.Contains(out, controlTopic) {
		t.Fatalf("topics ensure: exit %d:\n%s", code, out)
	}

	now := time.Now()
	status := func(instance string, ago time.Duration, partitions int, share, rate, learned float64, calls int) control.Record {
		return control.Record{Kind: control.KindStatus, Pipeline: topic, Instance: instance, At: now.Add(-ago), Status: &control.Status{
			Line: "running", Breaker: "closed", Scope: "pipeline", Partitions: partitions, MainPartitions: partitions / 3, TotalPartitions: 9,
			Share: share, RateLimit: rate, LearnedRate: learned, MaxCallsInFlight: calls, Inflight: 12, CallsInFlight: 4, CallsPerSecond: 33.3, Every: "5s"}}
	}
	cl := c.Client(t)
	for _, r := range []control.Record{
		status("pod-a", time.Second, 6, 2.0/3, 100.0/3, 0, 20),
		status("pod-b", time.Minute, 3, 1.0/3, 50.0/3, 12.5, 10), // three intervals of 5s passed long ago; 429s taught it 12.5/s
		{Kind: control.KindBreaker, Pipeline: topic, Instance: "pod-a", At: now, Line: &control.Line{State: control.StateOpen, Until: now.Add(time.Minute), Why: "30 of 40 calls failed"}},
		{Kind: control.KindPauseCode, Pipeline: topic, Instance: "pod-b", At: now.Add(-time.Hour), Line: &control.Line{State: control.StateOn, Until: now.Add(-50 * time.Minute), Code: "ERROR_ZERO_BALANCE"}},
	} {
		if err := control.Publish(ctx, cl, controlTopic, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: controlTopic, Key: []byte("guard/" + topic), Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runSplit(ctx, "status", "--json", "-c", cfg)
	var v statusJSON
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || len(v.Pipelines) != 1 {
		t.Fatalf("status --json: exit %d, %v:\n%s%s", code, err, out, errs)
	}
	if v.Skipped != 1 || !strings.Contains(errs, "skipped 1 malformed control record(s) of "+controlTopic+"; the first: ") || !strings.Contains(errs, "guard/"+topic) ||
		strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("skipped %d; stderr %q, want one line with the count and the first error", v.Skipped, errs)
	}
	p := v.Pipelines[0]
	if p.Paused != nil {
		t.Errorf("paused: %+v", p.Paused)
	}
	if len(p.Line) != 1 || p.Line[0].Kind != "breaker" || p.Line[0].State != "open" || p.Line[0].By != "pod-a" || !p.Line[0].Until.Equal(now.Add(time.Minute)) {
		t.Errorf("shared line %+v, want the open breaker only (the pause code's stop ended)", p.Line)
	}
	if len(p.Replicas) != 2 {
		t.Fatalf("replicas %+v, want pod-a and pod-b", p.Replicas)
	}
	a, b := p.Replicas[0], p.Replicas[1]
	if a.Instance != "pod-a" || a.Stale || a.Partitions != 6 || a.TotalPartitions != 9 || a.RateLimit != 100.0/3 || a.MaxCallsInFlight != 20 || a.CallsInFlight != 4 {
		t.Errorf("pod-a: %+v", a)
	}
	if b.Instance != "pod-b" || !b.Stale || !b.LastSeen.Equal(now.Add(-time.Minute)) || b.LearnedRate != 12.5 {
		t.Errorf("pod-b: %+v, want stale, last seen a minute ago", b)
	}

	code, out, _ = runSplit(ctx, "status", "-c", cfg)
	for _, want := range []string{
		topic + " (scope pipeline): not paused",
		"shared line: breaker open until ", ", by pod-a: 30 of 40 calls failed",
		"INSTANCE", "CALLS/S", "pod-a", "6/9", "67%", "33.33/s", "pod-b", "3/9", "12.5/s learned", "1m0s ago", "STALE",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status: exit %d, no %q in:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "ERROR_ZERO_BALANCE") {
		t.Errorf("status shows a pause code's stop that ended:\n%s", out)
	}
}

// A pipeline the config does not have is a usage error that lists the
// ones it has; so is a config without a control topic. Neither needs a
// broker.
func TestControlCommandsRefuseWhatTheConfigLacks(t *testing.T) {
	ctx := controlCtx(t)
	cfg := writeConfig(t, []string{"127.0.0.1:1"}, "solve", "", "  - {name: captcha, topic: captcha.requests}\n")
	for _, args := range [][]string{{"pause", "nosuch", "--reason", "x"}, {"resume", "nosuch"}, {"status", "--pipeline", "nosuch"}} {
		code, out, errs := runSplit(ctx, append(args, "-c", cfg)...)
		if code != 2 || !strings.Contains(errs, `no pipeline "nosuch" in the config (its pipelines: solve, captcha)`) {
			t.Errorf("%v: exit %d, want 2 listing the pipelines: %s%s", args, code, out, errs)
		}
	}
	if code, _, errs := runSplit(ctx, "pause", "-c", cfg); code != 2 || !strings.Contains(errs, "pause takes one PIPELINE") {
		t.Errorf("pause without a pipeline: exit %d: %s", code, errs)
	}

	off := filepath.Join(t.TempDir(), "off.yaml")
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(off, append(data, "control: {enabled: false}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runSplit(ctx, "pause", "-c", off, "solve"); code != 2 || !strings.Contains(errs, "control.enabled is false") {
		t.Errorf("pause with control.enabled: false: exit %d: %s", code, errs)
	}
}

// With control.enabled: false, topics ensure and check leave the control
// topic alone.
func TestTopicsWithoutControlTopic(t *testing.T) {
	c := kafkatest.New(t)
	ctx := controlCtx(t)
	topic := kafkatest.Topic(t, "noctl")
	controlTopic := kafkatest.Topic(t, "control")
	cfg := writeConfig(t, c.Brokers, topic, "", "control: {enabled: false, topic: "+controlTopic+"}\n")
	for _, verb := range []string{"ensure", "check"} {
		if code, out := runOut(ctx, "topics", verb, "-c", cfg); code != 0 || strings.Contains(out, controlTopic) || strings.Contains(out, "control") {
			t.Errorf("topics %s: exit %d, want 0 without the control topic:\n%s", verb, code, out)
		}
	}
}
