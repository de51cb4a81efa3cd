package analyzer_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/obs"
	"github.com/redrive/redrive/processor/control"
)

// browserPauseJS plays an operator on the Replicas panel of the pipeline
// its URL names (?pipeline=), with the page opened with the read-only
// token (kept in the tab, as if typed at the prompt): it clicks Pause
// (refused: the read-only token cannot), types analyzer.token into the
// replay form's token field and a reason, clicks Pause, waits for the
// panel to say paused, clicks Resume, waits for it to say not paused, and
// writes what it saw as JSON into #control-report. Every confirmation is
// answered yes, and counted.
const browserPauseJS = `(function () {
  const pipeline = new URL(document.currentScript.src).searchParams.get("pipeline");
  sessionStorage.setItem("redrive.analyzer.token", "read-tok");
  const out = { confirms: [], steps: [] };
  window.confirm = function (msg) { out.confirms.push(msg); return true; };
  const $ = (id) => document.getElementById(id);
  let step = 0, waited = 0;
  const timer = setInterval(function () {
    const result = $("control-result-" + pipeline), badge = $("paused-" + pipeline);
    if (document.body.dataset.loaded !== "1" || !result || !badge) return;
    const busy = $("pause-" + pipeline).disabled;
    const done = (msg) => { out.steps.push(msg + ": " + result.textContent); step++; waited = 0; };
    if (++waited > 100) { out.steps.push("stuck at step " + step + ": " + result.textContent); step = 99; }
    switch (step) {
      case 0:
        $("pause-" + pipeline).click(); step++; break;
      case 1:
        if (busy || !result.dataset.error) return;
        out.refused = result.dataset.error;
        done("refused");
        $("replay-token").value = "full-tok";
        $("replay-token").dispatchEvent(new Event("input"));
        $("pause-reason-" + pipeline).value = "browser test";
        $("pause-" + pipeline).click();
        break;
      case 2:
        if (busy || result.dataset.done !== "pause" || badge.dataset.paused !== "1") return;
        out.paused = { badge: badge.textContent, facts: $("control-facts-" + pipeline).textContent };
        done("paused");
        $("resume-" + pipeline).click();
        break;
      case 3:
        if (busy || result.dataset.done !== "resume" || badge.dataset.paused !== "0") return;
        out.resumed = { badge: badge.textContent, facts: $("control-facts-" + pipeline).textContent };
        done("resumed");
        break;
      default:
        clearInterval(timer);
        const pre = document.createElement("pre");
        pre.id = "control-report";
        pre.textContent = JSON.stringify(out);
        document.body.appendChild(pre);
    }
  }, 50);
})();`

// TestBrowserPauseResume loads the dashboard in headless Chromium against
// an analyzer following a control topic with two replicas' statuses (one
// stale), and clicks Pause, then Resume, as browserPauseJS does: the
// Replicas panel lists both replicas (the stale one marked), the read-only
// token is refused with the refusal shown, the replay form's token
// pauses and resumes, the page shows each, and the control topic got
// exactly the pause and the resume, which every replica reads.
// REDRIVE_CONTROL_SCREENSHOT=/tmp/x.png also writes a screenshot (once
// more clicked through, after the checks).
func TestBrowserPauseResume(t *testing.T) {
	chrome := browserChromium(t)
	e := newEnv(t)
	ctl := e.controlTopic()
	now := time.Now()
	fresh := status(e.main, "proc-a", now, 3, 0.75)
	fresh.Status.Every = "1m" // fresh for the whole test
	e.publish(ctl, fresh, status(e.main, "proc-b", now.Add(-time.Minute), 1, 0.25))
	a, _ := e.launch(analyzer.Options{ControlTopic: ctl, Instance: "an-1", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	api := a.HandlerAccess(analyzer.Access{Token: "full-tok", ReadToken: "read-tok"})
	base := serveLikeAnalyze(t, api, obs.Limits{})
	waitControl(t, base, "Bearer read-tok", func(c analyzer.ControlResponse) bool { return len(c.Pipelines[0].Replicas) == 2 })

	reqs := &browserRequests{}
	srv := httptest.NewServer(reqs.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/test-pause.js":
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = io.WriteString(w, browserPauseJS)
		case "/":
			servePageWith(w, r, api, "test-pause.js?pipeline="+e.main)
		default:
			api.ServeHTTP(w, r)
		}
	})))
	t.Cleanup(srv.Close)
	dom := browserRun(t, chrome, srv.URL+"/", "--dump-dom")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requests: %v\nDOM:\n%s", reqs.all(), browserHead(dom))
		}
	})
	if body, _ := browserFirst(dom, "body", nil); body.attrs["data-loaded"] != "1" || body.attrs["data-error"] != "" {
		t.Fatalf("the page did not render (data-error %q)", body.attrs["data-error"])
	}

	// The replicas, as the page left them.
	for inst, stale := range map[string]string{"proc-a": "0", "proc-b": "1"} {
		row, ok := browserFirst(browserOuter(dom, "replicas-"+e.main), "tr", map[string]string{"data-instance": inst})
		if !ok || row.attrs["data-stale"] != stale {
			t.Errorf("replica %s: row %v present %v, want data-stale=%s", inst, row.attrs, ok, stale)
		}
	}
	if !strings.Contains(browserOuter(dom, "replicas-"+e.main), ">stale<") {
		t.Errorf("the stale replica is not marked stale for a person")
	}
	if tb, _ := browserByID(dom, "replicas-"+e.main); tb.attrs["data-count"] != "2" || tb.attrs["data-stale"] != "1" {
		t.Errorf("#replicas-%s data-count %q data-stale %q, want 2 and 1", e.main, tb.attrs["data-count"], tb.attrs["data-stale"])
	}
	for _, want := range []string{"3 of 4", "75%", "12.5/s"} {
		if !strings.Contains(browserOuter(dom, "replicas-"+e.main), want) {
			t.Errorf("the replicas table does not show %q", want)
		}
	}

	// What the operator saw.
	e2, ok := browserByID(dom, "control-report")
	if !ok {
		t.Fatalf("no #control-report: the clicks did not finish")
	}
	var rep struct {
		Confirms []string
		Steps    []string
		Refused  string
		Paused   struct{ Badge, Facts string }
		Resumed  struct{ Badge, Facts string }
	}
	if err := json.Unmarshal([]byte(e2.text), &rep); err != nil {
		t.Fatalf("report %q: %v", e2.text, err)
	}
	t.Logf("steps: %q", rep.Steps)
	if len(rep.Steps) != 3 || !strings.Contains(rep.Refused, "403") || !strings.Contains(rep.Refused, "read-only") {
		t.Errorf("steps %q, refusal %q: want refused (403, read-only), paused, resumed", rep.Steps, rep.Refused)
	}
	if len(rep.Confirms) != 3 || !strings.Contains(rep.Confirms[0], "Pause pipeline "+e.main) || !strings.Contains(rep.Confirms[2], "Resume pipeline "+e.main) {
		t.Errorf("confirmations %q: want one per click, naming the pipeline", rep.Confirms)
	}
	if rep.Paused.Badge != "paused" || !strings.Contains(rep.Paused.Facts, "Paused by analyzer:an-1") || !strings.Contains(rep.Paused.Facts, "browser test") {
		t.Errorf("after Pause the panel showed %+v", rep.Paused)
	}
	if rep.Resumed.Badge != "not paused" || !strings.Contains(rep.Resumed.Facts, "Resumed by analyzer:an-1") {
		t.Errorf("after Resume the panel showed %+v", rep.Resumed)
	}
	for _, want := range []string{"POST /api/control/" + e.main + "/pause 403", "POST /api/control/" + e.main + "/pause 200", "POST /api/control/" + e.main + "/resume 200", "GET /api/control 200"} {
		if !reqs.seen(want) {
			t.Errorf("no request %q", want)
		}
	}

	// The control topic got the pause, then the resume, and nothing for
	// the refused click.
	if n := e.endOffset(ctl); n != 4 {
		t.Errorf("the control topic holds %d records, want 4: two statuses, the pause, the resume", n)
	}
	var pauses []control.Record
	for _, r := range collect(t, e.c, ctl, 4, 20*time.Second) {
		cr, err := control.Decode(r.Key, r.Value)
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if cr.Kind == control.KindPause {
			pauses = append(pauses, cr)
		}
	}
	if len(pauses) != 2 || !pauses[0].Pause.Paused || pauses[0].Pause.Reason != "browser test" || pauses[1].Pause.Paused ||
		pauses[0].Instance != "analyzer:an-1" || pauses[1].Instance != "analyzer:an-1" {
		t.Fatalf("pause records %+v, want the pause (browser test) then the resume, by analyzer:an-1", pauses)
	}
	if _, paused := e.readControl(ctl).Paused(e.main); paused {
		t.Errorf("the replicas read the pipeline as paused after the resume")
	}
	// Last: it clicks Pause and Resume again.
	if path := os.Getenv("REDRIVE_CONTROL_SCREENSHOT"); path != "" {
		browserRun(t, chrome, srv.URL+"/", "--screenshot="+path, "--window-size=1280,1400")
		t.Logf("screenshot written to %s", path)
	}
}
