package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeListsEveryVariable: every REDRIVE_* variable ApplyEnv reads is
// in the README's table, so a newcomer finds the one that sets a token or
// an address without reading the code.
func TestReadmeListsEveryVariable(t *testing.T) {
	src, err := os.ReadFile("env.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`Env\w+\s*=\s*"(REDRIVE_\w+)"`).FindAllStringSubmatch(string(src), -1)
	if len(vars) < 10 {
		t.Fatalf("found %d variables in env.go: the pattern no longer matches it", len(vars))
	}
	for _, v := range vars {
		if !strings.Contains(string(readme), "`"+v[1]+"`") {
			t.Errorf("README.md does not list %s", v[1])
		}
	}
}
