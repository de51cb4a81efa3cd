package httphandler

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// serve starts a 127.0.0.1 server answering with f and a Handler for it.
func serve(t *testing.T, o Options, f http.HandlerFunc) *Handler {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	o.URL = srv.URL + "/solve"
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func request(value string) *processor.Request {
	return &processor.Request{Record: &kgo.Record{Value: []byte(value)}, ID: "id-1", Attempt: 1}
}

func TestStatusMapping(t *testing.T) {
	cases := []struct {
		status int
		kind   processor.Kind
		code   string
	}{
		{200, processor.Success, ""},
		{201, processor.Success, ""},
		{204, processor.Success, ""},
		{202, processor.NotReady, "http_202"},
		{301, processor.Transient, "http_301"},
		{302, processor.Transient, "http_302"},
		{304, processor.Transient, "http_304"},
		{400, processor.Permanent, "http_400"},
		{401, processor.Permanent, "http_401"},
		{404, processor.Permanent, "http_404"},
		{408, processor.Transient, "http_408"},
		{409, processor.Permanent, "http_409"},
		{422, processor.Permanent, "http_422"},
		{425, processor.Transient, "http_425"},
		{429, processor.Transient, "http_429"},
		{500, processor.Transient, "http_500"},
		{502, processor.Transient, "http_502"},
		{503, processor.Transient, "http_503"},
		{504, processor.Transient, "http_504"},
		{599, processor.Transient, "http_599"},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
				if c.status/100 == 3 {
					w.Header().Set("Location", "/elsewhere") // must not be followed
				}
				w.WriteHeader(c.status)
				if c.status != 204 && c.status != 304 {
					io.WriteString(w, "the body")
				}
			})
			out := h.Handle(context.Background(), request("v"))
			if out.Kind != c.kind || out.Code != c.code {
				t.Fatalf("got %s %q (%v), want %s %q", out.Kind, out.Code, out.Err, c.kind, c.code)
			}
			if c.kind == processor.Success {
				if out.Err != nil {
					t.Fatalf("success with error %v", out.Err)
				}
				if want := "the body"; c.status != 204 && string(out.Result) != want {
					t.Fatalf("result %q, want %q", out.Result, want)
				}
				return
			}
			var rerr *ResponseError
			if !errors.As(out.Err, &rerr) || rerr.StatusCode != c.status {
				t.Fatalf("error %#v", out.Err)
			}
			want := strings.TrimSpace("POST " + h.safeURL + ": " + strconv.Itoa(c.status) + " " + http.StatusText(c.status))
			if !strings.HasPrefix(out.Err.Error(), want) {
				t.Fatalf("error %q, want it to start with %q", out.Err, want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes: quoted up to 200, on a rune boundary
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		io.WriteString(w, "line one\nline two "+long)
	})
	out := h.Handle(context.Background(), request("v"))
	msg := out.Err.Error()
	want := "POST " + h.safeURL + ": 503 Service Unavailable: line one line two é"
	if !strings.HasPrefix(msg, want) {
		t.Fatalf("message %q, want prefix %q", msg, want)
	}
	if n := len(msg) - len("POST "+h.safeURL+": 503 Service Unavailable: "); n > bodySnippet {
		t.Fatalf("body quote of %d bytes", n)
	}
}

func TestURLSecretsNotInErrors(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Query().Get("key") != "s3cret" {
			t.Errorf("query %q not sent", r.URL.RawQuery)
		}
		w.WriteHeader(500)
	}))
	defer srv.Close()
	h, err := New(Options{URL: strings.Replace(srv.URL, "http://", "http://user:pw@", 1) + "/in.php?key=s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	out := h.Handle(context.Background(), request("v"))
	if hits.Load() != 1 || strings.Contains(out.Err.Error(), "s3cret") || strings.Contains(out.Err.Error(), "pw") {
		t.Fatalf("hits %d, error %q", hits.Load(), out.Err)
	}
	srv.Close()
	out = h.Handle(context.Background(), request("v"))
	if out.Code != CodeConnect || strings.Contains(out.Err.Error(), "s3cret") {
		t.Fatalf("connect error: %s %q", out.Code, out.Err)
	}
}

func TestRequestHeaders(t *testing.T) {
	var got http.Header
	var body []byte
	var method string
	h := serve(t, Options{Headers: map[string]string{"Authorization": "Bearer tok", "x-tenant": "t1"}},
		func(w http.ResponseWriter, r *http.Request) {
			got, method = r.Header.Clone(), r.Method
			body, _ = io.ReadAll(r.Body)
		})
	t.Run("a request carries id attempt state key static headers and the value", func(t *testing.T) {
		binKey := []byte{0xff, 0x00, 'k', '\n'}
		req := &processor.Request{
			Record: &kgo.Record{Key: binKey, Value: []byte(`{"img":1}`),
				Headers: []kgo.RecordHeader{{Key: "Content-Type", Value: []byte("application/json")}, {Key: "other", Value: []byte("x")}}},
			ID: "solve.requests/3/42", Attempt: 3, State: []byte("task-7"),
		}
		if out := h.Handle(context.Background(), req); out.Kind != processor.Success {
			t.Fatalf("%+v", out)
		}
		want := map[string]string{
			"Content-Type":           "application/json",
			"Idempotency-Key":        "solve.requests/3/42",
			"Redrive-Attempt":        "3",
			"Redrive-State":          "task-7",
			"Redrive-State-Encoding": "",
			"Redrive-Key":            base64.RawURLEncoding.EncodeToString(binKey),
			"Redrive-Key-Encoding":   "base64url",
			"Authorization":          "Bearer tok",
			"X-Tenant":               "t1",
			"Other":                  "", // record headers are not passed on
		}
		for k, v := range want {
			if g := got.Get(k); g != v {
				t.Errorf("%s: %q, want %q", k, g, v)
			}
		}
		if method != http.MethodPost || string(body) != `{"img":1}` {
			t.Errorf("%s %q", method, body)
		}
	})

	t.Run("a printable key is sent as is and no state or content-type means none and octet-stream", func(t *testing.T) {
		req := &processor.Request{Record: &kgo.Record{Key: []byte("order-1"), Value: nil}, ID: "id", Attempt: 1}
		h.Handle(context.Background(), req)
		if got.Get("Redrive-Key") != "order-1" || got.Get("Redrive-Key-Encoding") != "" || got.Get("Redrive-State") != "" ||
			got.Get("Content-Type") != "application/octet-stream" || len(body) != 0 {
			t.Errorf("printable key: %v %q", got, body)
		}
	})

	t.Run("a null key sends no Redrive-Key and a binary state is base64url", func(t *testing.T) {
		state := []byte{1, 2, 3, 0xfe}
		req := &processor.Request{Record: &kgo.Record{Value: []byte("v")}, ID: "id", Attempt: 2, State: state}
		h.Handle(context.Background(), req)
		if _, ok := got["Redrive-Key"]; ok {
			t.Errorf("null key sent as %q", got.Get("Redrive-Key"))
		}
		if got.Get("Redrive-State") != base64.RawURLEncoding.EncodeToString(state) || got.Get("Redrive-State-Encoding") != "base64url" {
			t.Errorf("binary state: %v", got)
		}
	})

	t.Run("a key with a space at an end is encoded since HTTP would trim it", func(t *testing.T) {
		req := &processor.Request{Record: &kgo.Record{Key: []byte(" k"), Value: []byte("v")}, ID: "id", Attempt: 1}
		h.Handle(context.Background(), req)
		if got.Get("Redrive-Key-Encoding") != "base64url" {
			t.Errorf("key with a leading space: %v", got)
		}
	})

	t.Run("an empty key is sent empty and not as a null key", func(t *testing.T) {
		req := &processor.Request{Record: &kgo.Record{Key: []byte{}, Value: []byte("v")}, ID: "id", Attempt: 1}
		h.Handle(context.Background(), req)
		if vs, ok := got["Redrive-Key"]; !ok || vs[0] != "" {
			t.Errorf("empty key: %v", got)
		}
	})
}

func TestStaticContentType(t *testing.T) {
	var ct string
	h := serve(t, Options{Headers: map[string]string{"content-type": "application/json"}}, func(w http.ResponseWriter, r *http.Request) {
		ct = r.Header.Get("Content-Type")
	})
	h.Handle(context.Background(), request("v"))
	if ct != "application/json" {
		t.Fatalf("static default: %q", ct)
	}
	req := request("v")
	req.Record.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte("text/plain")}}
	h.Handle(context.Background(), req)
	if ct != "text/plain" {
		t.Fatalf("record's own: %q", ct)
	}
	req.Record.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte("text/plain\r\nX-Evil: 1")}}
	h.Handle(context.Background(), req)
	if ct != "application/json" {
		t.Fatalf("unsendable record content-type: %q", ct)
	}
}

func TestBadRequestID(t *testing.T) {
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) { t.Error("sent") })
	req := request("v")
	req.ID = "id\r\nX-Evil: 1"
	if out := h.Handle(context.Background(), req); out.Kind != processor.Invalid || out.Code != CodeBadID {
		t.Fatalf("%+v", out)
	}
	// A 200 KB id is never sent as Idempotency-Key.
	req.ID = strings.Repeat("k", 200<<10)
	out := h.Handle(context.Background(), req)
	if out.Kind != processor.Invalid || out.Code != CodeBadID || !strings.Contains(out.Err.Error(), "longer than 512 bytes") {
		t.Fatalf("%+v", out)
	}
	if n := len(out.Err.Error()); n > 200 {
		t.Errorf("error of %d bytes", n)
	}
}

// The longest valid id is sent whole.
func TestLongestRequestIDIsSent(t *testing.T) {
	var got string
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get(HeaderIdempotencyKey) })
	req := request("v")
	req.ID = strings.Repeat("k", retry.MaxIDBytes)
	if out := h.Handle(context.Background(), req); out.Kind != processor.Success || got != req.ID {
		t.Fatalf("%+v, sent %d bytes", out, len(got))
	}
}

func TestNotReady(t *testing.T) {
	var gotState string
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		gotState = r.Header.Get("Redrive-State")
		if r.Header.Get("Redrive-State") == "" {
			w.Header().Set("Redrive-State", "task-1")
		}
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(202)
	})
	out := h.Handle(context.Background(), request("v"))
	if out.Kind != processor.NotReady || string(out.State) != "task-1" || out.MinDelay != 7*time.Second || out.Code != "http_202" {
		t.Fatalf("%+v", out)
	}
	// A poll answered without a new state keeps the one it sent.
	req := request("v")
	req.State = out.State
	out = h.Handle(context.Background(), req)
	if gotState != "task-1" || out.Kind != processor.NotReady || string(out.State) != "task-1" {
		t.Fatalf("poll: sent %q, %+v", gotState, out)
	}
}

func TestRetryAfterDate(t *testing.T) {
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
		w.WriteHeader(429)
	})
	out := h.Handle(context.Background(), request("v"))
	if out.Kind != processor.Transient || out.Code != "http_429" || out.MinDelay < 85*time.Second || out.MinDelay > 90*time.Second || !out.Throttled {
		t.Fatalf("%+v, want a throttled transient outcome with the Retry-After's delay", out)
	}
}

// A 429 is the service asking to slow down (Throttled: the breaker does
// not count it); another transient status is not, and neither is a 429
// whose code a rule made permanent or a request fault.
func TestTooManyRequestsIsThrottled(t *testing.T) {
	for _, c := range []struct {
		status    int
		codes     Codes
		throttled bool
		kind      processor.Kind
	}{
		{429, Codes{}, true, processor.Transient},
		{503, Codes{}, false, processor.Transient},
		{429, Codes{Permanent: []string{"http_429"}}, false, processor.Permanent},
		{429, Codes{RequestFault: []string{"http_429"}}, false, processor.Transient},
	} {
		h := serve(t, Options{Codes: c.codes}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(c.status) })
		out := h.Handle(context.Background(), request("v"))
		if out.Throttled != c.throttled || out.Kind != c.kind {
			t.Errorf("status %d with %+v: %+v, want kind %v throttled %v", c.status, c.codes, out, c.kind, c.throttled)
		}
	}
}

func TestErrorCodeHeaderAndRules(t *testing.T) {
	codes := Codes{
		Transient: []string{"ERROR_NO_SLOT_AVAILABLE", "http_400"},
		NotReady:  []string{"CAPCHA_NOT_READY"},
		Permanent: []string{"ERROR_WRONG_USER_KEY", "http_503"},
		MinDelay:  map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": 5 * time.Second, "http_429": time.Minute},
	}
	cases := []struct {
		status     int
		code       string // Redrive-Error-Code sent
		retryAfter string
		kind       processor.Kind
		wantCode   string
		minDelay   time.Duration
	}{
		{503, "ERROR_NO_SLOT_AVAILABLE", "", processor.Transient, "ERROR_NO_SLOT_AVAILABLE", 5 * time.Second},
		{503, "ERROR_NO_SLOT_AVAILABLE", "30", processor.Transient, "ERROR_NO_SLOT_AVAILABLE", 30 * time.Second}, // Retry-After above the rule
		{503, "", "2", processor.Permanent, "http_503", 2 * time.Second},                                         // rule on redrive's code
		{500, "ERROR_WRONG_USER_KEY", "", processor.Permanent, "ERROR_WRONG_USER_KEY", 0},
		{400, "ERROR_WRONG_USER_KEY", "", processor.Permanent, "ERROR_WRONG_USER_KEY", 0},
		{400, "", "", processor.Transient, "http_400", 0},
		{400, "SOMETHING_ELSE", "", processor.Permanent, "SOMETHING_ELSE", 0}, // header wins over http_400, class by status
		{500, "CAPCHA_NOT_READY", "3", processor.NotReady, "CAPCHA_NOT_READY", 3 * time.Second},
		{429, "", "1", processor.Transient, "http_429", time.Minute},
		{202, "ERROR_WRONG_USER_KEY", "", processor.Permanent, "ERROR_WRONG_USER_KEY", 0},
		{200, "ERROR_WRONG_USER_KEY", "", processor.Success, "", 0}, // rules never turn a success into a failure
		{503, "  spaced\tcode  ", "", processor.Transient, "spaced_code", 0},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status)+"/"+c.code, func(t *testing.T) {
			h := serve(t, Options{Codes: codes}, func(w http.ResponseWriter, r *http.Request) {
				if c.code != "" {
					w.Header().Set("Redrive-Error-Code", c.code)
				}
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.Header().Set("Redrive-State", "s")
				w.WriteHeader(c.status)
			})
			out := h.Handle(context.Background(), request("v"))
			if out.Kind != c.kind || out.Code != c.wantCode || out.MinDelay != c.minDelay {
				t.Fatalf("got %s %q %s, want %s %q %s", out.Kind, out.Code, out.MinDelay, c.kind, c.wantCode, c.minDelay)
			}
			if (out.Kind == processor.NotReady) != (string(out.State) == "s") {
				t.Fatalf("state %q for %s", out.State, out.Kind)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	h := serve(t, Options{Timeout: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	start := time.Now()
	out := h.Handle(context.Background(), request("v"))
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %s", el)
	}
	if out.Kind != processor.Transient || out.Code != CodeTimeout || !errors.Is(out.Err, context.DeadlineExceeded) {
		t.Fatalf("%+v", out)
	}
}

func TestTimeoutInBody(t *testing.T) {
	release := make(chan struct{})
	h := serve(t, Options{Timeout: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	out := h.Handle(context.Background(), request("v"))
	if out.Kind != processor.Transient || out.Code != CodeTimeout {
		t.Fatalf("%+v", out)
	}
}

func TestCanceled(t *testing.T) {
	release := make(chan struct{})
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	out := h.Handle(ctx, request("v"))
	if out.Kind != processor.Transient || out.Code != CodeCanceled {
		t.Fatalf("%+v", out)
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h, err := New(Options{URL: "http://" + addr + "/solve"})
	if err != nil {
		t.Fatal(err)
	}
	out := h.Handle(context.Background(), request("v"))
	if out.Kind != processor.Transient || out.Code != CodeConnect || !strings.HasPrefix(out.Err.Error(), "POST http://"+addr+"/solve: cannot connect: ") {
		t.Fatalf("%+v", out)
	}
}

func TestConnectionDropped(t *testing.T) {
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	})
	out := h.Handle(context.Background(), request("v"))
	if out.Kind != processor.Transient || out.Code != CodeNetwork {
		t.Fatalf("%+v", out)
	}
}

func TestBodyTooLarge(t *testing.T) {
	for _, c := range []struct {
		status int
		size   int
		kind   processor.Kind
		code   string
	}{
		{200, 100, processor.Success, ""},
		{200, 101, processor.Transient, CodeBodyTooLarge},
		{500, 5000, processor.Transient, "http_500"}, // a failure's body is only quoted
		{400, 5000, processor.Permanent, "http_400"}, // so the status still decides
		{202, 5000, processor.NotReady, "http_202"},  // not-ready does not need the body
		{201, 1 << 20, processor.Transient, CodeBodyTooLarge},
	} {
		h := serve(t, Options{MaxBodyBytes: 100}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			io.WriteString(w, strings.Repeat("x", c.size))
		})
		out := h.Handle(context.Background(), request("v"))
		if out.Kind != c.kind || out.Code != c.code {
			t.Fatalf("%d with %d bytes: %s %q (%v)", c.status, c.size, out.Kind, out.Code, out.Err)
		}
		if c.kind == processor.Success && len(out.Result) != c.size {
			t.Fatalf("result of %d bytes", len(out.Result))
		}
		if c.code == CodeBodyTooLarge && (!errors.Is(out.Err, ErrBodyTooLarge) || out.Result != nil) {
			t.Fatalf("%+v", out)
		}
	}
	// The default limit is 1 MiB.
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", DefaultMaxBodyBytes+1))
	})
	if out := h.Handle(context.Background(), request("v")); out.Code != CodeBodyTooLarge {
		t.Fatalf("default limit: %+v", out)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	var other atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other.Add(1) }))
	defer target.Close()
	h := serve(t, Options{}, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	out := h.Handle(context.Background(), request("v"))
	if out.Kind != processor.Transient || out.Code != "http_307" || other.Load() != 0 {
		t.Fatalf("%+v, target hit %d times", out, other.Load())
	}
}

func TestCallerClientNotChanged(t *testing.T) {
	c := &http.Client{Timeout: time.Minute}
	if _, err := New(Options{URL: "http://127.0.0.1:1/", Client: c}); err != nil {
		t.Fatal(err)
	}
	if c.CheckRedirect != nil {
		t.Fatal("New changed the caller's client")
	}
}

func TestNewValidates(t *testing.T) {
	bad := []Options{
		{URL: ""},
		{URL: "/relative"},
		{URL: "ftp://127.0.0.1/x"},
		{URL: "http://"},
		{URL: "http://127.0.0.1/\x7f"},
		{URL: "http://127.0.0.1/", Timeout: -1},
		{URL: "http://127.0.0.1/", MaxBodyBytes: -1},
		{URL: "http://127.0.0.1/", Headers: map[string]string{"Bad Name": "v"}},
		{URL: "http://127.0.0.1/", Headers: map[string]string{"X": "a\nb"}},
		{URL: "http://127.0.0.1/", Headers: map[string]string{"idempotency-key": "v"}},
		{URL: "http://127.0.0.1/", Headers: map[string]string{"Redrive-Attempt": "v"}},
		{URL: "http://127.0.0.1/", JSON: &JSONRule{OKValue: 1}},
		{URL: "http://127.0.0.1/", JSON: &JSONRule{OKField: "a..b", OKValue: 1}},
		{URL: "http://127.0.0.1/", JSON: &JSONRule{OKField: "status"}},
		{URL: "http://127.0.0.1/", JSON: &JSONRule{OKField: "status", OKValue: []int{1}}},
		{URL: "http://127.0.0.1/", Codes: Codes{Transient: []string{"A"}, Permanent: []string{"A"}}},
		{URL: "http://127.0.0.1/", Codes: Codes{Transient: []string{""}}},
		{URL: "http://127.0.0.1/", Codes: Codes{MinDelay: map[string]time.Duration{"A": -time.Second}}},
	}
	for _, o := range bad {
		if _, err := New(o); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	h, err := New(Options{URL: "https://solver.example/solve"})
	if err != nil || h.timeout != DefaultTimeout || h.maxBody != DefaultMaxBodyBytes {
		t.Fatalf("defaults: %v %+v", err, h)
	}
}
