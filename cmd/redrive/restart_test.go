package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/kafkatest"
)

// ownBroker starts a broker of the test's own with scripts/kafka.sh (so it
// can be restarted without disturbing other tests) and returns its address
// and a restart function.
func ownBroker(t *testing.T) (addr string, restart func()) {
	t.Helper()
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			kafkatest.Missing(t, tool+" not found: the broker-restart test needs Java 17 and Maven (apt-get install openjdk-17-jre-headless maven)")
		}
	}
	script, _ := filepath.Abs("../../scripts/kafka.sh")
	dir := filepath.Join(t.TempDir(), "kafka")
	run := func(cmd string) string {
		c := exec.Command("bash", script, cmd)
		c.Env = append(os.Environ(), "REDRIVE_KAFKA_DIR="+dir)
		out, err := c.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("kafka.sh %s: %v\n%s", cmd, err, stderr)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return strings.TrimPrefix(lines[len(lines)-1], "KAFKA_BROKERS=")
	}
	addr = run("up")
	t.Cleanup(func() { run("down") })
	return addr, func() {
		if got := run("restart"); got != addr {
			t.Fatalf("restarted broker at %s, want %s", got, addr)
		}
	}
}

// TestBrokerRestartLosesNothing: the broker restarts while `redrive process`
// is mid-stream; every request still reaches its terminal topic and a
// SIGTERM afterwards exits 0 with everything committed.
func TestBrokerRestartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	addr, restart := ownBroker(t)
	c := &kafkatest.Cluster{Brokers: []string{addr}, Kind: kafkatest.KindReal}
	bin := buildBinary(t)
	topic := "restart"
	s := &solver{calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		s.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cfg := writeConfig(t, c.Brokers, topic, srv.URL+"/solve", "    concurrency: 16\n")
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	const n = 1500
	want := produceMix(t, c, topic, n)
	p := startProc(t, bin, cfg)
	deadline := time.Now().Add(60 * time.Second)
	for distinct(s) < n/4 {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d in 60s:\n%s", distinct(s), n, p.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	at := distinct(s)
	restart()
	missing, _, dups := terminal(t, c, topic, want)
	if missing > 0 {
		t.Fatalf("%d of %d requests reached no terminal topic after a broker restart at %d handled:\n%s", missing, n, at, p.log.String())
	}
	t.Logf("broker restarted after %d of %d handled; all reached their terminal topic; %d duplicates", at, n, dups)
	p.sigterm(t, 30*time.Second)
	if lag := c.Lag(t, "redrive."+topic, topic); lag != 0 {
		t.Errorf("lag on %s after SIGTERM is %d, want 0", topic, lag)
	}
}
