package analyzer_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/kafkatest"
)

// TestBrowserCallbacks loads the dashboard in headless Chromium against
// an analyzer given three processors (two answering, one gone) whose GET
// /api/pipelines report callbacks for one pipeline and none for another,
// and checks the Callbacks panel: the sums the API serves, as data and as
// text, a row per answering processor, and no panel for the pipeline
// without callbacks. REDRIVE_CALLBACKS_SCREENSHOT=/tmp/x.png also writes a
// screenshot.
func TestBrowserCallbacks(t *testing.T) {
	chrome := browserChromium(t)
	c := kafkatest.New(t)
	cb, plain := kafkatest.Topic(t, "cbui"), kafkatest.Topic(t, "plain")
	for _, n := range []string{cb, cb + ".dlq", cb + ".results", plain, plain + ".dlq"} {
		c.CreateTopic(t, n, 1, nil)
	}
	// Each processor's answer: the processor package's Status, as JSON.
	status := func(instance, callbacks string) string {
		return `{"instance":"` + instance + `","pipelines":[` +
			`{"name":"cbui","inflight":2,"waiting":5,"tiers":[],"line":{"state":"running","breaker":"closed","guard":true},"callbacks":` + callbacks + `},` +
			`{"name":"plain","inflight":1,"tiers":[],"line":{"state":"running","breaker":"closed","guard":true}}]}`
	}
	answers := []string{
		status("proc-a", `{"topic":"`+cb+`.callbacks","wait":"10s","held":3,"received":120,"matched":90,"duplicate":12,"late":2,"polls":30,"via_callback":90,"via_poll":25}`),
		status("proc-<b>b</b>", `{"topic":"`+cb+`.callbacks","wait":"10s","held":1,"received":1000,"matched":950,"duplicate":1,"late":0,"polls":1234567,"via_callback":950,"via_poll":40}`),
	}
	var urls []string
	for _, body := range answers {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/pipelines" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	urls = append(urls, gone.URL)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Pipelines: []analyzer.Pipeline{
			{Name: "cbui", Topic: cb, DLQ: cb + ".dlq", Results: cb + ".results"},
			{Name: "plain", Topic: plain, DLQ: plain + ".dlq"},
		},
		Logger: log, FlowEvery: 500 * time.Millisecond, Processors: urls,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
	srv := httptest.NewServer(a.Handler(""))
	t.Cleanup(srv.Close)

	// The API: the sum over the two that answered, each one's own.
	var fr analyzer.FlowResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		fr = analyzer.FlowResponse{}
		browserGetJSON(t, srv.URL+"/api/pipelines", &fr)
		if len(fr.Pipelines) == 2 && fr.Pipelines[0].Callbacks != nil && len(fr.Pipelines[0].Processors) == 3 && fr.Pipelines[0].SampledAt != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no callbacks in the flow within 60s: %+v", fr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := analyzer.ProcessorCallbacks{Topic: cb + ".callbacks", Wait: "10s", Held: 4, Received: 1120, Matched: 1040, Duplicate: 13, Late: 2, Polls: 1234597, ViaCallback: 1040, ViaPoll: 65}
	f := fr.Pipelines[0]
	if *f.Callbacks != want {
		t.Errorf("flow callbacks %+v, want %+v", *f.Callbacks, want)
	}
	if f.Processors[0].Callbacks == nil || f.Processors[0].Callbacks.Received != 120 || f.Processors[2].Callbacks != nil || f.Processors[2].Error == "" {
		t.Errorf("processors %+v", f.Processors)
	}
	if fr.Pipelines[1].Callbacks != nil || fr.Pipelines[1].Processors[0].Callbacks != nil {
		t.Errorf("the pipeline without callbacks has some: %+v", fr.Pipelines[1])
	}

	dom := browserRun(t, chrome, srv.URL+"/", "--dump-dom")
	if path := os.Getenv("REDRIVE_CALLBACKS_SCREENSHOT"); path != "" {
		browserRun(t, chrome, srv.URL+"/", "--screenshot="+path, "--window-size=1400,1100")
		t.Logf("screenshot written to %s", path)
	}
	if body, _ := browserFirst(dom, "body", nil); body.attrs["data-loaded"] != "1" || body.attrs["data-error"] != "" {
		t.Fatalf("the page did not render (data-error %q):\n%s", body.attrs["data-error"], browserHead(dom))
	}
	panel := browserOuter(dom, "callbacks-cbui")
	e, ok := browserByID(dom, "callbacks-cbui")
	if !ok || panel == "" {
		t.Fatalf("no #callbacks-cbui in the page:\n%s", browserHead(dom))
	}
	if !strings.Contains(browserOuter(dom, "flow-cbui"), `id="callbacks-cbui"`) {
		t.Errorf("the Callbacks panel is not inside the pipeline's flow")
	}
	if e.attrs["data-topic"] != want.Topic || e.attrs["data-wait"] != "10s" || e.attrs["data-processors"] != "2" {
		t.Errorf("panel attributes %v", e.attrs)
	}
	if h, ok := browserFirst(panel, "h3", nil); !ok || h.text != "Callbacks" {
		t.Errorf("panel heading %q", h.text)
	}
	var wantMap map[string]any
	b, _ := json.Marshal(want)
	_ = json.Unmarshal(b, &wantMap)
	counts := browserOuter(panel, "callbacks-cbui") // the whole panel; the sums come first
	for _, k := range []string{"held", "received", "matched", "duplicate", "late", "polls", "via_callback", "via_poll"} {
		n := int64(wantMap[k].(float64))
		v, ok := browserFirst(counts, "span", map[string]string{"data-metric": "cb-" + k})
		if !ok || v.attrs["data-value"] != strconv.FormatInt(n, 10) || v.text != browserInt(n) {
			t.Errorf("%s shows %q (data %q, present %v), the API says %d", k, v.text, v.attrs["data-value"], ok, n)
		}
	}
	// 1040 of 1105 finished via callback: 94.1 %.
	if !strings.Contains(panel, "94.1% of 1,105 jobs finished via callback") {
		t.Errorf("the panel does not say the share finished via callback:\n%s", panel)
	}
	// One row per processor that answered, its own numbers, markup as text.
	rows := 0
	for _, tr := range browserAll(panel, "tr") {
		if _, ok := tr.attrs["data-processor"]; ok {
			rows++
		}
	}
	if rows != 2 {
		t.Errorf("%d processor rows, want 2 (the gone one left out):\n%s", rows, panel)
	}
	if !strings.Contains(panel, "proc-&lt;b&gt;b&lt;/b&gt;") || strings.Contains(panel, "<b>b</b>") {
		t.Errorf("an instance name is not shown as text:\n%s", panel)
	}
	if td, ok := browserFirst(panel, "td", map[string]string{"data-metric": "cb-polls"}); !ok || td.text != "30" {
		t.Errorf("proc-a's polls show %q (present %v)", td.text, ok)
	}
	// No panel for the pipeline without callbacks.
	if _, ok := browserByID(dom, "callbacks-plain"); ok {
		t.Errorf("the pipeline without callbacks has a Callbacks panel")
	}
	if _, ok := browserByID(dom, "flow-plain"); !ok {
		t.Errorf("no flow for the pipeline without callbacks")
	}
}
