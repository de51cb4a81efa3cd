package obs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	s := New()
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "redrive_test_total", Help: "t"})
	s.Registry.MustRegister(c)
	c.Add(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := s.Serve(ctx, "127.0.0.1:0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr

	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, `"ok":false`) {
		t.Errorf("readyz before any check: %d %s, want 503", code, body)
	}
	s.Ready("pipeline solve", errors.New("consumer group redrive.solve not joined yet"))
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "not joined") {
		t.Errorf("readyz not joined: %d %s", code, body)
	}
	s.Ready("pipeline solve", nil)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("readyz ready: %d, want 200", code)
	}

	s.Beat("pipeline solve")
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("healthz fresh beat: %d", code)
	}
	clock = clock.Add(DefaultStall + time.Second)
	code, body := get(t, base+"/healthz")
	var st status
	_ = json.Unmarshal([]byte(body), &st)
	if code != 503 || st.OK || !strings.Contains(st.Checks["pipeline solve"], "no progress") {
		t.Errorf("healthz stalled: %d %s", code, body)
	}
	s.Beat("pipeline solve")
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("healthz after beat: %d", code)
	}

	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "redrive_test_total 3") || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, `redrive_ready{check="pipeline solve"} 1`) {
		t.Errorf("metrics: %d, missing series", code)
	}
}

func TestServeBadAddr(t *testing.T) {
	if _, err := New().Serve(context.Background(), "127.0.0.1:notaport", slog.Default()); err == nil || !strings.Contains(err.Error(), "http_addr") {
		t.Errorf("err = %v, want an http_addr error", err)
	}
}

// Every server redrive runs has timeouts (500 idle
// connections stayed open on the analyzer's) and the security headers.
func TestServerLimitsAndHeaders(t *testing.T) {
	srv := HTTPServer(http.NotFoundHandler(), Limits{})
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Errorf("HTTPServer with default limits: %+v", srv)
	}

	s := New()
	s.Limits = Limits{IdleTimeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := s.Serve(ctx, "127.0.0.1:0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'", "Referrer-Policy": "no-referrer"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("/metrics %s: %q, want %q", k, got, v)
		}
	}
	// The kept-alive connection now idles: the server closes it.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a failsafe, not the assertion
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: read %v, want EOF (closed by the server's idle timeout)", err)
	}
}
