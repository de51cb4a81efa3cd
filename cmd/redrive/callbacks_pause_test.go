package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// jobService is a job API (submit in.php, poll res.php) that records
// every call: when, which endpoint, the job polled, the attempt header.
type jobService struct {
	mu    sync.Mutex
	calls []jobCall
}

type jobCall struct {
	at       time.Time
	path     string
	id       string // res.php's id: the job polled
	attempt  string // Redrive-Attempt
	fullPath string
}

func (s *jobService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls = append(s.calls, jobCall{at: time.Now(), path: r.URL.Path, id: r.URL.Query().Get("id"), attempt: r.Header.Get("Redrive-Attempt"), fullPath: r.URL.RequestURI()})
	n := len(s.calls)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/in.php":
		fmt.Fprintf(w, `{"status":1,"request":"job-%d"}`, n)
	case "/res.php":
		fmt.Fprint(w, `{"status":1,"request":"solved"}`)
	default:
		http.NotFound(w, r)
	}
}

// first waits up to timeout for the first call to path.
func (s *jobService) first(path string, timeout time.Duration) (found jobCall, ok bool) {
	ok = kafkatest.Eventually(timeout, func() bool {
		for _, call := range s.snapshot() {
			if call.path == path {
				found = call
				return true
			}
		}
		return false
	})
	return found, ok
}

func (s *jobService) snapshot() []jobCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]jobCall(nil), s.calls...)
}

// A pause code that arrives by callback stops the line as one answered to
// a call does: no call and no submit for the pause's length; then the
// same job is polled, in the attempt it was submitted in, never
// submitted again. And a main-topic record carrying redrive-state (only
// redrive writes it, on tier records) is submitted as new: the state a
// producer wrote never reaches the service.
func TestPauseCodeByCallbackPausesAndKeepsTheJob(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "cbpause")
	svc := &jobService{}
	srv := httptest.NewServer(svc)
	defer srv.Close()
	httpAddr, cbAddr := freeAddr(t), freeAddr(t)
	const token = "pause-cb-0123456789abcdef"
	const pause = 4 * time.Second
	y := fmt.Sprintf(`brokers: [%q]
http_addr: %q
callback_addr: %q
session_timeout: 6s
shutdown_grace: 5s
instance: test
pipelines:
  - topic: %s
    results: %s.results
    retry: {tiers: [1s, 2s, 1m], max_attempts: 3, jitter: 0}
    not_ready_deadline: 5m
    handler:
      http:
        url: %q
        json: {ok_field: status, ok_value: 1, code_field: request}
        poll: {url: %q, state_field: request, result_field: request}
      callback: {path: /cb, token: %q, wait: 30s}
      codes:
        pause: {ERROR_ZERO_BALANCE: %s}
`, c.Brokers[0], httpAddr, cbAddr, topic, topic, srv.URL+"/in.php", srv.URL+"/res.php?id={state}", token, retry.FormatDelay(pause))
	cfg := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: %s", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- runCtx(ctx, []string{"process", "-c", cfg}, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		<-done
	}()

	cl := c.Client(t)
	produce := func(r *kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A producer's record with a job id it chose: submitted as new.
	produce(&kgo.Record{Topic: topic, Key: []byte("r1"), Value: []byte("img"),
		Headers: []kgo.RecordHeader{{Key: retry.HeaderState, Value: []byte("victim-job-42")}}})
	submit, ok := svc.first("/in.php", 30*time.Second)
	if !ok {
		t.Fatalf("no submit within 30s: calls %+v", svc.snapshot())
	}
	for _, call := range svc.snapshot() {
		if strings.Contains(call.fullPath, "victim-job-42") || call.path == "/res.php" {
			t.Fatalf("a producer's redrive-state reached the service: %+v", call)
		}
	}
	job := "job-1"
	if submit.attempt != "1" {
		t.Errorf("submit with attempt %q, want 1", submit.attempt)
	}

	// The service calls back: out of balance.
	time.Sleep(500 * time.Millisecond) // the submit's outcome is written and its record waits
	status, _ := callUntilOK(t, "http://"+cbAddr+"/cb?id="+job+"&code=ERROR_ZERO_BALANCE&token="+token)
	if status != http.StatusOK {
		t.Fatalf("callback answered %d", status)
	}
	heard := time.Now()

	// A second request, produced during the pause, is not submitted
	// before the pause ends.
	time.Sleep(time.Second)
	produce(&kgo.Record{Topic: topic, Key: []byte("r2"), Value: []byte("img2")})

	poll, ok := svc.first("/res.php", 30*time.Second)
	if !ok {
		t.Fatalf("the job was not polled after the pause: calls %+v", svc.snapshot())
	}
	if poll.id != job || poll.attempt != "1" {
		t.Errorf("after the pause: poll of job %q with attempt %q, want %s with attempt 1", poll.id, poll.attempt, job)
	}
	for _, call := range svc.snapshot()[1:] {
		if call.at.Before(heard.Add(pause - 200*time.Millisecond)) {
			t.Errorf("a call %s %s %.1fs after the pause code's callback, within its %s", call.path, call.fullPath, call.at.Sub(heard).Seconds(), pause)
		}
		if call.path == "/in.php" && call.attempt != "1" {
			t.Errorf("a submit with attempt %q after the pause, want 1 (the new request's)", call.attempt)
		}
	}
	submits := 0
	if !kafkatest.Eventually(15*time.Second, func() bool {
		submits = 0
		for _, call := range svc.snapshot() {
			if call.path == "/in.php" {
				submits++
			}
		}
		return submits == 2
	}) || submits != 2 {
		t.Errorf("%d submits, want 2 (r1 once, never again; r2 after the pause): %+v", submits, svc.snapshot())
	}
}
