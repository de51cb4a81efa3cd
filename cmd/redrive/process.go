package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
)

func newProcessCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "process",
		Short: "run the config's pipelines with the built-in HTTP handler",
		Long: `Consumes each pipeline's main and retry topics in the consumer group
redrive.<pipeline>, POSTs every record to the pipeline's handler.http.url,
and writes results, retries and dead letters. Pipelines with
handler.callback get their callback intake served on callback_addr (as
redrive callbacks does). SIGTERM or SIGINT: stop fetching, finish
in-flight work within shutdown_grace, commit, exit 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if err := startTierNames(cmd.Context(), c); err != nil {
				return err
			}
			if err := preflight(cmd.Context(), c, processNeeds(c)); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			o := obs.New()
			addr, err := o.Serve(ctx, c.HTTPAddr, slog.Default())
			if err != nil {
				return err
			}
			slog.Info("serving /metrics, /healthz, /readyz", "addr", "http://"+addr)
			// The intake runs beside the processor and stops with it.
			in, err := startIntake(ctx, c, o)
			if err != nil {
				return err
			}
			err = runProcessor(ctx, c, nil, o)
			cancel()
			if werr := in.wait(); err == nil {
				err = werr
			}
			return err
		},
	}
}

// runProcessor runs c's pipelines until ctx is done. handlers, by pipeline
// name, override the HTTP handler from the config.
func runProcessor(ctx context.Context, c *config.Config, handlers map[string]processor.Handler, o *obs.Server) error {
	pc, err := processorConfig(c, handlers, o)
	if err != nil {
		return &exitError{2, err}
	}
	pr, err := processor.New(pc, nil)
	if err != nil {
		return &exitError{2, err}
	}
	// GET /api/pipelines (the live state), POST
	// /api/pipelines/{name}/pause|resume (with processor.token).
	ph := pr.PipelinesHandler(c.Processor.Token)
	o.Mux.Handle("/api/pipelines", ph)
	o.Mux.Handle("/api/pipelines/", ph)
	slog.Info("processor starting", "pipelines", len(pc.Pipelines), "brokers", c.Brokers, "instance", pc.Instance)
	if err := pr.Run(ctx); err != nil {
		return err
	}
	slog.Info("processor stopped cleanly")
	return nil
}

func processorConfig(c *config.Config, handlers map[string]processor.Handler, o *obs.Server) (processor.Config, error) {
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return processor.Config{}, err
	}
	pc := processor.Config{
		Brokers:        c.Brokers,
		ClientOpts:     opts, // its seed brokers repeat Brokers: harmless
		Instance:       c.Instance,
		Principal:      c.Principal(),
		SessionTimeout: c.SessionTimeout.D(),
		ShutdownGrace:  c.ShutdownGrace.D(),
		CommitInterval: c.CommitInterval.D(),
		Registerer:     o.Registry,
		Logger:         slog.Default(),
		Ready:          o.Ready,
		Beat:           o.Beat,
		Control:        c.ProcessorControl(),
		Degraded:       o.Degraded,
	}
	for _, p := range c.Pipelines {
		h := handlers[p.Name]
		if h == nil {
			if p.Handler.HTTP == nil {
				return pc, fmt.Errorf("pipeline %q: no handler.http in the config (a Go program can embed processor.New with its own Handler instead)", p.Name)
			}
			hh, err := httphandler.New(p.HTTPOptions())
			if err != nil {
				return pc, fmt.Errorf("pipeline %q: %w", p.Name, err)
			}
			h = hh
		}
		pc.Pipelines = append(pc.Pipelines, p.ProcessorPipeline(h))
	}
	return pc, nil
}
