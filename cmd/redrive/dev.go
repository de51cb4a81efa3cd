package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/demosolver"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor/httphandler"
)

type devFlags struct {
	kafkaPort    int
	httpAddr     string
	analyzerAddr string
	solverAddr   string
	rate         float64
	duration     time.Duration
	seed         uint64
}

func newDevCmd(g *globals) *cobra.Command {
	f := &devFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "everything on one machine: embedded broker, demo solver, processor, sample traffic, dashboard",
		Long: `Starts an embedded Kafka broker (kfake, in memory) on 127.0.0.1, a demo
CAPTCHA solver that fails, defers and rejects some requests, creates the
pipeline's topics, runs the processor against the solver, produces sample
traffic and serves the analyzer's dashboard (the pipeline's flow and its
DLQ). With -c, the config's pipelines are used
(their brokers replaced by the embedded one; pipelines without
handler.http are pointed at the demo solver). Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), g, f, cmd.ErrOrStderr()) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.kafkaPort, "kafka-port", 19092, "port of the embedded broker on 127.0.0.1 (0: any free port)")
	fl.StringVar(&f.httpAddr, "http", "127.0.0.1:9090", "the processor's /api/pipelines, /metrics, /healthz, /readyz")
	fl.StringVar(&f.analyzerAddr, "analyzer", "127.0.0.1:9091", "the analyzer's dashboard and API")
	fl.StringVar(&f.solverAddr, "solver", "127.0.0.1:0", "demo solver address")
	fl.Float64Var(&f.rate, "rate", 20, "sample requests per second (0: none)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	fl.Uint64Var(&f.seed, "seed", 1, "demo solver's random seed")
	return cmd
}

// devConfig is the pipeline `redrive dev` runs without -c: the design's
// example with short tiers, so retries are visible within a minute.
func devConfig(brokers, solverURL string) *config.Config {
	yaml := fmt.Sprintf(`
brokers: [%q]
shutdown_grace: 5s
pipelines:
  - name: solve
    topic: solve.requests
    results: solve.results
    partitions: 6
    retry: {tiers: [1s, 5s, 15s], max_attempts: 4, jitter: 0.1}
    not_ready_deadline: 2m
    concurrency: 64
    dlq: {redact_headers: [authorization]}
    handler:
      http: {url: %q, timeout: 5s}
      codes:
        transient: [ERROR_NO_SLOT_AVAILABLE]
        not_ready: [CAPCHA_NOT_READY]
        permanent: [ERROR_WRONG_USER_KEY]
processor:
  token: %s
analyzer:
  token: %s
  rules:
    - name: no-slot-later
      match: {codes: [ERROR_NO_SLOT_AVAILABLE]}
      action: republish
      after: 10s
      max_redrives: 1
`, brokers, solverURL, devToken, devToken)
	c, err := config.Parse([]byte(yaml), func(string) string { return "" })
	if err != nil {
		panic("redrive dev's built-in config is invalid: " + err.Error()) // a bug, caught by tests
	}
	return c
}

func runDev(ctx context.Context, g *globals, f *devFlags, out io.Writer) error {
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(f.kafkaPort), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("embedded broker on 127.0.0.1:%d: %w (try --kafka-port 0)", f.kafkaPort, err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()[0]

	solver := demosolver.New(demosolver.Config{FailRate: 0.25, NotReadyRate: 0.15, PermanentRate: 0.03, PollsToReady: 2, Latency: 20 * time.Millisecond, Seed: f.seed})
	sl, err := net.Listen("tcp", f.solverAddr)
	if err != nil {
		return fmt.Errorf("demo solver on %s: %w", f.solverAddr, err)
	}
	ssrv := obs.HTTPServer(solver, obs.Limits{})
	go func() { _ = ssrv.Serve(sl) }()
	defer ssrv.Close()
	solverURL := "http://" + sl.Addr().String() + "/solve"

	var c *config.Config
	if g.configPath != "" {
		if c, err = g.load(); err != nil {
			return err
		}
		c.Brokers, c.SASL, c.TLS = []string{brokers}, nil, nil
		for i := range c.Pipelines {
			if c.Pipelines[i].Handler.HTTP == nil {
				c.Pipelines[i].Handler.HTTP = &config.HTTPHandler{URL: solverURL, Timeout: config.Duration(5 * time.Second), MaxBodyBytes: httphandler.DefaultMaxBodyBytes}
			}
		}
	} else {
		c = devConfig(brokers, solverURL)
	}
	c.HTTPAddr = f.httpAddr
	c.Analyzer.HTTPAddr = f.analyzerAddr
	// The replay token is printed only when dev chose it: one from the
	// environment or the file is a secret, said to be set, not shown.
	tokenNote := fmt.Sprintf("replay token %q", devToken)
	if c.Analyzer.Token == "" {
		c.Analyzer.Token = devToken
	} else if g.configPath != "" {
		tokenNote = "replay token: the one set by " + tokenOrigin(c, "analyzer.token")
	}
	// The same for the processor's pause and resume token.
	pauseNote := fmt.Sprintf("pause/resume token %q", devToken)
	if c.Processor.Token == "" {
		c.Processor.Token = devToken
	} else if g.configPath != "" {
		pauseNote = "pause/resume token: the one set by " + tokenOrigin(c, "processor.token")
	}

	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	rep, err := topicsRun(tctx, c, true)
	tcancel()
	if err != nil {
		rep.WriteTable(out)
		return fmt.Errorf("creating topics on the embedded broker: %w", err)
	}

	// The processor's endpoints: /metrics, /healthz, /readyz and (mounted
	// by runProcessor) /api/pipelines. Its status is the analyzer's
	// dashboard, which / leads to.
	o := obs.New()
	addr, err := o.Serve(ctx, c.HTTPAddr, slog.Default())
	if err != nil {
		return err
	}

	ao := obs.New()
	an, err := newAnalyzer(c, ao, func(o *analyzer.Options) {
		o.Processors = []string{"http://" + addr} // its flow view shows this processor's in flight, p99s and line
		if usesSolver(c, solverURL) {
			o.DemoOutage = solverOutage(solver) // the dashboard's outage button
		}
	})
	if err != nil {
		return err
	}
	anAddr := make(chan string, 1)
	anDone := make(chan error, 1)
	go func() { anDone <- serveAnalyzer(ctx, c, ao, an, anAddr) }()
	var analyzerURL string
	select {
	case a := <-anAddr:
		analyzerURL = "http://" + a + "/"
	case err := <-anDone:
		return fmt.Errorf("analyzer: %w", err)
	}
	o.Mux.Handle("GET /{$}", http.RedirectHandler(analyzerURL, http.StatusFound))

	fmt.Fprintf(out, `
redrive dev is running
  dashboard     %s   (the pipeline's flow and its DLQ; %s)
  processor     http://%s/api/pipelines   (this processor's live state; /metrics, /healthz, /readyz;
                POST /api/pipelines/<name>/pause|resume with %s)
  kafka         %s   (embedded, in memory; e.g. kcat -b %s -t %s -C -J)
  demo solver   %s   (an outage: the dashboard's button, or curl -X POST '%s?for=30s')
  traffic       %.0f requests/s to %s
Ctrl-C stops it.

`, analyzerURL, tokenNote, addr, pauseNote, brokers, brokers, c.Pipelines[0].DLQTopic(), solverURL, strings.TrimSuffix(solverURL, "/solve")+"/outage", f.rate, c.Pipelines[0].Topic)

	if f.rate > 0 {
		go sampleTraffic(ctx, brokers, c.Pipelines[0].Topic, f.rate, f.seed)
	}
	go summaryLoop(ctx, o, out, 5*time.Second)
	perr := runProcessor(ctx, c, nil, o)
	return errors.Join(perr, <-anDone)
}

// usesSolver reports whether one of c's pipelines calls the demo solver
// at url (always without -c; with it, those without handler.http).
func usesSolver(c *config.Config, url string) bool {
	for _, p := range c.Pipelines {
		if p.Handler.HTTP != nil && p.Handler.HTTP.URL == url {
			return true
		}
	}
	return false
}

// solverOutage is the analyzer's DemoOutage for dev's own demo solver: it
// runs in this process, so the switch is a call, not a request.
func solverOutage(s *demosolver.Solver) func(context.Context, time.Duration) error {
	return func(_ context.Context, d time.Duration) error {
		o, err := s.SetOutage(d)
		if err != nil {
			return err
		}
		if o.Active {
			slog.Warn("demo solver outage: every call is answered 503 "+demosolver.CodeOutage, "until", o.Until.Format(time.RFC3339))
		} else {
			slog.Info("demo solver outage ended")
		}
		return nil
	}
}

// devToken is the replay token dev uses when the config sets none.
// devToken is the replay token and processor.token dev uses when the
// config sets none.
const devToken = "dev"

// tokenOrigin says where the config's token at path (analyzer.token,
// processor.token) came from, without its value.
func tokenOrigin(c *config.Config, path string) string {
	if o := c.Origin(path); o != "" {
		return o
	}
	return "the config"
}

// sampleTraffic produces solve requests until ctx is done: mostly good
// ones, a few with a wrong key (the solver rejects those permanently).
func sampleTraffic(ctx context.Context, brokers, topic string, rate float64, seed uint64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		slog.Error("sample traffic", "err", err)
		return
	}
	defer cl.Close()
	rnd := rand.New(rand.NewPCG(seed, 7))
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	sites := []string{"shop.example", "forum.example", "bank.example", "mail.example"}
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		site := sites[rnd.IntN(len(sites))]
		apiKey := "demo-key"
		if rnd.IntN(50) == 0 {
			apiKey = "bad-key"
		}
		v := fmt.Sprintf(`{"type":"recaptcha","site":%q,"api_key":%q,"n":%d}`, site, apiKey, n)
		cl.Produce(ctx, &kgo.Record{
			Key:   []byte(site),
			Value: []byte(v),
			Headers: []kgo.RecordHeader{
				{Key: "content-type", Value: []byte("application/json")},
				{Key: "idempotency-key", Value: []byte("req-" + strconv.Itoa(n))},
				{Key: "authorization", Value: []byte("Bearer demo-secret")},
			},
		}, nil)
	}
}

// summaryLoop prints one line every interval: handled, retried per tier,
// dead-lettered, in flight, waiting, from the processor's own metrics.
func summaryLoop(ctx context.Context, o *obs.Server, out io.Writer, every time.Duration) {
	started := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fmt.Fprintln(out, devSummary(o, time.Since(started)))
	}
}

// devSummary is the one-line status `redrive dev` prints.
func devSummary(o *obs.Server, up time.Duration) string {
	var handled, dead, inflight, waiting float64
	tiers := map[string]float64{}
	mfs, _ := o.Registry.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "redrive_outcomes_total":
				handled += m.GetCounter().GetValue()
			case "redrive_dead_letters_total":
				dead += m.GetCounter().GetValue()
			case "redrive_inflight_records":
				inflight += m.GetGauge().GetValue()
			case "redrive_waiting_records":
				waiting += m.GetGauge().GetValue()
			case "redrive_retries_scheduled_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "tier" {
						tiers[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	names := make([]string, 0, len(tiers))
	for t := range tiers {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := time.ParseDuration(names[i])
		b, _ := time.ParseDuration(names[j])
		return a < b
	})
	var rt []string
	for _, t := range names {
		rt = append(rt, fmt.Sprintf("%s:%.0f", t, tiers[t]))
	}
	ready := "ready"
	if err := o.IsReady(); err != nil {
		ready = "not ready: " + err.Error()
	}
	return fmt.Sprintf("up %s  handled %.0f  retried [%s]  dead-lettered %.0f  in flight %.0f  waiting %.0f  %s",
		up.Round(time.Second), handled, strings.Join(rt, " "), dead, inflight, waiting, ready)
}
