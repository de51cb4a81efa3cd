package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/obs"
)

// TestSameFilterCLIAPIRule: one filter, given as `redrive replay` flags,
// as a POST /api/replay body and as an analyzer rule's match, selects and
// republishes the same dead letters from the same DLQ: all three go
// through dlq.ParseFilter and dlq.Republish (the truncated k7 matches and
// is refused by each), the first two through replay.Run.
func TestSameFilterCLIAPIRule(t *testing.T) {
	f := newReplayFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	toCLI, toAPI, toRule := f.topic+".cli", f.topic+".api", f.topic+".rule"
	for _, to := range []string{toCLI, toAPI, toRule} {
		f.c.CreateTopic(t, to, 1, nil)
	}
	// Selects k1, k2 (permanent), k3 and the binary key (exhausted
	// http_503) and the truncated k7; not k5 (timeout) nor the stray
	// record. Every kind of list key, with a prefix and a header.
	cfg := writeConfig(t, f.c.Brokers, f.topic, "", fmt.Sprintf(`analyzer:
  http_addr: "127.0.0.1:0"
  token: secret-0123456789abcdef
  rules:
    - name: same
      action: republish
      to: %s
      match:
        codes: [ERROR_WRONG_USER_KEY, "http_5*"]
        reasons: [permanent, exhausted]
        classes: [permanent, transient]
        origins: ["%s*"]
`, toRule, f.topic[:len(f.topic)-2]))
	want := []string{"base64:AAH/", "k1", "k2", "k3"}

	code, out, errs := runSplit(ctx, "replay", "-c", cfg, "--to", toCLI, "--code", "ERROR_WRONG_USER_KEY", "--code", "http_5*",
		"--reason", "permanent,exhausted", "--class", "permanent", "--class", "transient", "--origin", f.topic[:len(f.topic)-2]+"*")
	if code != 0 || !strings.Contains(errs, "republished 4 of 5 matching to "+toCLI+" (7 scanned; 1 truncated, not republished; 1 skipped") {
		t.Fatalf("replay: exit %d:\n%s%s", code, out, errs)
	}
	if got := tableKeys(t, out); !slices.Equal(got, want) {
		t.Errorf("CLI listed %v, want %v", got, want)
	}

	addr, _, stop := startAnalyzer(t, ctx, cancel, cfg)
	defer stop()
	// The API serves before Run has its client: wait until it is reading.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st analyzer.StatsResponse
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/stats", nil)
		req.Header.Set("Authorization", "Bearer secret-0123456789abcdef") // a token is set: reads need it too
		if r, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(r.Body).Decode(&st)
			r.Body.Close()
		}
		if len(st.Pipelines) == 1 && st.Pipelines[0].Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("analyzer not ready within 30s: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	body := fmt.Sprintf(`{"to": %q, "codes": ["ERROR_WRONG_USER_KEY", "http_5*"], "reasons": ["permanent", "exhausted"],
		"classes": ["permanent", "transient"], "origins": ["%s*"]}`, toAPI, f.topic[:len(f.topic)-2])
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/replay", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer secret-0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rr analyzer.ReplayResponse
	if err := json.Unmarshal(b, &rr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /api/replay: %d %s", resp.StatusCode, b)
	}
	if rr.Scanned != 7 || rr.Matched != 5 || rr.Truncated != 1 || rr.Undecodable != 1 || rr.Republished != 4 {
		t.Errorf("API counts %+v", rr)
	}
	var apiKeys []string
	for _, v := range rr.DeadLetters {
		apiKeys = append(apiKeys, viewKey(t, v.Key, v.KeyEncoding))
	}
	slices.Sort(apiKeys)
	if !slices.Equal(apiKeys, want) {
		t.Errorf("API listed %v, want %v", apiKeys, want)
	}

	for _, to := range []string{toCLI, toAPI, toRule} {
		rs := f.c.Collect(t, to, len(want), 30*time.Second)
		time.Sleep(300 * time.Millisecond)
		var keys []string
		for _, r := range rs {
			keys = append(keys, keyCell(r.Key))
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) || endOffsets(t, f.c, to) != int64(len(want)) {
			t.Errorf("%s holds %v (%d records), want %v", to, keys, endOffsets(t, f.c, to), want)
		}
	}
}

// viewKey is a View's key as the replay table shows it.
func viewKey(t *testing.T, s *string, encoding string) string {
	t.Helper()
	k, err := dlq.DecodeBytes(s, encoding)
	if err != nil {
		t.Fatal(err)
	}
	return keyCell(k)
}

// startAnalyzer loads cfg and serves its analyzer as `redrive analyze`
// does, until stop (which cancels ctx); it returns the listening address.
func startAnalyzer(t *testing.T, ctx context.Context, cancel context.CancelFunc, cfg string) (addr string, o *obs.Server, stop func()) {
	t.Helper()
	c, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o = obs.New()
	a, err := newAnalyzer(c, o)
	if err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serveAnalyzer(ctx, c, o, a, addrc) }()
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("analyzer: %v", err)
	}
	return addr, o, func() { cancel(); <-done }
}
