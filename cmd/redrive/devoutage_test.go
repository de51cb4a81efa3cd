package main

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/internal/demosolver"
	"github.com/redrive/redrive/processor"
)

// testDevOutage runs in TestDevRunsEverything: the dashboard's request
// (same origin) starts a demo solver outage; the processor's breaker
// opens and its line stops, and the dashboard's flow says so; a client
// with dev's token ends it.
func testDevOutage(t *testing.T, addr, anAddr, banner string) {
	var flow analyzer.FlowResponse
	if !getJSON("http://"+anAddr+"/api/pipelines", &flow) || !flow.DevOutage {
		t.Fatalf("dev's analyzer does not offer the outage (dev_outage): %+v", flow)
	}
	m := regexp.MustCompile(`demo solver   (http://\S+)/solve`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no demo solver URL in the banner:\n%s", banner)
	}
	solver := m[1]

	post := func(target string, header http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+anAddr+target, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// Another site's page may not.
	if resp := post("/api/dev/outage?for=30s", http.Header{"Origin": {"http://evil.example"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-origin POST: %d, want 403", resp.StatusCode)
	}
	var o demosolver.Outage
	if !getJSON(solver+"/outage", &o) || o.Active {
		t.Fatalf("the solver is in an outage before the button: %+v", o)
	}
	if resp := post("/api/dev/outage?for=30s", http.Header{"Origin": {"http://" + anAddr}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("the dashboard's POST /api/dev/outage?for=30s: %d", resp.StatusCode)
	}
	if !getJSON(solver+"/outage", &o) || !o.Active || o.Until == nil || time.Until(*o.Until) < 20*time.Second {
		t.Fatalf("the solver after the button: %+v, want an outage of 30s", o)
	}

	// The breaker opens: the processor's line stops, and the flow shows it.
	var ps processor.Status
	var f analyzer.Flow
	deadline := time.Now().Add(25 * time.Second)
	for {
		ps, flow = processor.Status{}, analyzer.FlowResponse{}
		if getJSON("http://"+addr+"/api/pipelines", &ps) && getJSON("http://"+anAddr+"/api/pipelines", &flow) &&
			statusOf(ps, "solve") != nil && flowOf(flow, "solve") != nil {
			f = *flowOf(flow, "solve")
			l := statusOf(ps, "solve").Line
			if l.State == "stopped" && l.Breaker == "open" && f.Line == "stopped" && len(f.Processors) == 1 && f.Processors[0].Line != nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 25s of the outage, the processor's line %+v, the flow's %q %+v", ps, f.Line, f.Processors)
		}
		time.Sleep(250 * time.Millisecond)
	}
	fl := f.Processors[0].Line
	if fl.Breaker != "open" || len(fl.Reasons) == 0 || fl.Reasons[0].Reason != "breaker" || fl.Reasons[0].Until.IsZero() || fl.Reasons[0].Detail == "" {
		t.Errorf("the flow's line of the processor: %+v, want the breaker open with until and why", fl)
	}

	// A client without an Origin needs dev's token; with it, for=0 ends
	// the outage.
	if resp := post("/api/dev/outage?for=0", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without Origin or token: %d, want 401", resp.StatusCode)
	}
	if resp := post("/api/dev/outage?for=0", http.Header{"Authorization": {"Bearer " + devToken}}); resp.StatusCode != http.StatusOK {
		t.Errorf("POST with dev's token, for=0: %d", resp.StatusCode)
	}
	if !getJSON(solver+"/outage", &o) || o.Active {
		t.Errorf("the solver after for=0: %+v", o)
	}
}

// The analyzer asks for no longer outage than the demo solver takes.
func TestDevOutageCapsAgree(t *testing.T) {
	if analyzer.MaxDevOutage != demosolver.MaxOutage {
		t.Errorf("analyzer.MaxDevOutage %s, demosolver.MaxOutage %s", analyzer.MaxDevOutage, demosolver.MaxOutage)
	}
}

// The outage button is offered only when a pipeline calls dev's solver.
func TestDevUsesSolver(t *testing.T) {
	const url = "http://127.0.0.1:2/solve"
	if !usesSolver(devConfig("127.0.0.1:1", url, "http://127.0.0.1:5", "127.0.0.1:6"), url) {
		t.Error("dev's own config does not use the demo solver")
	}
	c := devConfig("127.0.0.1:1", "http://127.0.0.1:3/solve", "http://127.0.0.1:5", "127.0.0.1:6")
	if usesSolver(c, url) {
		t.Error("a config calling another service uses the demo solver")
	}
	c.Pipelines[0].Handler.HTTP = nil
	if usesSolver(c, url) {
		t.Error("a pipeline without an HTTP handler uses the demo solver")
	}
}
