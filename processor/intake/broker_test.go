package intake

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// Against the broker the tests run on (the real one in CI): accepted
// callbacks land in <topic>.callbacks as processor.CallbackRecord wrote
// them; a callback without a job id lands in the DLQ as invalid, its value
// what was received without the token.
func TestCallbacksLandInKafka(t *testing.T) {
	c := kafkatest.New(t)
	main := kafkatest.Topic(t, "cbintake")
	cbTopic, dlqTopic := topics.CallbacksTopic(main), topics.DefaultDLQ(main)
	c.CreateTopics(t, 3, nil, cbTopic, dlqTopic)

	cl := c.Client(t, ProducerOpts()...)
	reg := prometheus.NewRegistry()
	o := baseOptions(cl, reg)
	o.Topic, o.DLQ, o.Instance = cbTopic, dlqTopic, "intake-test"
	in := mustNew(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.Ready(ctx); err != nil {
		t.Fatalf("Ready with both topics: %v", err)
	}
	mux, err := NewMux(in)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cb := srv.URL + "/cb"

	for _, tc := range []struct {
		name string
		req  *http.Request
	}{
		{"GET", newReq(t, "GET", cb+"?id=J-1&code=ANSWER-1&token="+testToken, "")},
		{"POST form with error", newReq(t, "POST", cb, "id=J-2&code=&error=ERROR_CAPTCHA_UNSOLVABLE",
			"Content-Type", "application/x-www-form-urlencoded", HeaderToken, testToken)},
		{"POST JSON", newReq(t, "POST", cb+"?token="+testToken, `{"id":23501,"code":"Completed"}`, "Content-Type", "application/json")},
		{"GET without id", newReq(t, "GET", cb+"?code=LOST-1&token="+testToken, "")},
		{"POST bad JSON", newReq(t, "POST", cb, `{"id":`, "Content-Type", "application/json", HeaderToken, testToken)},
	} {
		r := do(t, tc.req)
		if r.err != nil || r.status != http.StatusOK || r.body != bodyOK {
			t.Fatalf("%s: %d %q %v, want 200 OK", tc.name, r.status, r.body, r.err)
		}
		noEcho(t, r, "J-1", "ANSWER-1", "J-2", "23501", "LOST-1", testToken)
	}

	got := c.CollectUntil(t, []string{cbTopic, dlqTopic}, func(g kafkatest.Got) bool {
		return len(g[cbTopic]) >= 3 && len(g[dlqTopic]) >= 2
	}, 30*time.Second, 500*time.Millisecond)
	if len(got[cbTopic]) != 3 || len(got[dlqTopic]) != 2 {
		t.Fatalf("%d callbacks, %d dead letters; want 3 and 2", len(got[cbTopic]), len(got[dlqTopic]))
	}
	want := map[string]processor.Callback{
		"J-1":   {JobID: "J-1", Result: []byte("ANSWER-1")},
		"J-2":   {JobID: "J-2", Result: []byte(""), Error: "ERROR_CAPTCHA_UNSOLVABLE"},
		"23501": {JobID: "23501", Result: []byte("Completed")},
	}
	for _, r := range got[cbTopic] {
		cb, err := processor.DecodeCallback(r)
		if err != nil {
			t.Fatalf("callback record %s: %v", r.Key, err)
		}
		w, ok := want[cb.JobID]
		if !ok || string(cb.Result) != string(w.Result) || cb.Error != w.Error {
			t.Errorf("callback %+v, want %+v", cb, w)
		}
		if string(r.Key) != cb.JobID {
			t.Errorf("key %q, want the job id", r.Key)
		}
		_, hasErr := kafkatest.Header(r, processor.HeaderCallbackError)
		if hasErr != (w.Error != "") {
			t.Errorf("%s: header %s present = %v", cb.JobID, processor.HeaderCallbackError, hasErr)
		}
		delete(want, cb.JobID)
	}

	codes := map[string]*dlq.DeadLetter{}
	for _, r := range got[dlqTopic] {
		d, err := dlq.Decode(r)
		if err != nil {
			t.Fatalf("dead letter: %v", err)
		}
		codes[d.Code] = d
		if d.Reason != dlq.ReasonInvalid || d.Class != retry.ClassInvalid || d.OriginTopic != cbTopic || d.Attempt != 0 || d.Instance != "intake-test" {
			t.Errorf("dead letter %+v: want reason invalid, class invalid, origin %s, attempt 0", d, cbTopic)
		}
		if strings.Contains(string(d.Value), testToken) || strings.Contains(d.Error, testToken) {
			t.Errorf("dead letter keeps the token: value %q error %q", d.Value, d.Error)
		}
		for _, h := range r.Headers {
			if strings.Contains(string(h.Value), testToken) {
				t.Errorf("dead letter header %s keeps the token", h.Key)
			}
		}
	}
	if d := codes[CodeNoID]; d == nil || string(d.Value) != "code=LOST-1" || !strings.Contains(d.Error, `"id"`) {
		t.Errorf("no-id dead letter: %+v", d)
	}
	if d := codes[CodeBadBody]; d == nil || string(d.Value) != `{"id":` {
		t.Errorf("bad-body dead letter: %+v", d)
	} else if ct, _ := kafkatest.Header(&kgo.Record{Headers: d.UserHeaders}, "content-type"); ct != "application/json" {
		t.Errorf("bad-body dead letter content-type %q", ct)
	}

	if a, i := testutil.ToFloat64(in.requests[ResultAccepted]), testutil.ToFloat64(in.requests[ResultInvalid]); a != 3 || i != 2 {
		t.Errorf("accepted %v invalid %v, want 3 and 2", a, i)
	}
	if n := testutil.CollectAndCount(reg, "redrive_callback_ack_seconds"); n != 1 {
		t.Errorf("%d ack histograms, want 1", n)
	}

	// Ready says which topic is missing.
	o.Topic = kafkatest.Topic(t, "missing") + ".callbacks"
	o.Registerer = nil
	missing := mustNew(t, o)
	if err := missing.Ready(ctx); err == nil || !strings.Contains(err.Error(), o.Topic) {
		t.Errorf("Ready without the callbacks topic = %v", err)
	}
}
