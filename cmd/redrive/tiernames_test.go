package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// An upgrade: the tier written 2000ms was the topic .retry.2s, which
// exists. topics check and ensure say the tier keeps it and ensure does
// not create .retry.2000ms; process logs it once and retries through
// .retry.2s. A second pipeline, new, gets its tier as written.
func TestTierKeepsItsFormerTopic(t *testing.T) {
	c := kafkatest.New(t)
	upgraded, fresh := kafkatest.Topic(t, "upgraded"), kafkatest.Topic(t, "fresh")
	s := &solver{calls: map[string]int{}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	y := fmt.Sprintf(`brokers: [%q]
http_addr: "127.0.0.1:0"
session_timeout: 6s
shutdown_grace: 10s
pipelines:
  - topic: %s
    results: %s.results
    partitions: 2
    retry: {tiers: [2000ms, 3000ms], max_attempts: 2, jitter: 0}
    handler: {http: {url: %q, timeout: 5s}}
  - topic: %s
    partitions: 2
    retry: {tiers: [2000ms]}
    handler: {http: {url: %q, timeout: 5s}}
`, c.Brokers[0], upgraded, upgraded, srv.URL, fresh, srv.URL)
	cfg := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	c.CreateTopics(t, 2, nil, upgraded+".retry.2s")
	note := "pipeline " + upgraded + ": tier 2000ms uses the existing topic " + upgraded + ".retry.2s (its name before tier topics kept the written delay)"

	ctx := context.Background()
	code, out := runOut(ctx, "topics", "check", "-c", cfg)
	if code != 1 || !strings.Contains(out, note) || strings.Contains(out, "\n"+upgraded+".retry.2000ms ") || !strings.Contains(out, "\n"+fresh+".retry.2000ms ") {
		t.Fatalf("check: exit %d, want 1, the note, %s.retry.2s in the table and no %s.retry.2000ms:\n%s", code, upgraded, upgraded, out)
	}
	if code, out = runOut(ctx, "topics", "ensure", "-c", cfg); code != 0 || !strings.Contains(out, note) {
		t.Fatalf("ensure: exit %d, want 0 with the note:\n%s", code, out)
	}
	listed, err := c.Admin(t).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		upgraded + ".retry.2s": true, upgraded + ".retry.2000ms": false,
		upgraded + ".retry.3000ms": true, upgraded + ".retry.3s": false,
		fresh + ".retry.2000ms": true, fresh + ".retry.2s": false,
	} {
		if listed.Has(name) != want {
			t.Errorf("after ensure: %s exists = %v, want %v", name, listed.Has(name), want)
		}
	}
	if code, out = runOut(ctx, "topics", "check", "-c", cfg); code != 0 || strings.Count(out, "note: ") != 1 {
		t.Errorf("check after ensure: exit %d, want 0 with one note:\n%s", code, out)
	}

	// The start-up step of process and analyze: the same rule, logged.
	loaded, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	if err := startTierNames(ctx, loaded); err != nil {
		t.Fatal(err)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !strings.Contains(logs.String(), "level=INFO msg=\""+strings.ReplaceAll(note, `"`, `\"`)) || strings.Count(logs.String(), "\n") != 1 {
		t.Errorf("start-up log:\n%s\nwant the one note: %s", logs.String(), note)
	}
	if got := loaded.Pipelines[0].TierTopics(); got[0] != upgraded+".retry.2s" || got[1] != upgraded+".retry.3000ms" {
		t.Errorf("tier topics after start-up: %q", got)
	}

	// process retries through the former topic, named so in redrive-tier.
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() { done <- runCtx(pctx, []string{"process", "-c", cfg}, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("process did not stop within 30s")
		}
	}()
	cl := c.Client(t)
	rec := &kgo.Record{Topic: upgraded, Key: []byte("f"), Value: []byte("flaky"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("f")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tier := c.Collect(t, upgraded+".retry.2s", 1, 30*time.Second)
	if len(tier) != 1 || hdr(tier[0], retry.HeaderTier) != "2s" {
		t.Fatalf("%d records in %s.retry.2s (redrive-tier %q), want 1 with 2s", len(tier), upgraded, hdrOf(tier, retry.HeaderTier))
	}
	if res := c.Collect(t, upgraded+".results", 1, 30*time.Second); len(res) != 1 || hdr(res[0], retry.HeaderAttempt) != "2" {
		t.Errorf("results: %d, want the retry's on attempt 2", len(res))
	}
}

// hdrOf is the first record's header k, "" without records.
func hdrOf(rs []*kgo.Record, k string) string {
	if len(rs) == 0 {
		return ""
	}
	return hdr(rs[0], k)
}
