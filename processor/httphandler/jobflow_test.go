package httphandler_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/fakeapi"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// smmPanel is a fake SMM panel speaking API v2 (POST form, key and action
// fields): action=add → {"order":<id>}; action=status&order=<id> →
// "In progress" on the first two calls of an order, then "Completed".
type smmPanel struct {
	key    string
	mu     sync.Mutex
	next   int
	adds   map[string]int // by link: add calls
	orders map[int]string // order id → link
	polls  map[int]int    // order id → status calls
	bad    []string       // requests that were wrong
}

func (s *smmPanel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f, err := url.ParseQuery(string(b))
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded":
		s.bad = append(s.bad, fmt.Sprintf("%s %s %q", r.Method, r.Header.Get("Content-Type"), b))
		io.WriteString(w, `{"error":"Incorrect request"}`)
	case f.Get("key") != s.key:
		s.bad = append(s.bad, "wrong key: "+string(b))
		io.WriteString(w, `{"error":"Invalid API key"}`)
	case f.Get("action") == "add":
		link := f.Get("link")
		if f.Get("service") != "1" || f.Get("quantity") != "100" || link == "" {
			s.bad = append(s.bad, "bad add: "+string(b))
			io.WriteString(w, `{"error":"Incorrect request"}`)
			return
		}
		s.next++
		id := 23500 + s.next
		s.adds[link]++
		s.orders[id] = link
		fmt.Fprintf(w, `{"order":%d}`, id)
	case f.Get("action") == "status":
		id, err := strconv.Atoi(f.Get("order"))
		if _, ok := s.orders[id]; err != nil || !ok {
			s.bad = append(s.bad, "unknown order: "+string(b))
			io.WriteString(w, `{"error":"Incorrect order ID"}`)
			return
		}
		s.polls[id]++
		if s.polls[id] <= 2 {
			io.WriteString(w, `{"charge":"0.27","start_count":"3572","status":"In progress","remains":"157","currency":"USD"}`)
			return
		}
		io.WriteString(w, `{"charge":"0.27","start_count":"3572","status":"Completed","remains":"0","currency":"USD"}`)
	default:
		s.bad = append(s.bad, "unknown action: "+string(b))
		io.WriteString(w, `{"error":"Incorrect request"}`)
	}
}

// Records go through a job API end to end on a real broker: add → order
// id → status "In progress" twice → "Completed". Each record is in the
// results topic once, with the final answer, after three polls of its
// order; no record is added twice.
func TestJobAPIFlowSMMPanel(t *testing.T) {
	const n = 300
	sched := retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3, Jitter: 0.1}
	rg := pipetest.New(t, "smmflow", 4, sched)
	panel := &smmPanel{key: "panel-s3cret", adds: map[string]int{}, orders: map[int]string{}, polls: map[int]int{}}
	srv := httptest.NewServer(panel)
	t.Cleanup(srv.Close)
	h, err := httphandler.New(httphandler.Options{
		URL:  srv.URL + "/api/v2",
		Form: map[string]string{"key": panel.key, "action": "add"},
		JSON: &httphandler.JSONRule{CodeField: "error"},
		Poll: &httphandler.Poll{
			URL: srv.URL + "/api/v2", Method: "POST", Body: "key=" + panel.key + "&action=status&order={state}",
			StateField: "order", FirstAfter: time.Second, Every: time.Second,
			Status: &httphandler.StatusTable{Field: "status", Done: []string{"Completed"}, Pending: []string{"Pending", "In progress", "Processing"},
				Failed: []string{"Canceled", "Cancelled", "Partial"}},
		},
		Codes: httphandler.Codes{Pause: map[string]time.Duration{"Not enough funds on balance": time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rg.P.Concurrency = 32
	rg.Start(h)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := url.Values{"service": {"1"}, "link": {fmt.Sprintf("https://example.com/p/%d", i)}, "quantity": {"100"}}
		recs[i] = &kgo.Record{Topic: rg.P.Topic, Key: []byte("order-" + strconv.Itoa(i)), Value: []byte(v.Encode()),
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/x-www-form-urlencoded")}}}
	}
	rg.Produce(recs...)

	got := rg.Collect([]string{rg.P.Results, rg.P.DLQ}, func(got kafkatest.Got) bool {
		return got.Total(rg.P.Results, rg.P.DLQ) >= n
	}, 3*time.Minute, 3*time.Second)

	if dl := got[rg.P.DLQ]; len(dl) > 0 {
		code, _ := kafkatest.Header(dl[0], retry.HeaderErrorCode)
		msg, _ := kafkatest.Header(dl[0], retry.HeaderError)
		t.Errorf("%d dead letters, e.g. %s: %s", len(dl), code, msg)
	}
	results := map[string]int{}
	for _, r := range got[rg.P.Results] {
		results[string(r.Key)]++
		var ans struct{ Status, Remains, Charge string }
		if err := json.Unmarshal(r.Value, &ans); err != nil || ans.Status != "Completed" || ans.Remains != "0" || ans.Charge != "0.27" {
			t.Errorf("%s: result %q (%v), want the whole Completed answer", r.Key, r.Value, err)
		}
		if polls, _ := kafkatest.Header(r, retry.HeaderPolls); polls != "3" {
			t.Errorf("%s: redrive-polls %q, want 3", r.Key, polls)
		}
	}
	for i := range n {
		if c := results["order-"+strconv.Itoa(i)]; c != 1 {
			t.Errorf("order-%d: %d results, want 1", i, c)
		}
	}
	panel.mu.Lock()
	defer panel.mu.Unlock()
	if len(panel.bad) > 0 {
		t.Errorf("%d bad requests, e.g. %s", len(panel.bad), panel.bad[0])
	}
	if len(panel.adds) != n || len(panel.orders) != n {
		t.Errorf("%d links added, %d orders; want %d", len(panel.adds), len(panel.orders), n)
	}
	for link, c := range panel.adds {
		if c != 1 {
			t.Errorf("%s added %d times", link, c)
		}
	}
	for id, c := range panel.polls {
		if c != 3 {
			t.Errorf("order %d polled %d times, want 3", id, c)
		}
	}
}

// smmCall is one request the fake SMM panel answered.
type smmCall struct {
	start, end time.Time
	action     string
	noFunds    bool // answered "Not enough funds on balance"
}

// smmLog serves the fake SMM panel and logs each request with its answer.
type smmLog struct {
	h     http.Handler
	mu    sync.Mutex
	calls []smmCall
}

type teeWriter struct {
	http.ResponseWriter
	body []byte
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.body = append(w.body, b...)
	return w.ResponseWriter.Write(b)
}

func (l *smmLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tw := &teeWriter{ResponseWriter: w}
	l.h.ServeHTTP(tw, r) // parses r.Form
	c := smmCall{start: start, end: time.Now(), action: r.Form.Get("action"),
		noFunds: strings.Contains(string(tw.body), fakeapi.SMMNoFunds)}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

func (l *smmLog) log() []smmCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *smmLog) noFunds() int {
	n := 0
	for _, c := range l.log() {
		if c.noFunds {
			n++
		}
	}
	return n
}

// The fake SMM panel (internal/fakeapi) through the processor, configured
// as the smm-panel preset: it starts with no funds, so the first add is
// answered {"error":"Not enough funds on balance"}, which the preset makes
// a pause code. The line stops (status: pause_code) and no call starts
// for the pause; the order is added again after it, its attempt not spent.
// Once the balance is back every order is added once, polled In progress
// twice, then Completed, and is in results once with attempt 1.
func TestJobAPIFlowSMMPanelNoFunds(t *testing.T) {
	const n, pause = 20, 3 * time.Second
	sched := retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}, MaxAttempts: 3, Jitter: 0.1}
	rg := pipetest.New(t, "smmfunds", 2, sched)
	panel := fakeapi.NewSMMPanel(fakeapi.SMMOptions{NoFunds: true}, 1406)
	calls := &smmLog{h: panel}
	srv := httptest.NewServer(calls)
	t.Cleanup(srv.Close)
	key := fakeapi.DefaultSMMKey
	h, err := httphandler.New(httphandler.Options{
		URL:  srv.URL + "/api/v2",
		Form: map[string]string{"key": key, "action": "add"},
		JSON: &httphandler.JSONRule{CodeField: "error"},
		Poll: &httphandler.Poll{
			URL: srv.URL + "/api/v2", Method: "POST", Body: "key=" + key + "&action=status&order={state}",
			StateField: "order", FirstAfter: time.Second, Every: time.Second,
			Status: &httphandler.StatusTable{Field: "status", Done: []string{"Completed"}, Pending: []string{"Pending", "In progress", "Processing"},
				Failed: []string{"Canceled", "Cancelled", "Partial"}},
		},
		Codes: httphandler.Codes{
			Permanent: []string{fakeapi.SMMInvalidKey, fakeapi.SMMIncorrectRequest, fakeapi.SMMIncorrectOrderID},
			Pause:     map[string]time.Duration{fakeapi.SMMNoFunds: pause},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// One call at a time, so that the pause is the only gap between calls.
	rg.P.Concurrency = 1
	pr, _ := pipetest.RunProcessor(t, rg.Config(), h)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := url.Values{"service": {"1"}, "link": {fmt.Sprintf("https://example.com/p/%d", i)}, "quantity": {"100"}}
		recs[i] = &kgo.Record{Topic: rg.P.Topic, Key: []byte("order-" + strconv.Itoa(i)), Value: []byte(v.Encode()),
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/x-www-form-urlencoded")}}}
	}
	rg.Produce(recs...)

	// The line is stopped by the pause code while it lasts.
	var reason processor.StopReason
	if !kafkatest.Eventually(60*time.Second, func() bool {
		line := pr.Status().Pipelines[0].Line
		for _, r := range line.Reasons {
			if r.Reason == "pause_code" && line.State == "stopped" {
				reason = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the line never stopped for the pause code; %d no-funds answers; line %+v", calls.noFunds(), pr.Status().Pipelines[0].Line)
	}
	if d := reason.Until.Sub(reason.Since); d < pause-100*time.Millisecond || !strings.Contains(reason.Detail, fakeapi.SMMNoFunds) {
		t.Errorf("pause reason %+v: want %s for %q", reason, pause, fakeapi.SMMNoFunds)
	}
	// A second pause (the call after the first one is refused too), then
	// the balance is back.
	if !kafkatest.Eventually(60*time.Second, func() bool { return calls.noFunds() >= 2 }) {
		t.Fatalf("one no-funds answer in 60s, want a second after the pause: %+v", calls.log())
	}
	panel.SetNoFunds(false)

	got := rg.Collect([]string{rg.P.Results, rg.P.DLQ}, func(got kafkatest.Got) bool {
		return got.Total(rg.P.Results, rg.P.DLQ) >= n
	}, 90*time.Second, 2*time.Second)
	if dl := got[rg.P.DLQ]; len(dl) > 0 {
		code, _ := kafkatest.Header(dl[0], retry.HeaderErrorCode)
		t.Errorf("%d dead letters, e.g. %s %s", len(dl), dl[0].Key, code)
	}
	results := map[string]int{}
	for _, r := range got[rg.P.Results] {
		results[string(r.Key)]++
		var ans struct{ Status, Remains string }
		if err := json.Unmarshal(r.Value, &ans); err != nil || ans.Status != fakeapi.SMMCompleted || ans.Remains != "0" {
			t.Errorf("%s: result %q (%v), want the Completed answer", r.Key, r.Value, err)
		}
		if a, _ := kafkatest.Header(r, retry.HeaderAttempt); a != "1" {
			t.Errorf("%s: redrive-attempt %q, want 1 (a pause spends no attempt, polls are not attempts)", r.Key, a)
		}
		if p, _ := kafkatest.Header(r, retry.HeaderPolls); p != "3" {
			t.Errorf("%s: redrive-polls %q, want 3", r.Key, p)
		}
	}
	for i := range n {
		if c := results["order-"+strconv.Itoa(i)]; c != 1 {
			t.Errorf("order-%d: %d results, want 1", i, c)
		}
	}

	log := calls.log()
	pauses := 0
	for i, c := range log {
		if !c.noFunds {
			continue
		}
		pauses++
		if c.action != "add" {
			t.Errorf("no funds answered to %q", c.action)
		}
		if i+1 < len(log) {
			if gap := log[i+1].start.Sub(c.end); gap < pause-100*time.Millisecond {
				t.Errorf("a call started %s after the no-funds answer, within the %s pause", gap.Round(time.Millisecond), pause)
			}
		}
	}
	if st := panel.Stats(); pauses < 2 || st.NoFunds != int64(pauses) || st.Adds != n || st.StatusPolls != 3*n {
		t.Errorf("panel %+v, %d no-funds answers logged; want at least 2, %d orders, %d status polls", st, pauses, n, 3*n)
	}
	for _, o := range panel.Orders() {
		if o.Adds != 1 || o.Polls != 3 || o.Status != fakeapi.SMMCompleted {
			t.Errorf("order %d (%s): added %d times, %d polls, status %q; want 1, 3, Completed", o.ID, o.Link, o.Adds, o.Polls, o.Status)
		}
	}
}
