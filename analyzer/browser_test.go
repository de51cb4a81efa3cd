package analyzer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// TestBrowserDashboard loads the dashboard in headless Chromium against a
// running analyzer and checks that the page shows the numbers the API
// reports: the total, every error code's count, the per-minute chart and
// the recent dead letters. Chromium is "chromium", "chromium-browser" or
// "google-chrome" in PATH, or REDRIVE_CHROMIUM; without one the test skips,
// and fails under CI=true. Set REDRIVE_DASHBOARD_SCREENSHOT=/tmp/x.png to
// also get a screenshot of the page (do not commit it).
func TestBrowserDashboard(t *testing.T) {
	chrome := browserChromium(t)
	c := kafkatest.New(t)
	mainTopic, dlqTopic := kafkatest.Topic(t, "browser"), kafkatest.Topic(t, "browser.dlq")
	c.CreateTopic(t, mainTopic, 1, nil)
	c.CreateTopic(t, dlqTopic, 3, nil)

	const n = 30
	recs := browserDeadLetters(mainTopic, dlqTopic, n, time.Now())
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := c.Client(t).ProduceSync(pctx, recs...).FirstErr()
	cancel()
	if err != nil {
		t.Fatalf("producing the dead letters: %v", err)
	}

	const pipeline = "browser"
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Pipelines:  []analyzer.Pipeline{{Name: pipeline, Topic: mainTopic, DLQ: dlqTopic}},
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of its context's end")
		}
	})

	reqs := &browserRequests{}
	// No token: the API is open (TestBrowserToken: the token prompt).
	srv := httptest.NewServer(reqs.wrap(a.Handler("")))
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("the test server listens on %s, want 127.0.0.1", srv.URL)
	}

	// What the API says, once the statistics are rebuilt.
	var stats analyzer.StatsResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		stats = analyzer.StatsResponse{}
		browserGetJSON(t, srv.URL+"/api/stats", &stats)
		if len(stats.Pipelines) == 1 && stats.Pipelines[0].Ready && stats.Pipelines[0].Stats.Total == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the analyzer did not report %d dead letters, ready, within 60s: %+v", n, stats.Pipelines)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ps := stats.Pipelines[0]
	var list analyzer.DeadLettersResponse
	browserGetJSON(t, srv.URL+"/api/deadletters?limit=50", &list)
	if len(list.DeadLetters) != n {
		t.Fatalf("/api/deadletters returned %d dead letters, want %d", len(list.DeadLetters), n)
	}

	dom := browserRun(t, chrome, srv.URL+"/", "--dump-dom")
	domPath := filepath.Join(t.ArtifactDir(), "dashboard.html")
	if err := os.WriteFile(domPath, []byte(dom), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("the DOM Chromium dumped is in %s (kept with go test -artifacts)", domPath)
		}
	}()
	if path := os.Getenv("REDRIVE_DASHBOARD_SCREENSHOT"); path != "" {
		browserRun(t, chrome, srv.URL+"/", "--screenshot="+path, "--window-size=1280,1600")
		t.Logf("screenshot written to %s", path)
	}

	// The page finished its first render, without error.
	body, ok := browserFirst(dom, "body", nil)
	if !ok {
		t.Fatalf("no <body> in the dumped DOM:\n%s", browserHead(dom))
	}
	if body.attrs["data-loaded"] != "1" {
		t.Fatalf("body has no data-loaded=1 (data-error=%q): the page did not render its data; DOM:\n%s", body.attrs["data-error"], browserHead(dom))
	}
	if e, ok := body.attrs["data-error"]; ok {
		t.Errorf("body data-error=%q", e)
	}
	if _, ok := body.attrs["data-pwned"]; ok || strings.Contains(dom, "<img") {
		t.Errorf("markup from a dead letter's error ran in the page")
	}
	if !strings.Contains(dom, "&lt;img src=x") {
		t.Errorf("the error text with markup is not shown as text")
	}

	// Not redrive dev: no outage button.
	if e, ok := browserByID(dom, "dev"); !ok || !hasAttr(e, "hidden") {
		t.Errorf("#dev present %v, shown without DemoOutage", ok)
	}

	// The header: the DLQ and the total.
	if e, ok := browserByID(dom, "total-"+pipeline); !ok {
		t.Errorf("no #total-%s", pipeline)
	} else if e.attrs["data-value"] != strconv.FormatInt(ps.Stats.Total, 10) || e.text != strconv.FormatInt(ps.Stats.Total, 10) {
		t.Errorf("#total-%s shows %q (data-value %q), the API says %d", pipeline, e.text, e.attrs["data-value"], ps.Stats.Total)
	}
	if e, ok := browserByID(dom, "dlq-"+pipeline); !ok || e.text != ps.DLQ {
		t.Errorf("#dlq-%s shows %q, want %q", pipeline, e.text, ps.DLQ)
	}
	for _, id := range []string{"depth-" + pipeline, "oldest-" + pipeline} {
		if _, ok := browserByID(dom, id); !ok {
			t.Errorf("no #%s", id)
		}
	}

	// The error distribution by code, and the counts by reason.
	for _, b := range []struct {
		list, attr string
		want       map[string]int64
	}{{"codes", "data-code", ps.Stats.ByCode}, {"reasons", "data-reason", ps.Stats.ByReason}} {
		got := map[string]int64{}
		for _, e := range browserAll(browserOuter(dom, b.list), "li") {
			name, ok := e.attrs[b.attr]
			if !ok {
				continue
			}
			count, err := strconv.ParseInt(e.attrs["data-count"], 10, 64)
			if err != nil {
				t.Errorf("#%s row %s=%q: data-count %q", b.list, b.attr, name, e.attrs["data-count"])
			}
			got[name] = count
		}
		if len(got) != len(b.want) {
			t.Errorf("#%s has %d rows %v, the API has %d %v", b.list, len(got), got, len(b.want), b.want)
		}
		for name, want := range b.want {
			if g, ok := got[name]; !ok || g != want {
				t.Errorf("#%s: %s=%q shows %d (present %v), the API says %d", b.list, b.attr, name, g, ok, want)
			}
		}
	}

	// The per-minute chart: uPlot rendered a canvas, over the last hour of
	// per_minute, with the API's counts.
	chart := browserOuter(dom, "chart-minutes")
	if !strings.Contains(chart, `class="uplot`) || !strings.Contains(chart, "<canvas") {
		t.Errorf("#chart-minutes holds no uPlot chart:\n%.2000s", chart)
	}
	var lastHour int64
	for _, m := range ps.Stats.PerMinute[len(ps.Stats.PerMinute)-60:] {
		lastHour += m.Count
	}
	if e, _ := browserByID(dom, "chart-minutes"); e.attrs["data-points"] != "60" || e.attrs["data-sum"] != strconv.FormatInt(lastHour, 10) {
		t.Errorf("#chart-minutes charts %s minutes summing to %s, the API's last hour has 60 summing to %d", e.attrs["data-points"], e.attrs["data-sum"], lastHour)
	}

	// The recent dead letters: one row each, newest first as the API
	// lists them, with their headers in the details row.
	table := browserOuter(dom, "deadletters")
	var ids []string
	for _, e := range browserAll(table, "tr") {
		if id, ok := e.attrs["data-id"]; ok {
			ids = append(ids, id)
		}
	}
	if len(ids) != len(list.DeadLetters) {
		t.Errorf("#deadletters has %d rows, the API returned %d", len(ids), len(list.DeadLetters))
	}
	for i, v := range list.DeadLetters {
		if i < len(ids) && ids[i] != v.ID {
			t.Errorf("#deadletters row %d is %q, the API lists %q", i, ids[i], v.ID)
		}
	}
	first := list.DeadLetters[0]
	pos := fmt.Sprintf("%s/%d/%d", first.Topic, first.Partition, first.Offset)
	if i := strings.Index(table, `data-detail-for="`+pos+`"`); i < 0 {
		t.Errorf("no details row for %s", pos)
	} else {
		detail := table[i:]
		if j := strings.Index(detail[1:], "data-detail-for="); j >= 0 {
			detail = detail[:j+1]
		}
		for _, h := range first.Headers {
			if !strings.Contains(detail, `data-header="`+html.EscapeString(h.Key)+`"`) {
				t.Errorf("the details of %s do not show header %q", pos, h.Key)
			}
		}
	}

	// The page loaded its assets from the analyzer, and every request
	// succeeded.
	for _, want := range []string{"GET / 200", "GET /app.js 200", "GET /style.css 200", "GET /vendor/uplot/uPlot.iife.min.js 200",
		"GET /vendor/uplot/uPlot.min.css 200", "GET /api/stats 200", "GET /api/deadletters 200"} {
		if !reqs.seen(want) {
			t.Errorf("the browser made no request %q; requests: %v", want, reqs.all())
		}
	}
	for _, r := range reqs.all() {
		if code, _ := strconv.Atoi(r[strings.LastIndexByte(r, ' ')+1:]); code >= 400 {
			t.Errorf("request failed: %s", r)
		}
	}
}

// browserChromium finds headless Chromium, or skips (fails under CI).
func browserChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("REDRIVE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no Chromium found (looked for chromium, chromium-browser, google-chrome in PATH): install Debian's chromium package"
	kafkatest.Missing(t, msg)
	return ""
}

// browserRun runs headless Chromium on url and returns its standard output.
// Every host but 127.0.0.1 is unresolvable to it: the page must work offline.
func browserRun(t *testing.T, chrome, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
		"--disable-background-networking", "--disable-component-update", "--disable-default-apps",
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=10000",
	}, args...)
	all = append(all, url)
	cmd := exec.CommandContext(ctx, chrome, all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstderr:\n%s", chrome, strings.Join(all, " "), err, stderr.String())
	}
	return stdout.String()
}

// browserDeadLetters builds n dead letters of a few codes, reasons and
// keys, dead-lettered over the last n*80 seconds, one of them with markup
// in its error text and key.
func browserDeadLetters(mainTopic, dlqTopic string, n int, now time.Time) []*kgo.Record {
	kinds := []struct {
		code   string
		reason dlq.Reason
		class  retry.Class
	}{
		{"http_503", dlq.ReasonExhausted, retry.ClassTransient}, {"http_503", dlq.ReasonExhausted, retry.ClassTransient},
		{"http_503", dlq.ReasonExhausted, retry.ClassTransient}, {"http_503", dlq.ReasonExhausted, retry.ClassTransient},
		{"http_429", dlq.ReasonExhausted, retry.ClassTransient}, {"http_429", dlq.ReasonExhausted, retry.ClassTransient},
		{"schema_invalid", dlq.ReasonInvalid, retry.ClassInvalid}, {"schema_invalid", dlq.ReasonInvalid, retry.ClassInvalid},
		{"", dlq.ReasonPermanent, retry.ClassPermanent},
		{"ttl", dlq.ReasonExpired, retry.ClassExpired},
	}
	var out []*kgo.Record
	for i := range n {
		k := kinds[i%len(kinds)]
		ts := now.Add(-time.Duration(n-1-i) * 80 * time.Second).Truncate(time.Millisecond)
		key := []byte(fmt.Sprintf("order-%d", i%7))
		value := []byte(fmt.Sprintf(`{"order":%d,"site":"s%d"}`, i, i%3))
		errText := fmt.Sprintf("%s: upstream refused request %d", k.code, i)
		user := []kgo.RecordHeader{{Key: "trace-id", Value: []byte(fmt.Sprintf("trace-%02d", i))}}
		switch i {
		case 3:
			user = append(user, kgo.RecordHeader{Key: "blob", Value: []byte{0xff, 0x00, 0x7f}})
		case 5:
			key = nil
		case 7:
			errText = `<img src=x onerror="document.body.dataset.pwned=1"> bad schema`
			key = []byte("<b>bold</b>")
		case 13:
			key, value = []byte{0xff, 0xfe, 0x01}, []byte{0x00, 0x01, 0x02, 0xff}
		}
		src := &kgo.Record{Topic: mainTopic, Partition: 0, Offset: int64(i), Key: key, Value: value}
		m := retry.Meta{
			ID: fmt.Sprintf("%s/0/%d", mainTopic, i), Attempt: 1 + i%5, Polls: 1 + i%5,
			HasOrigin: true, OriginTopic: mainTopic, OriginPartition: 0, OriginOffset: int64(i), OriginTimestamp: ts.Add(-10 * time.Minute),
			FirstErrorAt: ts.Add(-5 * time.Minute), LastErrorAt: ts,
			Error: errText, ErrorCode: k.code, ErrorClass: k.class, Reason: string(k.reason),
		}
		r := dlq.Build(src, m, user, dlq.BuildOptions{Topic: dlqTopic, Group: "redrive.browser", Instance: "browser-test"})
		r.Timestamp = ts
		out = append(out, r)
	}
	return out
}

func browserGetJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// browserRequests records "METHOD PATH STATUS" of every request served.
type browserRequests struct {
	mu   sync.Mutex
	list []string
}

type browserStatus struct {
	http.ResponseWriter
	code int
}

func (s *browserStatus) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *browserStatus) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (b *browserRequests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &browserStatus{ResponseWriter: w}
		h.ServeHTTP(s, r)
		if s.code == 0 {
			s.code = http.StatusOK
		}
		b.mu.Lock()
		b.list = append(b.list, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, s.code))
		b.mu.Unlock()
	})
}

func (b *browserRequests) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.list...)
}

func (b *browserRequests) seen(want string) bool {
	for _, r := range b.all() {
		if r == want {
			return true
		}
	}
	return false
}

// A tiny reader of the DOM Chromium dumps: start tags with their
// attributes (unescaped) and the text right after them.
type browserElem struct {
	tag   string
	attrs map[string]string
	text  string
}

var (
	browserTagRE  = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[^\s=>/]+(?:="[^"]*")?)*)\s*/?>([^<]*)`)
	browserAttrRE = regexp.MustCompile(`([^\s=>/]+)(?:="([^"]*)")?`)
)

// browserAll returns the elements named tag ("" for every element) in s.
func browserAll(s, tag string) []browserElem {
	var out []browserElem
	for _, m := range browserTagRE.FindAllStringSubmatch(s, -1) {
		if tag != "" && !strings.EqualFold(m[1], tag) {
			continue
		}
		e := browserElem{tag: strings.ToLower(m[1]), attrs: map[string]string{}, text: html.UnescapeString(m[3])}
		for _, a := range browserAttrRE.FindAllStringSubmatch(m[2], -1) {
			e.attrs[a[1]] = html.UnescapeString(a[2])
		}
		out = append(out, e)
	}
	return out
}

func browserFirst(s, tag string, attrs map[string]string) (browserElem, bool) {
next:
	for _, e := range browserAll(s, tag) {
		for k, v := range attrs {
			if e.attrs[k] != v {
				continue next
			}
		}
		return e, true
	}
	return browserElem{}, false
}

func browserByID(s, id string) (browserElem, bool) {
	return browserFirst(s, "", map[string]string{"id": id})
}

var browserOpenRE = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9-]*)[\s>]`)

// browserOuter is the markup of the element with that id, from its start
// tag to its matching end tag ("" when there is none).
func browserOuter(s, id string) string {
	i := strings.Index(s, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	start := strings.LastIndexByte(s[:i], '<')
	m := browserOpenRE.FindStringSubmatch(s[start:])
	if m == nil {
		return ""
	}
	tag := strings.ToLower(m[1])
	depth := 0
	for j := start; j < len(s); {
		k := strings.IndexByte(s[j:], '<')
		if k < 0 {
			break
		}
		j += k
		rest := strings.ToLower(s[j:min(len(s), j+len(tag)+3)])
		switch {
		case strings.HasPrefix(rest, "</"+tag) && len(rest) > len(tag)+2 && rest[len(tag)+2] == '>':
			depth--
			if depth == 0 {
				return s[start : j+len(tag)+3]
			}
		case strings.HasPrefix(rest, "<"+tag) && len(rest) > len(tag)+1 && (rest[len(tag)+1] == ' ' || rest[len(tag)+1] == '>'):
			depth++
		}
		j++
	}
	return ""
}

func browserHead(s string) string {
	if len(s) > 4000 {
		return s[:4000] + "…"
	}
	return s
}

// TestBrowserFlow loads the dashboard in headless Chromium against a
// running processor with traffic and an analyzer, and checks the flow view
// (main → tier → results / DLQ) shows what GET /api/pipelines served to
// the page: every topic's written, waiting, in and done numbers, as data
// and as the text a person reads. REDRIVE_FLOW_SCREENSHOT=/tmp/x.png also
// writes a screenshot.
func TestBrowserFlow(t *testing.T) {
	chrome := browserChromium(t)
	c := kafkatest.New(t)
	// A name of its own: the test pauses its line, and a pause is durable
	// in the control topic.
	topic := kafkatest.Topic(t, "flowui")
	p := processor.Pipeline{Name: topic, Topic: topic,
		Schedule: retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2}}
	p.Results, p.DLQ = p.Topic+".results", p.Topic+".dlq"
	for _, n := range append([]string{p.Topic, p.Results, p.DLQ}, p.TierTopics()...) {
		c.CreateTopic(t, n, 2, nil)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		switch k := string(req.Record.Key); {
		case strings.HasPrefix(k, "retry"):
			return processor.Outcome{Kind: processor.Transient, Code: "busy", Err: errors.New("busy")}
		case strings.HasPrefix(k, "bad"):
			return processor.Outcome{Kind: processor.Permanent, Code: "bad", Err: errors.New("bad")}
		}
		return processor.Outcome{Kind: processor.Success}
	})
	pr, err := processor.New(processor.Config{Brokers: c.Brokers, Pipelines: []processor.Pipeline{p}, SessionTimeout: 6 * time.Second,
		ShutdownGrace: 5 * time.Second, CommitInterval: 200 * time.Millisecond, Logger: log, Instance: "flowui"}, h)
	if err != nil {
		t.Fatal(err)
	}
	// The processor's own status, and one that is gone.
	psrv := httptest.NewServer(http.StripPrefix("/api/pipelines", pr.StatusHandler()))
	t.Cleanup(psrv.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Pipelines: []analyzer.Pipeline{{Name: p.Name, Topic: p.Topic, DLQ: p.DLQ, Results: p.Results,
			Tiers: []analyzer.Tier{{Name: "1s", Topic: p.TierTopics()[0]}}}},
		Logger: log, FlowEvery: 500 * time.Millisecond, Processors: []string{psrv.URL, gone.URL},
		// As in redrive dev: the page offers a solver outage.
		DemoOutage: func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	wg.Add(3)
	go func() { defer wg.Done(); errs <- pr.Run(ctx) }()
	go func() { defer wg.Done(); errs <- a.Run(ctx) }()
	// Traffic until the test ends: most succeed, some retry then die, a few
	// fail for good.
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			k := []string{"ok", "ok", "ok", "retry", "bad"}[i%5]
			cl.Produce(ctx, &kgo.Record{Topic: p.Topic, Key: []byte(fmt.Sprintf("%s-%d", k, i)), Value: []byte("x")}, nil)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		stop()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})

	// Every GET /api/pipelines the page makes, by the sample it shows.
	var servedMu sync.Mutex
	served := map[string]analyzer.Flow{}
	api := a.Handler("")
	reqs := &browserRequests{}
	srv := httptest.NewServer(reqs.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/pipelines" {
			api.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		var fr analyzer.FlowResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &fr); err == nil && len(fr.Pipelines) == 1 {
			servedMu.Lock()
			served[fr.Pipelines[0].SampledAt] = fr.Pipelines[0]
			servedMu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})))
	t.Cleanup(srv.Close)

	// Wait until the flow shows records moving everywhere.
	var f analyzer.Flow
	deadline := time.Now().Add(90 * time.Second)
	for {
		var fr analyzer.FlowResponse
		browserGetJSON(t, srv.URL+"/api/pipelines", &fr)
		f = fr.Pipelines[0]
		if f.Main.InPerSecond > 0 && f.Tiers[0].InPerSecond > 0 && f.Results.InPerSecond > 0 && f.DLQ.InPerSecond > 0 && f.Main.DonePerSecond > 0 &&
			len(f.Processors) == 2 && f.Processors[0].Instance == "flowui" && f.HandlerP99Seconds > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flow shows no traffic everywhere within 90s: %+v", f)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Paused by hand, the processor's line stops: the page shows that it
	// is, and since when, but not who or why: the processor keeps those
	// for a caller with processor.token, which the analyzer does not have.
	const pauseDetail = "by 198.51.100.7:1: <b>rotating</b> the key"
	if err := pr.Pause(p.Name, pauseDetail); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		var fr analyzer.FlowResponse
		browserGetJSON(t, srv.URL+"/api/pipelines", &fr)
		f = fr.Pipelines[0]
		if f.Line == "stopped" && f.Processors[0].Line != nil && len(f.Processors[0].Line.Reasons) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flow does not show the paused processor's line within 30s: %+v", f)
		}
		time.Sleep(100 * time.Millisecond)
	}

	dom := browserRun(t, chrome, srv.URL+"/", "--dump-dom")
	if path := os.Getenv("REDRIVE_FLOW_SCREENSHOT"); path != "" {
		browserRun(t, chrome, srv.URL+"/", "--screenshot="+path, "--window-size=1400,900")
		t.Logf("screenshot written to %s", path)
	}
	if body, _ := browserFirst(dom, "body", nil); body.attrs["data-loaded"] != "1" || body.attrs["data-error"] != "" {
		t.Fatalf("the page did not render (data-error %q):\n%s", body.attrs["data-error"], browserHead(dom))
	}
	panel, ok := browserByID(dom, "flow-"+p.Name)
	if !ok {
		t.Fatalf("no #flow-%s in the page:\n%s", p.Name, browserHead(dom))
	}
	servedMu.Lock()
	want, ok := served[panel.attrs["data-sampled-at"]]
	servedMu.Unlock()
	if !ok || want.SampledAt == "" {
		t.Fatalf("the page shows sample %q, which GET /api/pipelines did not serve it", panel.attrs["data-sampled-at"])
	}
	if w, _ := strconv.ParseFloat(panel.attrs["data-window"], 64); w != want.WindowSeconds {
		t.Errorf("data-window %q, the API's window %v", panel.attrs["data-window"], want.WindowSeconds)
	}
	outer := browserOuter(dom, "flow-"+p.Name)
	topics := append([]analyzer.FlowTopic{want.Main}, want.Tiers...)
	topics = append(topics, *want.Results, want.DLQ)
	for _, ft := range topics {
		id := fmt.Sprintf("flow-%s-%s-%s", p.Name, ft.Role, ft.Name)
		node := browserOuter(outer, id)
		e, ok := browserByID(outer, id)
		if !ok || node == "" {
			t.Errorf("no #%s in the flow", id)
			continue
		}
		if e.attrs["data-topic"] != ft.Topic || e.attrs["data-end"] != strconv.FormatInt(ft.End, 10) {
			t.Errorf("#%s: topic %q end %q, the API: %s %d", id, e.attrs["data-topic"], e.attrs["data-end"], ft.Topic, ft.End)
		}
		// The numbers a person reads: the big one (waiting, or written where
		// no group reads), and the rates.
		values := map[string]browserElem{}
		for _, v := range browserAll(node, "span") {
			if m, ok := v.attrs["data-metric"]; ok {
				values[m] = v
			}
		}
		big, bigWant := "waiting", ft.Waiting
		if ft.Group == "" {
			big, bigWant = "end", ft.End
		}
		if v := values[big]; v.attrs["data-value"] != strconv.FormatInt(bigWant, 10) || v.text != browserInt(bigWant) {
			t.Errorf("#%s shows %s %q (data %q), the API says %d", id, big, v.text, v.attrs["data-value"], bigWant)
		}
		rates := map[string]float64{"in": ft.InPerSecond}
		if ft.Group != "" {
			rates["done"] = ft.DonePerSecond
		}
		for m, r := range rates {
			v := values[m]
			got, err := strconv.ParseFloat(v.attrs["data-value"], 64)
			if err != nil || math.Abs(got-r) > 1e-9 || v.text != browserRate(r) {
				t.Errorf("#%s shows %s %q (data %q), the API says %v (%s)", id, m, v.text, v.attrs["data-value"], r, browserRate(r))
			}
		}
	}
	// The reachable processor's numbers, and the count of those reached.
	if want.Processors[0].Error != "" || want.Processors[1].Error == "" {
		t.Errorf("processors %+v: want the first reached, the closed one with an error", want.Processors)
	}
	if e, _ := browserByID(outer, "flow-note-"+p.Name); e.attrs["data-processors"] != "2" || e.attrs["data-reached"] != "1" || !strings.Contains(e.text, "1 of 2 processors reached") {
		t.Errorf("the flow's note %q (data-processors %q, data-reached %q), want 1 of 2 processors reached", e.text, e.attrs["data-processors"], e.attrs["data-reached"])
	}
	for _, c := range []struct {
		node, metric string
		want         int64
	}{{"main-main", "inflight", want.Inflight}, {"tier-1s", "held", want.Tiers[0].Held}} {
		node := browserOuter(outer, "flow-"+p.Name+"-"+c.node)
		v, ok := browserFirst(node, "span", map[string]string{"data-metric": c.metric})
		if !ok || v.attrs["data-value"] != strconv.FormatInt(c.want, 10) || v.text != browserInt(c.want) {
			t.Errorf("%s %s shows %q (data %q, present %v), the API says %d", c.node, c.metric, v.text, v.attrs["data-value"], ok, c.want)
		}
	}
	if v, ok := browserFirst(outer, "span", map[string]string{"data-metric": "handler-p99"}); !ok || !(math.Abs(browserFloat(v.attrs["data-value"])-want.HandlerP99Seconds) <= 1e-12) {
		t.Errorf("handler p99 shows %q (data %q), the API says %v", v.text, v.attrs["data-value"], want.HandlerP99Seconds)
	}

	// The arrows carry the rate into what they point at.
	arrows := 0
	for _, e := range browserAll(outer, "div") {
		if r, ok := e.attrs["data-rate"]; ok {
			arrows++
			if _, err := strconv.ParseFloat(r, 64); err != nil {
				t.Errorf("arrow data-rate %q", r)
			}
		}
	}
	if arrows != 3 {
		t.Errorf("%d arrows, want 3 (main → 1s, → results, → DLQ)", arrows)
	}
	if !reqs.seen("GET /api/pipelines 200") {
		t.Errorf("the page did not GET /api/pipelines: %v", reqs.all())
	}

	// The line: the pipeline's state as a badge, and the reached
	// processor's state, breaker and reasons as the API served them.
	if e, ok := browserByID(outer, "line-"+p.Name); !ok || e.attrs["data-line"] != want.Line || e.text != want.Line || want.Line != "stopped" {
		t.Errorf("#line-%s shows %q (data-line %q, present %v), the API says %q", p.Name, e.text, e.attrs["data-line"], ok, want.Line)
	}
	wl := want.Processors[0].Line
	lines := browserOuter(outer, "flines-"+p.Name)
	if wl == nil || lines == "" {
		t.Fatalf("no line in the API (%+v) or no #flines-%s in the page", wl, p.Name)
	}
	if e, ok := browserFirst(lines, "div", map[string]string{"class": "fline"}); !ok || e.attrs["data-state"] != wl.State || e.attrs["data-breaker"] != wl.Breaker || e.attrs["data-instance"] != "flowui" {
		t.Errorf("the processor's line shows state %q breaker %q instance %q (present %v), the API says %q %q flowui", e.attrs["data-state"], e.attrs["data-breaker"], e.attrs["data-instance"], ok, wl.State, wl.Breaker)
	}
	if e, ok := browserFirst(lines, "span", map[string]string{"data-line": wl.State}); !ok || e.text != wl.State {
		t.Errorf("the processor's state badge shows %q (present %v), want %q", e.text, ok, wl.State)
	}
	if e, ok := browserFirst(lines, "span", map[string]string{"data-breaker": wl.Breaker}); !ok || !strings.HasPrefix(e.text, "breaker "+wl.Breaker) {
		t.Errorf("the breaker shows %q (present %v), want breaker %s", e.text, ok, wl.Breaker)
	}
	// What the breaker counted, as the API served it.
	if wc := wl.Counts; wc == nil {
		t.Errorf("the API serves no breaker counts for a processor at the defaults: %+v", wl)
	} else if e, ok := browserFirst(lines, "span", map[string]string{"class": "hint breaker-counts"}); !ok ||
		e.attrs["data-calls"] != strconv.Itoa(wc.Calls) || e.attrs["data-failures"] != strconv.Itoa(wc.Failures) ||
		e.attrs["data-not-counted"] != strconv.Itoa(wc.NotCounted) ||
		!strings.HasPrefix(e.text, fmt.Sprintf("counted %d calls, %d failed (%d in a row), %d not counted in %s", wc.Calls, wc.Failures, wc.InARow, wc.NotCounted, wc.Window)) {
		t.Errorf("the breaker's counts show %q %v (present %v), the API says %+v", e.text, e.attrs, ok, *wc)
	}
	var shown []string
	for _, li := range browserAll(lines, "li") {
		if r, ok := li.attrs["data-reason"]; ok {
			shown = append(shown, r)
		}
	}
	if len(shown) != len(wl.Reasons) {
		t.Errorf("the page shows the reasons %v, the API %+v", shown, wl.Reasons)
	}
	for _, r := range wl.Reasons {
		li, ok := browserFirst(lines, "li", map[string]string{"data-reason": r.Reason})
		if !ok || li.attrs["data-since"] != r.Since.Format(time.RFC3339Nano) {
			t.Errorf("reason %s: data-since %q (present %v), the API says %s", r.Reason, li.attrs["data-since"], ok, r.Since.Format(time.RFC3339Nano))
		}
	}
	if strings.Contains(lines, "198.51.100.7") || strings.Contains(lines, "rotating") {
		t.Errorf("the page shows who paused the line or why (%q):\n%s", pauseDetail, lines)
	}
	if _, ok := browserFirst(lines, "li", map[string]string{"data-reason": "manual"}); !ok || !strings.Contains(lines, html.EscapeString(processor.ManualDetailHidden)) {
		t.Errorf("the manual pause (present %v) does not say %q:\n%s", ok, processor.ManualDetailHidden, lines)
	}
	// redrive dev's outage button is offered (DemoOutage is set).
	if e, ok := browserByID(dom, "dev"); !ok || hasAttr(e, "hidden") {
		t.Errorf("#dev present %v, hidden %v: the outage button is not shown under DemoOutage", ok, hasAttr(e, "hidden"))
	}
	if e, ok := browserByID(dom, "dev-outage"); !ok || e.text != "Simulate a 30 s solver outage" {
		t.Errorf("#dev-outage %q (present %v)", e.text, ok)
	}
}

func hasAttr(e browserElem, name string) bool {
	_, ok := e.attrs[name]
	return ok
}

// browserInt formats n as the page does (en-US grouping).
func browserInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// browserRate formats records per second as the page does.
func browserRate(r float64) string {
	switch {
	case r == 0:
		return "0/s"
	case r >= 100:
		return browserInt(int64(math.Round(r))) + "/s"
	}
	return strconv.FormatFloat(r, 'f', 1, 64) + "/s"
}

func browserFloat(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// browserFillJS plays the user at the token prompt: each time the page
// shows it (body data-auth-asked grows), it types the next of the tokens
// its URL lists (?tokens=a,b) and submits the form, as a person would.
// With reload=1 it reloads the page once after it loaded its data
// (body data-reloaded=1 on the new page): the token must survive in the
// tab's sessionStorage.
const browserFillJS = `(function () {
  const q = new URL(document.currentScript.src).searchParams;
  const tokens = (q.get("tokens") || "").split(",").filter(Boolean);
  const reload = q.get("reload") === "1";
  if (sessionStorage.getItem("test.reloaded") === "1") document.body.dataset.reloaded = "1";
  let handled = 0, typed = 0;
  setInterval(function () {
    const b = document.body;
    if (reload && b.dataset.loaded === "1" && sessionStorage.getItem("test.reloaded") !== "1") {
      sessionStorage.setItem("test.reloaded", "1");
      location.reload();
      return;
    }
    const asked = +(b.dataset.authAsked || 0);
    const form = document.getElementById("auth");
    if (asked <= handled || form.hidden || typed >= tokens.length) return;
    handled = asked;
    document.getElementById("auth-token").value = tokens[typed++];
    b.dataset.typed = String(typed);
    form.requestSubmit();
  }, 50);
})();`

// servePageWith serves h's dashboard page with a script tag for src added
// before </body>; its headers are h's but for those the change falsifies.
func servePageWith(w http.ResponseWriter, r *http.Request, h http.Handler, src string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		if k != "Content-Length" && k != "Last-Modified" && k != "Etag" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(rec.Code)
	_, _ = io.WriteString(w, strings.Replace(rec.Body.String(), "</body>", `<script src="`+src+`"></script></body>`, 1))
}

// browserFill serves h with browserFillJS at /test-fill.js and a script
// tag for it (with query) added to the dashboard's page: the page's own
// policy allows it (same origin); nothing else of the page changes.
func browserFill(h http.Handler, query string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/test-fill.js":
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = io.WriteString(w, browserFillJS)
		case "/":
			servePageWith(w, r, h, "test-fill.js?"+query)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// TestBrowserToken: with analyzer.token and analyzer.read_token set, the
// dashboard asks for a token once, sends it with every call (its data
// appears; the refreshes and a reload ask no more: sessionStorage), asks
// again when a token is refused, and shows no dead letter until one is
// accepted. With hide_values the page shows each value's size and hash,
// never the value.
func TestBrowserToken(t *testing.T) {
	chrome := browserChromium(t)
	c := kafkatest.New(t)
	mainTopic, dlqTopic := kafkatest.Topic(t, "browsertok"), kafkatest.Topic(t, "browsertok.dlq")
	c.CreateTopic(t, mainTopic, 1, nil)
	c.CreateTopic(t, dlqTopic, 1, nil)
	const n = 6
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := c.Client(t).ProduceSync(pctx, browserDeadLetters(mainTopic, dlqTopic, n, time.Now())...).FirstErr()
	cancel()
	if err != nil {
		t.Fatalf("producing the dead letters: %v", err)
	}
	a, _ := (&env{t: t, c: c}).launch(analyzer.Options{
		Pipelines:  []analyzer.Pipeline{{Name: "tok", Topic: mainTopic, DLQ: dlqTopic}},
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
		HideValues: true,
	})
	api := a.HandlerAccess(analyzer.Access{Token: "full-tok", ReadToken: "read-tok"})

	// Ready, as the API says to a reader with the token.
	deadline := time.Now().Add(60 * time.Second)
	for {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/stats", nil)
		req.Header.Set("Authorization", "Bearer read-tok")
		api.ServeHTTP(rec, req)
		var st analyzer.StatsResponse
		if rec.Code == 200 && json.Unmarshal(rec.Body.Bytes(), &st) == nil && len(st.Pipelines) == 1 && st.Pipelines[0].Ready && st.Pipelines[0].Stats.Total == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the analyzer did not report %d dead letters within 60s: %d %s", n, rec.Code, rec.Body.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	run := func(t *testing.T, query string) (dom string, reqs *browserRequests) {
		t.Helper()
		reqs = &browserRequests{}
		srv := httptest.NewServer(reqs.wrap(browserFill(api, query)))
		t.Cleanup(srv.Close)
		dom = browserRun(t, chrome, srv.URL+"/", "--dump-dom")
		if t.Failed() {
			return dom, reqs
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("requests: %v\nDOM:\n%s", reqs.all(), browserHead(dom))
			}
		})
		return dom, reqs
	}
	body := func(t *testing.T, dom string) browserElem {
		t.Helper()
		b, ok := browserFirst(dom, "body", nil)
		if !ok {
			t.Fatalf("no <body> in the DOM:\n%s", browserHead(dom))
		}
		return b
	}
	count := func(reqs *browserRequests, want string) int {
		k := 0
		for _, r := range reqs.all() {
			if r == want {
				k++
			}
		}
		return k
	}
	rows := func(dom string) int {
		k := 0
		for _, e := range browserAll(browserOuter(dom, "deadletters"), "tr") {
			if _, ok := e.attrs["data-id"]; ok {
				k++
			}
		}
		return k
	}
	noValues := func(t *testing.T, dom string) {
		t.Helper()
		for _, v := range []string{`"order":`, `&quot;order&quot;`, `"site"`} {
			if strings.Contains(dom, v) {
				t.Errorf("the page shows a hidden value (%s)", v)
			}
		}
	}

	t.Run("prompt, then data, kept for the session", func(t *testing.T) {
		dom, reqs := run(t, "tokens=read-tok&reload=1")
		b := body(t, dom)
		if b.attrs["data-loaded"] != "1" || b.attrs["data-reloaded"] != "1" {
			t.Fatalf("body data-loaded=%q data-reloaded=%q (data-auth=%q, data-error=%q): want the data shown after the reload",
				b.attrs["data-loaded"], b.attrs["data-reloaded"], b.attrs["data-auth"], b.attrs["data-error"])
		}
		if _, asked := b.attrs["data-auth-asked"]; asked {
			t.Errorf("the reloaded page asked for the token again (data-auth-asked=%q): it was not kept for the session", b.attrs["data-auth-asked"])
		}
		if f, ok := browserByID(dom, "auth"); !ok || !hasAttr(f, "hidden") {
			t.Errorf("the token prompt is shown over the data")
		}
		if got := rows(dom); got != n {
			t.Errorf("#deadletters has %d rows, want %d", got, n)
		}
		// Asked first (no token: 401), then every call with it.
		if count(reqs, "GET /api/stats 401") != 1 || count(reqs, "GET /api/stats 200") < 2 || count(reqs, "GET /api/deadletters 200") < 2 {
			t.Errorf("want one refused GET /api/stats, then the calls with the token; requests: %v", reqs.all())
		}
		if count(reqs, "GET /api/deadletters 401") > 0 || count(reqs, "GET /api/pipelines 200") < 2 {
			t.Errorf("requests: %v", reqs.all())
		}
		// hide_values: sizes and hashes in the details, no value.
		if !strings.Contains(dom, `data-sha256="sha256:`) || !strings.Contains(dom, "analyzer.hide_values") {
			t.Errorf("the details show no hidden value's hash")
		}
		noValues(t, dom)
	})

	t.Run("a wrong token asks again", func(t *testing.T) {
		dom, reqs := run(t, "tokens=wrong")
		b := body(t, dom)
		if b.attrs["data-auth"] != "required" || b.attrs["data-auth-asked"] != "2" || b.attrs["data-typed"] != "1" {
			t.Errorf("body data-auth=%q data-auth-asked=%q data-typed=%q, want the prompt shown again after the wrong token",
				b.attrs["data-auth"], b.attrs["data-auth-asked"], b.attrs["data-typed"])
		}
		if _, loaded := b.attrs["data-loaded"]; loaded {
			t.Errorf("the page loaded data with a wrong token")
		}
		if f, ok := browserByID(dom, "auth"); !ok || hasAttr(f, "hidden") {
			t.Errorf("the token prompt is not shown")
		}
		if e, ok := browserByID(dom, "auth-error"); !ok || hasAttr(e, "hidden") || !strings.Contains(e.text, "did not accept") {
			t.Errorf("#auth-error %+v, want shown saying the token was not accepted", e)
		}
		if got := rows(dom); got != 0 {
			t.Errorf("#deadletters shows %d dead letters without a good token", got)
		}
		if strings.Contains(dom, "order-") || count(reqs, "GET /api/stats 200") > 0 || count(reqs, "GET /api/stats 401") != 2 {
			t.Errorf("want two refused GET /api/stats and no data; requests: %v", reqs.all())
		}
		noValues(t, dom)
	})

	t.Run("a wrong token, then the right one", func(t *testing.T) {
		dom, reqs := run(t, "tokens=wrong,full-tok")
		b := body(t, dom)
		if b.attrs["data-loaded"] != "1" || b.attrs["data-auth"] != "given" || b.attrs["data-auth-asked"] != "2" || b.attrs["data-typed"] != "2" {
			t.Errorf("body data-loaded=%q data-auth=%q data-auth-asked=%q data-typed=%q, want loaded after the second token",
				b.attrs["data-loaded"], b.attrs["data-auth"], b.attrs["data-auth-asked"], b.attrs["data-typed"])
		}
		if got := rows(dom); got != n {
			t.Errorf("#deadletters has %d rows, want %d", got, n)
		}
		if count(reqs, "GET /api/stats 401") != 2 || count(reqs, "GET /api/stats 200") < 1 {
			t.Errorf("requests: %v", reqs.all())
		}
	})
}
