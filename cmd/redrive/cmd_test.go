package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/fakeapi"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// writeConfig writes a one-pipeline config for the test's broker
// (clitest.WriteConfig).
func writeConfig(t *testing.T, brokers []string, topic, solverURL, extra string) string {
	t.Helper()
	return clitest.WriteConfig(t, brokers, topic, solverURL, extra)
}

func runOut(ctx context.Context, args ...string) (int, string) {
	var out bytes.Buffer
	code := runCtx(ctx, args, &out, &out)
	return code, out.String()
}

func TestTopicsCheckEnsureCheck(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "cmd")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	ctx := context.Background()

	code, out := runOut(ctx, "topics", "check", "-c", cfg)
	if code != 1 || !strings.Contains(out, topic+".dlq") || !strings.Contains(out, "PROBLEM") {
		t.Fatalf("check before ensure: exit %d, want 1 with the missing topics listed:\n%s", code, out)
	}
	code, out = runOut(ctx, "topics", "ensure", "-c", cfg)
	if code != 0 {
		t.Fatalf("ensure: exit %d:\n%s", code, out)
	}
	for _, name := range []string{topic, topic + ".retry.1s", topic + ".retry.2s", topic + ".dlq", topic + ".results"} {
		if !strings.Contains(out, name) {
			t.Errorf("ensure table does not list %s:\n%s", name, out)
		}
	}
	if code, out = runOut(ctx, "topics", "check", "-c", cfg); code != 0 {
		t.Fatalf("check after ensure: exit %d:\n%s", code, out)
	}
}

func TestUsageAndConfigErrorsExit2(t *testing.T) {
	ctx := context.Background()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("brokers: [\"127.0.0.1:1\"]\npipelines:\n  - topic: x\n    retry: {tierz: [1s]}\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"process"}, "no config"},
		{[]string{"process", "-c", bad}, "tierz"},
		{[]string{"process", "-c", filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
		{[]string{"nosuch"}, "unknown command"},
		{[]string{"analyze"}, "no config"},
	} {
		code, out := runOut(ctx, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 mentioning %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	if code, out := runOut(ctx, "version"); code != 0 || !strings.HasPrefix(out, "redrive ") {
		t.Errorf("version: %d %q", code, out)
	}
}

// solver is a scripted HTTP solver: the value says what to answer
// (clitest.Answer). Tests make it with &solver{calls: map[string]int{}}.
type solver struct {
	mu    sync.Mutex
	calls map[string]int // by Idempotency-Key
}

func (s *solver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.calls[id]++
	n := s.calls[id]
	s.mu.Unlock()
	clitest.Answer(w, string(body), n)
}

func (s *solver) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

// hdr is r's header k, "" without one.
func hdr(r *kgo.Record, k string) string { return clitest.Header(r, k) }

func TestProcessCommandHandlesAndStopsCleanly(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "proc")
	s := &solver{calls: map[string]int{}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cfg := writeConfig(t, c.Brokers, topic, srv.URL+"/solve", "")
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() { done <- runCtx(ctx, []string{"process", "-c", cfg}, io.Discard, &out) }()

	cl := c.Client(t)
	rec := func(id, v string) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}
	}
	if err := cl.ProduceSync(context.Background(), rec("a", "easy"), rec("b", "flaky"), rec("c", "wrong-key")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	results := c.Collect(t, topic+".results", 2, 30*time.Second)
	dead := c.Collect(t, topic+".dlq", 1, 30*time.Second)
	got := map[string]string{}
	for _, r := range results {
		got[hdr(r, retry.HeaderID)] = string(r.Value) + " attempt " + hdr(r, retry.HeaderAttempt)
	}
	if got["a"] != "solved easy attempt 1" || got["b"] != "solved flaky attempt 2" {
		t.Errorf("results = %v, want a on attempt 1 and b (503 once) on attempt 2", got)
	}
	if len(dead) != 1 || hdr(dead[0], retry.HeaderReason) != "permanent" || hdr(dead[0], retry.HeaderErrorCode) != "ERROR_WRONG_USER_KEY" {
		t.Errorf("dead letters = %d, want c as permanent ERROR_WRONG_USER_KEY", len(dead))
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("process exit %d after cancel, want 0:\n%s", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("process did not stop within 30s of SIGTERM")
	}
}

func TestDevRunsEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	anAddr := ln2.Addr().String()
	ln.Close()
	ln2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out syncBuf
	go func() {
		done <- runCtx(ctx, []string{"dev", "--kafka-port", "0", "--http", addr, "--analyzer", anAddr, "--rate", "100", "--duration", "150s"}, &out, &out)
	}()
	// The processor's live state on its port, and the whole flow on the
	// analyzer's: records reach the 1s tier, the results and the DLQ.
	var ps processor.Status
	var flow analyzer.FlowResponse
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		ps, flow = processor.Status{}, analyzer.FlowResponse{}
		if !getJSON("http://"+addr+"/api/pipelines", &ps) || !getJSON("http://"+anAddr+"/api/pipelines", &flow) {
			continue
		}
		p, f := statusOf(ps, "solve"), flowOf(flow, "solve")
		if p != nil && p.HandlerCalls > 0 && f != nil && len(f.Tiers) > 0 && f.Tiers[0].End > 0 && f.Results != nil && f.Results.End > 0 &&
			f.DLQ.End > 0 && strings.Contains(out.String(), "handled ") {
			break
		}
	}
	t.Run("the processor serves its live state at /api/pipelines", func(t *testing.T) {
		if len(ps.Pipelines) != 2 || statusOf(ps, "captcha") == nil {
			t.Errorf("the processor's /api/pipelines does not show the pipelines solve and captcha: %+v", ps)
		}
		if p := statusOf(ps, "solve"); p == nil || !p.Joined || p.HandlerCalls == 0 {
			t.Errorf("the processor's /api/pipelines shows no handled records after 60s: %+v\n%s", ps, out.String())
		}
	})
	t.Run("the dashboard's flow shows tiers, results and the DLQ and reaches the processor", func(t *testing.T) {
		f := flowOf(flow, "solve")
		if len(flow.Pipelines) != 2 || f == nil || flowOf(flow, "captcha") == nil {
			t.Fatalf("the analyzer's /api/pipelines: %+v", flow)
		}
		if len(f.Tiers) != 3 || f.Tiers[0].Name != "1s" || f.Tiers[0].End == 0 || f.Results == nil || f.Results.End == 0 || f.DLQ.End == 0 {
			t.Errorf("the dashboard's flow shows no retries in tier 1s, results or dead letters: %+v", f)
		}
		if len(f.Processors) != 1 || f.Processors[0].Error != "" {
			t.Errorf("the dashboard's flow does not reach dev's processor: %+v", f.Processors)
		}
	})
	t.Run("the captcha pipeline submits to the fake CaptchaAI", func(t *testing.T) {
		m := regexp.MustCompile(`captchaai     (http://\S+)/in\.php`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no fake CaptchaAI in the banner:\n%s", out.String())
		}
		var st fakeapi.CaptchaStats
		deadline := time.Now().Add(30 * time.Second)
		for !getJSON(m[1]+"/stats", &st) || st.Submits == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the fake CaptchaAI got no submit within 30s: %+v", st)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if !regexp.MustCompile(`callbacks     http://127\.0\.0\.1:[1-9][0-9]*   \(callback_addr; paths /cb/captcha\)`).MatchString(out.String()) {
			t.Errorf("the banner does not name the callback address:\n%s", out.String())
		}
	})
	t.Run("the dashboard shows callbacks, fallback polls and duplicates", func(t *testing.T) {
		// Within a minute of traffic: tasks finished by their pingback,
		// tasks whose pingback was dropped finished by a poll, pingbacks
		// sent twice counted as duplicates.
		var cb *analyzer.ProcessorCallbacks
		deadline := time.Now().Add(60 * time.Second)
		for {
			flow = analyzer.FlowResponse{}
			if getJSON("http://"+anAddr+"/api/pipelines", &flow) {
				if f := flowOf(flow, "captcha"); f != nil {
					cb = f.Callbacks
				}
			}
			if cb != nil && cb.Matched > 0 && cb.ViaCallback > 0 && cb.ViaPoll > 0 && cb.Polls > 0 && cb.Duplicate > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("within 60s the captcha pipeline's callbacks are %+v, want matched, via callback, via poll, polls and duplicates", cb)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !strings.Contains(out.String(), "callbacks [received:") || !strings.Contains(out.String(), "finished via [callback:") {
			t.Errorf("dev's summary line does not count callbacks and the jobs they finished:\n%s", out.String())
		}
	})
	t.Run("the dashboard lists the wrong-key dead letters", func(t *testing.T) {
		var dls struct {
			DeadLetters []struct {
				Code string `json:"code"`
			} `json:"dead_letters"`
		}
		wrongKey := false
		for i := 0; i < 100 && !wrongKey; i++ {
			getJSON("http://"+anAddr+"/api/deadletters?pipeline=solve&limit=1000", &dls)
			for _, d := range dls.DeadLetters {
				wrongKey = wrongKey || d.Code == "ERROR_WRONG_USER_KEY"
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !wrongKey {
			t.Errorf("the dashboard lists no ERROR_WRONG_USER_KEY dead letter")
		}
	})
	t.Run("the dashboard page has the flow view and the processor's / leads there", func(t *testing.T) {
		resp, err := http.Get("http://" + anAddr + "/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(page), `id="flows"`) {
			t.Errorf("the dashboard page has no flow view")
		}
		// The processor's / leads to the dashboard.
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if resp, err := noFollow.Get("http://" + addr + "/"); err != nil {
			t.Error(err)
		} else {
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://"+anAddr+"/" {
				t.Errorf("GET processor / = %d to %q, want 302 to the dashboard", resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	})
	t.Run("dev prints a summary and the analyzer dashboard URL", func(t *testing.T) {
		if !strings.Contains(out.String(), "handled ") || !strings.Contains(out.String(), "dead-lettered ") {
			t.Errorf("dev printed no summary line:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "dashboard     http://"+anAddr+"/") {
			t.Errorf("dev did not print the analyzer's dashboard URL:\n%s", out.String())
		}
	})
	t.Run("the analyzer in dev counts the dead letters", func(t *testing.T) {
		var st struct {
			Pipelines []struct {
				Name  string `json:"name"`
				Ready bool   `json:"ready"`
				Stats struct {
					Total    int64            `json:"total"`
					ByReason map[string]int64 `json:"by_reason"`
				} `json:"stats"`
			} `json:"pipelines"`
		}
		for i := 0; i < 100; i++ {
			if r, err := http.Get("http://" + anAddr + "/api/stats"); err == nil {
				_ = json.NewDecoder(r.Body).Decode(&st)
				r.Body.Close()
				if len(st.Pipelines) == 2 && st.Pipelines[0].Name == "solve" && st.Pipelines[0].Ready && st.Pipelines[0].Stats.Total > 0 {
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if len(st.Pipelines) != 2 || st.Pipelines[0].Name != "solve" || st.Pipelines[0].Stats.Total == 0 || st.Pipelines[0].Stats.ByReason["permanent"] == 0 {
			t.Errorf("the analyzer in dev reports no (permanent) dead letters for solve: %+v", st)
		}
	})
	t.Run("the dashboard's outage button opens the processor's breaker", func(t *testing.T) {
		testDevOutage(t, addr, anAddr, out.String())
	})
	t.Run("dev exits 0 when stopped", func(t *testing.T) {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev exit %d, want 0:\n%s", code, out.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("dev did not stop")
		}
	})
}

func TestDevConfigIsValid(t *testing.T) {
	c := devConfig("127.0.0.1:1", "http://127.0.0.1:2/solve", "http://127.0.0.1:3", "127.0.0.1:4")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// The captcha pipeline: the captchaai preset against the fake, its
	// ${VARS} from devEnv, its pingback to the callback intake.
	if len(c.Pipelines) != 2 || c.Pipelines[1].Name != "captcha" || c.CallbackAddr != "127.0.0.1:4" {
		t.Fatalf("pipelines %+v, callback_addr %q", c.Pipelines, c.CallbackAddr)
	}
	h := c.Pipelines[1].Handler
	if h.HTTP == nil || h.HTTP.URL != "http://127.0.0.1:3/in.php" || h.HTTP.Query["key"] != fakeapi.DefaultCaptchaKey || h.HTTP.Query["json"] != "1" ||
		h.HTTP.Query["pingback"] != "http://127.0.0.1:4/cb/captcha?token="+devCallbackToken {
		t.Errorf("captcha http %+v", h.HTTP)
	}
	if p := h.HTTP.Poll; p == nil || p.URL != "http://127.0.0.1:3/res.php?key="+fakeapi.DefaultCaptchaKey+"&action=get&json=1&id={state}" ||
		p.StateField != "request" || p.ResultField != "request" || p.Every.D() != 2*time.Second {
		t.Errorf("captcha poll %+v", h.HTTP.Poll)
	}
	if cb := h.Callback; cb == nil || cb.Path != devCallbackPath || cb.Token != devCallbackToken || cb.IDField != "id" || cb.ResultField != "code" || cb.Wait.D() != 10*time.Second {
		t.Errorf("captcha callback %+v", h.Callback)
	}
	// The fake accepts the key dev sends.
	if devEnv("CAPTCHA_API_KEY") != fakeapi.DefaultCaptchaKey || devEnv("HOME") != "" {
		t.Error("devEnv answers what it should not")
	}
}

func TestDevSummaryCountsCallbacks(t *testing.T) {
	o := obs.New()
	if s := devSummary(o, time.Second, []string{"captcha"}); !strings.Contains(s, "callbacks [received:0 matched:0 duplicate:0 late:0] polls 0  finished via [callback:0 poll:0]") {
		t.Errorf("a summary before any callback metric: %s", s)
	}
	cbs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redrive_callbacks_total"}, []string{"pipeline", "event"})
	polls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redrive_polls_total"}, []string{"pipeline"})
	jobs := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "redrive_job_seconds"}, []string{"pipeline", "via"})
	o.Registry.MustRegister(cbs, polls, jobs)
	cbs.WithLabelValues("captcha", "received").Add(12)
	cbs.WithLabelValues("captcha", "matched").Add(9)
	cbs.WithLabelValues("captcha", "duplicate").Add(2)
	polls.WithLabelValues("captcha").Add(5)
	for range 8 {
		jobs.WithLabelValues("captcha", "callback").Observe(2)
	}
	for range 3 {
		jobs.WithLabelValues("captcha", "poll").Observe(11)
	}
	// A pipeline without callbacks (solve): its not-ready polls and jobs
	// are not the callbacks' fallback polls.
	polls.WithLabelValues("solve").Add(40)
	jobs.WithLabelValues("solve", "poll").Observe(1)
	// solve's callback series are exported too (0): not a reason to show
	// callbacks without a pipeline with handler.callback.
	cbs.WithLabelValues("solve", "received")
	if s := devSummary(o, time.Second, []string{"captcha"}); !strings.Contains(s, "callbacks [received:12 matched:9 duplicate:2 late:0] polls 5  finished via [callback:8 poll:3]") {
		t.Errorf("summary %s", s)
	}
	if s := devSummary(o, time.Second, nil); strings.Contains(s, "callbacks") || strings.Contains(s, "polls") {
		t.Errorf("a summary without a pipeline with callbacks mentions callbacks: %s", s)
	}
}

func TestPickPort(t *testing.T) {
	a, err := pickPort("127.0.0.1:0")
	if err != nil || !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
		t.Errorf("pickPort(:0) = %q, %v", a, err)
	}
	if a, err := pickPort("127.0.0.1:9999"); err != nil || a != "127.0.0.1:9999" {
		t.Errorf("pickPort(:9999) = %q, %v", a, err)
	}
	if _, err := pickPort("no port"); err == nil {
		t.Error("pickPort of an address without a port")
	}
}

// statusOf is the processor's status of pipeline name, nil if absent.
func statusOf(s processor.Status, name string) *processor.PipelineStatus {
	return clitest.StatusOf(s, name)
}

// flowOf is the analyzer's flow of pipeline name, nil if absent.
func flowOf(r analyzer.FlowResponse, name string) *analyzer.Flow {
	for i := range r.Pipelines {
		if r.Pipelines[i].Name == name {
			return &r.Pipelines[i]
		}
	}
	return nil
}

type syncBuf = clitest.SyncBuf

// getJSON GETs url into v; false on any failure.
func getJSON(url string, v any) bool { return clitest.GetJSON(url, v) }

// devBanner runs redrive dev with args until it has printed its banner,
// stops it and returns all it printed.
func devBanner(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out syncBuf
	go func() {
		done <- runCtx(ctx, append([]string{"dev", "--kafka-port", "0", "--http", "127.0.0.1:0", "--analyzer", "127.0.0.1:0", "--rate", "0", "--duration", "60s"}, args...), &out, &out)
	}()
	printed := kafkatest.Eventually(45*time.Second, func() bool { return strings.Contains(out.String(), "Ctrl-C stops it.") })
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop")
	}
	if !printed {
		t.Fatalf("dev printed no banner:\n%s", out.String())
	}
	return out.String()
}

// A replay token from the environment is a secret; dev
// says where it is set, not what it is. The one dev picks itself is shown
// (README: "replay token `redrive-dev-token`").
func TestDevDoesNotPrintTheTokenFromTheEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const secret = "env-t0ken-s3cret"
	t.Run("from REDRIVE_ANALYZER_TOKEN", func(t *testing.T) {
		t.Setenv("REDRIVE_ANALYZER_TOKEN", secret)
		out := devBanner(t, "-c", writeConfig(t, []string{"127.0.0.1:1"}, "tok.env", "", ""))
		if strings.Contains(out, secret) {
			t.Errorf("dev printed the replay token from the environment:\n%s", out)
		}
		if !strings.Contains(out, "replay token: the one set by the environment (REDRIVE_ANALYZER_TOKEN)") {
			t.Errorf("dev does not say where the replay token is set:\n%s", out)
		}
	})
	t.Run("from ${VAR} in the file", func(t *testing.T) {
		t.Setenv("MY_TOKEN", secret)
		out := devBanner(t, "-c", writeConfig(t, []string{"127.0.0.1:1"}, "tok.file", "", "analyzer: {token: \"${MY_TOKEN}\"}\n"))
		if strings.Contains(out, secret) {
			t.Errorf("dev printed the replay token from the environment:\n%s", out)
		}
		if !strings.Contains(out, "replay token: the one set by ${MY_TOKEN} on line 12 of the file") {
			t.Errorf("dev does not say where the replay token is set:\n%s", out)
		}
	})
	t.Run("processor.token from REDRIVE_PROCESSOR_TOKEN", func(t *testing.T) {
		t.Setenv("REDRIVE_PROCESSOR_TOKEN", secret)
		out := devBanner(t, "-c", writeConfig(t, []string{"127.0.0.1:1"}, "ptok.env", "", ""))
		if strings.Contains(out, secret) {
			t.Errorf("dev printed the pause/resume token from the environment:\n%s", out)
		}
		if !strings.Contains(out, "pause/resume token: the one set by the environment (REDRIVE_PROCESSOR_TOKEN)") {
			t.Errorf("dev does not say where the pause/resume token is set:\n%s", out)
		}
	})
	t.Run("its own", func(t *testing.T) {
		out := devBanner(t)
		if !strings.Contains(out, `replay token "redrive-dev-token"`) || !strings.Contains(out, `pause/resume token "redrive-dev-token"`) {
			t.Errorf("dev does not print the tokens it chose:\n%s", out)
		}
	})
}
