package deploy

import (
	"os"
	"os/exec"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

const promtoolInstall = "install Debian's prometheus package (apt-get install prometheus), which has promtool"

func TestPromtoolCheckRules(t *testing.T) {
	promtool := needTool(t, "promtool", promtoolInstall)
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	t.Logf("%s", out)
}

// TestPromtoolTestRules runs redrive-rules.test.yaml, where each alert fires
// on a synthetic series and stays silent on a healthy one, and checks every
// alert of the rules file has such a test.
func TestPromtoolTestRules(t *testing.T) {
	const testFile = "prometheus/redrive-rules.test.yaml"
	data, err := os.ReadFile(testFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := sigsyaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range rulesFileGroups(t) {
		for _, r := range g.Rules {
			if r.Alert != "" && (!fires[r.Alert] || !silent[r.Alert]) {
				t.Errorf("%s: alert %s needs a firing and a silent case in %s", rulesFile, r.Alert, testFile)
			}
		}
	}
	promtool := needTool(t, "promtool", promtoolInstall)
	cmd := exec.Command(promtool, "test", "rules", "redrive-rules.test.yaml")
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
