package clitest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// FreeAddr is a 127.0.0.1 address with a port free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Probe returns the status code and body of GET url (0 when unreachable).
func Probe(url string) (int, string) {
	r, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// WaitProbe polls url until its status is want or timeout; it returns the last answer.
func WaitProbe(url string, want int, timeout time.Duration) (int, string) {
	deadline := time.Now().Add(timeout)
	for {
		code, body := Probe(url)
		if code == want || time.Now().After(deadline) {
			return code, body
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CallUntilOK calls u until it answers (the server may still be
// starting) and returns the first answer's status and body.
func CallUntilOK(t testing.TB, u string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// GetJSON GETs url into v; false on any failure.
func GetJSON(url string, v any) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// StatusOf is the processor's status of pipeline name, nil if absent.
func StatusOf(s processor.Status, name string) *processor.PipelineStatus {
	for i := range s.Pipelines {
		if s.Pipelines[i].Name == name {
			return &s.Pipelines[i]
		}
	}
	return nil
}
