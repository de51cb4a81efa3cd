package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// WriteConfig writes a one-pipeline config for the test's broker: topic
// with three partitions, tiers 1s and 2s (GroupTopics), results, the
// solver at solverURL (none when ""), then extra as it is (pipeline keys
// indented by four spaces, or top-level keys after them).
func WriteConfig(t testing.TB, brokers []string, topic, solverURL, extra string) string {
	t.Helper()
	handler := ""
	if solverURL != "" {
		handler = fmt.Sprintf("    handler:\n      http: {url: %q, timeout: 5s}\n", solverURL)
	}
	y := fmt.Sprintf(`brokers: [%q]
http_addr: "127.0.0.1:0"
session_timeout: 6s
shutdown_grace: 10s
instance: test
pipelines:
  - name: %s
    topic: %s
    results: %s.results
    partitions: 3
    retry: {tiers: [1s, 2s], max_attempts: 3, jitter: 0}
%s%s`, brokers[0], topic, topic, topic, handler, extra)
	p := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// GroupTopics are the topics the group of a WriteConfig pipeline consumes.
func GroupTopics(topic string) []string {
	return []string{topic, topic + ".retry.1s", topic + ".retry.2s"}
}
