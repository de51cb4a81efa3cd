package analyzer

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The body of POST /api/replay is exactly one JSON object with known
// fields and a limit that is not negative.
func TestDecodeReplayRequest(t *testing.T) {
	req, err := decodeReplayRequest(strings.NewReader(` {"codes":["http_503"],"limit":7,"dry_run":true} ` + "\n"))
	if err != nil || len(req.Codes) != 1 || req.Limit != 7 || !req.DryRun {
		t.Fatalf("good body: %+v, %v", req, err)
	}
	if req, err := decodeReplayRequest(strings.NewReader(`{"all":true}`)); err != nil || !req.All {
		t.Errorf(`{"all":true}: %+v, %v`, req, err)
	}
	for name, body := range map[string]string{
		"null":             `null`,
		"empty":            ``,
		"spaces":           "  \n",
		"array":            `[{"codes":["x"]}]`,
		"string":           `"all"`,
		"number":           `1`,
		"negative limit":   `{"codes":["x"],"limit":-1}`,
		"trailing garbage": `{"codes":["x"]}garbage`,
		"two objects":      `{"codes":["x"]}{"all":true}`,
		"trailing brace":   `{"codes":["x"]}}`,
		"unknown field":    `{"codez":["x"]}`,
		"limit too big":    `{"limit":1e30}`,
		"not closed":       `{"codes":["x"]`,
	} {
		if _, err := decodeReplayRequest(strings.NewReader(body)); err == nil || !strings.HasPrefix(err.Error(), "body") {
			t.Errorf("%s (%q): err %v, want a body error", name, body, err)
		}
	}
}

func FuzzDecodeReplayRequest(f *testing.F) {
	for _, s := range []string{`{"codes":["a"],"limit":3}`, `null`, `{"all":true}`, `{"limit":-1}`, `{} x`, `[]`, `{"headers":{"a":"b"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeReplayRequest(bytes.NewReader(b))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "body") {
				t.Fatalf("error %q does not start with body", err)
			}
			return
		}
		if req.Limit < 0 {
			t.Fatalf("accepted a negative limit: %d", req.Limit)
		}
		// What was accepted is one JSON object, nothing after it.
		dec := json.NewDecoder(bytes.NewReader(b))
		var m map[string]json.RawMessage
		if err := dec.Decode(&m); err != nil || m == nil {
			t.Fatalf("accepted %q, which is not one JSON object: %v", b, err)
		}
		if dec.More() {
			t.Fatalf("accepted %q with something after the object", b)
		}
	})
}

// A replay may run longer than the server's write timeout; longReply
// moves the handler's write deadline so that its answer still arrives.
func TestLongReplyOutlivesWriteTimeout(t *testing.T) {
	for _, long := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			if long {
				longReply(w, time.Minute)
			}
			<-time.After(600 * time.Millisecond) // 3 write timeouts: a replay scanning a long DLQ
			_, _ = io.WriteString(w, "done")
		}))
		srv.Config.WriteTimeout = 200 * time.Millisecond
		srv.Start()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		srv.Close()
		switch {
		case long && string(body) != "done":
			t.Errorf("with longReply the answer was lost at the write timeout: %q %v", body, err)
		case !long && string(body) == "done":
			t.Errorf("without longReply the answer arrived after the write timeout: the test shows nothing")
		}
	}
}
