package intake

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redrive/redrive/processor"
)

var testFields = Fields{ID: "id", Result: "code", Error: "error", Token: "s3cr3t-t0ken"}

func TestParse(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	const js = "application/json"
	tests := []struct {
		name          string
		req           Request
		id, result    string
		cbErr         string
		err           error
		raw           string // "" not checked unless rawSet
		rawSet        bool
		query         string
		contentTypeIs string
	}{
		// CaptchaAI calls GET ?id=…&code=….
		{name: "GET captchaai", req: Request{Method: "GET", Query: "id=2122988149&code=03AGdBq2&token=s3cr3t-t0ken"},
			id: "2122988149", result: "03AGdBq2", raw: "id=2122988149&code=03AGdBq2", rawSet: true},
		{name: "GET escapes", req: Request{Method: "GET", Query: "id=a%2Fb&code=x+y%26z"}, id: "a/b", result: "x y&z"},
		{name: "GET first value", req: Request{Method: "GET", Query: "id=1&id=2&code=a&code=b"}, id: "1", result: "a"},
		{name: "GET error field", req: Request{Method: "GET", Query: "id=7&code=&error=ERROR_CAPTCHA_UNSOLVABLE"}, id: "7", result: "", cbErr: "ERROR_CAPTCHA_UNSOLVABLE"},
		{name: "GET no result", req: Request{Method: "GET", Query: "id=7"}, id: "7"},
		// 2captcha POSTs a form with id and code.
		{name: "POST form", req: Request{Method: "POST", ContentType: form, Body: []byte("id=55&code=abc%21"), Query: "token=s3cr3t-t0ken"},
			id: "55", result: "abc!", raw: "id=55&code=abc%21", rawSet: true, contentTypeIs: form},
		{name: "POST form charset", req: Request{Method: "POST", ContentType: form + "; charset=utf-8", Body: []byte("id=55&code=x")}, id: "55", result: "x"},
		{name: "POST body wins over query", req: Request{Method: "POST", ContentType: form, Query: "id=q&code=fromquery&other=1", Body: []byte("code=frombody&id=b")},
			id: "b", result: "frombody", query: "id=q&code=fromquery&other=1"},
		{name: "POST query only", req: Request{Method: "POST", Query: "id=9&code=z"}, id: "9", result: "z"},
		{name: "POST JSON", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"id": 23501, "code": "OK text", "error": null}`)}, id: "23501", result: "OK text"},
		{name: "POST JSON number as written", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"id":"a","code":1.50e3}`)}, id: "a", result: "1.50e3"},
		{name: "POST JSON object value", req: Request{Method: "POST", ContentType: "application/vnd.api+json", Body: []byte(`{"id":"a","code":{"x": [1, true]}}`)}, id: "a", result: `{"x": [1, true]}`},
		{name: "POST JSON sniffed", req: Request{Method: "POST", Body: []byte(` {"id":"s","code":"c"}`)}, id: "s", result: "c"},
		{name: "POST form sniffed", req: Request{Method: "POST", Body: []byte(`id=s&code=c`)}, id: "s", result: "c"},
		{name: "POST JSON first member", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"id":"1","id":"2"}`)}, id: "1"},
		{name: "POST JSON null id", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"id":null,"code":"c"}`)}, err: ErrNoID},
		{name: "POST JSON array", req: Request{Method: "POST", ContentType: js, Body: []byte(`[{"id":"1"}]`)}, err: ErrBadBody},
		{name: "POST JSON trailing", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"id":"1"} {}`)}, err: ErrBadBody},
		{name: "POST JSON broken", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"id":"1"`)}, err: ErrBadBody},
		{name: "POST bad form", req: Request{Method: "POST", ContentType: form, Body: []byte(`id=1&code=%zz`)}, err: ErrBadBody, raw: "id=1&code=%zz", rawSet: true},
		{name: "POST other type", req: Request{Method: "POST", ContentType: "text/plain", Body: []byte(`id=1`)}, err: ErrBadBody},
		{name: "POST bad content type", req: Request{Method: "POST", ContentType: "a/b; =", Body: []byte(`id=1`)}, err: ErrBadBody},
		{name: "POST empty body any type", req: Request{Method: "POST", ContentType: "text/plain", Query: "id=3"}, id: "3"},
		{name: "GET bad query", req: Request{Method: "GET", Query: "id=1&code=%"}, err: ErrBadBody},
		{name: "GET no id", req: Request{Method: "GET", Query: "code=abc&token=s3cr3t-t0ken"}, err: ErrNoID, raw: "code=abc", rawSet: true},
		{name: "GET empty id", req: Request{Method: "GET", Query: "id=&code=abc"}, err: ErrNoID},
		{name: "GET id too long", req: Request{Method: "GET", Query: "id=" + strings.Repeat("x", 4097)}, err: ErrNoID},
		{name: "GET id not UTF-8", req: Request{Method: "GET", Query: "id=%ff"}, err: ErrNoID},
		{name: "PUT", req: Request{Method: "PUT", Query: "id=1"}, err: ErrMethod},
		// The token's text goes wherever it appears, not just the parameter.
		{name: "token elsewhere", req: Request{Method: "GET", Query: "code=s3cr3t-t0ken&TOKEN=s3cr3t-t0ken"}, err: ErrNoID, raw: "code=[redacted]&TOKEN=[redacted]", rawSet: true},
		{name: "token in form body", req: Request{Method: "POST", ContentType: form, Body: []byte("token=s3cr3t-t0ken&code=1")}, err: ErrNoID, raw: "code=1", rawSet: true},
		{name: "token in JSON body", req: Request{Method: "POST", ContentType: js, Body: []byte(`{"token":"s3cr3t-t0ken"}`)}, err: ErrNoID, raw: `{"token":"[redacted]"}`, rawSet: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.req, testFields)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				if p.Callback.JobID != "" {
					t.Errorf("JobID %q with an error", p.Callback.JobID)
				}
			} else {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if p.Callback.JobID != tt.id || string(p.Callback.Result) != tt.result || p.Callback.Error != tt.cbErr {
					t.Errorf("got id %q result %q error %q, want %q %q %q", p.Callback.JobID, p.Callback.Result, p.Callback.Error, tt.id, tt.result, tt.cbErr)
				}
			}
			if tt.rawSet && string(p.Raw) != tt.raw {
				t.Errorf("Raw = %q, want %q", p.Raw, tt.raw)
			}
			if tt.query != "" && p.Query != tt.query {
				t.Errorf("Query = %q, want %q", p.Query, tt.query)
			}
			if tt.contentTypeIs != "" && p.ContentType != tt.contentTypeIs {
				t.Errorf("ContentType = %q, want %q", p.ContentType, tt.contentTypeIs)
			}
		})
	}
}

func TestCode(t *testing.T) {
	_, err := Parse(Request{Method: "GET", Query: "x=1"}, testFields)
	if Code(err) != CodeNoID {
		t.Errorf("Code(no id) = %q", Code(err))
	}
	_, err = Parse(Request{Method: "GET", Query: "%"}, testFields)
	if Code(err) != CodeBadBody {
		t.Errorf("Code(bad query) = %q", Code(err))
	}
	if Code(nil) != "" || Code(ErrMethod) != "" {
		t.Error("Code of nil or ErrMethod is not empty")
	}
}

func TestScrubText(t *testing.T) {
	for _, tc := range []struct{ s, tok, want string }{
		{"abc", "", "abc"},
		{"a-tok-b-tok", "tok", "a-[redacted]-b-[redacted]"},
		{"a%2Bb a+b", "a+b", "[redacted] [redacted]"},
		// A token inside "[redacted]" cannot be replaced by it: deleted.
		{"xdx", "d", "xx"},
		// A replacement that makes the token again: deleted until gone.
		{"d]xx", "d]x", "x"},
	} {
		if got := scrubText(tc.s, tc.tok); got != tc.want {
			t.Errorf("scrubText(%q, %q) = %q, want %q", tc.s, tc.tok, got, tc.want)
		}
	}
}

// FuzzParseCallback: whatever arrives, Parse does not panic, a callback it
// accepts has a job id processor.CheckJobID accepts, and the token's text
// is in nothing Parse returns for storing (Raw, Query, ContentType).
func FuzzParseCallback(f *testing.F) {
	f.Add("GET", "", "id=1&code=abc&token=tok", []byte(nil), "tok")
	f.Add("POST", "application/x-www-form-urlencoded", "token=tok", []byte("id=2&code=x%20y"), "tok")
	f.Add("POST", "application/json", "", []byte(`{"id":23501,"code":"a","error":"E"}`), "tok")
	f.Add("POST", "", "", []byte(`{"id":"`+strings.Repeat("9", 5000)+`"}`), "")
	f.Add("POST", "text/plain", "id=1", []byte("tok"), "tok")
	f.Add("GET", "", "id=%ff&code=d]xx", []byte(nil), "d]x")
	f.Add("DELETE", "", "id=1", []byte(nil), "t")
	f.Fuzz(func(t *testing.T, method, contentType, query string, body []byte, token string) {
		fields := Fields{ID: "id", Result: "code", Error: "error", Token: token, MaxResult: 64, MaxError: 32}
		p, err := Parse(Request{Method: method, ContentType: contentType, Query: query, Body: body}, fields)
		switch {
		case err == nil:
			if cerr := processor.CheckJobID(p.Callback.JobID); cerr != nil {
				t.Fatalf("accepted job id %q: %v", p.Callback.JobID, cerr)
			}
			if len(p.Callback.Result) > 64 || len(p.Callback.Error) > 32 {
				t.Fatalf("accepted a result of %d bytes and an error of %d, bounds 64 and 32", len(p.Callback.Result), len(p.Callback.Error))
			}
			if token != "" {
				for what, s := range map[string]string{"JobID": p.Callback.JobID, "Result": string(p.Callback.Result), "Error": p.Callback.Error} {
					if strings.Contains(s, token) {
						t.Fatalf("accepted %s %q holds the token %q", what, s, token)
					}
				}
			}
		case errors.Is(err, ErrTooLarge):
			if p.Callback.JobID != "" {
				t.Fatalf("job id %q with error %v", p.Callback.JobID, err)
			}
		case errors.Is(err, ErrMethod):
			if method == "GET" || method == "POST" {
				t.Fatalf("ErrMethod for %s", method)
			}
		case !errors.Is(err, ErrNoID) && !errors.Is(err, ErrBadBody):
			t.Fatalf("error %v is none of Parse's", err)
		default:
			if p.Callback.JobID != "" {
				t.Fatalf("job id %q with error %v", p.Callback.JobID, err)
			}
		}
		if token != "" {
			for what, s := range map[string]string{"Raw": string(p.Raw), "Query": p.Query, "ContentType": p.ContentType} {
				if strings.Contains(s, token) {
					t.Fatalf("%s %q holds the token %q", what, s, token)
				}
			}
		}
	})
}

// The same fields mean the same callback whether they come in a GET's
// query, a POST's form or a POST's JSON object: the same job id, result
// and error, or the same refusal. A service switching from pingback URLs
// to JSON posts must not see callbacks accepted one way and refused the
// other.
func FuzzBodyAndQueryAgree(f *testing.F) {
	f.Add("23501", "03AGdBq2", "")
	f.Add("", "x", "")
	f.Add(strings.Repeat("9", 5000), "x", "")
	f.Add("id with spaces & = ;", "a+b", "ERROR_ZERO_BALANCE")
	f.Add("1", strings.Repeat("r", 65), "")
	f.Add("\u00e9t\u00e9", "\"", "\x00")
	f.Fuzz(func(t *testing.T, id, result, errText string) {
		if !utf8.ValidString(id) || !utf8.ValidString(result) || !utf8.ValidString(errText) {
			t.Skip("JSON carries UTF-8 only; FuzzParseCallback covers other bytes")
		}
		fields := Fields{ID: "id", Result: "code", Error: "error", Token: "tok-secret", MaxResult: 64, MaxError: 32}
		form := url.Values{"id": {id}, "code": {result}, "error": {errText}}.Encode()
		js, err := json.Marshal(map[string]string{"id": id, "code": result, "error": errText})
		if err != nil {
			t.Fatal(err)
		}
		ways := []Request{
			{Method: "GET", Query: form},
			{Method: "POST", ContentType: "application/x-www-form-urlencoded", Body: []byte(form)},
			{Method: "POST", ContentType: "application/json", Body: js},
		}
		type got struct {
			id, result, errText string
			code                string
			tooLarge            bool
		}
		var first got
		for i, req := range ways {
			p, err := Parse(req, fields)
			g := got{code: Code(err), tooLarge: errors.Is(err, ErrTooLarge)}
			if err == nil {
				g.id, g.result, g.errText = p.Callback.JobID, string(p.Callback.Result), p.Callback.Error
			}
			if i == 0 {
				first = g
				continue
			}
			if g != first {
				t.Fatalf("%s %s gives %+v, the query gives %+v", req.Method, req.ContentType, g, first)
			}
		}
	})
}

// JSON is UTF-8: a body with other bytes is refused, never read with
// U+FFFD in their place (a job id that a query could not carry).
func TestJSONBodyMustBeUTF8(t *testing.T) {
	body := []byte("{\"id\":\"job-\xff\",\"code\":\"ok\"}")
	_, err := Parse(Request{Method: "POST", ContentType: "application/json", Body: body}, Fields{ID: "id", Result: "code"})
	if !errors.Is(err, ErrBadBody) {
		t.Fatalf("invalid UTF-8 in a JSON body: %v, want ErrBadBody", err)
	}
	_, err = Parse(Request{Method: "GET", Query: "id=job-%ff&code=ok"}, Fields{ID: "id", Result: "code"})
	if !errors.Is(err, ErrNoID) {
		t.Fatalf("the same id in a query: %v, want ErrNoID", err)
	}
}

// A result or an error over its bound is ErrTooLarge, whatever carries it.
func TestFieldBounds(t *testing.T) {
	fields := Fields{ID: "id", Result: "code", Error: "error", MaxResult: 10, MaxError: 5}
	for _, req := range []Request{
		{Method: "GET", Query: "id=1&code=" + strings.Repeat("r", 11)},
		{Method: "POST", ContentType: "application/json", Body: []byte(`{"id":"1","error":"` + strings.Repeat("e", 6) + `"}`)},
	} {
		if _, err := Parse(req, fields); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s %s: %v, want ErrTooLarge", req.Method, req.Query, err)
		}
	}
	p, err := Parse(Request{Method: "GET", Query: "id=1&code=" + strings.Repeat("r", 10) + "&error=eeeee"}, fields)
	if err != nil || len(p.Callback.Result) != 10 || p.Callback.Error != "eeeee" {
		t.Errorf("fields at their bounds: %+v %v", p.Callback, err)
	}
}
