package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dashPanel is the part of a Grafana panel the layout checks read.
type dashPanel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Mappings []struct {
				Type    string `json:"type"`
				Options map[string]struct {
					Text string `json:"text"`
				} `json:"options"`
			} `json:"mappings"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

var byPipeline = regexp.MustCompile(`\bby\s*\([^)]*\bpipeline\b`)

// TestDashboardLayout checks the dashboard's conventions: panels on the
// 24-column grid without overlapping, every query on the ${datasource}
// variable, every per-pipeline query filtered by $pipeline, and the
// breaker's gauge shown with the processor's encoding (0 closed, 1
// half-open, 2 open).
func TestDashboardLayout(t *testing.T) {
	data, err := os.ReadFile("grafana/redrive.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] || !vars["pipeline"] {
		t.Fatalf("the dashboard needs the variables datasource and pipeline, has %v", vars)
	}
	if len(dash.Panels) < 10 {
		t.Fatalf("only %d panels: the decoding is broken?", len(dash.Panels))
	}
	breakerPanels := 0
	for i, p := range dash.Panels {
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
		}
		for _, q := range dash.Panels[:i] {
			o := q.GridPos
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				t.Errorf("panels %q %+v and %q %+v overlap", q.Title, o, p.Title, g)
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource is not ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		refs := map[string]bool{}
		readsBreaker := false
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: a target without expr, or a missing or repeated refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s: datasource is not ${datasource}", p.Title, tg.RefID)
			}
			if byPipeline.MatchString(tg.Expr) && !strings.Contains(tg.Expr, `pipeline=~"$pipeline"`) {
				t.Errorf("panel %q target %s: per-pipeline query without pipeline=~\"$pipeline\": %s", p.Title, tg.RefID, tg.Expr)
			}
			for _, n := range metricNames(tg.Expr) {
				readsBreaker = readsBreaker || n == "redrive_breaker_state"
			}
		}
		if readsBreaker {
			breakerPanels++
			texts := map[string]string{}
			for _, m := range p.FieldConfig.Defaults.Mappings {
				if m.Type == "value" {
					for v, o := range m.Options {
						texts[v] = o.Text
					}
				}
			}
			for v, want := range map[string]string{"0": "closed", "1": "half-open", "2": "open"} {
				if texts[v] != want {
					t.Errorf("panel %q: redrive_breaker_state %s is shown as %q, want %q", p.Title, v, texts[v], want)
				}
			}
		}
	}
	if breakerPanels == 0 {
		t.Error("no panel shows redrive_breaker_state")
	}
}
