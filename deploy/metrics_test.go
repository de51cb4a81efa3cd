package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/intake"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// recorder is a Registerer that notes the name of every metric registered
// through it: a vector with no series yet (a failure counter that never
// counted) is exported all the same once something happens.
type recorder struct {
	prometheus.Registerer
	mu    sync.Mutex
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// scrape GETs url's /metrics and returns the sample names in it (a
// histogram's as _bucket, _sum and _count).
func scrape(t *testing.T, base string) map[string]bool {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape %s: %d %v", base, resp.StatusCode, err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

var (
	promString  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatch   = regexp.MustCompile(`\{[^}]*\}`)
	promRange   = regexp.MustCompile(`\[[^\]]*\]`)
	promGroup   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promNumber  = regexp.MustCompile(`\b[0-9][0-9a-zA-Z._]*`)
	promIdent   = regexp.MustCompile(`\$?[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)
	promWords   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression selects: what is
// left after strings, label matchers, ranges, grouping clauses, function
// calls, keywords and numbers are taken out.
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	e := promString.ReplaceAllString(expr, " ")
	e = promMatch.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	e = promGroup.ReplaceAllString(e, " ")
	e = promNumber.ReplaceAllString(e, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(e, -1) {
		tok := m[0]
		if m[1] != "" || strings.HasPrefix(tok, "$") || promWords[strings.ToLower(tok)] {
			continue // a function or aggregation, a Grafana variable, a keyword
		}
		out = append(out, tok)
	}
	return out
}

func TestMetricNamesParser(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (pipeline, le) (rate(redrive_x_bucket{pipeline=~"$pipeline", a="b{c}"}[$__rate_interval]))) / on (pod) group_left max(up) > 5 and bool redrive_y offset 5m`)
	want := []string{"redrive_x_bucket", "up", "redrive_y"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metricNames = %v, want %v", got, want)
	}
}

// usedNames collects the metric names of the dashboard's expressions and
// of the alert rules, each with where it is used.
func usedNames(t *testing.T) map[string]string {
	t.Helper()
	used := map[string]string{}
	data, err := os.ReadFile("grafana/redrive.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/redrive.json: %v", err)
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				at = title
			}
			for k, c := range v {
				// Expressions, and the template variables' label_values(...) queries
				// (a datasource variable's query is a plugin name).
				if s, ok := c.(string); ok && (k == "expr" || (k == "query" || k == "definition") && strings.Contains(s, "label_values(")) {
					for _, n := range metricNames(s) {
						used[n] = "dashboard panel " + at
					}
				}
				walk(c, at)
			}
		case []any:
			for _, c := range v {
				walk(c, at)
			}
		}
	}
	walk(dash, "")
	if len(used) < 10 {
		t.Fatalf("grafana/redrive.json uses %d metrics: the walker found no expressions?", len(used))
	}
	for _, g := range rulesFileGroups(t) {
		for _, r := range g.Rules {
			for _, n := range metricNames(r.Expr.String()) {
				used[n] = "alert " + r.Alert
			}
		}
	}
	return used
}

// pair is a real processor and a real analyzer on one pipeline, each
// serving /metrics through internal/obs as `redrive process` and `redrive
// analyze` do. The pipeline has callbacks, and the processor's obs server
// also has the callback intake's metrics, as `redrive process` serving
// callback_addr has: the intake listens on intake.
type pair struct {
	c            *kafkatest.Cluster
	p            processor.Pipeline
	paddr, aaddr string
	prec, arec   *recorder
	intake       string // the intake's base URL; its path is pairCallbackPath
	// cbSubmits counts the submits of job-cb records (the handler's first call).
	cbSubmits *atomic.Int64
}

// The pair's callback path and token.
const (
	pairCallbackPath  = "/cb"
	pairCallbackToken = "deploy-cb-token-0123456789"
)

func startPair(t *testing.T) *pair {
	t.Helper()
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "deploy")
	p := processor.Pipeline{
		Name: topic, Topic: topic, Results: topic + ".results", DLQ: topic + ".dlq",
		Schedule:  retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2},
		Callbacks: &processor.Callbacks{Topic: topics.CallbacksTopic(topic), Wait: 2 * time.Second},
	}
	for _, n := range append([]string{p.Topic, p.Results, p.DLQ, p.Callbacks.Topic}, p.TierTopics()...) {
		c.CreateTopic(t, n, 2, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The processor, with a handler that succeeds, retries and fails for
	// good, and submits jobs (keys job-…: the key is the job id; a poll
	// finds job-poll-… done, job-cb-… pending).
	po := obs.New()
	prec := &recorder{Registerer: po.Registry, names: map[string]bool{}}
	cbSubmits := &atomic.Int64{}
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		switch k := string(req.Record.Key); {
		case strings.HasPrefix(k, "job") && len(req.State) == 0:
			if strings.HasPrefix(k, "job-cb") {
				cbSubmits.Add(1)
			}
			return processor.Poll(req.Record.Key, 0)
		case strings.HasPrefix(k, "job-cb"):
			// Polled before its callback came (a slow machine): still
			// pending, so that only the callback finishes it.
			return processor.Poll(req.State, time.Second)
		case strings.HasPrefix(k, "job"):
			return processor.Succeed([]byte("polled " + string(req.State)))
		case strings.HasPrefix(k, "retry"):
			return processor.Outcome{Kind: processor.Transient, Code: "ERROR_NO_SLOT_AVAILABLE", Err: fmt.Errorf("no slot")}
		case strings.HasPrefix(k, "bad"):
			return processor.Outcome{Kind: processor.Permanent, Code: "ERROR_WRONG_USER_KEY", Err: fmt.Errorf("wrong key")}
		}
		return processor.Outcome{Kind: processor.Success}
	})
	paddr, err := po.Serve(ctx, "127.0.0.1:0", log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// The callback intake, its metrics on the processor's registry.
	icl := c.Client(t, intake.ProducerOpts()...)
	in, err := intake.New(intake.Options{
		Pipeline: p.Name, Path: pairCallbackPath, Token: pairCallbackToken, Topic: p.Callbacks.Topic, DLQ: p.DLQ,
		Client: icl, Logger: log, Registerer: prec,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	mux, err := intake.NewMux(in)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	isrv := httptest.NewServer(mux)
	t.Cleanup(isrv.Close)
	stopProcessor := pipetest.Run(t, processor.Config{
		Brokers: c.Brokers, Pipelines: []processor.Pipeline{p}, SessionTimeout: 6 * time.Second,
		ShutdownGrace: 5 * time.Second, CommitInterval: 200 * time.Millisecond, Instance: "deploy-test",
		Registerer: prec, Logger: log, Ready: po.Ready, Beat: po.Beat,
	}, h)

	// The analyzer on the pipeline's DLQ.
	ao := obs.New()
	arec := &recorder{Registerer: ao.Registry, names: map[string]bool{}}
	an, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Pipelines:  []analyzer.Pipeline{{Name: p.Name, Topic: p.Topic, DLQ: p.DLQ}},
		Registerer: arec, Logger: log, Ready: ao.Ready, Beat: ao.Beat,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ao.Mux.Handle("/", an.Handler(""))
	aaddr, err := ao.Serve(ctx, "127.0.0.1:0", log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	adone := make(chan error, 1)
	go func() { adone <- an.Run(ctx) }()
	t.Cleanup(func() {
		if err := stopProcessor(); err != nil {
			t.Errorf("processor Run: %v", err)
		}
		cancel()
		select {
		case err := <-adone:
			if err != nil {
				t.Errorf("analyzer Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("analyzer did not stop within 60s")
		}
	})
	return &pair{c: c, p: p, paddr: paddr, aaddr: aaddr, prec: prec, arec: arec, intake: isrv.URL, cbSubmits: cbSubmits}
}

// scrapeBoth is the union of the processor's and the analyzer's names.
func (x *pair) scrapeBoth(t *testing.T) map[string]bool {
	t.Helper()
	exported := scrape(t, "http://"+x.paddr)
	for n := range scrape(t, "http://"+x.aaddr) {
		exported[n] = true
	}
	return exported
}

func sortedKeys(m map[string]string) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestIdleExportsEveryUsedMetric starts a processor and an analyzer and
// sends nothing: within 15 s every series the dashboard and the alert rules
// read is on /metrics (counters at 0, gauges at their value, histograms
// with their buckets), so panels show 0 instead of "no data" and absent()
// means the process is gone, not that nothing has happened yet.
func TestIdleExportsEveryUsedMetric(t *testing.T) {
	used := usedNames(t)
	x := startPair(t)
	deadline := time.Now().Add(15 * time.Second)
	var missing []string
	for {
		exported := x.scrapeBoth(t)
		missing = missing[:0]
		for _, n := range sortedKeys(used) {
			if !exported[n] {
				missing = append(missing, n+" ("+used[n]+")")
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, n := range missing {
		t.Errorf("idle for 15s, /metrics still lacks %s", n)
	}
	// The pipeline's own series are there with its labels, at zero.
	body := scrapeText(t, "http://"+x.paddr)
	for _, want := range []string{
		`redrive_consumer_lag{pipeline="` + x.p.Name + `",topic="` + x.p.TierTopics()[0] + `"}`,
		`redrive_retries_scheduled_total{pipeline="` + x.p.Name + `",tier="1s"} 0`,
		`redrive_dead_letters_total{code="",pipeline="` + x.p.Name + `",reason="exhausted"} 0`,
		`redrive_delay_lateness_seconds_count{pipeline="` + x.p.Name + `",tier="1s"} 0`,
		`redrive_handler_duration_seconds_count{outcome="success",pipeline="` + x.p.Name + `"} 0`,
		`redrive_produce_failures_total{kind="dlq",pipeline="` + x.p.Name + `"} 0`,
		// The line's series, with the label values the alerts and panels select.
		`redrive_breaker_state{pipeline="` + x.p.Name + `"} 0`,
		`redrive_breaker_transitions_total{pipeline="` + x.p.Name + `",to="half-open"} 0`,
		`redrive_breaker_transitions_total{pipeline="` + x.p.Name + `",to="open"} 0`,
		`redrive_paused{pipeline="` + x.p.Name + `",reason="breaker"} 0`,
		`redrive_paused{pipeline="` + x.p.Name + `",reason="guard"} 0`,
		`redrive_paused{pipeline="` + x.p.Name + `",reason="pause_code"} 0`,
		`redrive_paused{pipeline="` + x.p.Name + `",reason="manual"} 0`,
		`redrive_rate_limited_seconds_total{pipeline="` + x.p.Name + `"} 0`,
		`redrive_failovers_total{pipeline="` + x.p.Name + `"} 0`,
		// Callbacks: the processor's, and the intake's.
		`redrive_callbacks_total{event="matched",pipeline="` + x.p.Name + `"} 0`,
		`redrive_callbacks_held{pipeline="` + x.p.Name + `"} 0`,
		`redrive_polls_total{pipeline="` + x.p.Name + `"} 0`,
		`redrive_job_seconds_count{pipeline="` + x.p.Name + `",via="callback"} 0`,
		`redrive_job_seconds_count{pipeline="` + x.p.Name + `",via="poll"} 0`,
		`redrive_callback_requests_total{pipeline="` + x.p.Name + `",result="accepted"} 0`,
		`redrive_callback_ack_seconds_count{pipeline="` + x.p.Name + `"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("idle processor's /metrics lacks %s", want)
		}
	}
	abody := scrapeText(t, "http://"+x.aaddr)
	for _, want := range []string{
		`redrive_analyzer_dead_letters_total{code="",pipeline="` + x.p.Name + `",reason="permanent"} 0`,
		`redrive_analyzer_dlq_depth{pipeline="` + x.p.Name + `"} 0`,
		`redrive_analyzer_republish_failures_total{pipeline="` + x.p.Name + `"} 0`,
	} {
		if !strings.Contains(abody, want) {
			t.Errorf("idle analyzer's /metrics lacks %s", want)
		}
	}
}

// scrapeText is the body of base's /metrics.
func scrapeText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDashboardAndAlertsUseExportedMetrics runs a real processor and a
// real analyzer, pushes records through them, scrapes both and checks
// every metric name the dashboard and the alert rules use is exported.
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	used := usedNames(t)
	x := startPair(t)
	c, p, ctx := x.c, x.p, context.Background()
	paddr, aaddr, prec, arec := x.paddr, x.aaddr, x.prec, x.arec

	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	produce := func(rs []*kgo.Record) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
		err := cl.ProduceSync(pctx, rs...).FirstErr()
		pcancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	// First jobs: five finished by their callback (sent to the intake),
	// five by a poll after the callback wait. Before the failures below,
	// which open the breaker (ten in a row) and would hold the polls.
	var jobs []*kgo.Record
	for i := 0; i < 5; i++ {
		for _, k := range []string{"job-cb", "job-poll"} {
			jobs = append(jobs, &kgo.Record{Topic: p.Topic, Key: []byte(fmt.Sprintf("%s-%d", k, i)), Value: []byte(`{"n":1}`)})
		}
	}
	produce(jobs)
	// The callbacks go to the intake once their jobs were submitted, as a
	// service sends them. (A callback before its submit is covered by the
	// end-to-end tests in processor/httphandler.)
	if !kafkatest.Eventually(60*time.Second, func() bool { return x.cbSubmits.Load() >= 5 }) {
		t.Fatalf("the 5 job-cb records were not submitted within 60s: %d", x.cbSubmits.Load())
	}
	for i := 0; i < 5; i++ {
		u := fmt.Sprintf("%s%s?token=%s&id=job-cb-%d&code=solved-%d", x.intake, pairCallbackPath, pairCallbackToken, i, i)
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("callback %d: %d, want 200", i, resp.StatusCode)
		}
	}
	finished := func() (missing []string) {
		pbody := scrapeText(t, "http://"+paddr)
		for _, via := range []string{"callback", "poll"} {
			series := `redrive_job_seconds_count{pipeline="` + p.Name + `",via="` + via + `"}`
			if sampleValue(pbody, series) < 5 {
				missing = append(missing, series+" >= 5")
			}
		}
		return missing
	}
	if !kafkatest.Eventually(60*time.Second, func() bool { return len(finished()) == 0 }) {
		var cbLines []string
		for _, l := range strings.Split(scrapeText(t, "http://"+paddr), "\n") {
			if strings.Contains(l, p.Name) && (strings.HasPrefix(l, "redrive_callback") || strings.HasPrefix(l, "redrive_polls") ||
				strings.HasPrefix(l, "redrive_job_seconds_count") || strings.HasPrefix(l, "redrive_outcomes_total")) {
				cbLines = append(cbLines, l)
			}
		}
		t.Fatalf("after 60s the jobs are not all finished: %v\n%s", finished(), strings.Join(cbLines, "\n"))
	}

	// Then records that succeed, retry and fail for good.
	var rs []*kgo.Record
	for i := 0; i < 10; i++ {
		for _, k := range []string{"ok", "retry", "bad"} {
			rs = append(rs, &kgo.Record{Topic: p.Topic, Key: []byte(fmt.Sprintf("%s-%d", k, i)), Value: []byte(`{"n":1}`)})
		}
	}
	produce(rs)

	// Series that show traffic (all of them exist from start, see
	// TestIdleExportsEveryUsedMetric).
	mustScrape := []string{
		"redrive_records_consumed_total", "redrive_outcomes_total", "redrive_retries_scheduled_total",
		"redrive_dead_letters_total", "redrive_handler_duration_seconds_bucket", "redrive_delay_lateness_seconds_bucket",
		"redrive_consumer_lag", "redrive_inflight_records", "redrive_ready",
		"redrive_analyzer_dead_letters_total", "redrive_analyzer_dlq_depth", "redrive_analyzer_oldest_unhandled_seconds",
		"redrive_analyzer_actions_total", "process_resident_memory_bytes", "go_goroutines",
		"redrive_callbacks_total", "redrive_polls_total", "redrive_job_seconds_bucket",
		"redrive_callback_requests_total", "redrive_callback_ack_seconds_bucket",
	}
	var exported map[string]bool
	deadline := time.Now().Add(90 * time.Second)
	for {
		exported = scrape(t, "http://"+paddr)
		for n := range scrape(t, "http://"+aaddr) {
			exported[n] = true
		}
		var missing []string
		for _, n := range mustScrape {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		// The counters moved: the series exist from start, so existing
		// alone does not show the traffic reached them.
		sums := sampleSums(scrapeText(t, "http://"+paddr) + scrapeText(t, "http://"+aaddr))
		for _, n := range []string{"redrive_records_consumed_total", "redrive_outcomes_total", "redrive_retries_scheduled_total",
			"redrive_dead_letters_total", "redrive_handler_duration_seconds_count", "redrive_delay_lateness_seconds_count",
			"redrive_analyzer_dead_letters_total", "redrive_analyzer_actions_total",
			"redrive_callbacks_total", "redrive_polls_total", "redrive_callback_requests_total", "redrive_callback_ack_seconds_count"} {
			if sums[n] == 0 {
				missing = append(missing, n+" > 0")
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s the scrapes still lack %v", missing)
		}
		time.Sleep(500 * time.Millisecond)
	}

	registered := map[string]bool{}
	for _, r := range []*recorder{prec, arec} {
		r.mu.Lock()
		for n := range r.names {
			registered[n] = true
		}
		r.mu.Unlock()
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch {
		case exported[n]:
		case registered[n]:
			t.Logf("%s (%s): registered, no series yet in this run (it counts failures or rare events)", n, used[n])
		default:
			t.Errorf("%s, used by %s, is not exported by the processor or the analyzer", n, used[n])
		}
	}
}

// sampleSums adds up the samples of each name in a /metrics body.
func sampleSums(body string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.IndexAny(line, "{ ")
		j := strings.LastIndexByte(line, ' ')
		if i <= 0 || j < i {
			continue
		}
		if v, err := strconv.ParseFloat(line[j+1:], 64); err == nil {
			out[line[:i]] += v
		}
	}
	return out
}

// sampleValue is the value of series (name{labels} as exported) in a
// /metrics body, 0 if absent.
func sampleValue(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
