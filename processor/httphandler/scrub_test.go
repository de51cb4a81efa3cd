package httphandler

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/redact"
	"github.com/redrive/redrive/processor"
)

// Secrets of the hostile-service tests, each configured where a user puts
// one. botToken is in the URL's path, under no name at all: the segment
// bot<token> shows as xxxxx.
const (
	botToken   = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
	userPW     = "pw-SECRET-u1"
	queryKey   = "qry-SECRET-abc"
	headerKey  = "hdr-SECRET-789"
	bearer     = "tok-SECRET-456"
	fieldKey   = "sp ce/+&=SECRET-f" // needs escaping everywhere
	formKey    = "form-SECRET-k"
	pollKey    = "poll-SECRET-q"
	bodyKey    = "pbody-SECRET-b"
	envSecret  = "env-SECRET-000" // Options.Secrets: sent under a name that says nothing
	cookieSess = "sess-SECRET-c9"
)

var hostileSecrets = []string{botToken, userPW, queryKey, headerKey, bearer, fieldKey, formKey, pollKey, bodyKey, envSecret, cookieSess,
	base64.StdEncoding.EncodeToString([]byte("user:" + userPW))}

// echo is everything r carried, in the forms services echo it: as text
// (request line, header lines, body), as JSON, and HTML-escaped.
func echo(r *http.Request) string {
	body, _ := io.ReadAll(r.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "you sent %s %s\n", r.Method, r.URL.RequestURI())
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range r.Header {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
	}
	fmt.Fprintf(&b, "body: %s\n", body)
	j, _ := json.Marshal(map[string]any{"url": r.URL.String(), "headers": r.Header, "body": string(body), "query": r.URL.Query()})
	fmt.Fprintf(&b, "json: %s\n", j)
	fmt.Fprintf(&b, "html: <pre>%s</pre>\n", html.EscapeString(r.URL.RequestURI()))
	return b.String()
}

// hostile is a service on 127.0.0.1 that echoes the whole request: in a
// 400, in a 200 whose JSON says not ok with the echo as the code, as a
// submit answer without a job id, and as a poll answer (a 500, and a 200
// whose status is the echo).
func hostile(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := echo(r)
		j, _ := json.Marshal(e)
		switch path := r.URL.Path; {
		case strings.HasSuffix(path, "/echo400"):
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, e)
		case strings.HasSuffix(path, "/echo200"):
			fmt.Fprintf(w, `{"status":0,"request":%s}`, j)
		case strings.HasSuffix(path, "/in"):
			if r.Header.Get(HeaderKey) == "nojob" {
				fmt.Fprintf(w, `{"status":1,"note":%s}`, j)
				return
			}
			io.WriteString(w, `{"status":1,"request":"J1"}`)
		case strings.HasSuffix(path, "/res"):
			if r.Header.Get(HeaderKey) == "poll500" {
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, e)
				return
			}
			fmt.Fprintf(w, `{"status":%s}`, j)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hostileOptions configures every kind of secret against base; path is
// the submit path after the bot token.
func hostileOptions(base, path string) Options {
	u := strings.Replace(base, "http://", "http://user:"+userPW+"@", 1)
	return Options{
		URL: u + "/bot" + botToken + path + "?json=1&key=" + queryKey,
		Headers: map[string]string{
			"X-Api-Key":     headerKey,
			"Authorization": "Bearer " + bearer,
			"Cookie":        "lang=en; session=" + cookieSess,
			"X-Tenant":      envSecret,
			"Accept":        "application/json",
		},
		Query:   map[string]string{"api_key": fieldKey, "json": "1"},
		Form:    map[string]string{"key": formKey, "method": "post"},
		Secrets: []string{envSecret},
	}
}

// shows reports which configured secret text shows, in any form a
// service could write it (as is, escaped, in any case).
func shows(text string) string {
	low := strings.ToLower(text)
	for _, s := range hostileSecrets {
		js, _ := json.Marshal(s)
		for _, f := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.Trim(string(js), `"`), html.EscapeString(s)} {
			if strings.Contains(low, strings.ToLower(f)) {
				return f
			}
		}
	}
	return ""
}

// noSecret fails t when out's error, code or the fields of its
// ResponseError or CallbackError show a configured secret.
func noSecret(t *testing.T, what string, out processor.Outcome) {
	t.Helper()
	if out.Err == nil {
		t.Fatalf("%s: no error (outcome %+v)", what, out)
	}
	texts := map[string]string{"Err.Error()": out.Err.Error(), "Code": out.Code}
	var re *ResponseError
	if errors.As(out.Err, &re) {
		texts["ResponseError.URL"], texts["ResponseError.Detail"], texts["ResponseError.Body"], texts["ResponseError.Code"] = re.URL, re.Detail, re.Body, re.Code
	}
	var ce *CallbackError
	if errors.As(out.Err, &ce) {
		texts["CallbackError.Text"], texts["CallbackError.JobID"], texts["CallbackError.Code"] = ce.Text, ce.JobID, ce.Code
	}
	for k, v := range texts {
		if f := shows(v); f != "" {
			t.Errorf("%s: %s shows the secret %q:\n%s", what, k, f, v)
		}
	}
}

func formRecord(value string) *processor.Request {
	return &processor.Request{ID: "id-1", Attempt: 1, Record: &kgo.Record{Value: []byte(value),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte(formType)}}}}
}

// A service that echoes the request puts every configured secret in its
// answer; none of them reaches the outcome's error or code, while the
// error still says what happened.
func TestEchoedSecretsNeverShow(t *testing.T) {
	srv := hostile(t)
	host := strings.TrimPrefix(srv.URL, "http://")

	h400, err := New(hostileOptions(srv.URL, "/echo400"))
	if err != nil {
		t.Fatal(err)
	}
	out := h400.Handle(context.Background(), formRecord("q=1&token="+queryKey))
	noSecret(t, "400", out)
	var re *ResponseError
	if !errors.As(out.Err, &re) || re.StatusCode != http.StatusBadRequest || out.Kind != processor.Permanent {
		t.Fatalf("400: outcome %v %q, error %T, want a permanent *ResponseError", out.Kind, out.Code, out.Err)
	}
	msg := out.Err.Error()
	if want := "POST http://" + host + "/xxxxx/echo400: 400 Bad Request: you sent POST /xxxxx/echo400?json=1&key=xxxxx"; !strings.HasPrefix(msg, want) {
		t.Errorf("400: error\n  %s\nwant it to start\n  %s", msg, want)
	}

	jsonOpts := hostileOptions(srv.URL, "/echo200")
	jsonOpts.JSON = &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"}
	h200, err := New(jsonOpts)
	if err != nil {
		t.Fatal(err)
	}
	out = h200.Handle(context.Background(), formRecord("q=1"))
	noSecret(t, "200 not ok", out)
	if out.Kind != processor.Transient || !errors.Is(out.Err, ErrNotOK) || !strings.HasPrefix(out.Code, "you sent POST /xxxxx/echo200?json=1&key=xxxxx") {
		t.Errorf("200 not ok: outcome %v, code %q, error %v; want transient, ErrNotOK, the echo as the code", out.Kind, out.Code, out.Err)
	}

	pollOpts := hostileOptions(srv.URL, "/in")
	pollOpts.Poll = &Poll{URL: srv.URL + "/bot" + botToken + "/res?key=" + pollKey + "&id={state}", Method: "POST",
		Body: "key=" + bodyKey + "&id={state}", StateField: "request",
		Status: &StatusTable{Field: "status", Done: []string{"ready"}}}
	hp, err := New(pollOpts)
	if err != nil {
		t.Fatal(err)
	}
	req := formRecord("q=1")
	req.Record.Key = []byte("nojob")
	out = hp.Handle(context.Background(), req)
	noSecret(t, "submit without a job id", out)
	if out.Code != CodeNoJobID {
		t.Errorf("submit without a job id: code %q, want %s", out.Code, CodeNoJobID)
	}
	for _, key := range []string{"poll500", "status"} {
		req := formRecord("q=1")
		req.State, req.Record.Key = []byte("J1"), []byte(key)
		out := hp.Handle(context.Background(), req)
		noSecret(t, "poll "+key, out)
		if string(out.State) != "J1" || !strings.HasPrefix(out.Err.Error(), "POST http://"+host+"/xxxxx/res: ") {
			t.Errorf("poll %s: state %q, error %q; want the job id kept and the URL named", key, out.State, out.Err)
		}
	}

	// A callback quoting the key, as is and escaped.
	for _, e := range []string{
		"ERROR_WRONG_USER_KEY " + queryKey,
		"key " + strings.ToUpper(headerKey) + " is not valid; you sent " + url.QueryEscape(fieldKey),
		`{"error":"bad key","sent":"` + bearer + `"}`,
	} {
		out := hp.CallbackOutcome(processor.Callback{JobID: "J1", Error: e})
		noSecret(t, "callback", out)
		var ce *CallbackError
		if !errors.As(out.Err, &ce) || !errors.Is(out.Err, ErrCallback) {
			t.Errorf("callback: error %T %v, want a *CallbackError wrapping ErrCallback", out.Err, out.Err)
		}
	}
}

// A transport error can quote the answer (a malformed status line): it is
// scrubbed too.
func TestTransportErrorScrubbed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				io.WriteString(c, "HTTP/1.1 "+queryKey+" "+headerKey+"\r\n\r\n")
			}()
		}
	}()
	h, err := New(hostileOptions("http://"+ln.Addr().String(), "/x"))
	if err != nil {
		t.Fatal(err)
	}
	out := h.Handle(context.Background(), formRecord("q=1"))
	noSecret(t, "malformed answer", out)
	if out.Code != CodeNetwork || !strings.Contains(out.Err.Error(), "malformed HTTP status code") {
		t.Errorf("malformed answer: code %q, error %v; want %s naming the malformed status", out.Code, out.Err, CodeNetwork)
	}
}

// A secret in the URL's path is masked wherever the URL is named: under
// no name when it looks like a credential, and whatever it looks like
// when it is one of Options.Secrets (a ${KEY} in the path). A job id in
// the poll URL's path is shown as it is, however random it looks.
func TestPathSecretsMasked(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{URL: "http://127.0.0.1:1/bot" + botToken + "/send"}, "POST http://127.0.0.1:1/xxxxx/send: cannot connect: "},
		{Options{URL: "http://127.0.0.1:1/v1/onlyletterskey/res", Secrets: []string{"onlyletterskey"}}, "POST http://127.0.0.1:1/v1/xxxxx/res: cannot connect: "},
		{Options{URL: "http://127.0.0.1:1/v1/createTask"}, "POST http://127.0.0.1:1/v1/createTask: cannot connect: "},
		{Options{URL: "http://127.0.0.1:1/solve/recaptchaV2Enterprise"}, "POST http://127.0.0.1:1/solve/recaptchaV2Enterprise: cannot connect: "},
		{Options{URL: "http://127.0.0.1:1/k/" + queryKey + "/x?key=" + queryKey}, "POST http://127.0.0.1:1/k/xxxxx/x: cannot connect: "},
	} {
		h, err := New(c.opts)
		if err != nil {
			t.Fatal(err)
		}
		out := h.Handle(context.Background(), formRecord("q=1"))
		if msg := out.Err.Error(); !strings.HasPrefix(msg, c.want) || strings.Contains(msg, botToken) || strings.Contains(msg, "onlyletterskey") {
			t.Errorf("%s: error %q, want it to start %q", c.opts.URL, msg, c.want)
		}
	}
	h, err := New(Options{URL: "http://127.0.0.1:1/in", Poll: &Poll{URL: "http://127.0.0.1:1/bot" + botToken + "/res/{state}", StateField: "request"}})
	if err != nil {
		t.Fatal(err)
	}
	const job = "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f"
	out := h.Handle(context.Background(), &processor.Request{ID: "id", Attempt: 1, State: []byte(job)})
	if want := "GET http://127.0.0.1:1/xxxxx/res/" + job + ": cannot connect: "; !strings.HasPrefix(out.Err.Error(), want) {
		t.Errorf("poll: error %q, want it to start %q", out.Err, want)
	}
}

// A job id that would make a path segment "." or ".." is never sent: the
// server would resolve /p/jpath/.. to /p/, another resource, the API key
// with it. Dots elsewhere (the query, a longer segment) are sent.
func TestDotJobIDNotSent(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"status":"ready"}`)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		tpl, job string
		refused  bool
	}{
		{"/p/jpath/{state}?key=" + pollKey, "..", true},
		{"/p/jpath/{state}?key=" + pollKey, ".", true},
		{"/p/{state}/x", "..", true},
		{"/p/%2e{state}", ".", true}, // %2e. is .. to the server
		{"/p/jpath/{state}", "...", false},
		{"/p/jpath/{state}", "%2e%2e", false}, // sent as %252e%252e
		{"/p/jpath/{state}", "../x", false},   // sent as ..%2Fx: one segment
		{"/p/job-{state}", "..", false},
		{"/p/res?id={state}", "..", false},
	} {
		h, err := New(Options{URL: srv.URL + "/in", Poll: &Poll{URL: srv.URL + c.tpl, StateField: "request",
			Status: &StatusTable{Field: "status", Done: []string{"ready"}}}})
		if err != nil {
			t.Fatal(err)
		}
		before := hits.Load()
		out := h.Handle(context.Background(), &processor.Request{ID: "id", Attempt: 1, State: []byte(c.job)})
		sent := hits.Load() > before
		if !c.refused {
			if !sent || out.Kind != processor.Success {
				t.Errorf("%s with %q: sent %v, outcome %v %v; want it sent", c.tpl, c.job, sent, out.Kind, out.Err)
			}
			continue
		}
		if sent || out.Kind != processor.Invalid || out.Code != processor.CodeBadState {
			t.Errorf("%s with %q: sent %v, outcome %v %q; want it not sent, invalid, %s", c.tpl, c.job, sent, out.Kind, out.Code, processor.CodeBadState)
			continue
		}
		msg := out.Err.Error()
		if !strings.Contains(msg, srv.URL+strings.Split(c.tpl, "?")[0]) || strings.Contains(msg, pollKey) {
			t.Errorf("%s with %q: error %q; want it to name the template without its query", c.tpl, c.job, msg)
		}
	}
}

func TestSecretFloor(t *testing.T) {
	s := newScrubber(Options{Headers: map[string]string{"X-Api-Key": "abc"}, Secrets: []string{"abcd", "xxxx", "XXX"}})
	for in, want := range map[string]string{
		"abc of abcde":  "abc of xxxxxe",
		"ABCD and AbCd": "xxxxx and xxxxx",
		"a xxxx b":      "a xxxx b",
		"ends in ab":    "ends in ab",
		"ends in zabc":  "ends in zabc", // the start of abcd, but shorter than the floor
	} {
		if got := s.text(in); got != want {
			t.Errorf("text(%q) = %q, want %q", in, got, want)
		}
	}
	// A cut that left the start of a secret at the end.
	s = newScrubber(Options{Secrets: []string{"0123456789abcdef"}})
	if got := s.text("key is 0123456"); got != "key is xxxxx" {
		t.Errorf("the start of a secret at the end: %q, want it masked", got)
	}
	if got := s.snippet([]byte(strings.Repeat("a", bodySnippet-5)+"0123456789abcdef tail"), bodySnippet); strings.Contains(got, "01234") {
		t.Errorf("a secret across the snippet's end shows its start: %q", got)
	}
}

// The scrubber never returns a text showing a configured secret, in any
// of its forms and any ASCII case, whatever surrounds it, and never panics.
func FuzzScrub(f *testing.F) {
	for _, c := range [][3]string{
		{queryKey, "you sent /s/jquery?json=1&key=", " x-api-key=" + headerKey},
		{fieldKey, `{"sent":"`, `"}`},
		{"xxxxxy", "xxxxx", "y"},
		{"aaaa", "aaaaaaaa", "aaa"},
		{"\xff\xfe secret \x00", "\x00", "\xff"},
		{"ab_cd", "code ab\xffcd", ""},
		{"Bearer abc", "Authorization: ", ""},
	} {
		f.Add(c[0], c[1], c[2], 50)
	}
	f.Fuzz(func(t *testing.T, secret, before, after string, n int) {
		s := newScrubber(Options{Secrets: []string{secret}, Headers: map[string]string{"X-Api-Key": secret}})
		v := strings.TrimSpace(strings.ToValidUTF8(secret, "\uFFFD"))
		low := lowerASCII(v)
		check := func(what, got string) {
			if len(v) >= secretFloor && !strings.Contains(redact.Mask, low) && strings.Contains(lowerASCII(got), low) {
				t.Fatalf("%s shows the secret %q: %q", what, v, got)
			}
		}
		js, _ := json.Marshal(v)
		for _, form := range []string{secret, v, strings.ToUpper(v), url.QueryEscape(v), url.PathEscape(v), string(js)} {
			in := before + form + after
			check("text", s.text(in))
			check("code", s.code(in))
			check("snippet", s.snippet([]byte(in), max(0, n%2048)))
			check("describe", s.describe(in))
			if e := s.err(errors.New(in)); e != nil {
				check("err", e.Error())
			}
		}
	})
}

// TestScrubKeepsCause: a scrubbed error still unwraps to its cause.
func TestScrubKeepsCause(t *testing.T) {
	s := newScrubber(Options{Secrets: []string{queryKey}})
	cause := &net.OpError{Op: "dial", Err: errors.New("refused")}
	e := s.err(fmt.Errorf("sent key=%s: %w", queryKey, cause))
	var op *net.OpError
	if !errors.As(e, &op) || strings.Contains(e.Error(), queryKey) {
		t.Errorf("err: %v (as *net.OpError: %v), want the key masked and the cause kept", e, errors.As(e, &op))
	}
	if e := s.err(context.DeadlineExceeded); e != context.DeadlineExceeded {
		t.Errorf("err of an error without secrets = %v, want it as it was", e)
	}
}

// Option errors quote the URL: a token in its path is masked there too.
func TestValidateMasksPathSecrets(t *testing.T) {
	err := Options{URL: "ftp://127.0.0.1/bot" + botToken + "/send", Timeout: time.Second, MaxBodyBytes: 1,
		Poll:    &Poll{URL: "http://127.0.0.1/v1/" + envSecret + "/res/{State}", StateField: "request", Method: "GET", FirstAfter: time.Second, Every: time.Second},
		Secrets: []string{envSecret}}.Validate()
	if err == nil || strings.Contains(err.Error(), botToken) || strings.Contains(err.Error(), envSecret) ||
		!strings.Contains(err.Error(), `"ftp://127.0.0.1/xxxxx/send": want an absolute http:// or https:// URL`) ||
		!strings.Contains(err.Error(), `"http://127.0.0.1/v1/xxxxx/res/%7BState%7D": unknown {State}`) {
		t.Errorf("Validate: %v; want both URLs named with their secrets masked", err)
	}
}
