package httphandler_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// userHeaders are r's headers other than redrive's own, in order.
func userHeaders(r *kgo.Record) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, retry.HeaderPrefix) {
			out = append(out, h)
		}
	}
	return out
}

func sameHeaders(a, b []kgo.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// noDuplicateRedriveHeaders reports a redrive-* header written twice.
func noDuplicateRedriveHeaders(r *kgo.Record) error {
	seen := map[string]bool{}
	for _, h := range r.Headers {
		if strings.HasPrefix(h.Key, retry.HeaderPrefix) {
			if seen[h.Key] {
				return fmt.Errorf("header %s written twice", h.Key)
			}
			seen[h.Key] = true
		}
	}
	return nil
}

// printableASCII is the handler's rule for sending a key as is: bytes
// 0x20-0x7E, no space at either end.
func printableASCII(v []byte) bool {
	if len(v) > 0 && (v[0] == ' ' || v[len(v)-1] == ' ') {
		return false
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// errs collects failures found in loops and reports the first few, so a
// systematic bug does not print 2,000 lines.
type errs struct {
	t testing.TB
	n int
}

func (e *errs) add(format string, args ...any) {
	e.t.Helper()
	e.n++
	if e.n <= 25 {
		e.t.Errorf(format, args...)
	}
}

func (e *errs) done() {
	e.t.Helper()
	if e.n > 25 {
		e.t.Errorf("... and %d more failures", e.n-25)
	}
}

// solverCall is one HTTP request the scripted solver received.
type solverCall struct {
	at       time.Time // on arrival, before the body is read
	method   string
	uri      string
	attempt  string
	state    *string // Redrive-State, nil when absent
	stateEnc string
	key      *string // Redrive-Key, nil when absent
	keyEnc   string
	ctype    string
	body     []byte
	extra    []string // Redrive-* request headers outside the protocol
}

// scripted is the solver of TestFlowHTTP. It decides by the request id
// (Idempotency-Key), which is "<kind>[:<k>]#<n>":
//
//	ok             200 "solved:<id>"
//	permanent      400, Redrive-Error-Code ERROR_WRONG_USER_KEY
//	transient:k    503 ERROR_NO_SLOT_AVAILABLE on the first k calls, then 200
//	transient-ra:k the same with Retry-After: 2
//	notready:k     202 with Redrive-State task-<id>-<call> on the first k calls, then 200
//	notready-ra:k  the same with Retry-After: 2
//	always         503 ERROR_NO_SLOT_AVAILABLE
//	slow           no answer until the client gives up
type scripted struct {
	mu    sync.Mutex
	calls map[string][]solverCall
}

func parseScript(id string) (kind string, k int) {
	script, _, _ := strings.Cut(id, "#")
	kind, arg, _ := strings.Cut(script, ":")
	k, _ = strconv.Atoi(arg)
	return kind, k
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := solverCall{at: time.Now(), method: r.Method, uri: r.RequestURI, attempt: r.Header.Get(httphandler.HeaderAttempt),
		stateEnc: r.Header.Get(httphandler.HeaderStateEncoding), keyEnc: r.Header.Get(httphandler.HeaderKeyEncoding),
		ctype: r.Header.Get("Content-Type")}
	if v, ok := r.Header[httphandler.HeaderState]; ok {
		c.state = &v[0]
	}
	if v, ok := r.Header[httphandler.HeaderKey]; ok {
		c.key = &v[0]
	}
	for k := range r.Header {
		switch k {
		case httphandler.HeaderAttempt, httphandler.HeaderState, httphandler.HeaderStateEncoding, httphandler.HeaderKey, httphandler.HeaderKeyEncoding:
		default:
			if strings.HasPrefix(k, "Redrive-") {
				c.extra = append(c.extra, k)
			}
		}
	}
	c.body, _ = io.ReadAll(r.Body)
	id := r.Header.Get(httphandler.HeaderIdempotencyKey)
	s.mu.Lock()
	s.calls[id] = append(s.calls[id], c)
	n := len(s.calls[id])
	s.mu.Unlock()

	kind, k := parseScript(id)
	solved := func() {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "solved:"+id)
	}
	noSlot := func(retryAfter bool) {
		w.Header().Set(httphandler.HeaderErrorCode, "ERROR_NO_SLOT_AVAILABLE")
		if retryAfter {
			w.Header().Set(httphandler.HeaderRetryAfter, "2")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "no slot available")
	}
	switch kind {
	case "ok":
		solved()
	case "permanent":
		w.Header().Set(httphandler.HeaderErrorCode, "ERROR_WRONG_USER_KEY")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "wrong user key")
	case "transient", "transient-ra":
		if n <= k {
			noSlot(kind == "transient-ra")
			return
		}
		solved()
	case "notready", "notready-ra":
		if n <= k {
			w.Header().Set(httphandler.HeaderState, fmt.Sprintf("task-%s-%d", id, n))
			w.Header().Set(httphandler.HeaderErrorCode, "CAPCHA_NOT_READY")
			if kind == "notready-ra" {
				w.Header().Set(httphandler.HeaderRetryAfter, "2")
			}
			w.WriteHeader(http.StatusAccepted)
			return
		}
		solved()
	case "always":
		noSlot(false)
	case "slow":
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		solved()
	default:
		w.WriteHeader(http.StatusTeapot) // unknown id: permanent, and the test says why
	}
}

// plan is what one scripted request must go through.
type plan struct {
	calls    int             // handler calls, i.e. HTTP requests
	attempts []int           // Redrive-Attempt of each call
	polls    int             // calls that are not-ready polls (they carry Redrive-State)
	gaps     []time.Duration // tier delay before call i+1 (minimum gap)
	tiers    []string        // redrive-tier of the retry record before call i+1
	dlq      string          // reason, "" for a result
	code     string          // DLQ redrive-error-code
	errText  string          // a piece of DLQ redrive-error
}

func planFor(kind string, k int) plan {
	const s1, s2 = time.Second, 2 * time.Second
	switch kind {
	case "ok":
		return plan{calls: 1, attempts: []int{1}}
	case "permanent":
		return plan{calls: 1, attempts: []int{1}, dlq: "permanent", code: "ERROR_WRONG_USER_KEY", errText: "400 Bad Request: wrong user key"}
	case "transient", "transient-ra":
		p := plan{calls: k + 1}
		for i := 1; i <= k+1; i++ {
			p.attempts = append(p.attempts, i)
		}
		for i := 1; i <= k; i++ {
			// Attempt i+1 goes to tier i (1s, then 2s); Retry-After 2 moves
			// it to the smallest tier covering 2s.
			d := s1
			if i >= 2 || kind == "transient-ra" {
				d = s2
			}
			p.gaps = append(p.gaps, d)
			p.tiers = append(p.tiers, retry.FormatDelay(d))
		}
		return p
	case "notready", "notready-ra":
		p := plan{calls: k + 1, polls: k}
		for i := 0; i <= k; i++ {
			p.attempts = append(p.attempts, 1) // a poll repeats its attempt's number
		}
		for i := 1; i <= k; i++ {
			d := s1 // a poll goes to the first tier...
			if kind == "notready-ra" {
				d = s2 // ...or the smallest covering Retry-After
			}
			p.gaps = append(p.gaps, d)
			p.tiers = append(p.tiers, retry.FormatDelay(d))
		}
		return p
	case "always", "slow":
		p := plan{calls: 3, attempts: []int{1, 2, 3}, gaps: []time.Duration{s1, s2}, tiers: []string{"1s", "2s"}, dlq: "exhausted", code: "ERROR_NO_SLOT_AVAILABLE", errText: "503 Service Unavailable: no slot available"}
		if kind == "slow" {
			p.code, p.errText = httphandler.CodeTimeout, "no answer within 2s"
		}
		return p
	}
	panic("unknown kind " + kind)
}

// flowWant is what one request of the flow is and must go through.
type flowWant struct {
	plan
	kind string
	rec  *kgo.Record // as produced
}

// flowRun is one run of the scripted mix through the real processor and
// the HTTP handler, finished: what was produced, what arrived where, and
// every call the solver received.
type flowRun struct {
	p       processor.Pipeline
	secret  string
	safeURL string // the solver URL without its query
	wants   map[string]*flowWant
	got     kafkatest.Got
	calls   map[string][]solverCall // by Idempotency-Key, final
	retries map[string][]*kgo.Record
}

// runFlow sends 2,000 requests, weighted towards fast paths, against a
// scripted solver that fails by request id, and collects results, dead
// letters and retry records until every request ended and every retry was
// written, then a little longer for duplicates.
func runFlow(t *testing.T) *flowRun {
	const secret = "s3cr3t-api-key"
	sched := retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3, Jitter: 0.1}
	rg := pipetest.New(t, "httpflow", 4, sched)

	mix := []struct {
		script string
		n      int
	}{
		{"ok", 700}, {"permanent", 200}, {"transient:1", 250}, {"transient:2", 200}, {"transient-ra:1", 60},
		{"notready:1", 200}, {"notready:2", 150}, {"notready-ra:1", 60}, {"always", 100}, {"slow", 80},
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	wants := map[string]*flowWant{}
	var recs []*kgo.Record
	i := 0
	for _, m := range mix {
		kind, k := parseScript(m.script)
		for range m.n {
			id := fmt.Sprintf("%s#%04d", m.script, i)
			var key []byte
			switch i % 4 {
			case 0:
				key = []byte("user-" + strconv.Itoa(i))
			case 1:
				key = []byte{0x00, 0xff, byte(i), byte(i >> 8), '\n', 0x80} // binary: sent as base64url
			case 2:
				key = nil // null key: no Redrive-Key
			case 3:
				key = []byte(" padded key ") // printable but with edge spaces: base64url
			}
			var value []byte
			user := []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}, {Key: "trace-id", Value: []byte(fmt.Sprintf("trace-%08x", rnd.Uint32()))}}
			switch i % 3 {
			case 0:
				value = fmt.Appendf(nil, `{"id":%q,"captcha":"%x"}`, id, rnd.Uint64())
				user = append(user, kgo.RecordHeader{Key: "content-type", Value: []byte("application/json")})
			case 1:
				value = make([]byte, 1+rnd.IntN(300))
				for j := range value {
					value[j] = byte(rnd.UintN(256))
				}
			case 2:
				value = []byte("plain text ünïcödé " + id)
			}
			user = append(user,
				kgo.RecordHeader{Key: "x-bin", Value: []byte{0, 1, 2, 0xfe, 0xff}},
				kgo.RecordHeader{Key: "dup", Value: []byte("first")},
				kgo.RecordHeader{Key: "dup", Value: []byte("second")},
				kgo.RecordHeader{Key: "empty", Value: nil},
			)
			rec := &kgo.Record{Topic: rg.P.Topic, Key: key, Value: value, Headers: user}
			wants[id] = &flowWant{plan: planFor(kind, k), kind: kind, rec: rec}
			recs = append(recs, rec)
			i++
		}
	}
	rnd.Shuffle(len(recs), func(a, b int) { recs[a], recs[b] = recs[b], recs[a] })
	const total = 2000
	if len(recs) != total {
		t.Fatalf("mix has %d requests", len(recs))
	}
	nTier := 0
	for _, w := range wants {
		nTier += w.calls - 1
	}

	solver := &scripted{calls: map[string][]solverCall{}}
	srv := httptest.NewServer(solver)
	t.Cleanup(srv.Close)
	url := srv.URL + "/solve?api_key=" + secret
	// Two HTTP handlers on the same URL: a short timeout for the "slow"
	// requests, which the solver never answers, and a long one for the
	// rest. On a loaded machine under -race an immediate answer can take
	// seconds to arrive; with one short timeout for everything such a
	// spurious timeout would add an attempt the schedule does not have.
	// The short one is still long enough that the request reaches the
	// solver before it fires, or the solver would count one call fewer than
	// the attempts made (seen at 300ms on a loaded machine).
	const slowTimeout = 2 * time.Second
	short, err := httphandler.New(httphandler.Options{URL: url, Timeout: slowTimeout})
	if err != nil {
		t.Fatal(err)
	}
	long, err := httphandler.New(httphandler.Options{URL: url, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if strings.HasPrefix(req.ID, "slow#") {
			return short.Handle(ctx, req)
		}
		return long.Handle(ctx, req)
	})
	rg.P.Concurrency = 64
	begin := time.Now()
	stop := rg.Start(h, func(c *processor.Config) { c.Instance = "httptest" })
	rg.Produce(recs...)

	tiers := rg.P.TierTopics()
	topics := append([]string{rg.P.Results, rg.P.DLQ}, tiers...)
	got := rg.Collect(topics, func(got kafkatest.Got) bool {
		return got.Total(rg.P.Results, rg.P.DLQ) >= total && got.Total(tiers...) >= nTier
	}, 90*time.Second, 1500*time.Millisecond)
	elapsed := time.Since(begin)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	srv.Close() // no call in flight any more: solver.calls is final
	t.Logf("%d requests, %d results, %d dead letters, %d retry records in %v",
		total, len(got[rg.P.Results]), len(got[rg.P.DLQ]), got.Total(tiers...), elapsed.Round(time.Millisecond))

	// Retry records by request: the due time each call after the first
	// had to wait for.
	retries := map[string][]*kgo.Record{}
	codes := map[string]int{}
	for _, tt := range tiers {
		for _, r := range got[tt] {
			id, _ := kafkatest.Header(r, retry.HeaderID)
			retries[id] = append(retries[id], r)
			c, _ := kafkatest.Header(r, retry.HeaderErrorCode)
			codes[c]++
		}
	}
	t.Logf("retry records by redrive-error-code: %v", codes)

	solver.mu.Lock()
	calls := solver.calls
	solver.mu.Unlock()
	return &flowRun{p: rg.P, secret: secret, safeURL: srv.URL + "/solve", wants: wants, got: got, calls: calls, retries: retries}
}

// eachTerminal calls f for every result and dead letter of a known request
// that ended in the topic its plan says (TestFlowHTTP's first case reports
// the others).
func (fr *flowRun) eachTerminal(f func(id string, w *flowWant, r *kgo.Record, inDLQ bool)) {
	for _, topic := range []string{fr.p.Results, fr.p.DLQ} {
		for _, r := range fr.got[topic] {
			id, _ := kafkatest.Header(r, retry.HeaderID)
			w := fr.wants[id]
			inDLQ := topic == fr.p.DLQ
			if w == nil || inDLQ != (w.dlq != "") {
				continue
			}
			f(id, w, r, inDLQ)
		}
	}
}

// eachCalled calls f for every request the solver was called for as often
// as its plan says (TestFlowHTTP's call-count case reports the others).
func (fr *flowRun) eachCalled(f func(id string, w *flowWant, calls []solverCall)) {
	for id, w := range fr.wants {
		if calls := fr.calls[id]; len(calls) == w.calls {
			f(id, w, calls)
		}
	}
}

// TestFlowHTTP is the end-to-end flow through the real processor and the
// HTTP handler: one run of 2,000 requests (runFlow), then one case per
// promise the processor and the handler make about it.
func TestFlowHTTP(t *testing.T) {
	fr := runFlow(t)

	t.Run("every request reaches results or the DLQ exactly once", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		seen := map[string]int{}
		for _, topic := range []string{fr.p.Results, fr.p.DLQ} {
			for _, r := range fr.got[topic] {
				id, _ := kafkatest.Header(r, retry.HeaderID)
				seen[id]++
				w := fr.wants[id]
				if w == nil {
					e.add("%s: record with unknown redrive-id %q", r.Topic, id)
					continue
				}
				if inDLQ := r.Topic == fr.p.DLQ; inDLQ != (w.dlq != "") {
					reason, _ := kafkatest.Header(r, retry.HeaderReason)
					e.add("%s ended in %s (reason %q)", id, r.Topic, reason)
				}
			}
		}
		for id := range fr.wants {
			if seen[id] != 1 {
				e.add("%s: reached a terminal topic %d times, want exactly 1", id, seen[id])
			}
		}
	})

	t.Run("terminal records keep key and user headers and write each redrive header once", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachTerminal(func(id string, w *flowWant, r *kgo.Record, _ bool) {
			if !bytes.Equal(r.Key, w.rec.Key) || (r.Key == nil) != (w.rec.Key == nil) {
				e.add("%s: key %q, want %q", id, r.Key, w.rec.Key)
			}
			if u := userHeaders(r); !sameHeaders(u, w.rec.Headers) {
				e.add("%s: user headers %v, want %v", id, u, w.rec.Headers)
			}
			if err := noDuplicateRedriveHeaders(r); err != nil {
				e.add("%s: %v", id, err)
			}
		})
	})

	t.Run("terminal records count attempts and polls", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachTerminal(func(id string, w *flowWant, r *kgo.Record, _ bool) {
			if a, _ := kafkatest.Header(r, retry.HeaderAttempt); a != strconv.Itoa(w.attempts[len(w.attempts)-1]) {
				e.add("%s: redrive-attempt %q, want %d", id, a, w.attempts[len(w.attempts)-1])
			}
			if p, ok := kafkatest.Header(r, retry.HeaderPolls); (w.polls == 0 && ok && p != "0") || (w.polls > 0 && p != strconv.Itoa(w.polls)) {
				e.add("%s: redrive-polls %q, want %d", id, p, w.polls)
			}
		})
	})

	t.Run("terminal records name the origin and carry no retry state", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachTerminal(func(id string, _ *flowWant, r *kgo.Record, _ bool) {
			if ot, _ := kafkatest.Header(r, retry.HeaderOriginTopic); ot != fr.p.Topic {
				e.add("%s: redrive-origin-topic %q", id, ot)
			}
			for _, k := range []string{retry.HeaderDue, retry.HeaderTier, retry.HeaderState} {
				if v, ok := kafkatest.Header(r, k); ok {
					e.add("%s: terminal record carries %s=%q", id, k, v)
				}
			}
		})
	})

	t.Run("results carry the solver body and no error headers", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachTerminal(func(id string, _ *flowWant, r *kgo.Record, inDLQ bool) {
			if inDLQ {
				return
			}
			for _, k := range []string{retry.HeaderError, retry.HeaderErrorCode, retry.HeaderErrorClass, retry.HeaderReason} {
				if v, ok := kafkatest.Header(r, k); ok {
					e.add("%s: result carries %s=%q", id, k, v)
				}
			}
			if string(r.Value) != "solved:"+id {
				e.add("%s: result %q, want the solver's body", id, r.Value)
			}
		})
	})

	t.Run("dead letters keep the value and name reason code class group and instance", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachTerminal(func(id string, w *flowWant, r *kgo.Record, inDLQ bool) {
			if !inDLQ {
				return
			}
			if !bytes.Equal(r.Value, w.rec.Value) {
				e.add("%s: dead letter value %q, want %q", id, r.Value, w.rec.Value)
			}
			want := map[string]string{
				retry.HeaderReason:     w.dlq,
				retry.HeaderErrorCode:  w.code,
				retry.HeaderErrorClass: map[string]string{"permanent": "permanent", "exhausted": "transient"}[w.dlq],
				retry.HeaderGroup:      fr.p.GroupID(),
				retry.HeaderInstance:   "httptest",
			}
			for k, v := range want {
				if got, _ := kafkatest.Header(r, k); got != v {
					e.add("%s: %s %q, want %q", id, k, got, v)
				}
			}
		})
	})

	t.Run("dead letters name the URL without its query and the error times", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachTerminal(func(id string, w *flowWant, r *kgo.Record, inDLQ bool) {
			if !inDLQ {
				return
			}
			msg, _ := kafkatest.Header(r, retry.HeaderError)
			if !strings.Contains(msg, "POST "+fr.safeURL+":") || !strings.Contains(msg, w.errText) {
				e.add("%s: redrive-error %q, want the URL %s and %q", id, msg, fr.safeURL, w.errText)
			}
			if strings.Contains(msg, fr.secret) || strings.Contains(msg, "api_key") {
				e.add("%s: redrive-error %q leaks the URL's query", id, msg)
			}
			first, _ := kafkatest.Header(r, retry.HeaderFirstErrorAt)
			last, _ := kafkatest.Header(r, retry.HeaderLastErrorAt)
			f, _ := strconv.ParseInt(first, 10, 64)
			l, _ := strconv.ParseInt(last, 10, 64)
			if f <= 0 || l < f {
				e.add("%s: first-error-at %q, last-error-at %q", id, first, last)
			}
		})
	})

	t.Run("the solver is called as often as the schedule says", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		for id := range fr.calls {
			if fr.wants[id] == nil {
				e.add("solver called with unknown Idempotency-Key %q", id)
			}
		}
		for id, w := range fr.wants {
			if calls := fr.calls[id]; len(calls) != w.calls {
				var codes []string
				for _, r := range fr.retries[id] {
					c, _ := kafkatest.Header(r, retry.HeaderErrorCode)
					m, _ := kafkatest.Header(r, retry.HeaderError)
					codes = append(codes, c+": "+m)
				}
				e.add("%s: %d solver calls, want %d; retry records say %q", id, len(calls), w.calls, codes)
			}
		}
	})

	t.Run("each call sends method URL attempt body content type and key as the protocol says", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachCalled(func(id string, w *flowWant, calls []solverCall) {
			wantKey, wantKeyEnc := "", ""
			if w.rec.Key != nil {
				wantKey = string(w.rec.Key)
				if !printableASCII(w.rec.Key) {
					wantKey, wantKeyEnc = base64.RawURLEncoding.EncodeToString(w.rec.Key), httphandler.EncodingBase64URL
				}
			}
			wantCT := "application/octet-stream"
			for _, hd := range w.rec.Headers {
				if hd.Key == "content-type" {
					wantCT = string(hd.Value)
				}
			}
			for n, c := range calls {
				if c.method != http.MethodPost || c.uri != "/solve?api_key="+fr.secret {
					e.add("%s call %d: %s %s", id, n+1, c.method, c.uri)
				}
				if c.attempt != strconv.Itoa(w.attempts[n]) {
					e.add("%s call %d: Redrive-Attempt %q, want %d", id, n+1, c.attempt, w.attempts[n])
				}
				if !bytes.Equal(c.body, w.rec.Value) {
					e.add("%s call %d: body %q, want the record value %q", id, n+1, c.body, w.rec.Value)
				}
				if c.ctype != wantCT {
					e.add("%s call %d: Content-Type %q, want %q", id, n+1, c.ctype, wantCT)
				}
				switch {
				case w.rec.Key == nil && c.key != nil:
					e.add("%s call %d: Redrive-Key %q for a null key", id, n+1, *c.key)
				case w.rec.Key != nil && (c.key == nil || *c.key != wantKey || c.keyEnc != wantKeyEnc):
					e.add("%s call %d: Redrive-Key %v (%q), want %q (%q)", id, n+1, c.key, c.keyEnc, wantKey, wantKeyEnc)
				}
				if len(c.extra) > 0 {
					e.add("%s call %d: unexpected headers %v", id, n+1, c.extra)
				}
			}
		})
	})

	t.Run("a not-ready poll sends the state of the previous answer", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachCalled(func(id string, w *flowWant, calls []solverCall) {
			polls := 0
			for n, c := range calls {
				if c.state != nil {
					polls++
					if want := fmt.Sprintf("task-%s-%d", id, n); *c.state != want || c.stateEnc != "" {
						e.add("%s call %d: Redrive-State %q (%q), want %q from the previous answer", id, n+1, *c.state, c.stateEnc, want)
					}
				} else if w.polls > 0 && n > 0 {
					e.add("%s call %d: a poll without Redrive-State", id, n+1)
				}
			}
			if polls != w.polls {
				e.add("%s: %d polls, want %d", id, polls, w.polls)
			}
		})
	})

	t.Run("no retry is called before its tier delay", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachCalled(func(id string, w *flowWant, calls []solverCall) {
			for n := 1; n < len(calls); n++ {
				if gap := calls[n].at.Sub(calls[n-1].at); gap < w.gaps[n-1] {
					e.add("%s call %d: only %v after call %d; its tier is %v", id, n+1, gap, n, w.gaps[n-1])
				}
			}
		})
	})

	t.Run("each retry goes to its tier and is called at or after its due time", func(t *testing.T) {
		e := &errs{t: t}
		defer e.done()
		fr.eachCalled(func(id string, w *flowWant, calls []solverCall) {
			// A hop (a retry record re-queued without a call) repeats its
			// due time, so distinct due times pair with the calls after
			// the first.
			var ds []time.Time
			tierOf := map[int64]string{}
			for _, r := range fr.retries[id] {
				v, _ := kafkatest.Header(r, retry.HeaderDue)
				ms, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					e.add("%s: retry record with redrive-due %q", id, v)
					continue
				}
				if _, ok := tierOf[ms]; !ok {
					ds = append(ds, time.UnixMilli(ms))
				}
				tierOf[ms], _ = kafkatest.Header(r, retry.HeaderTier)
			}
			sort.Slice(ds, func(a, b int) bool { return ds[a].Before(ds[b]) })
			if len(ds) != w.calls-1 {
				e.add("%s: %d retry due times, want %d", id, len(ds), w.calls-1)
				return
			}
			for n, d := range ds {
				at := calls[n+1].at.Round(0) // wall clock, as redrive-due is
				if at.Before(d) {
					e.add("%s call %d at %v, before its due time %v", id, n+2, at.Format(time.StampMilli), d.Format(time.StampMilli))
				}
				if tier := tierOf[d.UnixMilli()]; tier != w.tiers[n] {
					e.add("%s: retry %d went to tier %q, want %q", id, n+1, tier, w.tiers[n])
				}
			}
		})
	})
}
