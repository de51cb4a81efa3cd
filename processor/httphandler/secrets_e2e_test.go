package httphandler_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// Records end in the DLQ after a service that echoes the whole request
// (the API key in the query, the headers) answered them: a 400, and a 200
// whose JSON says not ok with the echo as its code. Their dead letters'
// redrive-error and redrive-error-code hold no configured secret. A job
// whose id is ".." is dead-lettered invalid, bad_state, without its poll
// ever being sent. The line runs at the shipped defaults.
func TestEchoedSecretsNotInDeadLetter(t *testing.T) {
	const (
		queryKey  = "qry-SECRET-abc"
		headerKey = "hdr-SECRET-789"
		bearer    = "tok-SECRET-456"
		formKey   = "form-SECRET-k"
	)
	secrets := []string{queryKey, headerKey, bearer, formKey}
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/p/") {
			polls.Add(1)
			io.WriteString(w, `{"status":1,"request":"done"}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		echo := fmt.Sprintf("you sent %s %s\n", r.Method, r.URL.RequestURI())
		for k, v := range r.Header {
			echo += k + ": " + strings.Join(v, ", ") + "\n"
		}
		echo += "body: " + string(body)
		j, _ := json.Marshal(echo)
		switch r.Header.Get(httphandler.HeaderKey) {
		case "echo400":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, echo)
		case "echo200":
			fmt.Fprintf(w, `{"status":0,"request":%s}`, j)
		case "dot":
			io.WriteString(w, `{"status":1,"request":".."}`)
		}
	}))
	t.Cleanup(srv.Close)

	rg := pipetest.New(t, "secrets", 1, retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2})
	h, err := httphandler.New(httphandler.Options{
		URL:     srv.URL + "/in?json=1&key=" + queryKey,
		Headers: map[string]string{"X-Api-Key": headerKey, "Authorization": "Bearer " + bearer},
		Form:    map[string]string{"key": formKey},
		JSON:    &httphandler.JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &httphandler.Poll{URL: srv.URL + "/p/jpath/{state}?key=" + queryKey, StateField: "request",
			FirstAfter: time.Second, Every: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	rg.Start(h)
	var recs []*kgo.Record
	for _, k := range []string{"echo400", "echo200", "dot"} {
		recs = append(recs, &kgo.Record{Topic: rg.P.Topic, Key: []byte(k), Value: []byte(url.Values{"q": {"1"}}.Encode())})
	}
	rg.Produce(recs...)
	dead := rg.CollectN(rg.P.DLQ, len(recs), 60*time.Second, time.Second)
	want := map[string][2]string{ // reason, code
		"echo400": {"permanent", "http_400"},
		"echo200": {"exhausted", ""}, // the code is the echo, masked
		"dot":     {"invalid", processor.CodeBadState},
	}
	if len(dead) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(want))
	}
	for _, r := range dead {
		w := want[string(r.Key)]
		reason, _ := kafkatest.Header(r, retry.HeaderReason)
		code, _ := kafkatest.Header(r, retry.HeaderErrorCode)
		msg, _ := kafkatest.Header(r, retry.HeaderError)
		if reason != w[0] || (w[1] != "" && code != w[1]) {
			t.Errorf("%s: reason %s, code %q, want %s, %q", r.Key, reason, code, w[0], w[1])
		}
		for _, hd := range r.Headers {
			if !strings.HasPrefix(hd.Key, "redrive-") {
				continue
			}
			for _, s := range secrets {
				if strings.Contains(string(hd.Value), s) {
					t.Errorf("%s: %s shows the secret %s: %q", r.Key, hd.Key, s, hd.Value)
				}
			}
		}
		if !strings.Contains(msg, srv.URL) {
			t.Errorf("%s: redrive-error %q does not name the service", r.Key, msg)
		}
		t.Logf("%s: %s %s: %s", r.Key, reason, code, msg)
	}
	if n := polls.Load(); n != 0 {
		t.Errorf("%d polls sent, want none (the only job id is ..)", n)
	}
}
