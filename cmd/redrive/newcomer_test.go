package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/kafkatest"
)

// TestNewcomerPath walks the README's "Run it against your cluster" with
// the real binary, as a newcomer would on a fresh machine: a fresh broker
// from `make kafka-up` (its REDRIVE_BROKERS line evaluated, no address
// typed by hand), `redrive init`, the demo solver, `topics ensure`,
// `process`, `produce`, and the result and the dead letter read back with
// `redrive tail`. On that fresh broker no command logs a warning: the
// start-up check waits for the group coordinator to load rather than
// report a healthy cluster as not answering. Every command line it runs is
// in README.md.
func TestNewcomerPath(t *testing.T) {
	for _, tool := range []string{"java", "mvn", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			kafkatest.Missing(t, tool+" not found: the newcomer path starts a broker with make kafka-up (apt-get install openjdk-17-jre-headless maven make)")
		}
	}
	root, _ := filepath.Abs("../..")
	work := t.TempDir()
	bin := filepath.Join(work, "bin", "redrive")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}

	// make kafka-up: a broker of the test's own (its state in a temp dir,
	// a free port rather than 9092, which another broker may hold).
	kdir := filepath.Join(work, "kafka")
	benv := append(os.Environ(), "REDRIVE_KAFKA_DIR="+kdir, "KAFKA_PORT="+strings.TrimPrefix(freeAddr(t), "127.0.0.1:"))
	up := exec.Command("make", "-s", "kafka-up")
	up.Dir, up.Env = root, benv
	out, err := up.Output()
	t.Cleanup(func() {
		down := exec.Command("bash", "scripts/kafka.sh", "down")
		down.Dir, down.Env = root, benv
		_ = down.Run()
	})
	if err != nil {
		t.Fatalf("make kafka-up: %v", err)
	}
	var brokers string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "export REDRIVE_BROKERS="); ok {
			brokers = v
		}
	}
	if brokers == "" {
		t.Fatalf("make kafka-up printed no REDRIVE_BROKERS line:\n%s", out)
	}
	solver := freeAddr(t)
	env := append(os.Environ(), "REDRIVE_BROKERS="+brokers, "SOLVER_URL=http://"+solver+"/solve")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	steps := map[string]bool{}
	run := func(stdin string, args ...string) (string, string) {
		t.Helper()
		steps[strings.Join(args, " ")] = true
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env, cmd.Stdin = work, env, strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("redrive %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		noWarning(t, args, stderr.String())
		return stdout.String(), stderr.String()
	}
	background := func(args ...string) (stop func() string) {
		// The README's demo solver listens on its default address; this
		// one on a free port, with the flags after --addr the README does
		// not show.
		shown, _, _ := strings.Cut(strings.Join(args, " "), " --addr ")
		steps[shown] = true
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = work, env
		var logs syncBuf
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			if t.Failed() {
				switch args[0] {
				case "process":
					_, state := probe("http://127.0.0.1:9090/api/pipelines")
					_, metrics := probe("http://127.0.0.1:9090/metrics")
					var counted []string
					for _, l := range strings.Split(metrics, "\n") {
						if strings.HasPrefix(l, "redrive_") && !strings.HasSuffix(l, " 0") {
							counted = append(counted, l)
						}
					}
					t.Logf("redrive process /api/pipelines:\n%s\nits counters:\n%s", state, strings.Join(counted, "\n"))
				case "demo-solver":
					_, stats := probe("http://" + solver + "/stats")
					t.Logf("the demo solver's /stats: %s", stats)
				}
				// Its goroutines, to see where a stalled process waits.
				_ = cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-done:
				case <-time.After(5 * time.Second):
				}
				t.Logf("redrive %s logged:\n%s", shown, logs.String())
			}
			_ = cmd.Process.Kill()
		})
		return func() string {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("redrive %s after SIGTERM: %v\n%s", strings.Join(args, " "), err, logs.String())
				}
			case <-time.After(40 * time.Second):
				t.Errorf("redrive %s did not stop within 40s of SIGTERM", strings.Join(args, " "))
			}
			return logs.String()
		}
	}

	run("", "init")
	// The demo solver refuses a share of requests and answers a share 503
	// (retried after 5s, 30s, 5m), drawn by redrive-id, so by the partition
	// the request lands on; this test's one good request is answered 200
	// at once or after polls, within seconds.
	stopSolver := background("demo-solver", "--addr", solver, "--permanent-rate", "0", "--fail-rate", "0")
	run("", "topics", "ensure", "-c", "redrive.yaml")
	stopProcess := background("process", "-c", "redrive.yaml")
	run(`{"site":"x"}`+"\n", "produce", "-c", "redrive.yaml")
	run(`{"site":"x","api_key":"bad-key"}`+"\n", "produce", "-c", "redrive.yaml")

	results, _ := run("", "tail", "-c", "redrive.yaml", "solve.results", "--from-start", "--follow", "-n", "1", "--json")
	var res struct {
		Value   string `json:"value"`
		Headers []struct{ Key, Value string }
	}
	if err := json.Unmarshal([]byte(results), &res); err != nil || !strings.Contains(res.Value, `"status":1`) {
		t.Errorf("the result read back with redrive tail: %v\n%s", err, results)
	}
	dead, _ := run("", "tail", "-c", "redrive.yaml", "solve.requests.dlq", "--from-start", "--follow", "-n", "1", "--json")
	if !strings.Contains(dead, "bad-key") || !strings.Contains(dead, "ERROR_WRONG_USER_KEY") {
		t.Errorf("the dead letter read back with redrive tail lacks the request or its error code:\n%s", dead)
	}
	noWarning(t, []string{"process"}, stopProcess())
	stopSolver()

	for step := range steps {
		if !strings.Contains(string(readme), "redrive "+step) {
			t.Errorf("README.md does not show `redrive %s`", step)
		}
	}
	for _, s := range []string{`eval "$(make -s kafka-up)"`, "go install github.com/redrive/redrive/cmd/redrive@latest"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("README.md does not show %s", s)
		}
	}
}

// noWarning fails the test on any warning or error a command logged.
func noWarning(t *testing.T, args []string, logs string) {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("redrive %s logged on a healthy fresh broker: %s", strings.Join(args, " "), l)
		}
	}
}
