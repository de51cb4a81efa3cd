package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/internal/demosolver"
	"github.com/redrive/redrive/internal/obs"
)

func newDemoSolverCmd(_ *globals) *cobra.Command {
	var addr string
	var cfg demosolver.Config
	cmd := &cobra.Command{
		Use:   "demo-solver",
		Short: "a demo CAPTCHA-solving HTTP service speaking redrive's HTTP handler protocol",
		Long: `Serves POST /solve: answers 200 with a JSON answer, 503 with
ERROR_NO_SLOT_AVAILABLE and Retry-After (--fail-rate), 202 with a task id
until polled --polls-to-ready times (--not-ready-rate), 400
ERROR_WRONG_USER_KEY (--permanent-rate, or a value containing "bad-key").
GET /stats: counters as JSON. POST /outage?for=30s: an outage, every
/solve call answered 503 ERROR_SERVICE_OUTAGE for that long (for=0 ends
it; at most 10m); GET /outage: {"active", "until"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return &exitError{2, fmt.Errorf("--addr %s: %w", addr, err)}
			}
			srv := obs.HTTPServer(demosolver.New(cfg), obs.Limits{})
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			slog.Info("demo solver listening", "url", "http://"+ln.Addr().String()+"/solve")
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	fl.Float64Var(&cfg.FailRate, "fail-rate", 0.25, "share of answers that are 503 ERROR_NO_SLOT_AVAILABLE")
	fl.Float64Var(&cfg.NotReadyRate, "not-ready-rate", 0.15, "share of new tasks answered 202 (poll again)")
	fl.Float64Var(&cfg.PermanentRate, "permanent-rate", 0.02, "share of answers that are 400 ERROR_WRONG_USER_KEY")
	fl.IntVar(&cfg.PollsToReady, "polls-to-ready", 2, "polls before a deferred task is ready")
	fl.DurationVar(&cfg.Latency, "latency", 20*time.Millisecond, "time to answer")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	return cmd
}
