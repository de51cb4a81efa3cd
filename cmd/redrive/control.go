package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq/dlqread"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/control"
)

// controlTimeout bounds pause, resume and status by default: each is one
// write or one read of a small topic.
const controlTimeout = 30 * time.Second

func newPauseCmd(g *globals) *cobra.Command {
	var reason string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "pause PIPELINE",
		Short: "stop a pipeline's handler calls in every replica, until redrive resume",
		Long: `Writes a pause of PIPELINE to the control topic (control.topic, default
redrive.control). Every process running the pipeline stops calling its
handler within a second; polled records wait, none is dead-lettered. The
pause is kept in the topic: it holds across restarts, and for replicas
started later, until ` + "`redrive resume PIPELINE`" + `.`,
		Args: onePipeline("pause"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setPause(cmd, g, args[0], true, reason, timeout)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown by redrive status")
	cmd.Flags().DurationVar(&timeout, "timeout", controlTimeout, "give up after this long")
	return cmd
}

func newResumeCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "resume PIPELINE",
		Short: "end a pause of a pipeline, and every shared stop of its line, in every replica",
		Long: `Writes a resume of PIPELINE to the control topic. Every process running
the pipeline starts calling its handler again within a second. A resume
also clears the pipeline's shared stops (an open breaker, a pause code's
stop, the guard's stop): the operator says the cause is fixed.`,
		Args: onePipeline("resume"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setPause(cmd, g, args[0], false, "", timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", controlTimeout, "give up after this long")
	return cmd
}

// onePipeline refuses anything but one argument, as a usage error.
func onePipeline(verb string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return &exitError{2, fmt.Errorf("%s takes one PIPELINE, got %d arguments: redrive %s -c FILE PIPELINE", verb, len(args), verb)}
		}
		return nil
	}
}

func setPause(cmd *cobra.Command, g *globals, pipeline string, paused bool, reason string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	c, cl, topic, err := openControl(ctx, g, pipeline, false)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := needTopic(ctx, cl, topic, g); err != nil {
		return err
	}
	if err := control.SetPause(ctx, cl, topic, pipeline, operator(), paused, reason); err != nil {
		return &exitError{1, fmt.Errorf("writing to the control topic %s: %w", topic, err)}
	}
	out := cmd.OutOrStdout()
	if paused {
		fmt.Fprintf(out, "paused %s: every replica stops calling its handler within a second (records wait; none is dead-lettered), and it stays paused across restarts until `redrive resume %s`\n", pipeline, pipeline)
	} else {
		fmt.Fprintf(out, "resumed %s: every replica calls its handler again within a second; its shared breaker, pause codes and guard stop are cleared too\n", pipeline)
	}
	if scopeOf(c, pipeline) == "process" {
		// Only the pause is shared with a process-scoped pipeline.
		fmt.Fprintf(out, "note: %s has scope: process; its replicas share only this pause, not their breakers or budgets\n", pipeline)
	}
	return nil
}

// openControl loads the config, checks that pipeline ("": any) is one of
// its pipelines and that it has a control topic, runs the start-up check
// for reading the topic (read) or writing it, and opens a client.
func openControl(ctx context.Context, g *globals, pipeline string, read bool) (*config.Config, *kgo.Client, string, error) {
	c, err := g.load()
	if err != nil {
		return nil, nil, "", err
	}
	if pipeline != "" {
		if err := knownPipeline(c, pipeline); err != nil {
			return nil, nil, "", &exitError{2, err}
		}
	}
	spec, ok := c.ControlSpec()
	if !ok {
		return nil, nil, "", &exitError{2, errors.New("control.enabled is false in the config: its pipelines have no control topic, so there is nothing to pause, resume or show (a processor's POST /api/pipelines/<name>/pause stops that one process)")}
	}
	need := kafkaconn.Need{Write: []string{spec.Name}}
	if read {
		need = kafkaconn.Need{Read: []string{spec.Name}}
	}
	if err := preflight(ctx, c, need); err != nil {
		return nil, nil, "", err
	}
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return nil, nil, "", &exitError{2, err}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, "", &exitError{2, err}
	}
	return c, cl, spec.Name, nil
}

// knownPipeline says, listing them, that name is none of c's pipelines:
// a pause of a name no processor runs would stop nothing.
func knownPipeline(c *config.Config, name string) error {
	names := make([]string, len(c.Pipelines))
	for i, p := range c.Pipelines {
		if p.Name == name {
			return nil
		}
		names[i] = p.Name
	}
	return fmt.Errorf("no pipeline %q in the config (its pipelines: %s)", name, strings.Join(names, ", "))
}

func scopeOf(c *config.Config, pipeline string) string {
	for _, p := range c.Pipelines {
		if p.Name == pipeline {
			return p.Scope
		}
	}
	return ""
}

// consumeOf is how the config says pipeline reads its main topic.
func consumeOf(c *config.Config, pipeline string) string {
	for _, p := range c.Pipelines {
		if p.Name == pipeline {
			return p.Consume
		}
	}
	return ""
}

// needTopic is a clear error when the control topic does not exist: a
// write would otherwise wait for it until the timeout.
func needTopic(ctx context.Context, cl *kgo.Client, topic string, g *globals) error {
	_, err := dlqread.Offsets(ctx, cl, topic)
	switch {
	case errors.Is(err, dlqread.ErrNoTopic):
		return noControlTopic(topic, g)
	case err != nil:
		return &exitError{1, fmt.Errorf("the control topic %s: %w", topic, err)}
	}
	return nil
}

func noControlTopic(topic string, g *globals) error {
	return &exitError{1, fmt.Errorf("the control topic %s does not exist: create it with `redrive topics ensure -c %s` (it creates it compacted, with one partition)", topic, g.configPath)}
}

// operator names who paused or resumed: user@host.
func operator() string {
	host, _ := os.Hostname()
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	switch {
	case name == "":
		return host
	case host == "":
		return name
	}
	return name + "@" + host
}

func newStatusCmd(g *globals) *cobra.Command {
	var pipeline string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show each pipeline's pause, shared line and replicas, as the control topic has them",
		Long: `Reads the control topic from its start and shows, per pipeline of the
config: whether an operator paused it (why, by whom, since when), the
stops of its shared line in force (an open breaker, a pause code's stop,
the guard's stop), and a table of the replicas that publish their status:
their line, the partitions they own, their share of the pipeline's
budgets, their load, and when they were last heard of. A replica not heard
of for three of its status intervals is stale: killed, or cut off from the
control topic. --json prints it all as one JSON object.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			c, cl, topic, err := openControl(ctx, g, pipeline, true)
			if err != nil {
				return err
			}
			defer cl.Close()
			s, skipped, err := control.Read(ctx, cl, topic)
			switch {
			case errors.Is(err, dlqread.ErrNoTopic):
				return noControlTopic(topic, g)
			case err != nil:
				return &exitError{1, fmt.Errorf("reading the control topic %s: %w", topic, err)}
			}
			if len(skipped) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "skipped %d malformed control record(s) of %s; the first: %v\n", len(skipped), topic, skipped[0])
			}
			var names []string
			for _, p := range c.Pipelines {
				if pipeline == "" || p.Name == pipeline {
					names = append(names, p.Name)
				}
			}
			v := statusOfControl(c, s, topic, names, time.Now())
			v.Skipped = len(skipped)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
			}
			v.write(cmd.OutOrStdout())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pipeline, "pipeline", "", "only this pipeline (default: every pipeline of the config)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object")
	fl.DurationVar(&timeout, "timeout", controlTimeout, "give up after this long")
	return cmd
}

// controlStatus is what `redrive status` shows, as --json prints it.
type controlStatus struct {
	Topic     string            `json:"topic"`
	At        time.Time         `json:"at"`
	Pipelines []pipelineControl `json:"pipelines"`
	// Skipped counts the records Decode refused.
	Skipped int `json:"skipped"`
}

// pipelineControl is one pipeline's part of the control topic.
type pipelineControl struct {
	Name  string `json:"name"`
	Scope string `json:"scope"` // as the config says
	// Consume is group or share, as the config says.
	Consume string `json:"consume"`
	// Paused is the operator's pause in force; nil when none is.
	Paused *pauseInForce `json:"paused"`
	// Line are the shared stops in force.
	Line     []stopInForce    `json:"line"`
	Replicas []replicaControl `json:"replicas"`
}

type pauseInForce struct {
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
}

// stopInForce is a breaker, pause code or guard record that stops the
// line now.
type stopInForce struct {
	Kind  control.Kind `json:"kind"`
	State string       `json:"state"`
	// Until is when it ends by itself; zero: when an operator resumes.
	Until time.Time `json:"until,omitzero"`
	Why   string    `json:"why,omitempty"`
	Code  string    `json:"code,omitempty"`
	By    string    `json:"by"`
	Since time.Time `json:"since"`
}

type replicaControl struct {
	control.Replica
	// SeenAgo is how long ago its status was written, in seconds.
	SeenAgo float64 `json:"seen_ago_seconds"`
}

func statusOfControl(c *config.Config, s *control.State, topic string, names []string, now time.Time) controlStatus {
	v := controlStatus{Topic: topic, At: now.UTC(), Pipelines: []pipelineControl{}}
	replicas := s.Replicas(now)
	for _, name := range names {
		p := pipelineControl{Name: name, Scope: scopeOf(c, name), Consume: consumeOf(c, name), Line: stopsInForce(s, name, now), Replicas: []replicaControl{}}
		if r, ok := s.Paused(name); ok {
			p.Paused = &pauseInForce{Reason: r.Pause.Reason, By: r.Instance, Since: r.At}
		}
		for _, r := range replicas {
			if r.Pipeline == name {
				p.Replicas = append(p.Replicas, replicaControl{Replica: r, SeenAgo: now.Sub(r.Seen).Seconds()})
			}
		}
		v.Pipelines = append(v.Pipelines, p)
	}
	return v
}

// stopsInForce are pipeline's shared stops that hold at now
// (control.State.InForce).
func stopsInForce(s *control.State, pipeline string, now time.Time) []stopInForce {
	out := []stopInForce{}
	for _, kind := range []control.Kind{control.KindBreaker, control.KindPauseCode, control.KindGuard} {
		if r, ok := s.InForce(kind, pipeline, now); ok {
			l := r.Line
			out = append(out, stopInForce{Kind: kind, State: l.State, Until: l.Until, Why: l.Why, Code: l.Code, By: r.Instance, Since: r.At})
		}
	}
	return out
}

func (v controlStatus) write(w io.Writer) {
	now := v.At
	for i, p := range v.Pipelines {
		if i > 0 {
			fmt.Fprintln(w)
		}
		how := "scope " + p.Scope
		if p.Consume == string(processor.ConsumeShare) {
			// Budgets are split by the replicas counted, not partitions.
			how += ", consume share"
		}
		if p.Paused != nil {
			fmt.Fprintf(w, "%s (%s): PAUSED by %s since %s (%s)%s\n", p.Name, how, p.Paused.By, clock(p.Paused.Since), ago(now, p.Paused.Since), suffix(p.Paused.Reason))
		} else {
			fmt.Fprintf(w, "%s (%s): not paused\n", p.Name, how)
		}
		if len(p.Line) == 0 {
			fmt.Fprintln(w, "  shared line: no stop in force")
		}
		for _, l := range p.Line {
			what := string(l.Kind) + " " + l.State
			switch l.Kind {
			case control.KindPauseCode:
				what = "pause code " + l.Code
			case control.KindGuard:
				what = "guard stopped"
			}
			until := "until resumed"
			if !l.Until.IsZero() {
				until = fmt.Sprintf("until %s (%s)", clock(l.Until), ago(now, l.Until))
			}
			fmt.Fprintf(w, "  shared line: %s %s, by %s%s\n", what, until, l.By, suffix(l.Why))
		}
		if len(p.Replicas) == 0 {
			fmt.Fprintln(w, "  replicas: none has published a status")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  INSTANCE\tLINE\tPARTITIONS\tSHARE\tRATE\tMAX CALLS\tIN FLIGHT\tCALLS IN FLIGHT\tCALLS/S\tLAST SEEN\tSTALE")
		for _, r := range p.Replicas {
			line := r.Line
			if r.Why != "" {
				line += " (" + r.Why + ")"
			}
			rate, calls := "-", "-"
			if r.RateLimit > 0 {
				rate = perSecond(r.RateLimit)
			}
			if r.LearnedRate > 0 && (r.RateLimit == 0 || r.LearnedRate < r.RateLimit) {
				// The rate learned from 429s is the one in force.
				rate = perSecond(r.LearnedRate) + " learned"
			}
			if r.MaxCallsInFlight > 0 {
				calls = strconv.Itoa(r.MaxCallsInFlight)
			}
			stale := ""
			if r.Stale {
				stale = "STALE"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d/%d\t%.0f%%\t%s\t%s\t%d\t%d\t%.1f\t%s\t%s\n",
				r.Instance, line, r.Partitions, r.TotalPartitions, 100*r.Share, rate, calls, r.Inflight, r.CallsInFlight, r.CallsPerSecond, ago(now, r.Seen), stale)
		}
		tw.Flush()
		if stale := slices.IndexFunc(p.Replicas, func(r replicaControl) bool { return r.Stale }); stale >= 0 {
			fmt.Fprintln(w, "  STALE: not heard of for three of its status intervals (killed, or cut off from the control topic)")
		}
	}
}

// perSecond is a rate for a reader: "12.5/s".
func perSecond(r float64) string {
	return strconv.FormatFloat(math.Round(r*100)/100, 'f', -1, 64) + "/s"
}

// clock is t for a reader, in UTC to the second.
func clock(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ago is how far t is from now: "2m5s ago", or "in 30s" ahead.
func ago(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

func suffix(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}
