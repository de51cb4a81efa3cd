package main

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
)

// freeAddr is a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	return clitest.FreeAddr(t)
}

// probe returns the status code and body of GET url (0 when unreachable).
func probe(url string) (int, string) { return clitest.Probe(url) }

// waitProbe polls url until its status is want or timeout; it returns the last answer.
func waitProbe(url string, want int, timeout time.Duration) (int, string) {
	return clitest.WaitProbe(url, want, timeout)
}

// TestProbesOfProcess: /readyz fails until the group is joined and while
// outcome writes fail, and recovers; /healthz stays ok while idle.
func TestProbesOfProcess(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "probe")
	s := &solver{calls: map[string]int{}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	addr := freeAddr(t)
	cfg := writeConfig(t, c.Brokers, topic, srv.URL+"/solve", "")
	b, _ := os.ReadFile(cfg)
	_ = os.WriteFile(cfg, []byte(strings.Replace(string(b), `http_addr: "127.0.0.1:0"`, fmt.Sprintf("http_addr: %q", addr), 1)), 0o600)
	// Every topic but the DLQ: dead letters cannot be written.
	for _, n := range []string{topic, topic + ".retry.1s", topic + ".retry.2s", topic + ".results"} {
		c.CreateTopic(t, n, 3, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- runCtx(ctx, []string{"process", "-c", cfg}, io.Discard, io.Discard) }()
	base := "http://" + addr

	code, body := waitProbe(base+"/readyz", 200, 30*time.Second)
	if code != 200 {
		t.Fatalf("/readyz after start: %d %s, want 200 once the group is joined", code, body)
	}
	if code, body := probe(base + "/healthz"); code != 200 || !strings.Contains(body, "pipeline "+topic) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// A permanent failure needs the missing DLQ: writes fail, /readyz says so.
	cl := c.Client(t)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("wrong-key")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, body = waitProbe(base+"/readyz", 503, 30*time.Second)
	if code != 503 || !strings.Contains(body, "outcome writes failing") {
		t.Fatalf("/readyz while the DLQ is missing: %d %s, want 503 naming the failing writes", code, body)
	}
	c.CreateTopic(t, topic+".dlq", 3, nil)
	if code, body = waitProbe(base+"/readyz", 200, 60*time.Second); code != 200 {
		t.Fatalf("/readyz after the DLQ was created: %d %s, want 200", code, body)
	}
	time.Sleep(3 * time.Second) // idle: the poll loop still beats
	if code, body := probe(base + "/healthz"); code != 200 {
		t.Errorf("/healthz while idle: %d %s", code, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after cancel", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after cancel")
	}
}

// TestReadyzFailsBeforeJoin: with no broker the group is never joined;
// /readyz says so and /healthz stays ok (the process is alive and polling).
func TestReadyzFailsBeforeJoin(t *testing.T) {
	addr := freeAddr(t)
	cfg := writeConfig(t, []string{freeAddr(t)}, "nobroker", "http://127.0.0.1:1/solve", "")
	b, _ := os.ReadFile(cfg)
	_ = os.WriteFile(cfg, []byte(strings.Replace(string(b), `http_addr: "127.0.0.1:0"`, fmt.Sprintf("http_addr: %q", addr), 1)), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- runCtx(ctx, []string{"process", "-c", cfg}, io.Discard, io.Discard) }()
	defer func() { cancel(); <-done }()
	base := "http://" + addr
	// Until the processor registers its pipeline, /readyz is 503 "starting";
	// then 503 "not joined". Never 200.
	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, body = probe(base + "/readyz"); code == 200 || strings.Contains(body, "not joined") {
			break
		}
	}
	if code != 503 || !strings.Contains(body, "not joined") {
		t.Errorf("/readyz without a broker: %d %s, want 503 'not joined'", code, body)
	}
	time.Sleep(3 * time.Second)
	if code, body := probe(base + "/healthz"); code != 200 {
		t.Errorf("/healthz without a broker: %d %s, want 200", code, body)
	}
	if code, _ := probe(base + "/readyz"); code != 503 {
		t.Errorf("/readyz became %d without a broker", code)
	}
}
