package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// withHeader is r with header k's value replaced by v.
func withHeader(r *kgo.Record, k, v string) *kgo.Record {
	c := *r
	c.Headers = nil
	for _, h := range r.Headers {
		if h.Key == k {
			h.Value = []byte(v)
		}
		c.Headers = append(c.Headers, h)
	}
	return &c
}

// /api/stats counted rule republishes for undecodable
// dead letters that were never republished, and `redrive dlq stats`
// skipped them. Now both count them in "undecodable", and the rules'
// republished counts are what the worker republishes.
func TestAnalyzerAndDLQStatsAgree(t *testing.T) {
	f := newReplayFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	to := f.topic + ".again"
	f.c.CreateTopic(t, to, 1, nil)
	// Undecodable records that still decode in part (the kind the analyzer
	// used to decide and count): a reason that does not exist, a malformed
	// attempt. With the fixture's stray record: 3 undecodable.
	now := time.Now()
	good := deadSpec{key: []byte("u"), value: "v", code: "http_503", reason: dlq.ReasonExhausted, attempt: 3, ago: time.Minute}.record(f.dlq, f.topic, now, 20)
	bad := []*kgo.Record{withHeader(good, retry.HeaderReason, "bogus"), withHeader(good, retry.HeaderAttempt, "x")}
	if err := f.c.Client(t).ProduceSync(ctx, bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, f.c.Brokers, f.topic, "", fmt.Sprintf(`analyzer:
  http_addr: "127.0.0.1:0"
  rules:
    - name: all
      action: republish
      to: %s
`, to))

	code, out, errs := runSplit(ctx, "dlq", "stats", "-c", cfg, "--json")
	if code != 0 {
		t.Fatalf("dlq stats: exit %d:\n%s%s", code, out, errs)
	}
	var cli dlq.StatsSnapshot
	if err := json.Unmarshal([]byte(out), &cli); err != nil {
		t.Fatal(err)
	}

	addr, o, stop := startAnalyzer(t, ctx, cancel, cfg)
	defer stop()
	var api analyzer.PipelineStats
	if !kafkatest.Eventually(30*time.Second, func() bool {
		var st analyzer.StatsResponse
		r, err := http.Get("http://" + addr + "/api/stats")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		_ = json.NewDecoder(r.Body).Decode(&st)
		if len(st.Pipelines) != 1 || !st.Pipelines[0].Ready {
			return false
		}
		api = st.Pipelines[0]
		return true
	}) {
		t.Fatal("analyzer not ready within 30s")
	}

	s := api.Stats
	if cli.Total != 6 || cli.Undecodable != 3 {
		t.Errorf("dlq stats: total %d, undecodable %d; want 6 and 3", cli.Total, cli.Undecodable)
	}
	if s.Total != cli.Total || s.Undecodable != cli.Undecodable {
		t.Errorf("/api/stats total %d undecodable %d, dlq stats total %d undecodable %d", s.Total, s.Undecodable, cli.Total, cli.Undecodable)
	}
	for name, pair := range map[string][2]map[string]int64{
		"by_code": {s.ByCode, cli.ByCode}, "by_reason": {s.ByReason, cli.ByReason}, "by_class": {s.ByClass, cli.ByClass}, "by_origin": {s.ByOrigin, cli.ByOrigin},
	} {
		if fmt.Sprint(pair[0]) != fmt.Sprint(pair[1]) {
			t.Errorf("%s: /api/stats %v, dlq stats %v", name, pair[0], pair[1])
		}
	}
	if !s.Oldest.Equal(*cli.Oldest) || !s.Newest.Equal(*cli.Newest) {
		t.Errorf("oldest/newest: /api/stats %v %v, dlq stats %v %v", s.Oldest, s.Newest, cli.Oldest, cli.Newest)
	}
	// The rule's counts are what the worker does: 5 republished, the
	// truncated k7 kept, the undecodable ones never decided.
	if rc := s.Rules["all"]; rc.Republished != 5 || rc.Kept != 1 || len(s.Rules) != 1 {
		t.Errorf("rule counts %+v, want all: 5 republished, 1 kept (truncated), nothing else", s.Rules)
	}
	if got := f.c.Collect(t, to, 5, 30*time.Second); len(got) != 5 {
		t.Errorf("%d republished to %s, want 5", len(got), to)
	}
	actions := func(action string) float64 {
		mfs, _ := o.Registry.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "redrive_analyzer_actions_total" {
				continue
			}
			var n float64
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "action" && l.GetValue() == action {
						n += m.GetCounter().GetValue()
					}
				}
			}
			return n
		}
		return 0
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { return actions("republished") == 5 && actions("kept") == 1 }) {
		t.Errorf("the worker counted %v republished and %v kept, want 5 and 1 (the undecodable ones not at all)", actions("republished"), actions("kept"))
	}
}
