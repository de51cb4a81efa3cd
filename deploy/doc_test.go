// Package deploy holds the tests of everything under deploy/: the
// Dockerfile against `make build`, the kustomize base and overlay decoded
// strictly into the Kubernetes and CRD types, the Prometheus rules with
// promtool, and the metric names the dashboard and the alerts use against
// what a running processor and analyzer export.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/redrive/redrive/internal/kafkatest"
)

// repoRoot is the module root (the tests run in deploy/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s: %v", root, err)
	}
	return root
}

// needTool returns the path of a tool, skips the test without it, or fails
// it under CI=true with how to install it.
func needTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	kafkatest.Missing(t, name+" is not installed: "+install)
	return ""
}
