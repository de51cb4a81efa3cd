package config

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/redrive/redrive/topics"
)

// A tier is named as the file writes it when that is only digits and
// letters, else by its delay's shortest form; the name is the tier's
// everywhere a pipeline hands it on.
func TestTierNamesAsWritten(t *testing.T) {
	c := mustParse(t, pipe("retry: {tiers: [5s, 64s, ' 90s ', '${T}', 1.5h, 7200s]}"), env("T", "1h29m"))
	p := c.Pipelines[0]
	names := []string{"5s", "64s", "90s", "1h29m", "", "7200s"}
	if got := p.TierNames(); !slices.Equal(got, names) {
		t.Fatalf("TierNames = %q, want %q", got, names)
	}
	topicsWant := []string{"solve.requests.retry.5s", "solve.requests.retry.64s", "solve.requests.retry.90s",
		"solve.requests.retry.1h29m", "solve.requests.retry.1h30m", "solve.requests.retry.7200s"}
	if got := p.TierTopics(); !slices.Equal(got, topicsWant) {
		t.Errorf("TierTopics = %q, want %q", got, topicsWant)
	}
	if got := p.ProcessorPipeline(nil).TierTopics(); !slices.Equal(got, topicsWant) {
		t.Errorf("processor pipeline's TierTopics = %q, want %q", got, topicsWant)
	}
	var specs []string
	for _, s := range topics.ForPipeline(p.TopicSpec()) {
		if s.Role == topics.RoleRetry {
			specs = append(specs, s.Name)
		}
	}
	if !slices.Equal(specs, topicsWant) {
		t.Errorf("topics.ForPipeline tiers = %q, want %q", specs, topicsWant)
	}

	// Printed, the config keeps the names.
	out := dump(c)
	if !strings.Contains(out, "- 64s\n") || !strings.Contains(out, "- 1h30m\n") {
		t.Errorf("marshalled tiers:\n%s", out)
	}
	if again := mustParse(t, out, nil).Pipelines[0].TierTopics(); !slices.Equal(again, topicsWant) {
		t.Errorf("after a round trip: %q", again)
	}
	var y struct{ T []Tier }
	if err := yaml.Unmarshal([]byte("t: [64s, 1.5m]"), &y); err != nil || len(y.T) != 2 || y.T[0].String() != "64s" || y.T[1].String() != "1m30s" {
		t.Errorf("yaml.Unmarshal: %+v, %v", y.T, err)
	}
	if err := yaml.Unmarshal([]byte("t: [[1s]]"), &y); err == nil {
		t.Errorf("yaml.Unmarshal of a list as a tier: no error")
	}

	// The defaults, and a file writing them, name them 5s, 30s, 5m.
	for _, doc := range []string{pipe(), pipe("retry: {tiers: [5s, 30s, 5m]}")} {
		if got := mustParse(t, doc, nil).Pipelines[0].TierTopics(); !slices.Equal(got, []string{"solve.requests.retry.5s", "solve.requests.retry.30s", "solve.requests.retry.5m"}) {
			t.Errorf("default tiers: %q", got)
		}
	}
}
