package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// `redrive process` serves GET /api/pipelines as before and
// POST /api/pipelines/<name>/pause|resume with processor.token (here from
// REDRIVE_PROCESSOR_TOKEN).
func TestProcessorTokenConfigGuardsPauseResume(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "pause")
	cfg := writeConfig(t, c.Brokers, topic, "http://127.0.0.1:1/solve", "")
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const token = "p4use-t0ken-0123456789"
	t.Setenv("REDRIVE_HTTP_ADDR", addr)
	t.Setenv("REDRIVE_PROCESSOR_TOKEN", token)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out syncBuf
	go func() { done <- runCtx(ctx, []string{"process", "-c", cfg}, io.Discard, &out) }()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("process exit %d, want 0:\n%s", code, out.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("process did not stop")
		}
	}()

	base := "http://" + addr + "/api/pipelines"
	var st processor.Status
	if !kafkatest.Eventually(30*time.Second, func() bool { return getJSON(base, &st) && len(st.Pipelines) == 1 }) {
		t.Fatalf("GET /api/pipelines: %+v\n%s", st, out.String())
	}
	if st.Pipelines[0].Name != topic || st.Pipelines[0].Line.State != "running" {
		t.Errorf("GET /api/pipelines: %+v", st.Pipelines[0])
	}

	ready := func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if !kafkatest.Eventually(30*time.Second, ready) {
		t.Fatalf("never ready:\n%s", out.String())
	}

	post := func(path, bearer string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := post("/"+topic+"/pause", ""); code != http.StatusUnauthorized {
		t.Errorf("pause without a token: %d, want 401", code)
	}
	if code, _ := post("/"+topic+"/pause", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("pause with a wrong token: %d, want 401", code)
	}
	if code, _ := post("/nope/pause", token); code != http.StatusNotFound {
		t.Errorf("pause of an unknown pipeline: %d, want 404", code)
	}
	if code, _ := post("", token); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/pipelines: %d, want 405", code)
	}
	code, body := post("/"+topic+"/pause?reason=test", token)
	var ps processor.PipelineStatus
	if code != http.StatusOK || json.NewDecoder(bytes.NewReader(body)).Decode(&ps) != nil || ps.Line.State != "stopped" {
		t.Errorf("pause: %d %s", code, body)
	}
	if !getJSON(base, &st) || len(st.Pipelines) != 1 || st.Pipelines[0].Line.State != "stopped" {
		t.Errorf("GET /api/pipelines after pause: %+v", st)
	}
	// A paused process is healthy: Kubernetes must not restart it. Over
	// 3s the poll loop keeps beating (its polls return every 2s).
	for i := range 4 {
		for _, path := range []string{"/readyz", "/healthz"} {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s while paused (check %d): %d %s", path, i, resp.StatusCode, b)
			}
		}
		if i < 3 {
			time.Sleep(time.Second)
		}
	}
	code, body = post("/"+topic+"/resume", token)
	ps = processor.PipelineStatus{}
	if code != http.StatusOK || json.NewDecoder(bytes.NewReader(body)).Decode(&ps) != nil || ps.Line.State != "running" {
		t.Errorf("resume: %d %s", code, body)
	}
}
