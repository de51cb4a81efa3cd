package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
)

// ownBroker starts a broker of the test's own with scripts/kafka.sh (so it
// can be restarted without disturbing other tests) and returns its address
// and a restart function.
func ownBroker(t *testing.T) (addr string, restart func()) {
	t.Helper()
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			if ci := strings.ToLower(os.Getenv("CI")); ci == "true" || ci == "1" {
				t.Fatalf("%s not found: the broker-restart test needs Java 17 and Maven (apt-get install openjdk-17-jre-headless maven)", tool)
			}
			t.Skipf("%s not found; the broker-restart test needs Java and Maven", tool)
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
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{}
	var recs []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		v, to := "slow", topic+".results"
		switch {
		case i%10 == 0:
			v = "flaky"
		case i%25 == 1:
			v, to = "wrong-key", topic+".dlq"
		}
		want[id] = to
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
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
	results := collectIDs(t, c, topic+".results", countTo(want, topic+".results"), 120*time.Second)
	dead := collectIDs(t, c, topic+".dlq", countTo(want, topic+".dlq"), 60*time.Second)
	missing := 0
	for id, to := range want {
		got := results
		if to == topic+".dlq" {
			got = dead
		}
		if got[id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d requests reached no terminal topic after a broker restart at %d handled:\n%s", missing, n, at, p.log.String())
	}
	dups := 0
	for _, m := range []map[string]int{results, dead} {
		for _, k := range m {
			dups += k - 1
		}
	}
	t.Logf("broker restarted after %d of %d handled; all reached their terminal topic; %d duplicates", at, n, dups)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("SIGTERM: %v (want exit 0):\n%s", err, p.log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM:\n%s", p.log.String())
	}
	if lag := groupLag(t, c, "redrive."+topic, topic); lag != 0 {
		t.Errorf("lag on %s after SIGTERM is %d, want 0", topic, lag)
	}
}
