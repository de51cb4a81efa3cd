package crash

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
)

// ownBroker starts a broker of the test's own with scripts/kafka.sh (so it
// can be restarted or killed without disturbing other tests) and returns
// its address, a restart function (a clean stop and start; after kill, a
// start on the same port and data) and a kill function (SIGKILL, state
// kept).
func ownBroker(t *testing.T) (addr string, restart, kill func()) {
	t.Helper()
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			kafkatest.Missing(t, tool+" not found: the broker-restart test needs Java 17 and Maven (apt-get install openjdk-17-jre-headless maven)")
		}
	}
	script := clitest.RepoPath("scripts/kafka.sh")
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
	restart = func() {
		if got := run("restart"); got != addr {
			t.Fatalf("restarted broker at %s, want %s", got, addr)
		}
	}
	return addr, restart, func() { run("kill") }
}

// TestBrokerRestartLosesNothing: the broker restarts cleanly while
// `redrive process` is mid-stream, and later is SIGKILLed (a crash, not a
// clean stop), stays down a few seconds and is started again on the same
// data; every request still reaches its terminal topic, the processor
// logs the broker's absence, and a SIGTERM afterwards exits 0 with
// everything committed. (The broker-SIGKILL fault of the fault suite,
// fault_test.go, sharing this test's own broker.)
func TestBrokerRestartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	addr, restart, kill := ownBroker(t)
	c := &kafkatest.Cluster{Brokers: []string{addr}, Kind: kafkatest.KindReal}
	bin := clitest.Binary(t)
	topic := "restart"
	s := &clitest.Solver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		s.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cfg := clitest.WriteConfig(t, c.Brokers, topic, srv.URL+"/solve", "    concurrency: 16\n")
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	const n = 1500
	want := produceMix(t, c, topic, n)
	p := clitest.StartProcess(t, bin, cfg)
	waitHandled := func(k int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for s.Distinct() < k {
			if time.Now().After(deadline) {
				t.Fatalf("handled %d of %d in 60s:\n%s", s.Distinct(), n, p.Log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitHandled(n / 4)
	restartedAt := s.Distinct()
	restart()
	waitHandled(restartedAt + n/4)
	killedAt := s.Distinct()
	logBefore := len(p.Log.String())
	kill()
	killed := time.Now()
	time.Sleep(3 * time.Second) // down: fetches, writes and commits fail meanwhile
	handledDown := s.Distinct() - killedAt
	restart()
	down := time.Since(killed)
	missing, _, dups := terminal(t, c, topic, want)
	if missing > 0 {
		t.Fatalf("%d of %d requests reached no terminal topic after a broker restart at %d and a SIGKILL at %d handled:\n%s", missing, n, restartedAt, killedAt, p.Log.String())
	}
	// What an operator sees while the broker is gone.
	msgs := map[string]int{}
	for l := range strings.SplitSeq(p.Log.String()[logBefore:], "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			if _, m, ok := strings.Cut(l, "msg="); ok {
				if q, err := strconv.QuotedPrefix(m); err == nil {
					msgs[q]++
				}
			}
		}
	}
	after := p.Log.String()[logBefore:]
	unreachable, back := clitest.LineWith(after, `msg="cannot reach the broker`, "broker="+addr), clitest.LineWith(after, `msg="broker reachable again"`, "broker="+addr)
	if unreachable == "" || back == "" {
		t.Fatalf("the SIGKILLed broker, down for %v, is not logged as unreachable and then reachable again:\n%s", down, after)
	}
	t.Logf("broker restarted after %d and SIGKILLed after %d of %d handled (down %v, %d handled meanwhile); all reached their terminal topic; %d duplicates; WARN/ERROR lines meanwhile %v; log: %s ... %s",
		restartedAt, killedAt, n, down.Round(100*time.Millisecond), handledDown, dups, msgs, unreachable, back)
	p.Sigterm(t, 30*time.Second)
	if lag := c.Lag(t, "redrive."+topic, topic); lag != 0 {
		t.Errorf("lag on %s after SIGTERM is %d, want 0", topic, lag)
	}
}
