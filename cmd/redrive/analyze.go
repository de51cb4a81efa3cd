package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor"
)

func newAnalyzeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "analyze",
		Short: "consume the DLQs: statistics, alerts, rule-based republish, JSON API and dashboard",
		Long: `Reads each pipeline's DLQ from the earliest retained offset to rebuild
its statistics, and, in the consumer group redrive.<pipeline>.analyzer,
applies analyzer.rules to every dead letter (republish, keep, drop; park
past max_redrives). Serves the dashboard at /, the JSON API under /api/,
and /metrics, /healthz, /readyz on analyzer.http_addr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if err := startTierNames(cmd.Context(), c); err != nil {
				return err
			}
			if err := preflight(cmd.Context(), c, analyzeNeeds(c)); err != nil {
				return err
			}
			o := obs.New()
			a, err := newAnalyzer(c, o)
			if err != nil {
				return &exitError{2, err}
			}
			return serveAnalyzer(cmd.Context(), c, o, a, nil)
		},
	}
}

// newAnalyzer builds the analyzer for c's pipelines, reporting into o;
// set, if any, change its options last (dev: the processors whose live
// state the flow view adds, the demo solver's outage switch).
func newAnalyzer(c *config.Config, o *obs.Server, set ...func(*analyzer.Options)) (*analyzer.Analyzer, error) {
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return nil, err
	}
	rules, err := dlq.CompileRules(c.Analyzer.RuleSpecs())
	if err != nil {
		return nil, err
	}
	ao := analyzer.Options{ClientOpts: opts, Principal: c.Principal(), Registerer: o.Registry, Logger: slog.Default(), Ready: o.Ready, Beat: o.Beat,
		Limits: c.Analyzer.Limits(), Instance: c.Instance, SessionTimeout: c.SessionTimeout.D(), HideValues: c.Analyzer.HideValues}
	// The dashboard answers to the name it listens on and to the
	// configured ones (besides the loopback names).
	if host, _, err := net.SplitHostPort(c.Analyzer.HTTPAddr); err == nil && host != "" {
		ao.AllowedHosts = append(ao.AllowedHosts, host)
	}
	ao.AllowedHosts = append(ao.AllowedHosts, c.Analyzer.AllowedHosts...)
	ao.ControlTopic = c.Control.Topic
	for _, p := range c.Pipelines {
		ap := analyzer.Pipeline{Name: p.Name, Topic: p.Topic, DLQ: p.DLQTopic(), Rules: dlq.RulesFor(rules, p.Name), Results: p.Results,
			ExactlyOnce: processor.Delivery(p.Delivery) == processor.ExactlyOnce,
			Share:       processor.Consume(p.Consume) == processor.ConsumeShare}
		s := p.Schedule()
		for i, t := range p.TierTopics() {
			ap.Tiers = append(ap.Tiers, analyzer.Tier{Name: s.TierName(i), Topic: t})
		}
		ao.Pipelines = append(ao.Pipelines, ap)
	}
	for i, al := range c.Analyzer.Alerts {
		name := al.Name
		if name == "" {
			name = fmt.Sprintf("alert-%d", i+1)
		}
		match, err := al.Match.Filter()
		if err != nil {
			return nil, fmt.Errorf("analyzer.alerts[%d].match: %w", i, err)
		}
		ao.Alerts = append(ao.Alerts, analyzer.Alert{
			Name: name, Pipeline: al.Pipeline, Kind: al.Kind, Threshold: al.Threshold,
			Window: al.Window.D(), Age: al.Age.D(), Webhook: al.Webhook, Repeat: al.Repeat.D(),
			Match: match,
		})
	}
	for _, f := range set {
		f(&ao)
	}
	return analyzer.New(ao)
}

// serveAnalyzer serves a's dashboard and API next to o's endpoints on
// analyzer.http_addr and runs it until ctx is done. addrOut, if set,
// receives the bound address. Without a token it refuses an address that
// is not loopback (config.CheckAnalyzerListen; exit 2) unless
// analyzer.insecure_public.
func serveAnalyzer(ctx context.Context, c *config.Config, o *obs.Server, a *analyzer.Analyzer, addrOut chan<- string) error {
	if err := c.CheckAnalyzerListen(); err != nil {
		return &exitError{2, err}
	}
	switch {
	case c.Analyzer.Token == "" && c.Analyzer.ReadToken == "" && !config.LoopbackAddr(c.Analyzer.HTTPAddr):
		slog.Warn("analyzer.insecure_public: the dashboard and API show every dead letter to anyone who reaches " + c.Analyzer.HTTPAddr + "; set analyzer.token")
	case c.Analyzer.Token == "" && c.Analyzer.ReadToken == "":
		slog.Info("analyzer: no token set, the API is open on loopback; POST /api/replay is off")
	case c.Analyzer.Token == "":
		slog.Info("analyzer.token is not set: POST /api/replay is off (analyzer.read_token reads only)")
	}
	o.Mux.Handle("/", a.HandlerAccess(c.Analyzer.Access()))
	addr, err := o.Serve(ctx, c.Analyzer.HTTPAddr, slog.Default())
	if err != nil {
		return err
	}
	slog.Info("analyzer dashboard", "url", "http://"+addr+"/")
	if addrOut != nil {
		addrOut <- addr
	}
	return a.Run(ctx)
}
