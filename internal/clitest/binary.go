package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The command every test of the package runs.
const mainPackage = "github.com/redrive/redrive/cmd/redrive"

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Binary returns the path of the redrive binary, built on first use and
// shared by the package's tests (building it per test cost seconds each
// and filled the disk with copies). Main removes it afterwards.
func Binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "redrive-clitest-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "redrive")
		out, err := exec.Command("go", "build", "-o", built.bin, mainPackage).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build %s: %v\n%s", mainPackage, err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// Main is a test package's TestMain: it runs the tests, then each of
// after (stopping what the tests started once for all), removes the
// binary and exits with the tests' code.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// RepoPath is rel (a path from the repository root, such as
// scripts/kafka.sh) made absolute: the root is the nearest directory
// above the test's working directory with a go.mod. Tests run in their
// package's directory, whose depth differs from package to package.
func RepoPath(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return rel
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, rel)
		}
		if filepath.Dir(d) == d {
			return rel
		}
	}
}
