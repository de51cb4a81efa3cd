package analyzer

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeProcessorStatus(t *testing.T) {
	good := `{"instance":"p-1","now":"2026-01-01T00:00:00Z","pipelines":[{"name":"solve","inflight":3,"waiting":5,
		"handler_p99_seconds":0.2,"lateness_p99_seconds":0.01,"tiers":[{"name":"1s","topic":"t","waiting":5,"lateness_p99_seconds":0.01}]}]}`
	s, err := decodeProcessorStatus(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Instance != "p-1" || len(s.Pipelines) != 1 || s.Pipelines[0].Inflight != 3 || s.Pipelines[0].Tiers[0].Waiting != 5 {
		t.Errorf("decoded %+v", s)
	}
	for name, body := range map[string]string{
		"not json":          `<html>`,
		"negative inflight": `{"pipelines":[{"name":"a","inflight":-1}]}`,
		"negative p99":      `{"pipelines":[{"name":"a","handler_p99_seconds":-1}]}`,
		"negative tier":     `{"pipelines":[{"name":"a","tiers":[{"name":"1s","waiting":-2}]}]}`,
		"wrong type":        `{"pipelines":{"name":"a"}}`,
		"negative rate":     `{"pipelines":[{"name":"a","line":{"state":"running","rate_limit":-1}}]}`,
		"negative learned":  `{"pipelines":[{"name":"a","line":{"state":"running","learned_rate":-1}}]}`,
		"bad since":         `{"pipelines":[{"name":"a","line":{"state":"stopped","reasons":[{"reason":"manual","since":"yesterday"}]}}]}`,
		"many reasons":      `{"pipelines":[{"name":"a","line":{"state":"stopped","reasons":[` + strings.Repeat(`{"reason":"manual"},`, maxLineReasons) + `{"reason":"manual"}]}}]}`,
		"too large":         `{"instance":"` + strings.Repeat("x", maxStatusBytes) + `"}`,
		"negative held":     `{"pipelines":[{"name":"a","callbacks":{"held":-1}}]}`,
		"negative received": `{"pipelines":[{"name":"a","callbacks":{"received":-1}}]}`,
	} {
		if _, err := decodeProcessorStatus(strings.NewReader(body)); !errors.Is(err, ErrProcessorStatus) {
			t.Errorf("%s: err %v, want ErrProcessorStatus", name, err)
		}
	}
}

func FuzzDecodeProcessorStatus(f *testing.F) {
	f.Add([]byte(`{"instance":"p","pipelines":[{"name":"a","inflight":1,"waiting":2,"handler_p99_seconds":0.5,"tiers":[{"name":"1s","waiting":2}]}]}`))
	f.Add([]byte(`{"pipelines":[{"inflight":-1}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeProcessorStatus(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrProcessorStatus) {
				t.Fatalf("error %v is not ErrProcessorStatus", err)
			}
			return
		}
		// What is accepted is what the flow view can show.
		for _, p := range s.Pipelines {
			if p.Inflight < 0 || p.Waiting < 0 || p.HandlerP99Seconds < 0 || p.LatenessP99Seconds < 0 {
				t.Fatalf("accepted negative numbers: %+v", p)
			}
			for _, tr := range p.Tiers {
				if tr.Waiting < 0 || tr.LatenessP99Seconds < 0 {
					t.Fatalf("accepted negative tier numbers: %+v", tr)
				}
			}
		}
	})
}

// The processors' lines reach the flow: each processor's as it reported
// it, and the pipeline's in one word, the furthest from running.
func TestAddProcessorsLine(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	status := func(instance, line string) processorAnswer {
		body := `{"instance":"` + instance + `","pipelines":[{"name":"solve","inflight":1,"tiers":[]` + line + `},{"name":"other","line":{"state":"stopped"}}]}`
		s, err := decodeProcessorStatus(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", instance, err)
		}
		return processorAnswer{s: s}
	}
	running := `,"line":{"state":"running","breaker":"closed","breaker_since":"2026-01-02T03:04:05Z","guard":true,"rate_limit":5}`
	stopped := `,"line":{"state":"stopped","reasons":[{"reason":"breaker","since":"2026-01-02T03:04:05Z","until":"2026-01-02T03:04:35Z","detail":"10 failures in a row"},` +
		`{"reason":"manual","since":"2026-01-02T03:04:05Z","detail":"by 127.0.0.1:1: deploy"}],"breaker":"open","breaker_since":"2026-01-02T03:04:05Z","open_for":"30s","guard":true,"failover_to":"solve.b"}`
	probing := `,"line":{"state":"probing","breaker":"half-open","guard":false}`
	for _, c := range []struct {
		name    string
		answers []processorAnswer
		want    string
	}{
		{"none reached", []processorAnswer{{err: errors.New("refused")}}, ""},
		{"no line (an older processor)", []processorAnswer{status("p1", "")}, ""},
		{"running", []processorAnswer{status("p1", running)}, "running"},
		{"one of two stopped", []processorAnswer{status("p1", running), status("p2", stopped)}, "stopped"},
		{"probing beats running", []processorAnswer{status("p1", probing), status("p2", running)}, "probing"},
		{"stopped beats probing", []processorAnswer{status("p1", stopped), status("p2", probing), {err: errors.New("gone")}}, "stopped"},
		{"an unknown state beats running", []processorAnswer{status("p1", `,"line":{"state":"draining"}`), status("p2", running)}, "draining"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &Analyzer{}
			a.procs.last = map[string]processorAnswer{}
			for i, ans := range c.answers {
				u := "http://p" + string(rune('1'+i))
				a.o.Processors = append(a.o.Processors, u)
				a.procs.last[u] = ans
			}
			f := Flow{Name: "solve"}
			a.addProcessors(&f)
			if f.Line != c.want {
				t.Errorf("Flow.Line %q, want %q", f.Line, c.want)
			}
			for i, fp := range f.Processors {
				ans := c.answers[i]
				switch {
				case ans.err != nil || ans.s.Pipelines[0].Line == nil:
					if fp.Line != nil {
						t.Errorf("processor %d: line %+v, want none", i, fp.Line)
					}
				case fp.Line == nil || fp.Line.State != ans.s.Pipelines[0].Line.State:
					t.Errorf("processor %d: line %+v, want %+v", i, fp.Line, ans.s.Pipelines[0].Line)
				}
			}
		})
	}

	// Every field is carried, and the flow's copy is its own.
	a := &Analyzer{o: Options{Processors: []string{"http://p"}}}
	a.procs.last = map[string]processorAnswer{"http://p": status("p", stopped)}
	var f Flow
	f.Name = "solve"
	a.addProcessors(&f)
	l := f.Processors[0].Line
	if l == nil || l.State != "stopped" || l.Breaker != "open" || !l.BreakerSince.Equal(since) || l.OpenFor != "30s" || !l.Guard || l.FailoverTo != "solve.b" || len(l.Reasons) != 2 {
		t.Fatalf("line %+v", l)
	}
	if r := l.Reasons[0]; r.Reason != "breaker" || !r.Since.Equal(since) || !r.Until.Equal(since.Add(30*time.Second)) || r.Detail != "10 failures in a row" {
		t.Errorf("reason %+v", r)
	}
	if r := l.Reasons[1]; r.Reason != "manual" || !r.Until.IsZero() || r.Detail != "by 127.0.0.1:1: deploy" {
		t.Errorf("reason %+v", r)
	}
	l.Reasons[0].Detail = "changed"
	if a.procs.last["http://p"].s.Pipelines[0].Line.Reasons[0].Detail != "10 failures in a row" {
		t.Error("the flow shares its reasons with the kept answer")
	}
}

// The processors' callbacks reach the flow: each one's as it reported
// them, and the pipeline's summed over those that answered.
func TestAddProcessorsCallbacks(t *testing.T) {
	status := func(callbacks string) processorAnswer {
		body := `{"instance":"p","pipelines":[{"name":"cb","tiers":[]` + callbacks + `},{"name":"other","callbacks":{"received":99}}]}`
		s, err := decodeProcessorStatus(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return processorAnswer{s: s}
	}
	a := &Analyzer{o: Options{Processors: []string{"http://p1", "http://p2", "http://p3", "http://p4"}}}
	a.procs.last = map[string]processorAnswer{
		"http://p1": status(`,"callbacks":{"topic":"cb.callbacks","wait":"2m0s","held":2,"received":10,"matched":7,"duplicate":1,"late":1,"polls":4,"via_callback":7,"via_poll":3}`),
		"http://p2": status(`,"callbacks":{"topic":"cb.callbacks","wait":"2m0s","held":1,"received":5,"matched":5,"duplicate":0,"late":0,"polls":0,"via_callback":5,"via_poll":0}`),
		"http://p3": status(""), // an older processor, or one without the callback
		"http://p4": {err: errors.New("refused")},
	}
	f := Flow{Name: "cb"}
	a.addProcessors(&f)
	want := ProcessorCallbacks{Topic: "cb.callbacks", Wait: "2m0s", Held: 3, Received: 15, Matched: 12, Duplicate: 1, Late: 1, Polls: 4, ViaCallback: 12, ViaPoll: 3}
	if f.Callbacks == nil || *f.Callbacks != want {
		t.Fatalf("flow callbacks %+v, want %+v", f.Callbacks, want)
	}
	if f.Processors[0].Callbacks == nil || f.Processors[0].Callbacks.Received != 10 || f.Processors[2].Callbacks != nil || f.Processors[3].Callbacks != nil {
		t.Errorf("processors %+v", f.Processors)
	}
	// The flow's copy is its own.
	f.Processors[0].Callbacks.Received = 1000
	if a.procs.last["http://p1"].s.Pipelines[0].Callbacks.Received != 10 {
		t.Error("the flow shares its callbacks with the kept answer")
	}
	// No processor reports callbacks: none in the flow.
	g := Flow{Name: "none"}
	a.addProcessors(&g)
	if g.Callbacks != nil {
		t.Errorf("callbacks %+v for a pipeline no processor reports", g.Callbacks)
	}
}
