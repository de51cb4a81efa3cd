package httphandler

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redrive/redrive/processor"
)

func TestCleanCode(t *testing.T) {
	cases := map[string]string{
		"":                                  "",
		"   ":                               "",
		" ERROR_X ":                         "ERROR_X",
		"a\x00b":                            "a_b",
		"bad\xffutf8":                       "bad_utf8",
		strings.Repeat("é", 40):             strings.Repeat("é", 32),
		strings.Repeat("x", 100):            strings.Repeat("x", 64),
		"x" + strings.Repeat(" ", 70) + "y": "x",
	}
	for in, want := range cases {
		if got := cleanCode(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// parseHeader reads "Name: value" lines, the way a fuzzer can write them.
func parseHeader(s string) http.Header {
	h := http.Header{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			h.Add(k, strings.TrimLeft(v, " "))
		}
	}
	return h
}

func FuzzClassify(f *testing.F) {
	seeds := []struct {
		status int
		header string
		body   string
	}{
		{200, "", `{"status":1,"request":"answer"}`},
		{200, "", `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`},
		{200, "", `{"status":0,"request":"CAPCHA_NOT_READY"}`},
		{200, "", `{"status":0,"request":{"deep":[1,2,3]}}`},
		{200, "", `{"status":1e999999999}`},
		{200, "", `{"status":0,"request":"` + strings.Repeat("\xff", 300) + `"}`},
		{202, "Redrive-State: task-1\nRetry-After: 5", ""},
		{202, "Retry-After: Sun, 01 Mar 2026 12:01:30 GMT", ""},
		{503, "Redrive-Error-Code: ERROR_NO_SLOT_AVAILABLE\nRetry-After: 30", "busy"},
		{429, "Retry-After: -1", ""},
		{400, "Redrive-Error-Code: ERROR_WRONG_USER_KEY", "\x00\x01\x02"},
		{302, "Location: /x", ""},
		{101, "", ""},
		{0, "", ""},
		{-1, "Redrive-Error-Code: \xff\xfe", "\xff"},
		{1000, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.status, s.header, []byte(s.body), false, true, []byte("prev"))
	}
	rules := Codes{
		Transient: []string{"ERROR_NO_SLOT_AVAILABLE"},
		NotReady:  []string{"CAPCHA_NOT_READY"},
		Permanent: []string{"ERROR_WRONG_USER_KEY", "http_418"},
		MinDelay:  map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": 5 * time.Second, "http_503": 48 * time.Hour},
	}
	plain, err := New(Options{URL: "http://127.0.0.1:1/solve?key=secret", Codes: rules, MaxBodyBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	withJSON, err := New(Options{URL: "http://127.0.0.1:1/solve", Codes: rules, MaxBodyBytes: 4096,
		JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"}})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, header string, body []byte, tooLarge, jsonMode bool, sent []byte) {
		h := plain
		if jsonMode {
			h = withJSON
		}
		out := h.classify(status, parseHeader(header), body, tooLarge, sent, now)
		switch out.Kind {
		case processor.Success:
			if out.Err != nil || out.Code != "" || !bytes.Equal(out.Result, body) {
				t.Fatalf("success %+v", out)
			}
			if status < 200 || status > 299 || status == 202 || tooLarge {
				t.Fatalf("success from status %d (too large %v)", status, tooLarge)
			}
			return
		case processor.Transient, processor.NotReady, processor.Permanent:
		default:
			t.Fatalf("kind %v", out.Kind)
		}
		if out.Code == "" || len(out.Code) > maxCodeBytes || !utf8.ValidString(out.Code) {
			t.Fatalf("code %q", out.Code)
		}
		if out.Err == nil {
			t.Fatal("failure without an error")
		}
		msg := out.Err.Error()
		if len(msg) > maxErrorBytes || !utf8.ValidString(msg) || strings.Contains(msg, "secret") {
			t.Fatalf("message %q", msg)
		}
		if out.MinDelay < 0 || out.MinDelay > 48*time.Hour {
			t.Fatalf("min delay %s", out.MinDelay)
		}
		if out.Kind != processor.NotReady && out.State != nil {
			t.Fatalf("state %q on %s", out.State, out.Kind)
		}
	})
}
