package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrive/redrive/examples"
	"github.com/redrive/redrive/internal/config"
)

// TestInitWritesAStarterConfig: `redrive init` writes the default preset
// where asked, keeps an existing file unless --force, writes --brokers
// into the file, prints to stdout with -o -, and refuses an unknown preset
// naming the ones there are.
func TestInitWritesAStarterConfig(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	out := filepath.Join(dir, "redrive.yaml")
	code, msg := runOut(ctx, "init", "-o", out)
	if code != 0 || !strings.Contains(msg, "next: redrive topics ensure -c "+out) {
		t.Fatalf("init: exit %d:\n%s", code, msg)
	}
	want, _ := examples.File(examples.Default)
	if got, err := os.ReadFile(out); err != nil || string(got) != string(want) {
		t.Fatalf("the file is not the %s preset (%v)", examples.Default, err)
	}
	if err := os.WriteFile(out, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, msg := runOut(ctx, "init", "-o", out); code != 1 || !strings.Contains(msg, "--force") {
		t.Fatalf("init over an existing file: exit %d, want 1 naming --force:\n%s", code, msg)
	}
	if got, _ := os.ReadFile(out); string(got) != "mine" {
		t.Fatal("init replaced an existing file without --force")
	}
	if code, msg := runOut(ctx, "init", "-o", out, "--force", "--preset", "webhook", "--brokers", "10.1.2.3:9092, kafka-1:9093"); code != 0 || !strings.Contains(msg, "WEBHOOK_URL") {
		t.Fatalf("init --force --preset webhook: exit %d, want 0 naming the variables to set:\n%s", code, msg)
	}
	c, err := config.LoadEnv(out, func(k string) string {
		return map[string]string{"WEBHOOK_URL": "https://hooks.example/x"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Brokers, ","); got != "10.1.2.3:9092,kafka-1:9093" || c.Pipelines[0].Name != "webhook" {
		t.Errorf("brokers %s, pipeline %s: want --brokers in the file and the webhook preset", got, c.Pipelines[0].Name)
	}
	for _, name := range examples.Names() {
		code, msg := runOut(ctx, "init", "--preset", name, "-o", "-")
		want, _ := examples.File(name)
		if code != 0 || msg != string(want) {
			t.Errorf("init --preset %s -o -: exit %d, not the preset's file", name, code)
		}
	}
	if code, msg := runOut(ctx, "init", "--preset", "nope", "-o", "-"); code != 2 || !strings.Contains(msg, strings.Join(examples.Names(), ", ")) {
		t.Errorf("unknown preset: exit %d, want 2 listing the presets:\n%s", code, msg)
	}
	if code, msg := runOut(ctx, "init", "-o", "-", "--brokers", "bad host:x"); code != 2 {
		t.Errorf("init with a bad --brokers: exit %d, want 2:\n%s", code, msg)
	}
}
