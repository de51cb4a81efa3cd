package httphandler

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// twoCaptcha is the JSON mode of a 2captcha-style service.
var twoCaptcha = Options{
	JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
	Codes: Codes{
		Transient: []string{"ERROR_NO_SLOT_AVAILABLE"},
		NotReady:  []string{"CAPCHA_NOT_READY"},
		Permanent: []string{"ERROR_WRONG_USER_KEY"},
		MinDelay:  map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": 5 * time.Second},
	},
}

func TestJSONMode(t *testing.T) {
	cases := []struct {
		name     string
		opts     Options
		status   int
		header   map[string]string
		body     string
		kind     processor.Kind
		code     string
		minDelay time.Duration
		cause    error
	}{
		{name: "answer", opts: twoCaptcha, status: 200, body: `{"status":1,"request":"answer"}`, kind: processor.Success},
		{name: "no slot", opts: twoCaptcha, status: 200, body: `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`,
			kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE", minDelay: 5 * time.Second, cause: ErrNotOK},
		{name: "not ready", opts: twoCaptcha, status: 200, body: `{"status":0,"request":"CAPCHA_NOT_READY"}`,
			header: map[string]string{"Redrive-State": "t-9"}, kind: processor.NotReady, code: "CAPCHA_NOT_READY"},
		{name: "wrong key", opts: twoCaptcha, status: 200, body: `{"status":0,"request":"ERROR_WRONG_USER_KEY"}`,
			kind: processor.Permanent, code: "ERROR_WRONG_USER_KEY"},
		{name: "unlisted code is transient", opts: twoCaptcha, status: 200, body: `{"status":0,"request":"ERROR_ZERO_BALANCE"}`,
			kind: processor.Transient, code: "ERROR_ZERO_BALANCE"},
		{name: "header wins", opts: twoCaptcha, status: 200, body: `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`,
			header: map[string]string{"Redrive-Error-Code": "ERROR_WRONG_USER_KEY"}, kind: processor.Permanent, code: "ERROR_WRONG_USER_KEY"},
		{name: "no code", opts: twoCaptcha, status: 200, body: `{"status":0}`, kind: processor.Transient, code: CodeNotOK},
		{name: "numeric code", opts: twoCaptcha, status: 200, body: `{"status":0,"request":17}`, kind: processor.Transient, code: "17"},
		{name: "ok as float", opts: twoCaptcha, status: 200, body: `{"status":1.0,"request":"a"}`, kind: processor.Success},
		{name: "ok as string is not ok", opts: twoCaptcha, status: 200, body: `{"status":"1"}`, kind: processor.Transient, code: CodeNotOK},
		{name: "not json", opts: twoCaptcha, status: 200, body: `OK|answer`, kind: processor.Transient, code: CodeBadResponse, cause: ErrBadResponse},
		{name: "empty", opts: twoCaptcha, status: 200, body: ``, kind: processor.Transient, code: CodeBadResponse},
		{name: "trailing data", opts: twoCaptcha, status: 200, body: `{"status":1} {}`, kind: processor.Transient, code: CodeBadResponse},
		{name: "not an object", opts: twoCaptcha, status: 200, body: `[1]`, kind: processor.Transient, code: CodeNotOK},
		{name: "5xx code from the body", opts: twoCaptcha, status: 503, body: `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`,
			kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE", minDelay: 5 * time.Second},
		{name: "4xx code from the body, rule", opts: twoCaptcha, status: 403, body: `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`,
			kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE", minDelay: 5 * time.Second},
		{name: "5xx not json", opts: twoCaptcha, status: 502, body: `<html>bad gateway</html>`, kind: processor.Transient, code: "http_502"},
		{name: "202 code from the body", opts: twoCaptcha, status: 202, body: `{"status":0,"request":"CAPCHA_NOT_READY"}`,
			kind: processor.NotReady, code: "CAPCHA_NOT_READY"},
		{name: "nested bool", opts: Options{JSON: &JSONRule{OKField: "data.ok", OKValue: true, CodeField: "data.error.code"}},
			status: 200, body: `{"data":{"ok":false,"error":{"code":"E_RATE"}}}`, kind: processor.Transient, code: "E_RATE"},
		{name: "nested bool ok", opts: Options{JSON: &JSONRule{OKField: "data.ok", OKValue: true}},
			status: 200, body: `{"data":{"ok":true}}`, kind: processor.Success},
		{name: "string ok", opts: Options{JSON: &JSONRule{OKField: "result", OKValue: "success", CodeField: "errors.0"}},
			status: 200, body: `{"result":"error","errors":["BALANCE"]}`, kind: processor.Transient, code: "BALANCE"},
		{name: "json.Number ok value", opts: Options{JSON: &JSONRule{OKField: "s", OKValue: json.Number("2.5")}},
			status: 200, body: `{"s":2.50}`, kind: processor.Success},
		{name: "big int", opts: Options{JSON: &JSONRule{OKField: "s", OKValue: int64(1) << 62}},
			status: 200, body: `{"s":4611686018427387905}`, kind: processor.Transient, code: CodeNotOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := serve(t, c.opts, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			})
			out := h.Handle(context.Background(), request("v"))
			if out.Kind != c.kind || out.Code != c.code || out.MinDelay != c.minDelay {
				t.Fatalf("got %s %q %s (%v), want %s %q %s", out.Kind, out.Code, out.MinDelay, out.Err, c.kind, c.code, c.minDelay)
			}
			if c.kind == processor.Success && (string(out.Result) != c.body || out.Err != nil) {
				t.Fatalf("result %q, err %v", out.Result, out.Err)
			}
			if c.cause != nil && !errors.Is(out.Err, c.cause) {
				t.Fatalf("error %v is not %v", out.Err, c.cause)
			}
			if c.kind == processor.NotReady && c.header["Redrive-State"] != "" && string(out.State) != c.header["Redrive-State"] {
				t.Fatalf("state %q", out.State)
			}
		})
	}
}

func TestJSONNotOKMessage(t *testing.T) {
	h := serve(t, twoCaptcha, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`)
	})
	out := h.Handle(context.Background(), request("v"))
	want := "POST " + h.safeURL + `: 200 OK: status is 0, want 1: {"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`
	if out.Err.Error() != want {
		t.Fatalf("message\n %s\nwant\n %s", out.Err, want)
	}
}

// Without ok_field, an answer is ok when code_field is absent, null or
// empty (SMM panels: {"order":23501} or {"error":"..."}).
func TestJSONWithoutOKField(t *testing.T) {
	o := Options{JSON: &JSONRule{CodeField: "error"}, Codes: Codes{Pause: map[string]time.Duration{"Not enough funds on balance": time.Minute}}}
	for body, want := range map[string]struct {
		kind processor.Kind
		code string
	}{
		`{"order":23501}`:                         {processor.Success, ""},
		`{"order":1,"error":null}`:                {processor.Success, ""},
		`{"order":1,"error":""}`:                  {processor.Success, ""},
		`{"order":1,"error":"  "}`:                {processor.Success, ""},
		`[1,2]`:                                   {processor.Success, ""},
		`{"error":"Incorrect request"}`:           {processor.Transient, "Incorrect request"},
		`{"error":"Not enough funds on balance"}`: {processor.Paused, "Not enough funds on balance"},
		`{"error":{"message":"x"}}`:               {processor.Transient, CodeNotOK},
		`{"error":0}`:                             {processor.Transient, "0"},
		`{"error":false}`:                         {processor.Transient, "false"},
		`not json`:                                {processor.Transient, CodeBadResponse},
	} {
		h := serve(t, o, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
		out := h.Handle(context.Background(), request("x"))
		if out.Kind != want.kind || out.Code != want.code {
			t.Errorf("%s: %v %q (%v), want %v %q", body, out.Kind, out.Code, out.Err, want.kind, want.code)
		}
	}
}
