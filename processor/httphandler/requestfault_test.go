package httphandler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// requestFaultCodes are a CAPTCHA API's code rules with its unsolvable task
// as the request's fault, and redrive's own code for a 422 too.
func requestFaultCodes() Codes {
	return Codes{
		Transient:    []string{"ERROR_NO_SLOT_AVAILABLE"},
		RequestFault: []string{"ERROR_CAPTCHA_UNSOLVABLE", "http_422"},
		NotReady:     []string{"CAPCHA_NOT_READY"},
		Permanent:    []string{"ERROR_WRONG_USER_KEY"},
		MinDelay:     map[string]time.Duration{"ERROR_CAPTCHA_UNSOLVABLE": 2 * time.Second},
		Pause:        map[string]time.Duration{"ERROR_ZERO_BALANCE": time.Minute},
	}
}

// A request_fault code is transient and marked RequestFault whatever the
// status would say, as the other classes override it; transient codes and
// failing statuses stay the service's.
func TestRequestFaultClassify(t *testing.T) {
	plain := mustNew(t, Options{URL: "http://127.0.0.1:1/solve", Codes: requestFaultCodes()})
	withJSON := mustNew(t, Options{URL: "http://127.0.0.1:1/solve", Codes: requestFaultCodes(),
		JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"}})
	const unsolvable = "ERROR_CAPTCHA_UNSOLVABLE"
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		h      *Handler
		status int
		header string
		body   string
		want   expect
	}{
		{"500 with the code header", plain, 500, "Redrive-Error-Code: " + unsolvable, "",
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"200 with the code in the JSON body", withJSON, 200, "", `{"status":0,"request":"` + unsolvable + `"}`,
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true, err: "status is 0, want 1"}},
		{"500 with the code in the JSON body", withJSON, 500, "", `{"status":0,"request":"` + unsolvable + `"}`,
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"a 4xx, permanent by its status", plain, 400, "Redrive-Error-Code: " + unsolvable, "",
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"a 202, not ready by its status", plain, 202, "Redrive-Error-Code: " + unsolvable + "\nRedrive-State: s", "",
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"a longer Retry-After", plain, 503, "Redrive-Error-Code: " + unsolvable + "\nRetry-After: 30", "",
			expect{kind: processor.Transient, code: unsolvable, minDelay: 30 * time.Second, requestFault: true}},
		{"redrive's own code", plain, 422, "", "",
			expect{kind: processor.Transient, code: "http_422", requestFault: true}},
		{"a transient code is the service's", withJSON, 200, "", `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`,
			expect{kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE"}},
		{"an unlisted 5xx is the service's", plain, 500, "", "",
			expect{kind: processor.Transient, code: "http_500"}},
		{"a success stays a success", withJSON, 200, "Redrive-Error-Code: " + unsolvable, `{"status":1,"request":"token"}`,
			expect{kind: processor.Success, result: `{"status":1,"request":"token"}`}},
	} {
		out := tt.h.classify(tt.status, parseHeader(tt.header), []byte(tt.body), false, []byte("prev"), now)
		tt.want.check(t, tt.name, out)
	}
}

// A job API's submit and poll answers and its callbacks keep the mark: the
// unsolvable task submitted anew (poll.resubmit) is still the request's
// fault, and one polled again keeps its job id.
func TestRequestFaultJobAPI(t *testing.T) {
	const unsolvable = "ERROR_CAPTCHA_UNSOLVABLE"
	api := newJobAPI(t)
	o := Options{
		URL:  api.srv.URL + "/in.php",
		JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &Poll{URL: api.srv.URL + "/res.php?id={state}", StateField: "request", ResultField: "request",
			Every: 5 * time.Second, Resubmit: []string{unsolvable}},
		Codes: requestFaultCodes(),
	}
	resubmit := mustNew(t, o)
	o.Poll.Resubmit = nil
	pollAgain := mustNew(t, o)
	answer := `{"status":0,"request":"` + unsolvable + `"}`

	api.answer("/in.php", answer)
	expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}.
		check(t, "submit", resubmit.Handle(t.Context(), jobRequest("method=post", "", "")))
	api.answer("/res.php", answer)
	expect{kind: processor.Transient, code: unsolvable, requestFault: true}.
		check(t, "poll, resubmit", resubmit.Handle(t.Context(), jobRequest("", "", "2122988149")))
	expect{kind: processor.Transient, state: "2122988149", code: unsolvable, minDelay: 2 * time.Second, requestFault: true}.
		check(t, "poll, polled again", pollAgain.Handle(t.Context(), jobRequest("", "", "2122988149")))
	api.answer("/res.php", `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`)
	expect{kind: processor.Transient, state: "2122988149", code: "ERROR_NO_SLOT_AVAILABLE"}.
		check(t, "poll, transient", resubmit.Handle(t.Context(), jobRequest("", "", "2122988149")))

	for _, tt := range []struct {
		name string
		h    *Handler
		cb   processor.Callback
		want expect
	}{
		{"result, resubmit", resubmit, processor.Callback{JobID: "9", Result: []byte(unsolvable)},
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"error field, resubmit", resubmit, processor.Callback{JobID: "9", Error: unsolvable},
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"result", pollAgain, processor.Callback{JobID: "9", Result: []byte(unsolvable)},
			expect{kind: processor.Transient, code: unsolvable, minDelay: 2 * time.Second, requestFault: true}},
		{"redrive's own code", pollAgain, processor.Callback{JobID: "9", Error: "http_422"},
			expect{kind: processor.Transient, code: "http_422", requestFault: true}},
		{"a transient code", resubmit, processor.Callback{JobID: "9", Result: []byte("ERROR_NO_SLOT_AVAILABLE")},
			expect{kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE"}},
		{"an unlisted error", resubmit, processor.Callback{JobID: "9", Error: "ERROR_SOMETHING"},
			expect{kind: processor.Transient, code: "ERROR_SOMETHING"}},
	} {
		tt.want.check(t, "callback "+tt.name, tt.h.CallbackOutcome(tt.cb))
	}
}

// A request_fault code is in one class only, pause included; a resubmit
// code may be one (it is transient).
func TestRequestFaultCodesHaveOneClass(t *testing.T) {
	type at struct {
		field string
		index int
		key   string
	}
	for _, tt := range []struct {
		name  string
		codes Codes
		at    at
		msg   string
	}{
		{"transient too", Codes{Transient: []string{"A"}, RequestFault: []string{"B", "A"}}, at{"Codes.RequestFault", 1, ""}, `"A" is in transient too; a code has one class`},
		{"permanent too", Codes{RequestFault: []string{"A"}, Permanent: []string{"A"}}, at{"Codes.Permanent", 0, ""}, `"A" is in request_fault too`},
		{"not ready too", Codes{RequestFault: []string{"A"}, NotReady: []string{"A"}}, at{"Codes.NotReady", 0, ""}, `"A" is in request_fault too`},
		{"pause too", Codes{RequestFault: []string{"A"}, Pause: map[string]time.Duration{"A": time.Minute}}, at{"Codes.Pause", -1, "A"}, `"A" is in request_fault too`},
		{"empty", Codes{RequestFault: []string{""}}, at{"Codes.RequestFault", 0, ""}, "empty code"},
	} {
		err := tt.codes.Validate()
		var fe *processor.FieldError
		if !errors.As(err, &fe) || (at{fe.Field, fe.Index, fe.Key}) != tt.at || !strings.Contains(fe.Msg, tt.msg) {
			t.Errorf("%s: %v, want %+v: %s", tt.name, err, tt.at, tt.msg)
		}
	}
	if err := (Codes{RequestFault: []string{"A", "A"}}).Validate(); err != nil {
		t.Errorf("a code twice in its own class: %v", err)
	}
	o := captchaAIOptions()
	o.Codes.Permanent = nil
	o.Codes.RequestFault = []string{"ERROR_CAPTCHA_UNSOLVABLE"}
	o.Poll.Resubmit = []string{"ERROR_CAPTCHA_UNSOLVABLE"}
	if _, err := New(o); err != nil {
		t.Errorf("a resubmit code in request_fault: %v", err)
	}
}
