package httphandler

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// jobCall is one request a fake job API received.
type jobCall struct {
	method, path string
	query        url.Values
	rawQuery     string
	ctype        string
	body         string
}

// jobAPI is a fake job API on 127.0.0.1: it logs each request and answers
// with the next scripted answer for its path.
type jobAPI struct {
	mu      sync.Mutex
	calls   []jobCall
	answers map[string][]jobAnswer // by path, taken in order; the last repeats
	srv     *httptest.Server
}

type jobAnswer struct {
	status int
	body   string
}

func newJobAPI(t *testing.T) *jobAPI {
	a := &jobAPI{answers: map[string][]jobAnswer{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.calls = append(a.calls, jobCall{method: r.Method, path: r.URL.Path, query: r.URL.Query(), rawQuery: r.URL.RawQuery, ctype: r.Header.Get("Content-Type"), body: string(b)})
		ans := jobAnswer{http.StatusNotFound, "no answer scripted"}
		if l := a.answers[r.URL.Path]; len(l) > 0 {
			ans = l[0]
			if len(l) > 1 {
				a.answers[r.URL.Path] = l[1:]
			}
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ans.status)
		io.WriteString(w, ans.body)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// answer scripts the next answers of path (200 unless status is given as
// "503 body").
func (a *jobAPI) answer(path string, bodies ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers[path] = nil
	for _, b := range bodies {
		st := http.StatusOK
		for _, s := range []int{202, 400, 503} {
			if p, ok := strings.CutPrefix(b, http.StatusText(s)+" "); ok {
				st, b = s, p
			}
		}
		a.answers[path] = append(a.answers[path], jobAnswer{st, b})
	}
}

func (a *jobAPI) last(t *testing.T) jobCall {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) == 0 {
		t.Fatal("no call")
	}
	return a.calls[len(a.calls)-1]
}

func (a *jobAPI) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

func jobRequest(value, ctype, state string) *processor.Request {
	r := &kgo.Record{Value: []byte(value)}
	if ctype != "" {
		r.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte(ctype)}}
	}
	req := &processor.Request{Record: r, ID: "id-1", Attempt: 1}
	if state != "" {
		req.State = []byte(state)
	}
	return req
}

func mustNew(t *testing.T, o Options) *Handler {
	t.Helper()
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// expect checks an outcome's kind, state, code, delay and request-fault
// mark; a result is checked for a success.
type expect struct {
	kind         processor.Kind
	state        string
	code         string
	minDelay     time.Duration
	result       string
	err          string // a piece of Err
	requestFault bool
}

func (e expect) check(t *testing.T, what string, out processor.Outcome) {
	t.Helper()
	if out.Kind != e.kind || string(out.State) != e.state || out.Code != e.code || out.MinDelay != e.minDelay || out.RequestFault != e.requestFault {
		t.Errorf("%s: %v state %q code %q delay %s request fault %v (%v); want %v state %q code %q delay %s request fault %v",
			what, out.Kind, out.State, out.Code, out.MinDelay, out.RequestFault, out.Err, e.kind, e.state, e.code, e.minDelay, e.requestFault)
	}
	if e.kind == processor.Success && string(out.Result) != e.result {
		t.Errorf("%s: result %q, want %q", what, out.Result, e.result)
	}
	if e.err != "" && (out.Err == nil || !strings.Contains(out.Err.Error(), e.err)) {
		t.Errorf("%s: error %v, want %q in it", what, out.Err, e.err)
	}
}

// CaptchaAI's documented wire format: in.php answers
// {"status":1,"request":"<task id>"}, res.php {"status":0,"request":
// "CAPCHA_NOT_READY"} until {"status":1,"request":"<token>"}.
func TestCaptchaAIJob(t *testing.T) {
	const key = "s3cr3t-k3y"
	api := newJobAPI(t)
	h := mustNew(t, Options{
		URL:   api.srv.URL + "/in.php",
		Query: map[string]string{"key": key, "json": "1", "pingback": "https://me.example/cb?token=t"},
		JSON:  &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &Poll{
			URL:        api.srv.URL + "/res.php?key=" + key + "&action=get&json=1&id={state}",
			StateField: "request", ResultField: "request", FirstAfter: 15 * time.Second, Every: 5 * time.Second,
		},
		Codes: Codes{
			NotReady:  []string{"CAPCHA_NOT_READY"},
			Transient: []string{"ERROR_NO_SLOT_AVAILABLE"},
			Permanent: []string{"ERROR_CAPTCHA_UNSOLVABLE", "ERROR_WRONG_CAPTCHA_ID"},
			MinDelay:  map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": 5 * time.Second},
			Pause:     map[string]time.Duration{"ERROR_ZERO_BALANCE": time.Minute},
		},
	})
	res := api.srv.URL + "/res.php"

	// Submit: POST in.php with the query fields; the record as it is.
	api.answer("/in.php", `{"status":1,"request":"2122988149"}`)
	out := h.Handle(t.Context(), jobRequest(`{"method":"hcaptcha","sitekey":"x"}`, "application/json", ""))
	expect{kind: processor.NotReady, state: "2122988149", minDelay: 15 * time.Second}.check(t, "submit", out)
	c := api.last(t)
	if c.method != "POST" || c.path != "/in.php" || c.query.Get("key") != key || c.query.Get("json") != "1" ||
		c.query.Get("pingback") != "https://me.example/cb?token=t" || c.body != `{"method":"hcaptcha","sitekey":"x"}` || c.ctype != "application/json" {
		t.Errorf("submit request: %+v", c)
	}

	// Poll: GET res.php?id=<job>, not ready, then the token.
	api.answer("/res.php", `{"status":0,"request":"CAPCHA_NOT_READY"}`, `{"status":1,"request":"03AGdBq25SxXT-pmSeBXjzScW"}`)
	out = h.Handle(t.Context(), jobRequest(`{"method":"hcaptcha"}`, "application/json", "2122988149"))
	expect{kind: processor.NotReady, state: "2122988149", code: "CAPCHA_NOT_READY", minDelay: 5 * time.Second}.check(t, "not ready", out)
	c = api.last(t)
	if c.method != "GET" || c.path != "/res.php" || c.query.Get("id") != "2122988149" || c.query.Get("action") != "get" || c.body != "" || c.ctype != "" {
		t.Errorf("poll request: %+v", c)
	}
	out = h.Handle(t.Context(), jobRequest("", "", "2122988149"))
	expect{kind: processor.Success, result: "03AGdBq25SxXT-pmSeBXjzScW"}.check(t, "solved", out)

	// Failures of a poll keep the job id, so the next call polls again.
	for _, tt := range []struct {
		answer string
		want   expect
	}{
		{`{"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE"}`, expect{kind: processor.Permanent, code: "ERROR_CAPTCHA_UNSOLVABLE",
			err: `GET ` + res + `: 200 OK: status is 0, want 1: {"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE"}`}},
		{"Service Unavailable busy", expect{kind: processor.Transient, state: "2122988149", code: "http_503", err: "GET " + res + ": 503 Service Unavailable: busy"}},
		{`{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`, expect{kind: processor.Transient, state: "2122988149", code: "ERROR_NO_SLOT_AVAILABLE", minDelay: 5 * time.Second}},
		{`{"status":0,"request":"ERROR_ZERO_BALANCE"}`, expect{kind: processor.Paused, state: "2122988149", code: "ERROR_ZERO_BALANCE", minDelay: time.Minute}},
		{`{"status":0}`, expect{kind: processor.Transient, state: "2122988149", code: CodeNotOK}},
		{`not json`, expect{kind: processor.Transient, state: "2122988149", code: CodeBadResponse}},
		{"Accepted ", expect{kind: processor.NotReady, state: "2122988149", code: "http_202", minDelay: 5 * time.Second}},
		{`{"status":1}`, expect{kind: processor.Transient, state: "2122988149", code: CodeNoResult, err: "request missing"}},
		{`{"status":1,"request":{"token":"T","ua":"x<y"}}`, expect{kind: processor.Success, result: `{"token":"T","ua":"x<y"}`}},
		{`{"status":1,"request":12.50}`, expect{kind: processor.Success, result: `12.50`}},
	} {
		api.answer("/res.php", tt.answer)
		out := h.Handle(t.Context(), jobRequest("", "", "2122988149"))
		tt.want.check(t, tt.answer, out)
		if out.Err != nil && strings.Contains(out.Err.Error(), key) {
			t.Errorf("%s: the api key shows: %v", tt.answer, out.Err)
		}
	}

	// Submit failures carry no state: nothing was submitted.
	for _, tt := range []struct {
		answer string
		want   expect
	}{
		{`{"status":0,"request":"ERROR_ZERO_BALANCE"}`, expect{kind: processor.Paused, code: "ERROR_ZERO_BALANCE", minDelay: time.Minute}},
		{`{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`, expect{kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE", minDelay: 5 * time.Second}},
		{`{"status":1}`, expect{kind: processor.Transient, code: CodeNoJobID, err: "POST " + api.srv.URL + "/in.php: 200 OK: no job id: request missing"}},
		{`{"status":1,"request":""}`, expect{kind: processor.Transient, code: CodeNoJobID, err: "request is empty"}},
		{`{"status":1,"request":true}`, expect{kind: processor.Transient, code: CodeNoJobID, err: "request is true, want a string or a number"}},
		{`{"status":1,"request":"` + strings.Repeat("9", retry.MaxStateBytes+1) + `"}`, expect{kind: processor.Transient, code: CodeNoJobID, err: "more than 4096"}},
		// A 202 is read like a 200: the job id is in the body.
		{`Accepted {"status":1,"request":"77"}`, expect{kind: processor.NotReady, state: "77", minDelay: 15 * time.Second}},
	} {
		api.answer("/in.php", tt.answer)
		out := h.Handle(t.Context(), jobRequest("body", "", ""))
		tt.want.check(t, "submit "+tt.answer[:min(len(tt.answer), 60)], out)
		if out.Err != nil && strings.Contains(out.Err.Error(), key) {
			t.Errorf("%s: the api key shows: %v", tt.answer, out.Err)
		}
	}
	var rerr *ResponseError
	api.answer("/in.php", `{"status":1}`)
	if out := h.Handle(t.Context(), jobRequest("", "", "")); !errors.Is(out.Err, ErrNoJobID) || !errors.As(out.Err, &rerr) || rerr.Method != "POST" {
		t.Errorf("no job id: %#v", out.Err)
	}

	// The API unreachable during a poll: transient, the job id kept, GET named.
	api.srv.Close()
	out = h.Handle(t.Context(), jobRequest("", "", "2122988149"))
	expect{kind: processor.Transient, state: "2122988149", code: CodeConnect, err: "GET " + res + ": cannot connect"}.check(t, "closed", out)
	if strings.Contains(out.Err.Error(), key) {
		t.Errorf("the api key shows: %v", out.Err)
	}
}

// An SMM panel's API v2: POST form action=add → {"order":23501}; POST
// action=status&order=<id> → {"status":"In progress",...} until
// "Completed"; errors are {"error":"..."} with status 200.
func TestSMMPanelJob(t *testing.T) {
	const key = "panel-k3y"
	api := newJobAPI(t)
	h := mustNew(t, Options{
		URL:  api.srv.URL + "/api/v2",
		Form: map[string]string{"key": key, "action": "add"},
		JSON: &JSONRule{CodeField: "error"},
		Poll: &Poll{
			URL: api.srv.URL + "/api/v2", Method: "POST", Body: "key=" + key + "&action=status&order={state}",
			StateField: "order", FirstAfter: 30 * time.Second, Every: 10 * time.Second,
			Status: &StatusTable{Field: "status", Done: []string{"Completed"}, Pending: []string{"Pending", "In progress", "Processing"}, Failed: []string{"Canceled", "Cancelled", "Partial"}},
		},
		Codes: Codes{
			Permanent: []string{"Incorrect request", "Incorrect order ID"},
			Pause:     map[string]time.Duration{"Not enough funds on balance": 5 * time.Minute},
		},
	})
	const record = "service=1&link=https%3A%2F%2Fexample.com%2Fp%2F1&quantity=100"

	api.answer("/api/v2", `{"order":23501}`)
	out := h.Handle(t.Context(), jobRequest(record, formType, ""))
	expect{kind: processor.NotReady, state: "23501", minDelay: 30 * time.Second}.check(t, "add", out)
	c := api.last(t)
	f, err := url.ParseQuery(c.body)
	if err != nil || c.method != "POST" || c.ctype != formType || f.Get("key") != key || f.Get("action") != "add" || f.Get("service") != "1" ||
		f.Get("link") != "https://example.com/p/1" || f.Get("quantity") != "100" || len(f) != 5 || !strings.HasPrefix(c.body, record+"&") {
		t.Errorf("add request: %+v (%v)", c, err)
	}

	progress := `{"charge":"0.27","start_count":"3572","status":"In progress","remains":"157","currency":"USD"}`
	completed := `{"charge":"0.27","start_count":"3572","status":"Completed","remains":"0","currency":"USD"}`
	api.answer("/api/v2", progress, progress, completed)
	for i := range 2 {
		out = h.Handle(t.Context(), jobRequest(record, formType, "23501"))
		expect{kind: processor.NotReady, state: "23501", code: "In progress", minDelay: 10 * time.Second, err: `status is "In progress": pending`}.check(t, "status", out)
		c = api.last(t)
		if c.method != "POST" || c.ctype != formType || c.body != "key="+key+"&action=status&order=23501" {
			t.Errorf("status request %d: %+v", i, c)
		}
	}
	out = h.Handle(t.Context(), jobRequest(record, formType, "23501"))
	expect{kind: processor.Success, result: completed}.check(t, "completed", out)

	long := `{"status":"Partial","remains":"` + strings.Repeat("7", 600) + `"}`
	for _, tt := range []struct {
		answer string
		want   expect
	}{
		{`{"status":"Partial","remains":"15"}`, expect{kind: processor.Permanent, code: "Partial",
			err: `POST ` + api.srv.URL + `/api/v2: 200 OK: status is "Partial": failed: {"status":"Partial","remains":"15"}`}},
		{`{"status":" canceled "}`, expect{kind: processor.Permanent, code: "canceled"}},
		{`{"status":"COMPLETED"}`, expect{kind: processor.Success, result: `{"status":"COMPLETED"}`}},
		{`{"status":"processing"}`, expect{kind: processor.NotReady, state: "23501", code: "processing", minDelay: 10 * time.Second}},
		{`{"status":"Refunded"}`, expect{kind: processor.Transient, state: "23501", code: CodeUnknownStatus, err: `status is "Refunded", in none of`}},
		{`{"status":{"a":1}}`, expect{kind: processor.Transient, state: "23501", code: CodeUnknownStatus}},
		{`{"charge":"0.27"}`, expect{kind: processor.Transient, state: "23501", code: CodeNoStatus, err: "status missing"}},
		{`{"status":null}`, expect{kind: processor.Transient, state: "23501", code: CodeNoStatus}},
		{`{"error":"Incorrect order ID"}`, expect{kind: processor.Permanent, code: "Incorrect order ID"}},
		{`{"error":"Something else"}`, expect{kind: processor.Transient, state: "23501", code: "Something else", err: `error is "Something else", want it absent`}},
		{`{"error":"Not enough funds on balance"}`, expect{kind: processor.Paused, state: "23501", code: "Not enough funds on balance", minDelay: 5 * time.Minute}},
		{long, expect{kind: processor.Permanent, code: "Partial", err: strings.Repeat("7", 600)}},
	} {
		api.answer("/api/v2", tt.answer)
		out := h.Handle(t.Context(), jobRequest(record, formType, "23501"))
		tt.want.check(t, tt.answer[:min(60, len(tt.answer))], out)
		if out.Err != nil && (strings.Contains(out.Err.Error(), key) || len(out.Err.Error()) > maxErrorBytes) {
			t.Errorf("%s: the key shows or the error is long: %v", tt.answer, out.Err)
		}
		if tt.want.kind == processor.Permanent && !strings.HasPrefix(tt.answer, `{"error"`) && !errors.Is(out.Err, ErrJobFailed) {
			t.Errorf("%s: error %#v is not ErrJobFailed", tt.answer, out.Err)
		}
	}

	// No balance at submit: the configured class (a pause), no state.
	api.answer("/api/v2", `{"error":"Not enough funds on balance"}`)
	out = h.Handle(t.Context(), jobRequest(record, formType, ""))
	expect{kind: processor.Paused, code: "Not enough funds on balance", minDelay: 5 * time.Minute, err: `error is "Not enough funds on balance"`}.check(t, "no funds", out)
	api.answer("/api/v2", `{"error":"Incorrect request"}`)
	out = h.Handle(t.Context(), jobRequest(record, formType, ""))
	expect{kind: processor.Permanent, code: "Incorrect request"}.check(t, "incorrect", out)
	// Numbers: an order id of 1e3 is used as written; a status 1 matches "1".
	api.answer("/api/v2", `{"order":1e3}`)
	out = h.Handle(t.Context(), jobRequest(record, formType, ""))
	expect{kind: processor.NotReady, state: "1e3", minDelay: 30 * time.Second}.check(t, "1e3", out)
	if n := api.count(); n != 19 {
		t.Errorf("%d calls, want 19", n)
	}
}

// Status values that are numbers match their decimal form.
func TestStatusNumbers(t *testing.T) {
	api := newJobAPI(t)
	h := mustNew(t, Options{URL: api.srv.URL + "/submit", Poll: &Poll{URL: api.srv.URL + "/poll/{state}", StateField: "id",
		Status: &StatusTable{Field: "data.state", Done: []string{"2"}, Pending: []string{"1", "true"}, Failed: []string{"-1"}}}})
	for body, want := range map[string]processor.Kind{
		`{"data":{"state":2}}`:     processor.Success,
		`{"data":{"state":2.0}}`:   processor.Success,
		`{"data":{"state":"2"}}`:   processor.Success,
		`{"data":{"state":1}}`:     processor.NotReady,
		`{"data":{"state":true}}`:  processor.NotReady,
		`{"data":{"state":-1}}`:    processor.Permanent,
		`{"data":{"state":2.5}}`:   processor.Transient,
		`{"data":{"state":false}}`: processor.Transient,
	} {
		api.answer("/poll/a b", body)
		if out := h.Handle(t.Context(), jobRequest("", "", "a b")); out.Kind != want {
			t.Errorf("%s: %v (%s %v), want %v", body, out.Kind, out.Code, out.Err, want)
		}
		if c := api.last(t); c.path != "/poll/a b" || c.method != "GET" {
			t.Errorf("%s: request %+v", body, c)
		}
	}
}

// Without poll, a request with state is sent as before: POST to url with
// Redrive-State.
func TestNoPollSendsStateAsBefore(t *testing.T) {
	var got http.Header
	var method string
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		got, method = r.Header.Clone(), r.Method
		w.WriteHeader(http.StatusAccepted)
	})
	out := h.Handle(t.Context(), jobRequest("v", "", "task-1"))
	if out.Kind != processor.NotReady || string(out.State) != "task-1" || method != "POST" || got.Get(HeaderState) != "task-1" {
		t.Errorf("%v %q %s %v", out.Kind, out.State, method, got)
	}
}

// Query fields go to the submit URL, keeping its query; Form fields to a
// form body, or to the query of any other body.
func TestSubmitQueryAndForm(t *testing.T) {
	api := newJobAPI(t)
	base := Options{
		URL:   api.srv.URL + "/in.php?json=1&soft_id=7",
		Query: map[string]string{"key": "a b&c=d", "pingback": "https://me.example/cb?token=x&y=1"},
		Form:  map[string]string{"method": "post", "f&": "é="},
	}
	withCT := base
	withCT.Headers = map[string]string{"Content-Type": "text/plain"}
	withFormCT := base
	withFormCT.Headers = map[string]string{"content-type": formType}
	noForm := base
	noForm.Form = nil
	const q = "json=1&soft_id=7&key=a+b%26c%3Dd&pingback=https%3A%2F%2Fme.example%2Fcb%3Ftoken%3Dx%26y%3D1"
	const form = "f%26=%C3%A9%3D&method=post"
	for _, tt := range []struct {
		name      string
		o         Options
		value     string
		ctype     string // the record's
		wantQuery string
		wantBody  string
		wantCT    string
	}{
		{"form record", base, "a=1&b=x+y", "Application/X-WWW-Form-Urlencoded; charset=utf-8", q, "a=1&b=x+y&" + form, "Application/X-WWW-Form-Urlencoded; charset=utf-8"},
		{"form record ending in &", base, "a=1&", formType, q, "a=1&" + form, formType},
		{"empty form record", base, "", formType, q, form, formType},
		{"record without type: a form", base, "body=x", "", q, "body=x&" + form, formType},
		{"JSON record: form fields in the query", base, `{"a":"b"}`, "application/json", q + "&" + form, `{"a":"b"}`, "application/json"},
		{"configured text/plain: query", withCT, "hello", "", q + "&" + form, "hello", "text/plain"},
		{"configured form type", withFormCT, "x=1", "", q, "x=1&" + form, formType},
		{"no form fields: octet-stream as before", noForm, "raw", "", q, "raw", "application/octet-stream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := mustNew(t, tt.o)
			api.answer("/in.php", "ok")
			if out := h.Handle(t.Context(), jobRequest(tt.value, tt.ctype, "")); out.Kind != processor.Success {
				t.Fatalf("%v %v", out.Kind, out.Err)
			}
			c := api.last(t)
			if c.rawQuery != tt.wantQuery {
				t.Errorf("query %q, want %q", c.rawQuery, tt.wantQuery)
			}
			if c.body != tt.wantBody || c.ctype != tt.wantCT {
				t.Errorf("body %q (%s), want %q (%s)", c.body, c.ctype, tt.wantBody, tt.wantCT)
			}
		})
	}
}

// Whatever a job API answers: a submit's answer is never a success (an
// accepted one is not-ready with a usable job id); a poll's answer keeps
// the job id on every outcome but a success or a permanent failure; no
// message shows the key or is longer than 1 KiB, and each names the method.
func FuzzJobAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		header string
		body   string
	}{
		{200, "", `{"status":1,"request":"2122988149"}`},
		{200, "", `{"status":0,"request":"CAPCHA_NOT_READY"}`},
		{200, "", `{"status":"In progress","request":"x"}`},
		{200, "", `{"status":"Completed","request":{"a":[1,2]}}`},
		{200, "", `{"status":"partial"}`},
		{200, "", `{"status":7,"request":23501}`},
		{200, "", `{"status":1,"request":null}`},
		{202, "Retry-After: 30", `{"status":1,"request":"77"}`},
		{503, "Redrive-Error-Code: ERROR_ZERO_BALANCE", ""},
		{400, "", `{"error":"bad"}`},
		{200, "", "\xff\x00"},
	} {
		f.Add(s.status, s.header, []byte(s.body), "2122988149")
	}
	o := Options{
		URL:   "http://127.0.0.1:1/in.php?key=s3cret",
		Query: map[string]string{"key": "s3cret"},
		JSON:  &JSONRule{CodeField: "error"},
		Poll: &Poll{URL: "http://127.0.0.1:1/res.php?key=s3cret&id={state}", StateField: "request", ResultField: "request",
			Status: &StatusTable{Field: "status", Done: []string{"Completed", "1"}, Pending: []string{"In progress"}, Failed: []string{"Partial"}}},
		Codes: Codes{NotReady: []string{"CAPCHA_NOT_READY"}, Permanent: []string{"ERROR_WRONG"}, Pause: map[string]time.Duration{"ERROR_ZERO_BALANCE": time.Minute}},
	}
	h, err := New(o)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, status int, header string, body []byte, job string) {
		check := func(what string, out processor.Outcome, method string) {
			if out.Err != nil {
				msg := out.Err.Error()
				if strings.Contains(msg, "s3cret") || len(msg) > maxErrorBytes || !strings.HasPrefix(msg, method+" http://127.0.0.1:1/") {
					t.Fatalf("%s: message %q", what, msg)
				}
			}
			if len(out.Code) > maxCodeBytes {
				t.Fatalf("%s: code %q", what, out.Code)
			}
		}
		// The submit.
		c := h.submitCall(jobRequest("x", "", ""))
		out := h.submitted(c, h.classifyCall(c, status, parseHeader(header), body, false, now), status)
		check("submit", out, "POST")
		switch out.Kind {
		case processor.Success:
			t.Fatalf("a submit succeeded: %+v", out)
		case processor.NotReady:
			if isSuccess(status) && (len(out.State) == 0 || len(out.State) > retry.MaxStateBytes || strings.TrimSpace(string(out.State)) == "") {
				t.Fatalf("accepted with state %q", out.State)
			}
		}
		if job == "" {
			return
		}
		// A poll.
		c = h.pollCall(job)
		out = h.polled(c, []byte(job), h.classifyCall(c, status, parseHeader(header), body, false, now), status)
		check("poll", out, "GET")
		switch out.Kind {
		case processor.Success, processor.Permanent, processor.Invalid:
			if out.State != nil {
				t.Fatalf("poll: %v with state %q", out.Kind, out.State)
			}
		default:
			if string(out.State) != job {
				t.Fatalf("poll: %v with state %q, want the job id %q", out.Kind, out.State, job)
			}
		}
		if out.Kind == processor.NotReady && out.MinDelay < h.poll.every {
			t.Fatalf("poll: not ready after %s, less than every", out.MinDelay)
		}
	})
}

// A code in poll.resubmit means the job failed: the next attempt submits
// anew (no job id kept), from a poll answer and from a callback alike.
func TestPollResubmitCodes(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE"}`)
	}))
	defer api.Close()
	h, err := New(Options{URL: api.URL + "/in.php", JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &Poll{URL: api.URL + "/res.php?id={state}", StateField: "request", Resubmit: []string{"ERROR_CAPTCHA_UNSOLVABLE"}}})
	if err != nil {
		t.Fatal(err)
	}
	out := h.Handle(t.Context(), jobRequest("", "", "77"))
	if out.Kind != processor.Transient || out.State != nil || out.Code != "ERROR_CAPTCHA_UNSOLVABLE" {
		t.Fatalf("poll answer: %v state %q code %q, want transient without state", out.Kind, out.State, out.Code)
	}
	out = h.CallbackOutcome(processor.Callback{JobID: "77", Result: []byte("ERROR_CAPTCHA_UNSOLVABLE")})
	if out.Kind != processor.Transient || out.State != nil {
		t.Fatalf("callback: %v state %q, want transient without state", out.Kind, out.State)
	}
	// Not in resubmit: the same answer is a plain transient failure that keeps the job.
	h2, _ := New(Options{URL: api.URL + "/in.php", JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &Poll{URL: api.URL + "/res.php?id={state}", StateField: "request"}})
	if out := h2.Handle(t.Context(), jobRequest("", "", "77")); out.Kind != processor.Transient || string(out.State) != "77" {
		t.Fatalf("without resubmit: %v state %q, want transient keeping 77", out.Kind, out.State)
	}
}
