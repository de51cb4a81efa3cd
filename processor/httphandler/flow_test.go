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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

// rig is one behaviour test's broker and pipeline: the real processor with
// the HTTP handler, its topics created with kadm.
type rig struct {
	t  testing.TB
	c  *kafkatest.Cluster
	cl *kgo.Client
	p  processor.Pipeline
}

func newRig(t testing.TB, base string, partitions int32, sched retry.Schedule) *rig {
	t.Helper()
	c := kafkatest.New(t)
	r := &rig{t: t, c: c, cl: c.Client(t, kgo.ProducerLinger(time.Millisecond))}
	topic := kafkatest.Topic(t, base)
	r.p = processor.Pipeline{
		Name:     topic,
		Topic:    topic,
		Results:  topic + ".results",
		DLQ:      topic + ".dlq",
		Schedule: sched,
	}
	names := append([]string{topic, r.p.Results, r.p.DLQ}, r.p.TierTopics()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Admin(t).CreateTopics(ctx, partitions, 1, nil, names...)
	if err != nil {
		t.Fatalf("create topics: %v", err)
	}
	for _, tr := range resp.Sorted() {
		if tr.Err != nil {
			t.Fatalf("create topic %s: %v", tr.Topic, tr.Err)
		}
	}
	return r
}

// start runs a processor with h until stop is called or the test ends;
// stop returns Run's error.
func (r *rig) start(h processor.Handler) (stop func() error) {
	r.t.Helper()
	pr, err := processor.New(processor.Config{
		Brokers:        r.c.Brokers,
		Pipelines:      []processor.Pipeline{r.p},
		SessionTimeout: 6 * time.Second,
		ShutdownGrace:  10 * time.Second,
		CommitInterval: 200 * time.Millisecond,
		Registerer:     prometheus.NewRegistry(),
		Instance:       "httptest",
	}, h)
	if err != nil {
		r.t.Fatalf("processor.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				runErr = fmt.Errorf("processor did not stop within 60s")
			}
		})
		return runErr
	}
	r.t.Cleanup(func() { _ = stop() })
	return stop
}

func (r *rig) produce(rs []*kgo.Record) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		r.t.Fatalf("produce: %v", err)
	}
}

// collect reads topics from their start until enough(got) holds or the
// timeout passes, then for settle more to catch extras (duplicates). got
// maps a topic to its records in consumed order.
func (r *rig) collect(topics []string, enough func(got map[string][]*kgo.Record) bool, timeout, settle time.Duration) map[string][]*kgo.Record {
	r.t.Helper()
	cl := r.c.Client(r.t, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	got := map[string][]*kgo.Record{}
	deadline := time.Now().Add(timeout)
	var settleAt time.Time
	for {
		now := time.Now()
		if settleAt.IsZero() && enough(got) {
			settleAt = now.Add(settle)
		}
		if !settleAt.IsZero() && now.After(settleAt) || now.After(deadline) {
			return got
		}
		end := deadline
		if !settleAt.IsZero() {
			end = settleAt
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(rec *kgo.Record) { got[rec.Topic] = append(got[rec.Topic], rec) })
	}
}

func hdr(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

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
			p.code, p.errText = httphandler.CodeTimeout, "no answer within 300ms"
		}
		return p
	}
	panic("unknown kind " + kind)
}

// TestFlowHTTP is the end-to-end flow through the real processor and the
// HTTP handler: 2,000 requests against a scripted solver that fails by
// request id. Every request ends exactly once in the results topic or the
// DLQ with the expected reason and code; redrive-attempt and redrive-polls
// are counted right; key, value and user headers arrive intact at the
// solver and in the terminal record; the solver is called exactly as often
// as the schedule says with the right Redrive-Attempt and Redrive-State,
// and never before the retry's due time or its tier's delay.
func TestFlowHTTP(t *testing.T) {
	const secret = "s3cr3t-api-key"
	sched := retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3, Jitter: 0.1}
	rg := newRig(t, "httpflow", 4, sched)

	// The mix, 2,000 in all, weighted towards fast paths.
	mix := []struct {
		script string
		n      int
	}{
		{"ok", 700}, {"permanent", 200}, {"transient:1", 250}, {"transient:2", 200}, {"transient-ra:1", 60},
		{"notready:1", 200}, {"notready:2", 150}, {"notready-ra:1", 60}, {"always", 100}, {"slow", 80},
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	type want struct {
		plan
		kind string
		rec  *kgo.Record // as produced
	}
	wants := map[string]*want{}
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
			rec := &kgo.Record{Topic: rg.p.Topic, Key: key, Value: value, Headers: user}
			wants[id] = &want{plan: planFor(kind, k), kind: kind, rec: rec}
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
	const slowTimeout = 300 * time.Millisecond
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
	rg.p.Concurrency = 64
	begin := time.Now()
	stop := rg.start(h)
	rg.produce(recs)

	tiers := rg.p.TierTopics()
	topics := append([]string{rg.p.Results, rg.p.DLQ}, tiers...)
	got := rg.collect(topics, func(got map[string][]*kgo.Record) bool {
		n := 0
		for _, tt := range tiers {
			n += len(got[tt])
		}
		return len(got[rg.p.Results])+len(got[rg.p.DLQ]) >= total && n >= nTier
	}, 90*time.Second, 1500*time.Millisecond)
	elapsed := time.Since(begin)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	srv.Close() // no call in flight any more: solver.calls is final
	t.Logf("%d requests, %d results, %d dead letters, %d retry records in %v",
		total, len(got[rg.p.Results]), len(got[rg.p.DLQ]), func() int {
			n := 0
			for _, tt := range tiers {
				n += len(got[tt])
			}
			return n
		}(), elapsed.Round(time.Millisecond))

	e := &errs{t: t}
	defer e.done()
	safeURL := srv.URL + "/solve"

	// Terminal records: each id exactly once, in the right topic, intact.
	seen := map[string]int{}
	checkTerminal := func(r *kgo.Record) {
		id, _ := hdr(r, retry.HeaderID)
		seen[id]++
		w := wants[id]
		if w == nil {
			e.add("%s: record with unknown redrive-id %q", r.Topic, id)
			return
		}
		inDLQ := r.Topic == rg.p.DLQ
		if inDLQ != (w.dlq != "") {
			e.add("%s ended in %s (reason %q)", id, r.Topic, func() string { s, _ := hdr(r, retry.HeaderReason); return s }())
			return
		}
		if !bytes.Equal(r.Key, w.rec.Key) || (r.Key == nil) != (w.rec.Key == nil) {
			e.add("%s: key %q, want %q", id, r.Key, w.rec.Key)
		}
		if u := userHeaders(r); !sameHeaders(u, w.rec.Headers) {
			e.add("%s: user headers %v, want %v", id, u, w.rec.Headers)
		}
		if err := noDuplicateRedriveHeaders(r); err != nil {
			e.add("%s: %v", id, err)
		}
		if a, _ := hdr(r, retry.HeaderAttempt); a != strconv.Itoa(w.attempts[len(w.attempts)-1]) {
			e.add("%s: redrive-attempt %q, want %d", id, a, w.attempts[len(w.attempts)-1])
		}
		if p, ok := hdr(r, retry.HeaderPolls); (w.polls == 0 && ok && p != "0") || (w.polls > 0 && p != strconv.Itoa(w.polls)) {
			e.add("%s: redrive-polls %q, want %d", id, p, w.polls)
		}
		if ot, _ := hdr(r, retry.HeaderOriginTopic); ot != rg.p.Topic {
			e.add("%s: redrive-origin-topic %q", id, ot)
		}
		for _, k := range []string{retry.HeaderDue, retry.HeaderTier, retry.HeaderState} {
			if v, ok := hdr(r, k); ok {
				e.add("%s: terminal record carries %s=%q", id, k, v)
			}
		}
		if !inDLQ {
			for _, k := range []string{retry.HeaderError, retry.HeaderErrorCode, retry.HeaderErrorClass, retry.HeaderReason} {
				if v, ok := hdr(r, k); ok {
					e.add("%s: result carries %s=%q", id, k, v)
				}
			}
			if string(r.Value) != "solved:"+id {
				e.add("%s: result %q, want the solver's body", id, r.Value)
			}
			return
		}
		if !bytes.Equal(r.Value, w.rec.Value) {
			e.add("%s: dead letter value %q, want %q", id, r.Value, w.rec.Value)
		}
		want := map[string]string{
			retry.HeaderReason:     w.dlq,
			retry.HeaderErrorCode:  w.code,
			retry.HeaderErrorClass: map[string]string{"permanent": "permanent", "exhausted": "transient"}[w.dlq],
			retry.HeaderGroup:      rg.p.GroupID(),
			retry.HeaderInstance:   "httptest",
		}
		for k, v := range want {
			if got, _ := hdr(r, k); got != v {
				e.add("%s: %s %q, want %q", id, k, got, v)
			}
		}
		msg, _ := hdr(r, retry.HeaderError)
		if !strings.Contains(msg, "POST "+safeURL+":") || !strings.Contains(msg, w.errText) {
			e.add("%s: redrive-error %q, want the URL %s and %q", id, msg, safeURL, w.errText)
		}
		if strings.Contains(msg, secret) || strings.Contains(msg, "api_key") {
			e.add("%s: redrive-error %q leaks the URL's query", id, msg)
		}
		first, _ := hdr(r, retry.HeaderFirstErrorAt)
		last, _ := hdr(r, retry.HeaderLastErrorAt)
		f, _ := strconv.ParseInt(first, 10, 64)
		l, _ := strconv.ParseInt(last, 10, 64)
		if f <= 0 || l < f {
			e.add("%s: first-error-at %q, last-error-at %q", id, first, last)
		}
	}
	for _, r := range got[rg.p.Results] {
		checkTerminal(r)
	}
	for _, r := range got[rg.p.DLQ] {
		checkTerminal(r)
	}
	for id := range wants {
		if seen[id] != 1 {
			e.add("%s: reached a terminal topic %d times, want exactly 1", id, seen[id])
		}
	}

	// Retry records: the due time each call after the first had to wait for.
	dues := map[string][]*kgo.Record{}
	codes := map[string]int{}
	for _, tt := range tiers {
		for _, r := range got[tt] {
			id, _ := hdr(r, retry.HeaderID)
			dues[id] = append(dues[id], r)
			c, _ := hdr(r, retry.HeaderErrorCode)
			codes[c]++
		}
	}
	t.Logf("retry records by redrive-error-code: %v", codes)

	// Solver calls: as many as the schedule says, each as the protocol says,
	// none early.
	solver.mu.Lock()
	defer solver.mu.Unlock()
	for id := range solver.calls {
		if wants[id] == nil {
			e.add("solver called with unknown Idempotency-Key %q", id)
		}
	}
	for id, w := range wants {
		calls := solver.calls[id]
		if len(calls) != w.calls {
			var codes []string
			for _, r := range dues[id] {
				c, _ := hdr(r, retry.HeaderErrorCode)
				m, _ := hdr(r, retry.HeaderError)
				codes = append(codes, c+": "+m)
			}
			e.add("%s: %d solver calls, want %d; retry records say %q", id, len(calls), w.calls, codes)
			continue
		}
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
		polls := 0
		for n, c := range calls {
			if c.method != http.MethodPost || c.uri != "/solve?api_key="+secret {
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
			if c.state != nil {
				polls++
				if want := fmt.Sprintf("task-%s-%d", id, n); *c.state != want || c.stateEnc != "" {
					e.add("%s call %d: Redrive-State %q (%q), want %q from the previous answer", id, n+1, *c.state, c.stateEnc, want)
				}
			} else if w.polls > 0 && n > 0 {
				e.add("%s call %d: a poll without Redrive-State", id, n+1)
			}
			if n == 0 {
				continue
			}
			if gap := c.at.Sub(calls[n-1].at); gap < w.gaps[n-1] {
				e.add("%s call %d: only %v after call %d; its tier is %v", id, n+1, gap, n, w.gaps[n-1])
			}
		}
		if polls != w.polls {
			e.add("%s: %d polls, want %d", id, polls, w.polls)
		}
		// Each retry record's due time was honoured by the call it led to.
		// A hop (a retry record re-queued without a call) repeats its due
		// time, so distinct due times pair with the calls after the first.
		var ds []time.Time
		tierOf := map[int64]string{}
		for _, r := range dues[id] {
			v, _ := hdr(r, retry.HeaderDue)
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				e.add("%s: retry record with redrive-due %q", id, v)
				continue
			}
			if _, ok := tierOf[ms]; !ok {
				ds = append(ds, time.UnixMilli(ms))
			}
			tierOf[ms], _ = hdr(r, retry.HeaderTier)
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a].Before(ds[b]) })
		if len(ds) != w.calls-1 {
			e.add("%s: %d retry due times, want %d", id, len(ds), w.calls-1)
			continue
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
	}
}
