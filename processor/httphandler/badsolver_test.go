package httphandler_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// badVariant is one way a solver misbehaves, and the dead letter it must
// lead to after max_attempts transient failures.
type badVariant struct {
	serve   func(w http.ResponseWriter, r *http.Request) // nil: no server is reached
	code    string                                       // redrive-error-code
	errText string                                       // a piece of redrive-error
	// timeout is the handler's Timeout for this variant; 0: 30s, so that
	// only the variants meant to time out can, however loaded the machine.
	timeout time.Duration
	// replayable: the solver drops the connection without an answer, which
	// Go's transport resends on its own when it happened on a reused
	// connection (the request carries Idempotency-Key, so net/http deems it
	// replayable): the solver then sees more calls than attempts.
	replayable bool
}

// badRun is what one bad-solver run saw.
type badRun struct {
	mu    sync.Mutex
	calls map[string]int
}

// runBadSolver sends per requests of each variant through the processor and
// HTTP handlers built from opts (URL set to the solver's, or to url when
// given; Timeout the variant's), and checks that every one of them is dead-lettered exactly once
// as exhausted after 3 attempts, with the variant's code, a clear
// redrive-error naming the URL without its query, and key, value and user
// headers intact; and that the solver was called 3 times per request.
func runBadSolver(t *testing.T, opts httphandler.Options, url string, variants map[string]badVariant, per int) {
	const secret = "s3cr3t-api-key"
	rg := pipetest.New(t, "badsolver", 3, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3, Jitter: 0.1})
	// Every call fails: an outage, which the breaker holds without spending
	// attempts (TestBadSolverDead's "defaults" case); these runs are about
	// the dead letters such failures lead to once attempts are spent.
	rg.P.Breaker = processor.Breaker{Disabled: true}
	run := &badRun{calls: map[string]int{}}
	var safeURL string
	if url == "" {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get(httphandler.HeaderIdempotencyKey)
			run.mu.Lock()
			run.calls[id]++
			run.mu.Unlock()
			name, _, _ := strings.Cut(id, "#")
			v, ok := variants[name]
			if !ok || v.serve == nil {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			v.serve(w, r)
		}))
		t.Cleanup(srv.Close)
		safeURL = srv.URL + "/solve"
		opts.URL = safeURL + "?api_key=" + secret
	} else {
		opts.URL = url
		safeURL, _, _ = strings.Cut(url, "?")
	}
	handlers := map[string]*httphandler.Handler{}
	for name, v := range variants {
		o := opts
		o.Timeout = v.timeout
		if o.Timeout == 0 {
			o.Timeout = 30 * time.Second
		}
		hh, err := httphandler.New(o)
		if err != nil {
			t.Fatal(err)
		}
		handlers[name] = hh
	}
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		name, _, _ := strings.Cut(req.ID, "#")
		return handlers[name].Handle(ctx, req)
	})

	want := map[string]*kgo.Record{}
	var recs []*kgo.Record
	for name := range variants {
		for i := range per {
			id := fmt.Sprintf("%s#%03d", name, i)
			key := []byte("k-" + id)
			if i%2 == 1 {
				key = []byte{0, 0xff, byte(i)}
			}
			rec := &kgo.Record{Topic: rg.P.Topic, Key: key, Value: []byte(`{"captcha":"` + id + `"}`), Headers: []kgo.RecordHeader{
				{Key: "idempotency-key", Value: []byte(id)},
				{Key: "trace-id", Value: []byte("trace-" + strconv.Itoa(i))},
				{Key: "content-type", Value: []byte("application/json")},
				{Key: "x-bin", Value: []byte{0, 0xfe}},
			}}
			want[id] = rec
			recs = append(recs, rec)
		}
	}
	begin := time.Now()
	stop := rg.Start(h)
	rg.Produce(recs...)
	got := rg.Collect([]string{rg.P.DLQ, rg.P.Results}, func(got kafkatest.Got) bool {
		return len(got[rg.P.DLQ]) >= len(want)
	}, 60*time.Second, time.Second)
	elapsed := time.Since(begin)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	t.Logf("%d requests: %d dead letters, %d results in %v", len(want), len(got[rg.P.DLQ]), len(got[rg.P.Results]), elapsed.Round(time.Millisecond))

	e := &errs{t: t}
	defer e.done()
	for _, r := range got[rg.P.Results] {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		e.add("%s: a bad answer became a result %q", id, r.Value)
	}
	seen := map[string]int{}
	logged := map[string]bool{}
	for _, r := range got[rg.P.DLQ] {
		id, _ := kafkatest.Header(r, retry.HeaderID)
		seen[id]++
		w := want[id]
		if w == nil {
			e.add("dead letter with unknown redrive-id %q", id)
			continue
		}
		name, _, _ := strings.Cut(id, "#")
		v := variants[name]
		if !logged[name] {
			logged[name] = true
			code, _ := kafkatest.Header(r, retry.HeaderErrorCode)
			msg, _ := kafkatest.Header(r, retry.HeaderError)
			t.Logf("%s: redrive-error-code %s, redrive-error %q", name, code, msg)
		}
		if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) {
			e.add("%s: key %q value %q, want %q %q", id, r.Key, r.Value, w.Key, w.Value)
		}
		if u := userHeaders(r); !sameHeaders(u, w.Headers) {
			e.add("%s: user headers %v, want %v", id, u, w.Headers)
		}
		if err := noDuplicateRedriveHeaders(r); err != nil {
			e.add("%s: %v", id, err)
		}
		for k, wv := range map[string]string{
			retry.HeaderReason:     "exhausted",
			retry.HeaderErrorClass: "transient",
			retry.HeaderErrorCode:  v.code,
			retry.HeaderAttempt:    "3",
		} {
			if gv, _ := kafkatest.Header(r, k); gv != wv {
				e.add("%s: %s %q, want %q", id, k, gv, wv)
			}
		}
		msg, _ := kafkatest.Header(r, retry.HeaderError)
		switch {
		case !strings.HasPrefix(msg, "POST "+safeURL+": "):
			e.add("%s: redrive-error %q does not name the URL %s", id, msg, safeURL)
		case !strings.Contains(msg, v.errText):
			e.add("%s: redrive-error %q, want it to say %q", id, msg, v.errText)
		case strings.Contains(msg, secret) || strings.Contains(msg, "api_key"):
			e.add("%s: redrive-error %q leaks the URL's query", id, msg)
		case len(msg) > retry.MaxErrorBytes || !utf8.ValidString(msg):
			e.add("%s: redrive-error of %d bytes, valid UTF-8 %v", id, len(msg), utf8.ValidString(msg))
		}
	}
	for id := range want {
		if seen[id] != 1 {
			e.add("%s: %d dead letters, want exactly 1", id, seen[id])
		}
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	replays := map[string]int{}
	defer func() {
		if len(replays) > 0 {
			t.Logf("calls net/http resent on its own (connection dropped, request replayable): %v", replays)
		}
	}()
	for id := range want {
		name, _, _ := strings.Cut(id, "#")
		v := variants[name]
		n := run.calls[id]
		if v.replayable && n > 3 {
			replays[name] += n - 3
		}
		switch {
		case v.serve == nil && n != 0:
			e.add("%s: %d calls reached a server, want none", id, n)
		case v.serve != nil && v.replayable && n < 3:
			// net/http may resend a request whose reused connection broke
			// before an answer (see handler.go); never fewer than 3.
			e.add("%s: %d solver calls, want at least 3", id, n)
		case v.serve != nil && !v.replayable && n != 3:
			e.add("%s: %d solver calls, want 3", id, n)
		}
	}
}

// TestBadSolverGarbage: a solver in JSON mode whose 2xx answers are not
// what it promised (not JSON, cut short, two values, the wrong type) or are
// not HTTP at all. Every request is retried and dead-lettered as exhausted
// with bad_response / not_ok / network, never taken for a success.
func TestBadSolverGarbage(t *testing.T) {
	t.Parallel()
	body := func(s string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(s))
		}
	}
	hijack := func(raw string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			_, _ = buf.WriteString(raw)
			_ = buf.Flush()
			_ = conn.Close()
		}
	}
	variants := map[string]badVariant{
		"text":      {serve: body("this is not json"), code: httphandler.CodeBadResponse, errText: "200 OK: body is not JSON: invalid character"},
		"html":      {serve: body("<html><body>502 Bad Gateway</body></html>"), code: httphandler.CodeBadResponse, errText: "body is not JSON"},
		"truncated": {serve: body(`{"status":1,"request":"abc`), code: httphandler.CodeBadResponse, errText: "body is not JSON: unexpected EOF"},
		"empty":     {serve: body(""), code: httphandler.CodeBadResponse, errText: "body is not JSON: empty body"},
		"two":       {serve: body(`{"status":1}{"status":1}`), code: httphandler.CodeBadResponse, errText: "data after the JSON value"},
		"binary":    {serve: body("\x00\xff\xfe\x80\x1b[31mjunk"), code: httphandler.CodeBadResponse, errText: "body is not JSON"},
		"wrongtype": {serve: body(`{"status":"1"}`), code: httphandler.CodeNotOK, errText: `{"status":"1"}`},
		"cut":       {serve: hijack("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"sta"), code: httphandler.CodeNetwork, errText: "network error: unexpected EOF"},
		"nothttp":   {serve: hijack("HELLO THERE\r\n\r\n"), code: httphandler.CodeNetwork, errText: "network error: ", replayable: true},
		"hangup":    {serve: hijack(""), code: httphandler.CodeNetwork, errText: "network error: ", replayable: true},
	}
	runBadSolver(t, httphandler.Options{JSON: &httphandler.JSONRule{OKField: "status", OKValue: 1, CodeField: "request"}}, "", variants, 15)
}

// TestBadSolverEndlessBody: a solver that streams a body forever, fast or
// a byte at a time, on a success or on a failure. Reading is bounded by
// MaxBodyBytes and Timeout: the request fails transiently (body_too_large,
// timeout, or the failure's own code with only the body's start read), the
// handler hangs up, and the solver's writes stop far short of what an
// unbounded reader would take in.
func TestBadSolverEndlessBody(t *testing.T) {
	t.Parallel()
	const maxBody = 64 << 10
	const capAfter = 10 * time.Second // the solver gives up on its own only if the handler never hangs up
	var mu sync.Mutex
	var maxWritten int64
	capped := 0
	closed := make(chan time.Time)
	close(closed)
	stream := func(status int, chunk []byte, every time.Duration) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			w.WriteHeader(status)
			var written int64
			end := time.After(capAfter)
			hit := false
		loop:
			for {
				if _, err := w.Write(chunk); err != nil {
					break
				}
				written += int64(len(chunk))
				if rc.Flush() != nil {
					break
				}
				var pause <-chan time.Time
				if every > 0 {
					pause = time.After(every)
				} else {
					pause = closed // write again at once
				}
				select {
				case <-r.Context().Done():
					break loop
				case <-end:
					hit = true
					break loop
				case <-pause:
				}
			}
			mu.Lock()
			maxWritten = max(maxWritten, written)
			if hit {
				capped++
			}
			mu.Unlock()
		}
	}
	flood := bytes.Repeat([]byte("endless body "), 2500) // 32.5 KB a write
	variants := map[string]badVariant{
		"flood": {serve: stream(http.StatusOK, flood, 0), code: httphandler.CodeBodyTooLarge, errText: "200 OK: body longer than 65536 bytes"},
		"drip": {serve: stream(http.StatusOK, []byte("."), 10*time.Millisecond), code: httphandler.CodeTimeout, errText: "no answer within 2s",
			// Long enough that the request reaches the solver before it
			// fires (at 500ms a loaded machine sometimes timed out first,
			// and the solver counted one call fewer than the attempts).
			timeout: 2 * time.Second},
		"flood503": {serve: stream(http.StatusServiceUnavailable, flood, 0), code: "http_503", errText: "503 Service Unavailable: endless body endless body"},
	}
	runBadSolver(t, httphandler.Options{MaxBodyBytes: maxBody}, "", variants, 20)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("most bytes the solver wrote into one answer before the handler hung up: %d", maxWritten)
	if capped > 0 {
		t.Errorf("%d endless answers were still being read after %v", capped, capAfter)
	}
	// The floods have a 30s timeout, so only MaxBodyBytes stopped them.
	// Loopback moves GB/s: an unbounded read would have taken in far more.
	// What got written beyond maxBody sat in socket buffers.
	if maxWritten > 64<<20 {
		t.Errorf("the solver wrote %d bytes into one answer; the handler reads at most %d", maxWritten, maxBody)
	}
}

// TestBadSolverDead: the solver's URL is a closed listener. Every attempt
// fails to connect; every request is dead-lettered as exhausted with code
// connect and an error naming the URL without its query.
func TestBadSolverDead(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr + "/solve?api_key=s3cr3t-api-key"
	t.Run("dead letters", func(t *testing.T) {
		t.Parallel()
		variants := map[string]badVariant{
			"dead": {code: httphandler.CodeConnect, errText: "cannot connect: dial tcp " + addr},
		}
		runBadSolver(t, httphandler.Options{}, url, variants, 60)
	})
	// At the shipped defaults a dead service is an outage: the breaker
	// opens on its 20th failure in a row and nothing is dead-lettered.
	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		e := pipetest.New(t, "deadsolver", 3, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3})
		h, err := httphandler.New(httphandler.Options{URL: url, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		pr, _ := pipetest.RunProcessor(t, e.Config(), h)
		e.Produce(requests(e.P.Topic, "dead", 200)...)
		if !kafkatest.Eventually(20*time.Second, func() bool { return pr.Status().Pipelines[0].Line.Breaker == "open" }) {
			t.Fatalf("the breaker did not open on a dead service: %+v", pr.Status().Pipelines[0].Line)
		}
		l := pr.Status().Pipelines[0].Line
		if l.Why != "20 counted failures in a row" {
			t.Errorf("breaker open because %q, want 20 counted failures in a row", l.Why)
		}
		got := e.Collect([]string{e.P.DLQ, e.P.Results}, func(kafkatest.Got) bool { return false }, 5*time.Second, 0)
		if n := len(got[e.P.DLQ]) + len(got[e.P.Results]); n != 0 {
			t.Errorf("%d outcomes during the outage at the defaults, want none (records wait, no attempt spent)", n)
		}
	})
}
