package httphandler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// captchaAIOptions are a CaptchaAI job API's options (the server is never
// called by CallbackOutcome).
func captchaAIOptions() Options {
	return Options{
		URL:  "http://127.0.0.1:1/in.php",
		JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &Poll{URL: "http://127.0.0.1:1/res.php?id={state}", StateField: "request", ResultField: "request", Every: 7 * time.Second},
		Codes: Codes{
			NotReady:  []string{"CAPCHA_NOT_READY"},
			Transient: []string{"ERROR_NO_SLOT_AVAILABLE"},
			Permanent: []string{"ERROR_CAPTCHA_UNSOLVABLE"},
			MinDelay:  map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": 3 * time.Second, "CAPCHA_NOT_READY": 30 * time.Second},
			Pause:     map[string]time.Duration{"ERROR_ZERO_BALANCE": time.Minute},
		},
	}
}

func TestCallbackOutcome(t *testing.T) {
	h := mustNew(t, captchaAIOptions())
	for _, tt := range []struct {
		name string
		cb   processor.Callback
		want expect
	}{
		{"token", processor.Callback{JobID: "2122988149", Result: []byte("03AGdBq25SxXT")}, expect{kind: processor.Success, result: "03AGdBq25SxXT"}},
		{"token kept as is", processor.Callback{JobID: "1", Result: []byte(" a b \n")}, expect{kind: processor.Success, result: " a b \n"}},
		{"empty result", processor.Callback{JobID: "1"}, expect{kind: processor.Success, result: ""}},
		{"result is a permanent code", processor.Callback{JobID: "2122988149", Result: []byte("ERROR_CAPTCHA_UNSOLVABLE")},
			expect{kind: processor.Permanent, code: "ERROR_CAPTCHA_UNSOLVABLE", err: "callback for job 2122988149: ERROR_CAPTCHA_UNSOLVABLE"}},
		{"result is a pause code", processor.Callback{JobID: "9", Result: []byte(" ERROR_ZERO_BALANCE\n")},
			expect{kind: processor.Paused, code: "ERROR_ZERO_BALANCE", minDelay: time.Minute}},
		{"result is a not-ready code", processor.Callback{JobID: "9", Result: []byte("CAPCHA_NOT_READY")},
			expect{kind: processor.NotReady, state: "9", code: "CAPCHA_NOT_READY", minDelay: 30 * time.Second}},
		{"result is a transient code", processor.Callback{JobID: "9", Result: []byte("ERROR_NO_SLOT_AVAILABLE")},
			expect{kind: processor.Transient, code: "ERROR_NO_SLOT_AVAILABLE", minDelay: 3 * time.Second}},
		{"a code in another case is a result", processor.Callback{JobID: "9", Result: []byte("error_captcha_unsolvable")},
			expect{kind: processor.Success, result: "error_captcha_unsolvable"}},
		{"error field, unknown", processor.Callback{JobID: "9", Result: []byte("x"), Error: "ERROR_SOMETHING"},
			expect{kind: processor.Transient, code: "ERROR_SOMETHING", err: "callback for job 9: ERROR_SOMETHING"}},
		{"error field, permanent", processor.Callback{JobID: "9", Error: "ERROR_CAPTCHA_UNSOLVABLE"},
			expect{kind: processor.Permanent, code: "ERROR_CAPTCHA_UNSOLVABLE"}},
		{"error field, not ready", processor.Callback{JobID: "9", Error: "CAPCHA_NOT_READY"},
			expect{kind: processor.NotReady, state: "9", code: "CAPCHA_NOT_READY", minDelay: 30 * time.Second}},
		{"error field, pause", processor.Callback{JobID: "9", Error: "ERROR_ZERO_BALANCE"},
			expect{kind: processor.Paused, code: "ERROR_ZERO_BALANCE", minDelay: time.Minute}},
		{"error field of blanks", processor.Callback{JobID: "9", Error: " \t "},
			expect{kind: processor.Transient, code: CodeCallbackError}},
	} {
		out := h.CallbackOutcome(tt.cb)
		tt.want.check(t, tt.name, out)
		if out.Kind != processor.Success && !errors.Is(out.Err, ErrCallback) {
			t.Errorf("%s: %#v is not ErrCallback", tt.name, out.Err)
		}
	}
	// Without poll, a not-ready callback is polled after its min_delay (0: the first tier).
	o := captchaAIOptions()
	o.Poll = nil
	delete(o.Codes.MinDelay, "CAPCHA_NOT_READY")
	out := mustNew(t, o).CallbackOutcome(processor.Callback{JobID: "5", Error: "CAPCHA_NOT_READY"})
	expect{kind: processor.NotReady, state: "5", code: "CAPCHA_NOT_READY"}.check(t, "no poll", out)
	// A long error is cut, the message bounded.
	out = h.CallbackOutcome(processor.Callback{JobID: strings.Repeat("j", 4000), Error: strings.Repeat("e", 5000)})
	if len(out.Code) != maxCodeBytes || len(out.Err.Error()) > maxErrorBytes {
		t.Errorf("long: code %d bytes, error %d bytes", len(out.Code), len(out.Err.Error()))
	}
}

// Whatever a callback holds, CallbackOutcome does not panic, an error is
// never a success, and neither is a result that is a configured code.
func FuzzCallbackOutcome(f *testing.F) {
	f.Add("2122988149", []byte("03AGdBq25SxXT"), "")
	f.Add("1", []byte("ERROR_CAPTCHA_UNSOLVABLE"), "")
	f.Add("1", []byte(" ERROR_ZERO_BALANCE "), "")
	f.Add("1", []byte(nil), "ERROR_X")
	f.Add("\xff", []byte("\x00"), "\n")
	f.Add("", []byte("CAPCHA_NOT_READY"), "CAPCHA_NOT_READY")
	h, err := New(captchaAIOptions())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, job string, result []byte, cbErr string) {
		out := h.CallbackOutcome(processor.Callback{JobID: job, Result: result, Error: cbErr})
		code := h.isCode(strings.TrimSpace(string(result)))
		switch {
		case out.Kind == processor.Success && (cbErr != "" || code):
			t.Fatalf("error %q / result %q became a success", cbErr, result)
		case out.Kind == processor.Success:
			if string(out.Result) != string(result) {
				t.Fatalf("result %q, want %q as it came", out.Result, result)
			}
		case out.Code == "" || out.Err == nil || len(out.Err.Error()) > maxErrorBytes || len(out.Code) > maxCodeBytes:
			t.Fatalf("failure without a code or error, or too long: %+v", out)
		case out.Kind == processor.NotReady && string(out.State) != job:
			t.Fatalf("not ready with state %q, want the job id %q", out.State, job)
		}
	})
}
