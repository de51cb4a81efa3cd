package analyzer_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
)

// browserLayoutJS measures the flow once the page has loaded its data:
// every box of every flow card (main, tiers, results, DLQ) must lie
// inside its card, every count and rate inside its box and its card, and
// be what is painted at both ends of it (not cut off by a scrolling row
// or the window's edge); neither the row nor the page may scroll sideways. It writes
// {"width", "nodes", "values", "problems"} as JSON into #layout-report.
const browserLayoutJS = `(function () {
  const timer = setInterval(function () {
    if (document.body.dataset.loaded !== "1" || !document.querySelector(".panel.flow .fnode")) return;
    clearInterval(timer);
    const out = { width: window.innerWidth, nodes: 0, values: 0, problems: [] };
    const bad = (msg) => out.problems.push(msg);
    const r = (e) => e.getBoundingClientRect();
    const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5 && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
    const span = (a) => Math.round(a.left) + ".." + Math.round(a.right);
    const doc = document.documentElement;
    if (doc.scrollWidth > doc.clientWidth) bad("the page scrolls sideways: " + doc.scrollWidth + " px wide in " + doc.clientWidth);
    for (const card of document.querySelectorAll(".panel.flow")) {
      const row = card.querySelector(".fchain");
      if (row.scrollWidth > row.clientWidth) bad(card.id + ": the flow row scrolls: " + row.scrollWidth + " px wide in " + row.clientWidth);
      for (const node of card.querySelectorAll(".fnode")) {
        out.nodes++;
        if (!inside(r(node), r(card))) bad(node.id + " at x " + span(r(node)) + " is not inside its card at " + span(r(card)));
      }
      for (const v of card.querySelectorAll(".fnode .value[data-metric], .farrow .rate")) {
        out.values++;
        const box = v.closest(".fnode, .farrow");
        const what = (box.id || box.title) + " " + (v.dataset.metric || "rate") + " " + JSON.stringify(v.textContent);
        if (!v.textContent.trim()) bad(what + " is empty");
        if (!inside(r(v), r(box))) bad(what + " at x " + span(r(v)) + " is not inside its box at " + span(r(box)));
        if (!inside(r(v), r(card))) bad(what + " at x " + span(r(v)) + " is not inside its card at " + span(r(card)));
        // Bring it into the window vertically only: scrolling it into
        // view would also scroll a row that hides it.
        window.scrollBy(0, r(v).top - window.innerHeight / 2);
        const a = r(v), y = (a.top + a.bottom) / 2;
        for (const x of [a.left + 1, a.right - 1]) {
          const hit = document.elementFromPoint(x, y);
          if (!hit || !v.contains(hit)) bad(what + " is not what shows at x " + Math.round(x) + " (" + (hit ? hit.tagName + "." + hit.className : "outside the window") + ")");
        }
      }
    }
    window.scrollTo(0, 0);
    const pre = document.createElement("pre");
    pre.id = "layout-report";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 50);
})();`

// devFlows is GET /api/pipelines as `redrive dev` answers it after a
// while: its two pipelines (solve and captcha, three tiers each, results
// and a DLQ), its processor reached, counts in the hundreds of thousands.
func devFlows(now time.Time) analyzer.FlowResponse {
	flow := func(name string, rate float64, callbacks *analyzer.ProcessorCallbacks) analyzer.Flow {
		group := "redrive." + name
		topic := func(role, tname, t string, end int64, in float64, waiting int64, g string) analyzer.FlowTopic {
			ft := analyzer.FlowTopic{Role: role, Name: tname, Topic: t, End: end, InPerSecond: in, Group: g}
			if g != "" {
				ft.Waiting, ft.Committed, ft.DonePerSecond = waiting, end-waiting, in
			}
			return ft
		}
		f := analyzer.Flow{Name: name, Group: group, WindowSeconds: 15.2, SampledAt: now.Format(time.RFC3339Nano),
			Inflight: 64, HandlerP99Seconds: 0.2345, LatenessP99Seconds: 0.012, Line: "running",
			Main: topic("main", "main", name+".requests", 1_234_567, rate, 1_234, group), Callbacks: callbacks}
		for i, d := range []string{"1s", "5s", "15s"} {
			t := topic("tier", d, name+".requests.retry."+d, int64(123_456/(i+1)), rate/4/float64(i+1), int64(456/(i+1)), group)
			t.Held, t.LatenessP99Seconds = int64(321/(i+1)), 0.0456
			f.Tiers = append(f.Tiers, t)
		}
		res := topic("results", "results", name+".results", 1_198_765, rate*0.95, 0, "")
		f.Results = &res
		f.DLQ = topic("dlq", "dlq", name+".requests.dlq", 35_802, rate*0.05, 12, "redrive."+name+".analyzer")
		f.Processors = []analyzer.FlowProcessor{{URL: "http://127.0.0.1:9090", Instance: "dev", Inflight: 64, Waiting: 1_234,
			HandlerP99Seconds: 0.2345, LatenessP99Seconds: 0.012, Callbacks: callbacks,
			Line: &analyzer.ProcessorLine{State: "running", Breaker: "closed", Guard: true}}}
		return f
	}
	cb := &analyzer.ProcessorCallbacks{Topic: "captcha.requests.callbacks", Wait: "10s", Held: 12, Received: 4_321, Matched: 3_456,
		Duplicate: 432, Late: 21, Polls: 2_345, ViaCallback: 3_456, ViaPoll: 864}
	return analyzer.FlowResponse{Now: now.Format(time.RFC3339Nano), DevOutage: true,
		Pipelines: []analyzer.Flow{flow("solve", 20, nil), flow("captcha", 5, cb)}}
}

// browserDevDashboard serves the dashboard of an analyzer of `redrive
// dev`'s two pipelines that never runs (its statistics stay empty), with
// devFlows as GET /api/pipelines and script added to the page as
// test-page.js. stats answers the query strings of the GET /api/stats
// made so far.
func browserDevDashboard(t *testing.T, script string) (url string, stats func() []string) {
	t.Helper()
	a, err := analyzer.New(analyzer.Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, // never connects: nothing runs Run
		Pipelines: []analyzer.Pipeline{
			{Name: "solve", Topic: "solve.requests", DLQ: "solve.requests.dlq", Results: "solve.results"},
			{Name: "captcha", Topic: "captcha.requests", DLQ: "captcha.requests.dlq", Results: "captcha.results"},
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	flows, err := json.Marshal(devFlows(time.Now().UTC()))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var queries []string
	api := a.Handler("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/pipelines":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(flows)
		case "/test-page.js":
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = io.WriteString(w, script)
		case "/":
			servePageWith(w, r, api, "test-page.js")
		case "/api/stats":
			mu.Lock()
			queries = append(queries, r.URL.RawQuery)
			mu.Unlock()
			api.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(queries)
	}
}

// TestBrowserFlowFitsItsCard loads the dashboard in headless Chromium at
// 900, 1280, 1400 and 1920 px wide, with the flow of `redrive dev`'s two
// pipelines, and checks that every box of the flow row lies inside its
// card and every count and rate in it is shown whole (browserLayoutJS).
// The flow is served as GET /api/pipelines would answer it: the layout is
// under test, not the sampling (TestBrowserFlow), so no broker is needed.
// REDRIVE_FLOW_SCREENSHOT_DIR=/tmp/x also writes a screenshot per width.
func TestBrowserFlowFitsItsCard(t *testing.T) {
	chrome := browserChromium(t)
	url, _ := browserDevDashboard(t, browserLayoutJS)
	for _, width := range []int{900, 1280, 1400, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			size := fmt.Sprintf("--window-size=%d,1000", width)
			dom := browserRun(t, chrome, url, "--dump-dom", size)
			if dir := os.Getenv("REDRIVE_FLOW_SCREENSHOT_DIR"); dir != "" {
				path := filepath.Join(dir, fmt.Sprintf("flow-%d.png", width))
				browserRun(t, chrome, url, "--screenshot="+path, size)
				t.Logf("screenshot written to %s", path)
			}
			if body, _ := browserFirst(dom, "body", nil); body.attrs["data-loaded"] != "1" || body.attrs["data-error"] != "" {
				t.Fatalf("the page did not render (data-error %q):\n%s", body.attrs["data-error"], browserHead(dom))
			}
			e, ok := browserByID(dom, "layout-report")
			if !ok {
				t.Fatalf("no layout report in the page:\n%s", browserHead(dom))
			}
			var rep struct {
				Width, Nodes, Values int
				Problems             []string
			}
			if err := json.Unmarshal([]byte(e.text), &rep); err != nil {
				t.Fatalf("layout report %q: %v", e.text, err)
			}
			// 2 pipelines of main, 3 tiers, results and DLQ. Numbers: main's
			// waiting, in, done, in flight, handler p99; each tier's waiting,
			// in, done, held, late p99; results' written and in; the DLQ's
			// waiting, in, done; the 5 arrows' rates.
			const nodes, values = 2 * 6, 2 * (5 + 3*5 + 2 + 3 + 5)
			if rep.Width != width || rep.Nodes != nodes || rep.Values != values {
				t.Errorf("measured %d boxes and %d numbers at %d px wide, want %d and %d at %d", rep.Nodes, rep.Values, rep.Width, nodes, values, width)
			}
			for _, p := range rep.Problems {
				t.Errorf("at %d px: %s", width, p)
			}
		})
	}
}

// browserChartRangeJS picks the chart's last 24 hours once the page has
// loaded, as a person would.
const browserChartRangeJS = `(function () {
  const timer = setInterval(function () {
    if (document.body.dataset.loaded !== "1") return;
    clearInterval(timer);
    const sel = document.getElementById("chart-range");
    sel.value = "1440";
    sel.dispatchEvent(new Event("change"));
  }, 50);
})();`

// TestBrowserChartAsksForItsMinutes: the dashboard asks GET /api/stats for
// the minutes its chart draws, the last hour by default; picking the last
// 24 hours asks for 1440 and draws them.
func TestBrowserChartAsksForItsMinutes(t *testing.T) {
	chrome := browserChromium(t)
	url, stats := browserDevDashboard(t, browserChartRangeJS)
	dom := browserRun(t, chrome, url, "--dump-dom")
	if body, _ := browserFirst(dom, "body", nil); body.attrs["data-loaded"] != "1" || body.attrs["data-error"] != "" {
		t.Fatalf("the page did not render (data-error %q):\n%s", body.attrs["data-error"], browserHead(dom))
	}
	qs := stats()
	if len(qs) < 2 || qs[0] != "minutes=60" || qs[len(qs)-1] != "minutes=1440" {
		t.Errorf("GET /api/stats asked with %q, want minutes=60 first, minutes=1440 last", qs)
	}
	for _, q := range qs {
		if q != "minutes=60" && q != "minutes=1440" {
			t.Errorf("GET /api/stats?%s: want minutes=60 or 1440", q)
		}
	}
	if e, _ := browserByID(dom, "chart-minutes"); e.attrs["data-points"] != "1440" {
		t.Errorf("the chart of the last 24 hours draws %q minutes, want 1440", e.attrs["data-points"])
	}
}
