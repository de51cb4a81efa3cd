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
	"github.com/redrive/redrive/internal/fakeapi"
	"github.com/redrive/redrive/internal/obs"
)

func newDemoSolverCmd(_ *globals) *cobra.Command {
	var addr string
	var cfg demosolver.Config
	var withCaptcha, withSMM, pingbackPOST bool
	var pb fakeapi.PingbackOptions
	cmd := &cobra.Command{
		Use:   "demo-solver",
		Short: "a demo CAPTCHA-solving HTTP service speaking redrive's HTTP handler protocol; fake CaptchaAI and SMM panel APIs",
		Long: `Serves POST /solve: answers 200 with a JSON answer, 503 with
ERROR_NO_SLOT_AVAILABLE and Retry-After (--fail-rate), 202 with a task id
until polled --polls-to-ready times (--not-ready-rate), 400
ERROR_WRONG_USER_KEY (--permanent-rate, or a value containing "bad-key").
GET /stats: counters as JSON. POST /outage?for=30s: an outage, every
/solve call answered 503 ERROR_SERVICE_OUTAGE for that long (for=0 ends
it; at most 10m); GET /outage: {"active", "until"}.

--captchaai also serves a fake CaptchaAI / 2captcha (in.php, res.php,
pingbacks to 127.0.0.1 only; counters at /captchaai/stats), --smm a fake
SMM panel (POST /api/v2; counters at /smm/stats), in the services'
documented wire formats, for the captchaai and smm-panel presets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return &exitError{2, fmt.Errorf("--addr %s: %w", addr, err)}
			}
			base := "http://" + ln.Addr().String()
			mux := http.NewServeMux()
			mux.Handle("/", demosolver.New(cfg))
			if withCaptcha {
				if pingbackPOST {
					pb.Style = fakeapi.PingbackPOST
				}
				captcha := fakeapi.NewCaptchaAI(fakeapi.CaptchaOptions{Pingback: pb}, cfg.Seed)
				defer captcha.Close()
				mux.Handle("/in.php", captcha)
				mux.Handle("/res.php", captcha)
				mux.Handle("/captchaai/stats", http.StripPrefix("/captchaai", captcha))
				slog.Info("fake CaptchaAI listening", "submit", base+"/in.php", "poll", base+"/res.php", "key", fakeapi.DefaultCaptchaKey)
			}
			if withSMM {
				smm := fakeapi.NewSMMPanel(fakeapi.SMMOptions{}, cfg.Seed)
				mux.Handle("/api/v2", smm)
				mux.Handle("/smm/stats", http.StripPrefix("/smm", smm))
				slog.Info("fake SMM panel listening", "url", base+"/api/v2", "key", fakeapi.DefaultSMMKey)
			}
			srv := obs.HTTPServer(mux, obs.Limits{})
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			slog.Info("demo solver listening", "url", base+"/solve")
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
	fl.BoolVar(&withCaptcha, "captchaai", false, "also serve a fake CaptchaAI / 2captcha: /in.php, /res.php, pingbacks")
	fl.BoolVar(&withSMM, "smm", false, "also serve a fake SMM panel: POST /api/v2")
	fl.Float64Var(&pb.DropRatio, "pingback-drop", 0.2, "--captchaai: share of tasks whose pingback is never sent")
	fl.Float64Var(&pb.DuplicateRatio, "pingback-duplicate", 0.1, "--captchaai: share of tasks whose pingback is sent twice")
	fl.Float64Var(&pb.EarlyRatio, "pingback-early", 0.05, "--captchaai: share of tasks whose pingback comes before the submit's answer")
	fl.BoolVar(&pingbackPOST, "pingback-post", false, "--captchaai: pingbacks as a POST form (2captcha) instead of a GET (CaptchaAI)")
	return cmd
}
