package processor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// The processor's /api/pipelines: GET is open (no record data in it);
// pause and resume need processor.token (any case of the scheme, 401 with
// a JSON error and a challenge otherwise), and are off (403) without one.
func TestPipelinesHandlerTokenRule(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second}, 1)
	pr, err := processor.New(processor.Config{Brokers: e.Cluster.Brokers, Pipelines: []processor.Pipeline{e.P}, Instance: "auth-test"},
		processor.HandlerFunc(func(_ context.Context, _ *processor.Request) processor.Outcome {
			return processor.Outcome{Kind: processor.Success}
		}))
	if err != nil {
		t.Fatal(err)
	}
	do := func(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://127.0.0.1:9090"+path, nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	pause := "/api/pipelines/" + e.P.Name + "/pause"
	resume := "/api/pipelines/" + e.P.Name + "/resume"

	h := pr.PipelinesHandler("p-tok")
	if w := do(h, "GET", "/api/pipelines", ""); w.Code != 200 || !strings.Contains(w.Body.String(), e.P.Name) {
		t.Errorf("GET /api/pipelines without a token: %d %s, want 200", w.Code, w.Body.String())
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic p-tok", "p-tok", "Bearerp-tok", "Bearer p-to", "Bearer p-tok2"} {
		for _, path := range []string{pause, resume} {
			w := do(h, "POST", path, auth)
			var body struct{ Error string }
			if w.Code != 401 || json.Unmarshal(w.Body.Bytes(), &body) != nil || !strings.Contains(body.Error, "processor.token") || w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("POST %s with Authorization %q: %d %s, want 401 with a JSON error and a challenge", path, auth, w.Code, w.Body.String())
			}
		}
	}
	if st := pr.Status().Pipelines[0].Line.State; st == "stopped" {
		t.Fatalf("a refused pause stopped the line")
	}
	if w := do(h, "POST", pause+"?reason=test", "bearer p-tok"); w.Code != 200 {
		t.Fatalf("pause with the token (lowercase scheme): %d %s", w.Code, w.Body.String())
	}
	if st := pr.Status().Pipelines[0].Line.State; st != "stopped" {
		t.Errorf("line %q after the pause, want stopped", st)
	}
	if w := do(h, "POST", resume, "Bearer  p-tok"); w.Code != 200 {
		t.Fatalf("resume with the token: %d %s", w.Code, w.Body.String())
	}
	if w := do(h, "POST", "/api/pipelines/nope/pause", "Bearer p-tok"); w.Code != 404 || !strings.Contains(w.Body.String(), `"error"`) {
		t.Errorf("pause of an unknown pipeline: %d %s, want a JSON 404", w.Code, w.Body.String())
	}

	off := pr.PipelinesHandler("")
	for _, auth := range []string{"", "Bearer "} {
		if w := do(off, "POST", pause, auth); w.Code != 403 || !strings.Contains(w.Body.String(), "REDRIVE_PROCESSOR_TOKEN") {
			t.Errorf("pause with no processor.token configured (Authorization %q): %d %s, want 403", auth, w.Code, w.Body.String())
		}
	}
	if w := do(off, "GET", "/api/pipelines", ""); w.Code != 200 {
		t.Errorf("GET /api/pipelines with no token configured: %d", w.Code)
	}
}

// FuzzValidBearer: only "<bearer in any case> <spaces><token>" passes,
// never with an empty token.
func FuzzValidBearer(f *testing.F) {
	for _, s := range [][2]string{{"Bearer tok", "tok"}, {"bearer  tok", "tok"}, {"Bearer", ""}, {"Bearer ", ""}, {"Basic tok", "tok"}, {"Bearer tok ", "tok"}, {"BEARER \x00", "\x00"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, auth, token string) {
		got := processor.ValidBearer(auth, token)
		scheme, rest, found := strings.Cut(auth, " ")
		want := token != "" && found && strings.EqualFold(scheme, "bearer") && strings.TrimLeft(rest, " ") == token
		if got != want {
			t.Errorf("ValidBearer(%q, %q) = %t, want %t", auth, token, got, want)
		}
		if token != "" && token[0] != ' ' && !processor.ValidBearer("Bearer "+token, token) {
			t.Errorf("ValidBearer refuses Bearer %q", token)
		}
	})
}
