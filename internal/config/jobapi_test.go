package config

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
)

// A job API in the file becomes the handler's Options: query, form, poll
// (durations, status table), JSON mode without ok_field; the defaults are
// the handler's; ${ENV} is expanded and {state} left for the handler.
func TestJobAPIConfig(t *testing.T) {
	c := mustParse(t, pipe(
		"handler:",
		"  http:",
		"    url: 'https://panel.example/api/v2'",
		"    query: {json: '1', soft_id: '${SOFT}'}",
		"    form: {key: '${KEY}', action: add}",
		"    json: {code_field: error}",
		"    poll:",
		"      url: 'https://panel.example/api/v2?key=${KEY}&id={state}'",
		"      method: post",
		"      body: 'key=${KEY}&action=status&order={state}'",
		"      state_field: order",
		"      first_after: 15s",
		"      status:",
		"        field: status",
		"        done: [Completed]",
		"        pending: [Pending, In progress]",
		"        failed: [Canceled, Partial]",
	), env("KEY", "k3y", "SOFT", "7"))
	p := c.Pipelines[0]
	pc := p.Handler.HTTP.Poll
	if pc.Method != "POST" || pc.FirstAfter != Duration(15*time.Second) || pc.Every != Duration(httphandler.DefaultPollEvery) {
		t.Errorf("poll after SetDefaults: %+v", pc)
	}
	o := p.HTTPOptions()
	want := &httphandler.Poll{URL: "https://panel.example/api/v2?key=k3y&id={state}", Method: "POST", Body: "key=k3y&action=status&order={state}",
		StateField: "order", FirstAfter: 15 * time.Second, Every: httphandler.DefaultPollEvery,
		Status: &httphandler.StatusTable{Field: "status", Done: []string{"Completed"}, Pending: []string{"Pending", "In progress"}, Failed: []string{"Canceled", "Partial"}}}
	if !reflect.DeepEqual(o.Poll, want) {
		t.Errorf("Poll:\n%+v\nwant\n%+v", o.Poll, want)
	}
	if !reflect.DeepEqual(o.Query, map[string]string{"json": "1", "soft_id": "7"}) || !reflect.DeepEqual(o.Form, map[string]string{"key": "k3y", "action": "add"}) {
		t.Errorf("Query %v, Form %v", o.Query, o.Form)
	}
	if o.JSON == nil || o.JSON.OKField != "" || o.JSON.CodeField != "error" || o.JSON.OKValue != nil {
		t.Errorf("JSON %+v", o.JSON)
	}
	if _, err := httphandler.New(o); err != nil {
		t.Errorf("httphandler.New: %v", err)
	}
	// The file's defaults are the handler's.
	c = mustParse(t, pipe("handler: {http: {url: 'http://h/', poll: {url: 'http://h/res?id={state}', state_field: request}}}"), nil)
	d := httphandler.Poll{}.WithDefaults()
	if got := c.Pipelines[0].HTTPOptions().Poll; got.Method != d.Method || got.FirstAfter != d.FirstAfter || got.Every != d.Every {
		t.Errorf("defaults %+v, want %+v", got, d)
	}
	// Printed, no secret shows.
	out := dump(ptr(c.Redacted()))
	c = mustParse(t, pipe("handler: {http: {url: 'http://h/', query: {api_key: '${KEY}', pingback: 'https://me/cb?token=${KEY}'}, form: {key: '${KEY}'},",
		"  poll: {url: 'http://h/res?key=${KEY}&id={state}', method: POST, body: 'key=${KEY}&order={state}', state_field: order}}}"), env("KEY", "k3y"))
	out = dump(ptr(c.Redacted()))
	if strings.Contains(out, "k3y") || !strings.Contains(out, "{state}") {
		t.Errorf("Redacted shows the key or lost {state}:\n%s", out)
	}
	if p := c.Pipelines[0].Handler.HTTP; p.Query["api_key"] != "k3y" || p.Poll.Body != "key=k3y&order={state}" {
		t.Errorf("Redacted changed the config: %+v", p)
	}
}

func ptr[T any](v T) *T { return &v }

// The handler's problems with a job API are reported at their keys and
// lines, the handler's FieldError as the cause.
func TestJobAPIKeyErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		doc   string
		want  []string
		field string
	}{
		{"state in the host", pipe("handler:", "  http:", "    url: http://h/", "    poll:", "      url: 'http://{state}.h/res?key=${KEY}'", "      state_field: request"),
			[]string{`line 8: pipelines[0].handler.http.poll.url: "http://{state}.h/res?key=xxxxx": {state} may not be in the host, port or user info; put it in the path or the query`}, "Poll.URL"},
		{"unknown placeholder", pipe("handler:", "  http:", "    url: http://h/", "    poll:", "      url: 'http://h/res?id={id}'", "      state_field: request"),
			[]string{`line 8: pipelines[0].handler.http.poll.url: "http://h/res?id={id}": unknown {id}: the only placeholder is {state} (the job id)`}, "Poll.URL"},
		{"no state_field, bad method", pipe("handler:", "  http:", "    url: http://h/", "    poll:", "      url: 'http://h/res?id={state}'", "      method: PUT"),
			[]string{
				`line 9: pipelines[0].handler.http.poll.method: "PUT": want GET or POST`,
				`line 7: pipelines[0].handler.http.poll.state_field: required with poll: the path of the job id in the submit's answer, e.g. request`,
			}, "Poll.Method"},
		{"body with GET, negative every", pipe("handler:", "  http:", "    url: http://h/", "    poll: {url: 'http://h/r', body: 'id={state}', state_field: s, every: -5s}"),
			[]string{
				`line 7: pipelines[0].handler.http.poll.every: bad duration "-5s": negative`,
				`line 7: pipelines[0].handler.http.poll.body: needs method POST: a GET poll has no body`,
				`line 7: pipelines[0].handler.http.poll.url: no {state}: the job id must be in the URL (or, with method POST, in the body)`,
			}, ""},
		{"body with GET", pipe("handler:", "  http:", "    url: http://h/", "    poll:", "      url: 'http://h/r'", "      body: 'id={state}'", "      state_field: s"),
			[]string{
				`line 9: pipelines[0].handler.http.poll.body: needs method POST: a GET poll has no body`,
				`line 8: pipelines[0].handler.http.poll.url: no {state}: the job id must be in the URL (or, with method POST, in the body)`,
			}, "Poll.Body"},
		{"status lists", pipe("handler:", "  http:", "    url: http://h/", "    poll:", "      url: 'http://h/r?id={state}'", "      state_field: s",
			"      status:", "        field: status", "        pending: [In progress]", "        failed: [in PROGRESS, '']"),
			[]string{
				`line 10: pipelines[0].handler.http.poll.status.done: required with status: the values that mean done, e.g. [Completed]`,
				`line 13: pipelines[0].handler.http.poll.status.failed[0]: "in PROGRESS" is in pending too (values match without case); a value has one meaning`,
				`line 13: pipelines[0].handler.http.poll.status.failed[1]: empty value`,
			}, "Poll.Status.Done"},
		{"json without ok_field and code_field", pipe("handler:", "  http:", "    url: http://h/", "    json: {ok_value: 1}"),
			[]string{
				`line 7: pipelines[0].handler.http.json.ok_field: required with json unless code_field is set: the path of the ok flag, e.g. status`,
				`line 7: pipelines[0].handler.http.json.ok_value: needs ok_field; without one an answer is ok when code_field is absent, null or empty`,
			}, "JSON.OKField"},
		{"empty query field", pipe("handler:", "  http:", "    url: http://h/", "    query: {'': x}"),
			[]string{`line 7: pipelines[0].handler.http.query: empty field name`}, "Query"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, env("KEY", "s3cret"))
			if got := err.Error(); got != strings.Join(tt.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s", got, strings.Join(tt.want, "\n"))
			}
			var fe *processor.FieldError
			if tt.field != "" && (!errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != tt.field) {
				t.Errorf("cause: %#v, want a FieldError of %s", fe, tt.field)
			}
		})
	}
}

// The example's captchaai preset, against a stand-in for res.php that
// answers what the services document: each answer (and each callback)
// gets the outcome the preset's comments promise. An unsolvable task is
// submitted anew (poll.resubmit: no state, an attempt spent) and is the
// task's fault, which the breaker does not count (request_fault); every
// other failure of a poll keeps the task id.
func TestExampleCaptchaPresetOutcomes(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data), env("CAPTCHA_API_KEY", "k", "CB_TOKEN", "cb-0123456789abcdef"))
	var p *Pipeline
	for i := range c.Pipelines {
		if c.Pipelines[i].Name == "captchaai" {
			p = &c.Pipelines[i]
		}
	}
	if p == nil || p.Handler.HTTP == nil || p.Handler.HTTP.Poll == nil || p.Handler.Callback == nil {
		t.Fatalf("no captchaai preset with a poll and a callback in %s", exampleFile)
	}
	var answer atomic.Value // res.php's next body
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer.Load().(string))
	}))
	defer srv.Close()
	o := p.HTTPOptions()
	o.URL = srv.URL + "/in.php"
	o.Poll.URL = srv.URL + "/res.php?id={state}"
	h, err := httphandler.New(o)
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: p.Topic, Value: []byte("method=userrecaptcha&googlekey=x&pageurl=https://shop.example/")}
	for _, tc := range []struct {
		name, body   string
		kind         processor.Kind
		state        string // the outcome's state: the task id kept, or none
		requestFault bool
	}{
		{"solved", `{"status":1,"request":"03AGdBq2"}`, processor.Success, "", false},
		{"not ready", `{"status":0,"request":"CAPCHA_NOT_READY"}`, processor.NotReady, "2122988149", false},
		{"unsolvable: submitted anew", `{"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE"}`, processor.Transient, "", true},
		{"no slot: polled again", `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`, processor.Transient, "2122988149", false},
		{"wrong task id", `{"status":0,"request":"ERROR_WRONG_CAPTCHA_ID"}`, processor.Permanent, "", false},
		{"no thread or balance: a pause", `{"status":0,"request":"ERROR_ZERO_BALANCE"}`, processor.Paused, "2122988149", false},
	} {
		answer.Store(tc.body)
		out := h.Handle(context.Background(), &processor.Request{Record: rec, ID: "id-1", Attempt: 1, State: []byte("2122988149")})
		if out.Kind != tc.kind || (tc.kind != processor.Permanent && string(out.State) != tc.state) || out.RequestFault != tc.requestFault {
			t.Errorf("%s: poll outcome %v state %q request fault %v (%v), want %v state %q request fault %v",
				tc.name, out.Kind, out.State, out.RequestFault, out.Err, tc.kind, tc.state, tc.requestFault)
		}
	}
	// The same codes in a callback (CaptchaAI: code=ERROR_CAPTCHA_UNSOLVABLE).
	for code, kind := range map[string]processor.Kind{"03AGdBq2": processor.Success, "ERROR_CAPTCHA_UNSOLVABLE": processor.Transient} {
		out := h.CallbackOutcome(processor.Callback{JobID: "2122988149", Result: []byte(code)})
		if out.Kind != kind || len(out.State) != 0 || out.RequestFault != (kind == processor.Transient) {
			t.Errorf("callback %s: %v state %q request fault %v, want %v without state, a request fault when transient", code, out.Kind, out.State, out.RequestFault, kind)
		}
	}
}
