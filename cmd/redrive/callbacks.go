package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor/intake"
)

func newCallbacksCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "callbacks",
		Short: "serve only the callback intake of the config's pipelines (handler.callback) on callback_addr",
		Long: `Serves every pipeline's handler.callback.path on callback_addr, as
redrive process does, without processing: run it apart to scale the
public-facing intake on its own. Each callback is written to the
pipeline's callbacks topic (acks=all) and answered 200 only after the
broker acknowledged it; 503 when it could not be written. /metrics,
/healthz and /readyz (the callbacks topics and DLQs exist) are on
http_addr. SIGTERM or SIGINT: finish the requests in flight, exit 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if !c.HasCallbacks() {
				return &exitError{2, errors.New("no pipeline has handler.callback: nothing to serve")}
			}
			ctx := cmd.Context()
			if err := preflight(ctx, c, callbacksNeeds(c)); err != nil {
				return err
			}
			o := obs.New()
			addr, err := o.Serve(ctx, c.HTTPAddr, slog.Default())
			if err != nil {
				return &exitError{1, err}
			}
			slog.Info("serving /metrics, /healthz, /readyz", "addr", "http://"+addr)
			in, err := startIntake(ctx, c, o)
			if err != nil {
				return err
			}
			return in.wait()
		},
	}
}

// intakeServer is the callback intake serving callback_addr.
type intakeServer struct {
	addr string
	done chan error
}

// ackGrace is how long a stopping intake waits for its requests in
// flight: their acknowledgement, and a little more.
const ackGrace = intake.AckTimeout + 5*time.Second

// startIntake serves the callback intakes of c's pipelines on
// callback_addr until ctx is done, with a producer client of its own
// (kafkaconn options + intake.ProducerOpts), metrics on o's registry and
// a readiness check per pipeline ("callbacks <pipeline>": its callbacks
// topic and DLQ exist with leaders). Nil, nil when no pipeline has
// handler.callback. Stopping: no new requests, those in flight finish (up
// to ackGrace), then the client closes; wait returns then.
func startIntake(ctx context.Context, c *config.Config, o *obs.Server) (*intakeServer, error) {
	if !c.HasCallbacks() {
		return nil, nil
	}
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return nil, &exitError{2, err}
	}
	cl, err := kgo.NewClient(append(opts, intake.ProducerOpts()...)...)
	if err != nil {
		return nil, &exitError{2, err}
	}
	instance := c.Instance
	if instance == "" {
		instance, _ = os.Hostname()
	}
	var intakes []*intake.Intake
	for _, p := range c.Pipelines {
		if p.Handler.Callback == nil {
			continue
		}
		co := p.CallbackOptions()
		co.Client, co.Logger, co.Registerer, co.Instance = cl, slog.Default(), o.Registry, instance
		if co.Token == "" {
			// The config refuses this on an address others reach unless
			// insecure_public says so; on loopback (a proxy in front, a
			// test) it is allowed, and said.
			slog.Warn("callback intake without a token: anyone who can reach callback_addr can post a result for any job; set handler.callback.token (\"${CB_TOKEN}\") and put it in the pingback URL",
				"pipeline", p.Name, "path", co.Path, "addr", c.CallbackAddr, "insecure_public", p.Handler.Callback.InsecurePublic)
		}
		in, err := intake.New(co)
		if err != nil {
			cl.Close()
			return nil, &exitError{2, fmt.Errorf("pipeline %q: handler.callback: %w", p.Name, err)}
		}
		intakes = append(intakes, in)
	}
	mux, err := intake.NewMux(intakes...)
	if err != nil {
		cl.Close()
		return nil, &exitError{2, err}
	}
	ln, err := net.Listen("tcp", c.CallbackAddr)
	if err != nil {
		cl.Close()
		return nil, &exitError{1, fmt.Errorf("callback_addr %s: %w", c.CallbackAddr, err)}
	}
	srv := obs.HTTPServer(mux, obs.Limits{})
	s := &intakeServer{addr: ln.Addr().String(), done: make(chan error, 1)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		readyLoop(ctx, intakes, o)
	}()
	go func() {
		var err error
		select {
		case <-ctx.Done():
		case err = <-served:
		}
		sctx, cancel := context.WithTimeout(context.Background(), ackGrace)
		_ = srv.Shutdown(sctx)
		cancel()
		<-checked
		cl.Close()
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.done <- &exitError{1, fmt.Errorf("callback intake on %s: %w", s.addr, err)}
			return
		}
		s.done <- nil
	}()
	for _, in := range intakes {
		slog.Info("serving callbacks", "pipeline", in.Options().Pipeline, "url", "http://"+s.addr+in.Path(), "topic", in.Options().Topic)
	}
	return s, nil
}

// wait returns once the intake stopped; nil for a clean stop. A nil
// intakeServer (no callbacks) returns at once.
func (s *intakeServer) wait() error {
	if s == nil {
		return nil
	}
	return <-s.done
}

// readyInterval is how often the intake's readiness is checked.
const readyInterval = 10 * time.Second

// readyLoop reports each intake's readiness (intake.Intake.Ready) to o
// at once and every readyInterval until ctx is done.
func readyLoop(ctx context.Context, intakes []*intake.Intake, o *obs.Server) {
	t := time.NewTicker(readyInterval)
	defer t.Stop()
	for {
		for _, in := range intakes {
			cctx, cancel := context.WithTimeout(ctx, readyInterval)
			err := in.Ready(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			o.Ready("callbacks "+in.Options().Pipeline, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
