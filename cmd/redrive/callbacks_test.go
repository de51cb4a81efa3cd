package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// callbackConfig writes a config whose pipeline has a callback intake at
// /cb (token tok-cmd-0123456789abcdef) on cbAddr.
func callbackConfig(t *testing.T, brokers []string, topic, httpAddr, cbAddr string) string {
	t.Helper()
	y := fmt.Sprintf(`brokers: [%q]
http_addr: %q
callback_addr: %q
session_timeout: 6s
shutdown_grace: 5s
instance: test
pipelines:
  - name: %s
    topic: %s
    partitions: 2
    retry: {tiers: [1s], max_attempts: 2, jitter: 0}
    handler:
      http:
        url: "http://127.0.0.1:1/in"
        poll: {url: "http://127.0.0.1:1/res?id={state}", state_field: request}
      callback: {path: /cb, token: tok-cmd-0123456789abcdef, error_field: error}
`, brokers[0], httpAddr, cbAddr, topic, topic)
	p := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// callUntilOK calls u until it answers (the server may still be
// starting) and returns the first answer's status and body.
func callUntilOK(t *testing.T, u string) (int, string) {
	t.Helper()
	return clitest.CallUntilOK(t, u)
}

// `redrive callbacks -c FILE` serves the intake alone: a callback is
// answered 200 and its record is in <topic>.callbacks; /readyz reports
// the intake ready; SIGTERM exits 0. `redrive process` serves the same
// intake beside the processor.
func TestCallbacksCommand(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "cbcmd")
	httpAddr, cbAddr := freeAddr(t), freeAddr(t)
	cfg := callbackConfig(t, c.Brokers, topic, httpAddr, cbAddr)
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 || !strings.Contains(out, topic+".callbacks") {
		t.Fatalf("topics ensure: exit %d, want 0 listing %s.callbacks:\n%s", code, topic, out)
	}

	for i, command := range []string{"callbacks", "process"} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		var out bytes.Buffer
		go func() { done <- runCtx(ctx, []string{command, "-c", cfg}, io.Discard, &out) }()

		id := fmt.Sprintf("job-%d", i)
		status, body := callUntilOK(t, "http://"+cbAddr+"/cb?id="+id+"&code=answer-"+id+"&token=tok-cmd-0123456789abcdef")
		if status != http.StatusOK || body != "OK\n" {
			cancel()
			t.Fatalf("%s: callback answered %d %q, want 200 OK\n%s", command, status, body, out.String())
		}
		if status, _ := callUntilOK(t, "http://"+cbAddr+"/cb?id=x&code=y&token=wrong"); status != http.StatusForbidden {
			t.Errorf("%s: wrong token answered %d, want 403", command, status)
		}
		if command == "callbacks" {
			ok := kafkatest.Eventually(30*time.Second, func() bool {
				status, body := callUntilOK(t, "http://"+httpAddr+"/readyz")
				return status == http.StatusOK && strings.Contains(body, `"callbacks `+topic+`":"ok"`)
			})
			if !ok {
				_, body := callUntilOK(t, "http://"+httpAddr+"/readyz")
				t.Errorf("callbacks: /readyz never ready: %s", body)
			}
			if _, body := callUntilOK(t, "http://"+httpAddr+"/metrics"); !strings.Contains(body, `redrive_callback_requests_total{pipeline="`+topic+`",result="accepted"} 1`) {
				t.Errorf("callbacks: /metrics lacks the accepted callback")
			}
		}
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("%s: exit %d after SIGTERM, want 0:\n%s", command, code, out.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop within 60s of SIGTERM", command)
		}
	}

	recs := c.Collect(t, topic+".callbacks", 2, 30*time.Second)
	got := map[string]string{}
	for _, r := range recs {
		cb, err := processor.DecodeCallback(r)
		if err != nil {
			t.Fatal(err)
		}
		got[cb.JobID] = string(cb.Result)
	}
	if len(recs) != 2 || got["job-0"] != "answer-job-0" || got["job-1"] != "answer-job-1" {
		t.Errorf("callbacks topic holds %v, want job-0 and job-1 with their answers", got)
	}
}

func TestCallbacksCommandConfigErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	write := func(name, y string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noPath := write("nopath.yaml", "brokers: [\"127.0.0.1:1\"]\npipelines:\n  - topic: x\n    handler:\n      callback: {token: t}\n")
	none := write("none.yaml", "brokers: [\"127.0.0.1:1\"]\npipelines:\n  - topic: x\n")
	// A callback path without a token where others reach it: refused
	// before anything starts, at the default address too.
	public := write("public.yaml", "brokers: [\"127.0.0.1:1\"]\ncallback_addr: 0.0.0.0:8443\npipelines:\n  - topic: x\n    handler:\n      callback: {path: /cb}\n")
	publicDefault := write("default.yaml", "brokers: [\"127.0.0.1:1\"]\npipelines:\n  - topic: x\n    handler:\n      callback: {path: /cb}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"callbacks"}, "no config"},
		{[]string{"callbacks", "-c", noPath}, "pipelines[0].handler.callback.path: required"},
		{[]string{"callbacks", "-c", none}, "no pipeline has handler.callback"},
		{[]string{"callbacks", "-c", none, "--nosuch"}, "unknown flag"},
		{[]string{"callbacks", "-c", public}, "pipelines[0].handler.callback.token: required"},
		{[]string{"process", "-c", public}, "pipelines[0].handler.callback.token: required"},
		{[]string{"process", "-c", publicDefault}, "pipelines[0].handler.callback.token: required"},
	} {
		code, out := runOut(context.Background(), tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 mentioning %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}
