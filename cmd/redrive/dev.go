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
	"net/url"
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
	"github.com/redrive/redrive/internal/fakeapi"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor/httphandler"
)

type devFlags struct {
	kafkaPort     int
	httpAddr      string
	analyzerAddr  string
	solverAddr    string
	captchaAddr   string
	callbacksAddr string
	rate          float64
	duration      time.Duration
	seed          uint64
}

func newDevCmd(g *globals) *cobra.Command {
	f := &devFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "everything on one machine: embedded broker, demo solver, fake CaptchaAI, processor, sample traffic, dashboard",
		Long: `Starts an embedded Kafka broker (kfake, in memory) on 127.0.0.1, a demo
CAPTCHA solver that fails, defers and rejects some requests, and a fake
CaptchaAI (in.php, res.php, pingbacks: some dropped, some sent twice);
creates the topics of two pipelines, solve (the demo solver) and captcha
(the captchaai preset against the fake: submit with pingback, callback,
fallback poll), runs the processor and the callback intake, produces
sample traffic and serves the analyzer's dashboard (the pipelines' flow,
callbacks and DLQ). With -c, the config's pipelines are used (their
brokers replaced by the embedded one; pipelines without handler.http are
pointed at the demo solver). Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), g, f, cmd.ErrOrStderr()) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.kafkaPort, "kafka-port", 19092, "port of the embedded broker on 127.0.0.1 (0: any free port)")
	fl.StringVar(&f.httpAddr, "http", "127.0.0.1:9090", "the processor's /api/pipelines, /metrics, /healthz, /readyz")
	fl.StringVar(&f.analyzerAddr, "analyzer", "127.0.0.1:9091", "the analyzer's dashboard and API")
	fl.StringVar(&f.solverAddr, "solver", "127.0.0.1:0", "demo solver address")
	fl.StringVar(&f.captchaAddr, "captchaai", "127.0.0.1:0", "fake CaptchaAI address (in.php, res.php)")
	fl.StringVar(&f.callbacksAddr, "callbacks", "127.0.0.1:0", "callback_addr: where the callback intake listens (port 0: a free port, chosen at start)")
	fl.Float64Var(&f.rate, "rate", 20, "sample requests per second (0: none)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	fl.Uint64Var(&f.seed, "seed", 1, "demo solver's random seed")
	return cmd
}

// devCaptcha is how dev's fake CaptchaAI behaves: tasks solved in 1–3 s,
// a fifth of the pingbacks dropped (those tasks are polled after the
// callback wait), a tenth sent twice (deduplicated), a few before the
// submit is answered, a few submits without a slot, a few unsolvable
// (submitted anew: poll.resubmit).
func devCaptcha(seed uint64) *fakeapi.CaptchaAI {
	return fakeapi.NewCaptchaAI(fakeapi.CaptchaOptions{
		NoSlotRatio:     0.05,
		UnsolvableRatio: 0.02,
		Pingback: fakeapi.PingbackOptions{
			DropRatio: 0.2, DuplicateRatio: 0.1, EarlyRatio: 0.05,
			RetryDelay: 500 * time.Millisecond,
		},
	}, seed)
}

// devEnv answers the ${NAMES} of dev's own config: the fake CaptchaAI's key
// and the callback token. The process environment is not read, so a real
// key set there never reaches the fake.
func devEnv(name string) string {
	switch name {
	case "CAPTCHA_API_KEY":
		return fakeapi.DefaultCaptchaKey
	case "CB_TOKEN":
		return devCallbackToken
	}
	return ""
}

// devCallbackToken is the callback token of dev's captcha pipeline.
const devCallbackToken = "dev-callback-token"

// devCallbackPath is where the captcha pipeline's callbacks come in.
const devCallbackPath = "/cb/captcha"

// devConfig is the configuration `redrive dev` runs without -c: the
// design's example with short tiers, so retries are visible within a
// minute, and the captchaai preset against the fake CaptchaAI at
// captchaBase (http://host:port) with short waits (a callback wait of 10s,
// polls every 2s), its callbacks on callbackAddr. The YAML is what a user
// would write; ${CAPTCHA_API_KEY} and ${CB_TOKEN} come from devEnv.
func devConfig(brokers, solverURL, captchaBase, callbackAddr string) *config.Config {
	yaml := fmt.Sprintf(`
brokers: [%[1]q]
shutdown_grace: 5s
callback_addr: %[4]q
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
      http: {url: %[2]q, timeout: 5s}
      codes:
        transient: [ERROR_NO_SLOT_AVAILABLE]
        not_ready: [CAPCHA_NOT_READY]
        permanent: [ERROR_WRONG_USER_KEY]
  - name: captcha
    topic: captcha.requests
    results: captcha.results
    partitions: 3
    retry: {tiers: [1s, 5s, 15s], max_attempts: 4, jitter: 0.1}
    not_ready_deadline: 2m
    handler:
      http:
        url: %[5]q
        timeout: 15s
        query: {key: "${CAPTCHA_API_KEY}", json: "1", pingback: "http://%[4]s%[6]s?token=${CB_TOKEN}"}
        json: {ok_field: status, ok_value: 1, code_field: request}
        poll:
          url: "%[7]s?key=${CAPTCHA_API_KEY}&action=get&json=1&id={state}"
          state_field: request
          result_field: request
          first_after: 2s
          every: 2s
          resubmit: [ERROR_CAPTCHA_UNSOLVABLE]
      callback:
        path: %[6]s
        token: "${CB_TOKEN}"
        id_field: id
        result_field: code
        wait: 10s
      codes:
        transient: [ERROR_NO_SLOT_AVAILABLE]
        request_fault: [ERROR_CAPTCHA_UNSOLVABLE]
        not_ready: [CAPCHA_NOT_READY]
        permanent: [ERROR_WRONG_USER_KEY, ERROR_KEY_DOES_NOT_EXIST, ERROR_WRONG_CAPTCHA_ID]
        pause: {ERROR_ZERO_BALANCE: 30s}
processor:
  token: %[3]s
analyzer:
  token: %[3]s
  rules:
    - name: no-slot-later
      match: {codes: [ERROR_NO_SLOT_AVAILABLE]}
      action: republish
      after: 10s
      max_redrives: 1
`, brokers, solverURL, devToken, callbackAddr, captchaBase+"/in.php", devCallbackPath, captchaBase+"/res.php")
	c, err := config.Parse([]byte(yaml), devEnv)
	if err != nil {
		panic("redrive dev's built-in config is invalid: " + err.Error()) // a bug, caught by tests
	}
	return c
}

func runDev(ctx context.Context, g *globals, f *devFlags, out io.Writer) (err error) {
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	// cancel stops everything dev started on ctx (the intake, the
	// analyzer, the traffic) once the processor has stopped.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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

	// The fake CaptchaAI, for the captcha pipeline: it calls the callback
	// intake on callbackAddr back.
	captcha := devCaptcha(f.seed)
	defer captcha.Close() // after its server: stops the pingbacks still to come
	cl, err := net.Listen("tcp", f.captchaAddr)
	if err != nil {
		return fmt.Errorf("fake CaptchaAI on %s: %w", f.captchaAddr, err)
	}
	csrv := obs.HTTPServer(captcha, obs.Limits{})
	go func() { _ = csrv.Serve(cl) }()
	defer csrv.Close()
	captchaBase := "http://" + cl.Addr().String()
	callbackAddr, err := pickPort(f.callbacksAddr)
	if err != nil {
		return fmt.Errorf("--callbacks %s: %w", f.callbacksAddr, err)
	}

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
		c = devConfig(brokers, solverURL, captchaBase, callbackAddr)
	}
	c.HTTPAddr = f.httpAddr
	c.CallbackAddr = callbackAddr
	c.Analyzer.HTTPAddr = f.analyzerAddr
	// The replay token is printed only when dev chose it: one from the
	// environment or the file is a secret, said to be set, not shown.
	tokenNote := fmt.Sprintf("replay token %q", devToken)
	// dev's own token (its config's, or picked below when a file sets
	// none) turns replay on but leaves the dashboard open (OpenReads):
	// only on loopback, as the analyzer's listen rule has it.
	pickedToken := c.Analyzer.ReadToken == "" && (c.Analyzer.Token == "" || (g.configPath == "" && c.Analyzer.Token == devToken))
	if pickedToken && !c.Analyzer.InsecurePublic && !config.LoopbackAddr(c.Analyzer.HTTPAddr) {
		return &exitError{2, fmt.Errorf("--analyzer %s is not a loopback address and no token is set: the dashboard would show every dead letter to anyone who reaches it; "+
			"listen on 127.0.0.1, or give a config (-c) with analyzer.token (%s) or analyzer.read_token (%s), or analyzer.insecure_public: true",
			c.Analyzer.HTTPAddr, config.EnvAnalyzerToken, config.EnvAnalyzerReadToken)}
	}
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
	// The callback intake on callback_addr, as redrive process serves it
	// (its metrics and readiness on o): the fake CaptchaAI's pingbacks
	// reach the captcha pipeline through it. Nil without a pipeline with
	// handler.callback.
	in, err := startIntake(ctx, c, o)
	if err != nil {
		return err
	}
	defer func() {
		cancel() // the processor stopped (or dev failed to start): so does the intake
		err = errors.Join(err, in.wait())
	}()

	ao := obs.New()
	an, err := newAnalyzer(c, ao, func(o *analyzer.Options) {
		o.Processors = []string{"http://" + addr} // its flow view shows this processor's in flight, p99s and line
		o.OpenReads = pickedToken                 // on loopback (checked above): dev's own token is for replay only
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

	captchaTopic := devCaptchaTopic(c, captchaBase)
	traffic := fmt.Sprintf("%.0f requests/s to %s", f.rate, c.Pipelines[0].Topic)
	if captchaTopic != "" {
		traffic += fmt.Sprintf(", %.0f/s to %s", captchaRate(f.rate), captchaTopic)
	}
	fmt.Fprintf(out, `
redrive dev is running
  dashboard     %s   (the pipelines' flow, callbacks and DLQ; %s)
  processor     http://%s/api/pipelines   (this processor's live state; /metrics, /healthz, /readyz;
                POST /api/pipelines/<name>/pause|resume with %s)
  kafka         %s   (embedded, in memory; e.g. redrive tail --brokers %s %s --from-start)
  demo solver   %s   (an outage: the dashboard's button, or curl -X POST '%s?for=30s')
%s  traffic       %s
Ctrl-C stops it.

`, analyzerURL, tokenNote, addr, pauseNote, brokers, brokers, c.Pipelines[0].DLQTopic(), solverURL, strings.TrimSuffix(solverURL, "/solve")+"/outage",
		devCallbackLines(c, captchaTopic, captchaBase), traffic)

	if f.rate > 0 {
		go sampleTraffic(ctx, brokers, c.Pipelines[0].Topic, f.rate, f.seed)
		if captchaTopic != "" {
			go captchaTraffic(ctx, brokers, captchaTopic, captchaRate(f.rate), f.seed)
		}
	}
	go summaryLoop(ctx, o, out, 5*time.Second, callbackPipelines(c))
	perr := runProcessor(ctx, c, nil, o)
	cancel() // the processor stopped (or failed to start): so does the analyzer
	return errors.Join(perr, <-anDone)
}

// devCallbackLines are the banner's lines about the fake CaptchaAI (when a
// pipeline submits to it) and the callback intake (when a pipeline has a
// callback).
func devCallbackLines(c *config.Config, captchaTopic, captchaBase string) string {
	var b strings.Builder
	if captchaTopic != "" {
		fmt.Fprintf(&b, "  captchaai     %s/in.php, /res.php   (a fake: pingbacks 20%% dropped, 10%% sent twice; its counters: GET %s/stats)\n", captchaBase, captchaBase)
	}
	var paths []string
	for _, p := range c.Pipelines {
		if p.Handler.Callback != nil {
			paths = append(paths, p.Handler.Callback.Path)
		}
	}
	if len(paths) > 0 {
		fmt.Fprintf(&b, "  callbacks     http://%s   (callback_addr; paths %s)\n", c.CallbackAddr, strings.Join(paths, ", "))
	}
	return b.String()
}

// devCaptchaTopic is the main topic of the pipeline that submits to dev's
// fake CaptchaAI at base (the captcha pipeline without -c), "" if none.
func devCaptchaTopic(c *config.Config, base string) string {
	for _, p := range c.Pipelines {
		if p.Handler.HTTP != nil && strings.HasPrefix(p.Handler.HTTP.URL, base+"/") {
			return p.Topic
		}
	}
	return ""
}

// captchaRate is the captcha pipeline's share of the sample traffic: a
// quarter, at least one request a second.
func captchaRate(rate float64) float64 { return max(rate/4, 1) }

// pickPort is addr with port 0 replaced by a port free now (the intake
// listens on it later, and the pingback URL must name it first).
func pickPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
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

// devToken is the replay token and processor.token dev uses when the
// config sets none. Known, as dev listens on loopback only; long enough
// for the rule every configured token meets (bearer.Check).
const devToken = "redrive-dev-token"

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
	produceEvery(ctx, "sample traffic", brokers, topic, rate, rand.New(rand.NewPCG(seed, 7)), func(rnd *rand.Rand, n int, site string) *kgo.Record {
		apiKey := "demo-key"
		if rnd.IntN(50) == 0 {
			apiKey = "bad-key"
		}
		v := fmt.Sprintf(`{"type":"recaptcha","site":%q,"api_key":%q,"n":%d}`, site, apiKey, n)
		return &kgo.Record{
			Key:   []byte(site),
			Value: []byte(v),
			Headers: []kgo.RecordHeader{
				{Key: "content-type", Value: []byte("application/json")},
				{Key: "idempotency-key", Value: []byte("req-" + strconv.Itoa(n))},
				{Key: "authorization", Value: []byte("Bearer demo-secret")},
			},
		}
	})
}

// captchaTraffic produces CAPTCHA tasks for the captcha pipeline until
// ctx is done: the form fields of in.php (method, googlekey, pageurl), as
// a producer for the captchaai preset writes them.
func captchaTraffic(ctx context.Context, brokers, topic string, rate float64, seed uint64) {
	produceEvery(ctx, "sample captcha traffic", brokers, topic, rate, rand.New(rand.NewPCG(seed, 11)), func(_ *rand.Rand, n int, site string) *kgo.Record {
		v := url.Values{"method": {"userrecaptcha"}, "googlekey": {"6Le-demo-" + site}, "pageurl": {"https://" + site + "/login?n=" + strconv.Itoa(n)}}
		return &kgo.Record{
			Key:   []byte(site),
			Value: []byte(v.Encode()),
			Headers: []kgo.RecordHeader{
				{Key: "content-type", Value: []byte("application/x-www-form-urlencoded")},
				{Key: "idempotency-key", Value: []byte("captcha-" + strconv.Itoa(n))},
			},
		}
	})
}

// produceEvery produces record(rnd, n, site) rate times a second (n from 1,
// site one of four demo sites) until ctx is done.
func produceEvery(ctx context.Context, what, brokers, topic string, rate float64, rnd *rand.Rand, record func(rnd *rand.Rand, n int, site string) *kgo.Record) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		slog.Error(what, "err", err)
		return
	}
	defer cl.Close()
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	sites := []string{"shop.example", "forum.example", "bank.example", "mail.example"}
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cl.Produce(ctx, record(rnd, n, sites[rnd.IntN(len(sites))]), nil)
	}
}

// callbackPipelines are the names of c's pipelines with handler.callback.
func callbackPipelines(c *config.Config) []string {
	var names []string
	for _, p := range c.Pipelines {
		if p.Handler.Callback != nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// summaryLoop prints one line every interval: handled, retried per tier,
// dead-lettered, in flight, waiting, from the processor's own metrics;
// the callbacks of cbPipelines (devSummary).
func summaryLoop(ctx context.Context, o *obs.Server, out io.Writer, every time.Duration, cbPipelines []string) {
	started := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fmt.Fprintln(out, devSummary(o, time.Since(started), cbPipelines))
	}
}

// devSummary is the one-line status `redrive dev` prints. With pipelines
// with callbacks (cbPipelines, by name): their callbacks by event, their
// polls (fallback polls and the polls after them) and their jobs finished
// by a callback or by a poll. Other pipelines' polls (not-ready answers)
// and callback series (exported for every pipeline, 0) are left out.
func devSummary(o *obs.Server, up time.Duration, cbPipelines []string) string {
	var handled, dead, inflight, waiting float64
	tiers := map[string]float64{}
	callbacks := map[string]map[string]float64{} // by pipeline, by event
	polls := map[string]float64{}                // by pipeline
	via := map[string]map[string]float64{}       // by pipeline, by via: jobs finished
	add := func(m map[string]map[string]float64, k1, k2 string, v float64) {
		if m[k1] == nil {
			m[k1] = map[string]float64{}
		}
		m[k1][k2] += v
	}
	mfs, _ := o.Registry.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "redrive_outcomes_total":
				handled += m.GetCounter().GetValue()
			case "redrive_dead_letters_total":
				dead += m.GetCounter().GetValue()
			case "redrive_inflight_records":
				inflight += m.GetGauge().GetValue()
			case "redrive_waiting_records":
				waiting += m.GetGauge().GetValue()
			case "redrive_callbacks_total":
				add(callbacks, labels["pipeline"], labels["event"], m.GetCounter().GetValue())
			case "redrive_polls_total":
				polls[labels["pipeline"]] += m.GetCounter().GetValue()
			case "redrive_job_seconds":
				add(via, labels["pipeline"], labels["via"], float64(m.GetHistogram().GetSampleCount()))
			case "redrive_retries_scheduled_total":
				if t, ok := labels["tier"]; ok {
					tiers[t] += m.GetCounter().GetValue()
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
	cb := ""
	if len(cbPipelines) > 0 {
		var cbPolls, viaCallback, viaPoll float64
		events := map[string]float64{}
		for _, p := range cbPipelines {
			for e, n := range callbacks[p] {
				events[e] += n
			}
			cbPolls += polls[p]
			viaCallback += via[p]["callback"]
			viaPoll += via[p]["poll"]
		}
		cb = fmt.Sprintf("  callbacks [received:%.0f matched:%.0f duplicate:%.0f late:%.0f] polls %.0f  finished via [callback:%.0f poll:%.0f]",
			events["received"], events["matched"], events["duplicate"], events["late"], cbPolls, viaCallback, viaPoll)
	}
	return fmt.Sprintf("up %s  handled %.0f  retried [%s]  dead-lettered %.0f  in flight %.0f  waiting %.0f%s  %s",
		up.Round(time.Second), handled, strings.Join(rt, " "), dead, inflight, waiting, cb, ready)
}
