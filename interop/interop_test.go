package interop_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
)

const instance = "interop-test"

var (
	clients      = []string{"kcat", "python", "java"}
	compressions = []string{"gzip", "snappy", "lz4", "zstd"}
	keyKinds     = []string{"string", "binary", "empty", "null"}
	// codecs are Kafka's record batch compression attributes.
	codecs = map[string]uint8{"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
)

// request is one record a client produces, and what must become of it.
type request struct {
	client, topic, compression string
	fate                       string // ok, permanent, exhausted, invalid, expired
	keyKind                    string
	key, value                 []byte // key nil: a null key
	headers                    []kgo.RecordHeader
	timestamp                  int64  // Unix ms; 0: the producer's clock
	id                         string // its idempotency-key header, if any
}

// ident names a request on every topic and in the solver: its value, or
// for a null or empty value its idempotency key.
func (r *request) ident() string {
	if len(r.value) > 0 {
		return string(r.value)
	}
	return "id:" + r.id
}

// identOf is ident of a record read back (user headers are copied).
func identOf(value []byte, hs []kgo.RecordHeader) string {
	if len(value) > 0 {
		return string(value)
	}
	for _, h := range hs {
		if h.Key == "idempotency-key" {
			return "id:" + string(h.Value)
		}
	}
	return ""
}

// valueTail makes every value binary: NUL, bytes that are not UTF-8, a
// two-byte rune; the line-oriented kcat gets no newline or tab.
func valueTail(client string) []byte {
	t := []byte{0x00, 0xff, 0x80, 0x7f, 0x01, 0xc3, 0xa9}
	if client != "kcat" {
		t = append(t, '\n', '\t', '\r', 0x00)
	}
	return t
}

func userHeaders(client, id string) []kgo.RecordHeader {
	bin := []byte{0xff, 0x80, 0x01} // kcat takes headers from argv: no NUL
	if client != "kcat" {
		bin = []byte{0x00, 0xff, 0x80, 0x01}
	}
	hs := []kgo.RecordHeader{
		{Key: "idempotency-key", Value: []byte(id)},
		{Key: "content-type", Value: []byte("application/x-interop; v=1")},
		{Key: "x-dup", Value: []byte("1")},
		{Key: "x-dup", Value: []byte("2")},
		{Key: "x-empty", Value: []byte{}},
		{Key: "x-bin", Value: bin},
	}
	if client != "kcat" {
		hs = append(hs, kgo.RecordHeader{Key: "x-null", Value: nil})
	}
	return hs
}

// requests is the matrix one pipeline's main topic receives: from each
// client, with each compression, successes and permanent failures with
// every key kind, with and without headers; transient failures that run
// out of attempts; an invalid redrive header; a 64 KiB value; and, from the
// clients that can set a record's timestamp, a request past the ttl.
func requests(topic string, now time.Time) []*request {
	var out []*request
	n := 0
	add := func(client, comp, fate, kk string, withHeaders bool, edit func(*request)) {
		n++
		r := &request{client: client, topic: topic, compression: comp, fate: fate, keyKind: kk}
		switch kk {
		case "string":
			r.key = []byte(fmt.Sprintf("user-%d", n))
		case "binary":
			r.key = append([]byte{0x00, 0xff, 0x80, 0xc3, 0x28}, strconv.Itoa(n)...)
		case "empty":
			r.key = []byte{}
		}
		tag := "plain"
		if withHeaders {
			tag = "headers"
			r.id = fmt.Sprintf("%s-%s-%s-%d", client, comp, fate, n)
			r.headers = userHeaders(client, r.id)
		}
		// librdkafka sends a batch uncompressed when compressing does not
		// make it smaller: the padding makes every record compressible.
		r.value = fmt.Appendf(nil, "%s|%s|%s|%s|%s|%d|%s", fate, client, comp, tag, kk, n, strings.Repeat("pad ", 64))
		r.value = append(r.value, valueTail(client)...)
		if edit != nil {
			edit(r)
		}
		out = append(out, r)
	}
	for _, client := range clients {
		for _, comp := range compressions {
			for _, h := range []bool{false, true} {
				for _, kk := range keyKinds {
					add(client, comp, "ok", kk, h, nil)
					add(client, comp, "permanent", kk, h, nil)
				}
			}
			add(client, comp, "exhausted", "string", true, nil)
			add(client, comp, "exhausted", "binary", false, nil)
			add(client, comp, "invalid", "string", true, func(r *request) {
				r.headers = append(r.headers, kgo.RecordHeader{Key: retry.HeaderAttempt, Value: []byte("abc")})
			})
			add(client, comp, "ok", "string", false, func(r *request) {
				r.value = append(r.value, bytes.Repeat([]byte("redrive interop "), 4096)...)
			})
			// A null value (a tombstone) and an empty one, kept apart.
			for _, fate := range []string{"ok", "permanent"} {
				add(client, comp, fate, "string", true, func(r *request) { r.value = nil })
				add(client, comp, fate, "string", true, func(r *request) { r.value = []byte{} })
			}
			if client != "kcat" {
				add(client, comp, "expired", "binary", client == "java", func(r *request) {
					r.timestamp = now.Add(-2 * time.Hour).UnixMilli()
				})
			}
		}
	}
	return out
}

// ---- the solver ----

type call struct {
	id, attempt, key, keyEncoding, contentType string
	keySent                                    bool
	body                                       []byte
}

// solver answers by the value's fate: ok echoes the body; permanent is a
// 400 ERROR_WRONG_USER_KEY; exhausted a 503 ERROR_NO_SLOT_AVAILABLE.
type solver struct {
	mu    sync.Mutex
	calls map[string][]call // by path and body
	bad   []string
}

func (s *solver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	_, keySent := r.Header[httphandler.HeaderKey]
	c := call{id: r.Header.Get("Idempotency-Key"), attempt: r.Header.Get(httphandler.HeaderAttempt),
		key: r.Header.Get(httphandler.HeaderKey), keyEncoding: r.Header.Get(httphandler.HeaderKeyEncoding),
		contentType: r.Header.Get("Content-Type"), keySent: keySent, body: body}
	ident, fate := string(body), ""
	if len(body) == 0 { // the fate is in the id: client-compression-fate-n
		ident = "id:" + c.id
		if f := strings.Split(c.id, "-"); len(f) == 4 {
			fate = f[2]
		}
	} else {
		fate, _, _ = strings.Cut(string(body), "|")
	}
	s.mu.Lock()
	s.calls[r.URL.Path+"\x00"+ident] = append(s.calls[r.URL.Path+"\x00"+ident], c)
	s.mu.Unlock()
	switch fate {
	case "ok":
		_, _ = w.Write(body)
	case "permanent":
		w.Header().Set(httphandler.HeaderErrorCode, "ERROR_WRONG_USER_KEY")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"ERROR_WRONG_USER_KEY"}`)
	case "exhausted":
		w.Header().Set(httphandler.HeaderErrorCode, "ERROR_NO_SLOT_AVAILABLE")
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		s.mu.Lock()
		s.bad = append(s.bad, fmt.Sprintf("%s %.80q", r.URL.Path, body))
		s.mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}
}

func (s *solver) callsOf(path string, r *request) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls[path+"\x00"+r.ident()]...)
}

// ---- producing ----

func produceKcat(kcat, brokers string, reqs []*request) error {
	type batch struct {
		topic, comp string
		null        bool // -Z: an empty value is sent as null
		headers     []kgo.RecordHeader
		lines       []byte
	}
	var batches []*batch
	plain := map[string]*batch{}
	for _, r := range reqs {
		if r.client != "kcat" {
			continue
		}
		line := append([]byte(nil), r.value...)
		if r.key != nil {
			line = append(append(append([]byte(nil), r.key...), '\t'), r.value...)
		}
		line = append(line, '\n')
		if r.headers == nil {
			k := r.topic + "/" + r.compression
			if plain[k] == nil {
				plain[k] = &batch{topic: r.topic, comp: r.compression}
				batches = append(batches, plain[k])
			}
			plain[k].lines = append(plain[k].lines, line...)
			continue
		}
		// -H applies to every record of a run: one run per record with headers.
		batches = append(batches, &batch{topic: r.topic, comp: r.compression, null: r.value == nil, headers: r.headers, lines: line})
	}
	errs := make(chan error, len(batches))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			args := []string{"-b", brokers, "-P", "-t", b.topic, "-z", b.comp, "-K", "\t", "-X", "enable.idempotence=true"}
			if b.null {
				args = append(args, "-Z")
			}
			for _, h := range b.headers {
				args = append(args, "-H", h.Key+"="+string(h.Value))
			}
			if _, err := runErr(60*time.Second, b.lines, kcat, args...); err != nil {
				errs <- fmt.Errorf("kcat -P -t %s -z %s: %w", b.topic, b.comp, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func spec(reqs []*request, client string) []byte {
	var b bytes.Buffer
	for _, r := range reqs {
		if r.client == client {
			b.WriteString(specLine(r))
		}
	}
	return b.Bytes()
}

// ---- header checks ----

var decimal = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

type split struct {
	redrive map[string]string
	compat  map[string][]byte
	user    []kgo.RecordHeader
	dups    []string
}

func splitHeaders(hs []kgo.RecordHeader) split {
	s := split{redrive: map[string]string{}, compat: map[string][]byte{}}
	for _, h := range hs {
		switch {
		case strings.HasPrefix(h.Key, retry.HeaderPrefix):
			if _, ok := s.redrive[h.Key]; ok {
				s.dups = append(s.dups, h.Key)
			}
			s.redrive[h.Key] = string(h.Value)
		case strings.HasPrefix(h.Key, "kafka_dlt-") || strings.HasPrefix(h.Key, "__connect.errors."):
			if _, ok := s.compat[h.Key]; ok {
				s.dups = append(s.dups, h.Key)
			}
			s.compat[h.Key] = h.Value
		default:
			s.user = append(s.user, h)
		}
	}
	return s
}

// wantUser is what redrive must copy: the producer's headers but its own.
func wantUser(r *request) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range r.headers {
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
		if a[i].Key != b[i].Key || (a[i].Value == nil) != (b[i].Value == nil) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func showBytes(b []byte) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprintf("%.80q", b)
}

func showHeaders(hs []kgo.RecordHeader) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, h.Key+"="+showBytes(h.Value))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checker collects problems of one pipeline's outputs.
type checker struct {
	t      *testing.T
	what   string
	errors int
}

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.errors++
	if c.errors <= 40 {
		c.t.Errorf(c.what+": "+format, args...)
	} else if c.errors == 41 {
		c.t.Errorf("%s: more problems left out", c.what)
	}
}

func (c *checker) decimalHeader(rec string, m map[string]string, k string) int64 {
	c.t.Helper()
	v, ok := m[k]
	if !ok {
		c.errorf("%s: no %s", rec, k)
		return -1
	}
	if !decimal.MatchString(v) {
		c.errorf("%s: %s = %q, not a decimal integer", rec, k, v)
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.errorf("%s: %s = %q: %v", rec, k, v, err)
	}
	return n
}

// msHeader checks a Unix-ms time lies in [lo, hi].
func (c *checker) msHeader(rec string, m map[string]string, k string, lo, hi time.Time) int64 {
	c.t.Helper()
	n := c.decimalHeader(rec, m, k)
	if n >= 0 && (n < lo.UnixMilli() || n > hi.UnixMilli()) {
		c.errorf("%s: %s = %d (%s) outside [%s, %s]: not Unix ms of this run", rec, k, n,
			time.UnixMilli(n).UTC().Format(time.RFC3339Nano), lo.UTC().Format(time.RFC3339), hi.UTC().Format(time.RFC3339))
	}
	return n
}

func (c *checker) exactKeys(rec string, m map[string]string, want []string) {
	c.t.Helper()
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	w := append([]string(nil), want...)
	sort.Strings(w)
	if strings.Join(got, ",") != strings.Join(w, ",") {
		c.errorf("%s: redrive headers %v, want exactly %v", rec, got, w)
	}
}

var dlqHeaders = []string{retry.HeaderID, retry.HeaderAttempt, retry.HeaderOriginTopic, retry.HeaderOriginPartition,
	retry.HeaderOriginOffset, retry.HeaderOriginTimestamp, retry.HeaderFirstErrorAt, retry.HeaderLastErrorAt,
	retry.HeaderError, retry.HeaderErrorCode, retry.HeaderErrorClass, retry.HeaderReason, retry.HeaderGroup, retry.HeaderInstance}

var resultHeaders = []string{retry.HeaderID, retry.HeaderAttempt, retry.HeaderOriginTopic, retry.HeaderOriginPartition,
	retry.HeaderOriginOffset, retry.HeaderOriginTimestamp}

// what each failing fate must look like in the DLQ: code, class, attempts.
var deadFates = map[string]struct {
	code, class string
	attempt     int64
}{
	"permanent": {"ERROR_WRONG_USER_KEY", "permanent", 1},
	"exhausted": {"ERROR_NO_SLOT_AVAILABLE", "transient", 2},
	"invalid":   {processor.CodeBadHeader, "invalid", 0},
	"expired":   {processor.CodeTTL, "expired", 0},
}

// pipe is one pipeline of the test, with its own topics and style.
type pipe struct {
	name, style           string
	topic, results, dead  string
	reqs                  []*request
	origin                map[string]kcatRecord // main-topic record by value
	resultsOut, deadOut   []kcatRecord
	deadByIdent           map[string]kcatRecord
	nOK, nDead            int
	expectedID            map[string]string // by value
	byIdent               map[string]*request
	pythonDead            map[string][]kgo.RecordHeader
	solverPath, groupName string
}

func TestClientsAgainstProcessor(t *testing.T) {
	start := time.Now()
	kcat := kcatPath(t)
	python := pythonPath(t)
	java := javaProducer(t)
	script := filepath.Join(clientsDir(t), "redrive_interop.py")

	c := kafkatest.New(t)
	brokers := strings.Join(c.Brokers, ",")
	var pipes []*pipe
	for _, style := range []string{dlq.StyleRedrive, dlq.StyleSpring, dlq.StyleConnect} {
		label := style
		if label == "" {
			label = "plain"
		}
		topic := kafkatest.Topic(t, "interop-"+label)
		p := &pipe{name: topic, style: style, topic: topic, results: topic + ".results", dead: topic + ".dlq",
			solverPath: "/" + label, groupName: "redrive." + topic}
		p.reqs = requests(topic, start)
		p.byIdent = map[string]*request{}
		for _, r := range p.reqs {
			p.byIdent[r.ident()] = r
			if r.fate == "ok" {
				p.nOK++
			} else {
				p.nDead++
			}
		}
		pipes = append(pipes, p)
	}

	s := &solver{calls: map[string][]call{}}
	srv := httptest.NewServer(s)
	defer srv.Close()

	sched := retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 2, Jitter: 0}
	var pcs []processor.Pipeline
	for _, p := range pipes {
		h, err := httphandler.New(httphandler.Options{URL: srv.URL + p.solverPath, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		pp := processor.Pipeline{Name: p.name, Topic: p.topic, Results: p.results, DLQ: p.dead, Schedule: sched,
			TTL: time.Hour, DLQHeaderStyle: p.style, Handler: h}
		for _, tp := range append([]string{p.topic, p.results, p.dead}, pp.TierTopics()...) {
			c.CreateTopic(t, tp, 3, nil)
		}
		pcs = append(pcs, pp)
	}
	var logs syncBuf
	stop := pipetest.Run(t, processor.Config{
		Brokers: c.Brokers, Pipelines: pcs, Instance: instance,
		SessionTimeout: 6 * time.Second, ShutdownGrace: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}, nil)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("processor: %v", err)
		}
		if t.Failed() {
			t.Logf("processor log:\n%s", tail(logs.String(), 6000))
		}
	}()

	// Produce with the three clients at once.
	var all []*request
	for _, p := range pipes {
		all = append(all, p.reqs...)
	}
	prodStart := time.Now()
	var wg sync.WaitGroup
	perr := make([]error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); perr[0] = produceKcat(kcat, brokers, all) }()
	go func() {
		defer wg.Done()
		_, perr[1] = runErr(2*time.Minute, spec(all, "python"), python, script, "produce", brokers)
	}()
	go func() {
		defer wg.Done()
		_, perr[2] = runErr(2*time.Minute, spec(all, "java"), java[0], append(java[1:], brokers)...)
	}()
	wg.Wait()
	for i, err := range perr {
		if err != nil {
			t.Fatalf("producing with %s: %v", clients[i], err)
		}
	}
	t.Logf("produced %d requests with kcat, confluent-kafka and kafka-clients in %s", len(all), time.Since(prodStart).Round(time.Millisecond))

	// What the clients put on the main topics, as kcat reads it, and the
	// compression the batches carry, as franz-go reads it.
	t.Run("producers", func(t *testing.T) {
		for _, p := range pipes {
			checkOrigins(t, kcat, brokers, c, p)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	for _, p := range pipes {
		p.resultsOut = kcatWait(t, kcat, brokers, p.results, p.nOK, 60*time.Second)
		p.deadOut = kcatWait(t, kcat, brokers, p.dead, p.nDead, 60*time.Second)
	}
	// Anything extra (a duplicate) would show up now.
	time.Sleep(time.Second)
	for _, p := range pipes {
		p.resultsOut = kcatRead(t, kcat, brokers, p.results)
		p.deadOut = kcatRead(t, kcat, brokers, p.dead)
	}
	end := time.Now().Add(time.Second)
	s.mu.Lock()
	if len(s.bad) > 0 {
		t.Errorf("the solver got requests that must never reach it (invalid, expired): %v", s.bad)
	}
	s.mu.Unlock()

	for _, p := range pipes {
		label := p.style
		if label == "" {
			label = "plain"
		}
		t.Run("results/"+label, func(t *testing.T) { checkResults(t, p, s, start, end) })
		t.Run("dead-letters/"+label, func(t *testing.T) { checkDead(t, p, s, start, end) })
		t.Run("python-reads-dlq/"+label, func(t *testing.T) { checkPythonRaw(t, python, script, brokers, p) })
		switch p.style {
		case dlq.StyleSpring:
			t.Run("spring-headers", func(t *testing.T) { checkSpring(t, p) })
		case dlq.StyleConnect:
			t.Run("connect-headers", func(t *testing.T) { checkConnect(t, p) })
		}
	}
	t.Run("python-dlq-filter", func(t *testing.T) { checkFilter(t, python, script, brokers, pipes[0]) })
}

func checkOrigins(t *testing.T, kcat, brokers string, c *kafkatest.Cluster, p *pipe) {
	ck := &checker{t: t, what: p.topic}
	recs := kcatRead(t, kcat, brokers, p.topic)
	p.origin = map[string]kcatRecord{}
	p.expectedID = map[string]string{}
	for _, r := range recs {
		if _, dup := p.origin[identOf(r.Value, r.Headers)]; dup {
			ck.errorf("value %s twice on the main topic", showBytes(r.Value))
		}
		p.origin[identOf(r.Value, r.Headers)] = r
	}
	if len(recs) != len(p.reqs) {
		ck.errorf("main topic holds %d records, produced %d", len(recs), len(p.reqs))
	}
	for _, r := range p.reqs {
		o, ok := p.origin[r.ident()]
		if !ok {
			ck.errorf("%s's %s request %s is not on the main topic", r.client, r.fate, showBytes(r.value))
			continue
		}
		if !sameBytes(o.Value, r.value) {
			ck.errorf("%s put value %s on the main topic, meant %s", r.client, showBytes(o.Value), showBytes(r.value))
		}
		if !sameBytes(o.Key, r.key) {
			ck.errorf("%s (%s key) put key %s on the main topic, meant %s", r.client, r.keyKind, showBytes(o.Key), showBytes(r.key))
		}
		if !sameHeaders(o.Headers, r.headers) {
			ck.errorf("%s put headers %s on the main topic, meant %s", r.client, showHeaders(o.Headers), showHeaders(r.headers))
		}
		if r.timestamp != 0 && o.Timestamp != r.timestamp {
			ck.errorf("%s: timestamp %d, meant %d", r.client, o.Timestamp, r.timestamp)
		}
		p.expectedID[r.ident()] = r.id
		if r.id == "" {
			p.expectedID[r.ident()] = fmt.Sprintf("%s/%d/%d", o.Topic, o.Partition, o.Offset)
		}
	}
	// The batches are compressed as asked (kfake does not keep a
	// producer's batches as they came).
	if c.Kind == kafkatest.KindKfake {
		t.Logf("%s: compression codecs not checked on kfake", p.topic)
		return
	}
	got := c.CollectUntil(t, []string{p.topic}, func(got kafkatest.Got) bool { return len(got[p.topic]) >= len(p.reqs) }, 30*time.Second, 0)
	for _, rec := range got[p.topic] {
		r := p.byIdent[identOf(rec.Value, rec.Headers)]
		if r == nil || (r.client != "java" && len(r.value) == 0) {
			// librdkafka sends a batch uncompressed when compressing
			// does not make it smaller, as with a lone empty record.
			continue
		}
		if got := rec.Attrs.CompressionType(); got != codecs[r.compression] {
			ck.errorf("%s's %s record %s came in a batch with codec %d, want %d (%s)", r.client, r.compression, showBytes([]byte(r.ident())), got, codecs[r.compression], r.compression)
		}
	}
}

func checkResults(t *testing.T, p *pipe, s *solver, start, end time.Time) {
	ck := &checker{t: t, what: p.results}
	got := map[string]int{}
	for _, rec := range p.resultsOut {
		got[identOf(rec.Value, rec.Headers)]++
		r := p.byIdent[identOf(rec.Value, rec.Headers)]
		name := fmt.Sprintf("result %s/%d/%d %s", rec.Topic, rec.Partition, rec.Offset, showBytes(rec.Value))
		if r == nil || r.fate != "ok" {
			ck.errorf("%s: not the echo of a request that succeeds", name)
			continue
		}
		name = fmt.Sprintf("%s's %s result (%s key, %s)", r.client, r.compression, r.keyKind, showBytes(r.value[:min(40, len(r.value))]))
		o := p.origin[r.ident()]
		if !bytes.Equal(rec.Value, r.value) {
			ck.errorf("%s: value %s, the solver echoed %s", name, showBytes(rec.Value), showBytes(r.value))
		}
		if !sameBytes(rec.Key, r.key) {
			ck.errorf("%s: key %s, the request's is %s", name, showBytes(rec.Key), showBytes(r.key))
		}
		hs := splitHeaders(rec.Headers)
		if len(hs.dups) > 0 {
			ck.errorf("%s: headers twice: %v", name, hs.dups)
		}
		if !sameHeaders(hs.user, wantUser(r)) {
			ck.errorf("%s: user headers %s, want %s", name, showHeaders(hs.user), showHeaders(wantUser(r)))
		}
		if len(hs.compat) > 0 {
			ck.errorf("%s: compatibility headers on a result: %v", name, hs.compat)
		}
		ck.exactKeys(name, hs.redrive, resultHeaders)
		checkIdentity(ck, name, hs.redrive, p, r, o)
		if a := ck.decimalHeader(name, hs.redrive, retry.HeaderAttempt); a != 1 {
			ck.errorf("%s: redrive-attempt %d, want 1", name, a)
		}
		checkCalls(ck, name, s.callsOf(p.solverPath, r), p, r, 1)
	}
	for _, r := range p.reqs {
		if r.fate == "ok" && got[r.ident()] != 1 {
			ck.errorf("%s's %s request %s has %d results, want 1", r.client, r.compression, showBytes([]byte(r.ident())), got[r.ident()])
		}
	}
	t.Logf("%s: %d results checked", p.results, len(p.resultsOut))
}

// checkIdentity checks redrive-id and the origin headers.
func checkIdentity(ck *checker, name string, m map[string]string, p *pipe, r *request, o kcatRecord) {
	ck.t.Helper()
	if id := m[retry.HeaderID]; id != p.expectedID[r.ident()] {
		ck.errorf("%s: redrive-id %q, want %q", name, id, p.expectedID[r.ident()])
	}
	if m[retry.HeaderOriginTopic] != p.topic {
		ck.errorf("%s: redrive-origin-topic %q, want %q", name, m[retry.HeaderOriginTopic], p.topic)
	}
	if n := ck.decimalHeader(name, m, retry.HeaderOriginPartition); n != int64(o.Partition) {
		ck.errorf("%s: redrive-origin-partition %d, kcat read it from partition %d", name, n, o.Partition)
	}
	if n := ck.decimalHeader(name, m, retry.HeaderOriginOffset); n != o.Offset {
		ck.errorf("%s: redrive-origin-offset %d, kcat read it at offset %d", name, n, o.Offset)
	}
	if n := ck.decimalHeader(name, m, retry.HeaderOriginTimestamp); n != o.Timestamp {
		ck.errorf("%s: redrive-origin-timestamp %d, the record's timestamp (ms) is %d", name, n, o.Timestamp)
	}
}

// checkCalls checks what the solver got over HTTP for r.
func checkCalls(ck *checker, name string, calls []call, p *pipe, r *request, want int) {
	ck.t.Helper()
	if len(calls) != want {
		ck.errorf("%s: the solver was called %d times, want %d", name, len(calls), want)
	}
	ctype := "application/octet-stream"
	for _, h := range r.headers {
		if h.Key == "content-type" {
			ctype = string(h.Value)
		}
	}
	for i, cl := range calls {
		if !bytes.Equal(cl.body, r.value) {
			ck.errorf("%s: POST body %s, want the value", name, showBytes(cl.body))
		}
		if cl.id != p.expectedID[r.ident()] {
			ck.errorf("%s: Idempotency-Key %q, want %q", name, cl.id, p.expectedID[r.ident()])
		}
		if cl.attempt != strconv.Itoa(i+1) {
			ck.errorf("%s: call %d had Redrive-Attempt %q", name, i+1, cl.attempt)
		}
		if cl.contentType != ctype {
			ck.errorf("%s: Content-Type %q, want %q", name, cl.contentType, ctype)
		}
		var key []byte
		switch {
		case !cl.keySent:
			key = nil
		case cl.keyEncoding == httphandler.EncodingBase64URL:
			k, err := base64.RawURLEncoding.DecodeString(cl.key)
			if err != nil {
				ck.errorf("%s: Redrive-Key %q is not unpadded base64url: %v", name, cl.key, err)
			}
			key = k
			if key == nil {
				key = []byte{}
			}
		default:
			key = []byte(cl.key)
		}
		if !sameBytes(key, r.key) {
			ck.errorf("%s: Redrive-Key decodes to %s (sent %v, encoding %q), the record key is %s", name, showBytes(key), cl.keySent, cl.keyEncoding, showBytes(r.key))
		}
	}
}

func checkDead(t *testing.T, p *pipe, s *solver, start, end time.Time) {
	ck := &checker{t: t, what: p.dead}
	got := map[string]int{}
	p.deadByIdent = map[string]kcatRecord{}
	for _, rec := range p.deadOut {
		got[identOf(rec.Value, rec.Headers)]++
		p.deadByIdent[identOf(rec.Value, rec.Headers)] = rec
		r := p.byIdent[identOf(rec.Value, rec.Headers)]
		name := fmt.Sprintf("dead letter %s/%d/%d %s", rec.Topic, rec.Partition, rec.Offset, showBytes(rec.Value))
		if r == nil || r.fate == "ok" {
			ck.errorf("%s: not a request that fails", name)
			continue
		}
		name = fmt.Sprintf("%s's %s %s dead letter (%s key, %s)", r.client, r.compression, r.fate, r.keyKind, showBytes(r.value[:min(40, len(r.value))]))
		want := deadFates[r.fate]
		o := p.origin[r.ident()]
		if !sameBytes(rec.Value, r.value) {
			ck.errorf("%s: value %s, the request's is %s", name, showBytes(rec.Value), showBytes(r.value))
		}
		if !sameBytes(rec.Key, r.key) {
			ck.errorf("%s: key %s, the request's is %s", name, showBytes(rec.Key), showBytes(r.key))
		}
		hs := splitHeaders(rec.Headers)
		if len(hs.dups) > 0 {
			ck.errorf("%s: headers twice: %v", name, hs.dups)
		}
		if !sameHeaders(hs.user, wantUser(r)) {
			ck.errorf("%s: user headers %s, want %s", name, showHeaders(hs.user), showHeaders(wantUser(r)))
		}
		ck.exactKeys(name, hs.redrive, dlqHeaders)
		checkIdentity(ck, name, hs.redrive, p, r, o)
		m := hs.redrive
		if m[retry.HeaderReason] != r.fate {
			ck.errorf("%s: redrive-reason %q, want %q", name, m[retry.HeaderReason], r.fate)
		}
		if m[retry.HeaderErrorCode] != want.code {
			ck.errorf("%s: redrive-error-code %q, want %q", name, m[retry.HeaderErrorCode], want.code)
		}
		if m[retry.HeaderErrorClass] != want.class {
			ck.errorf("%s: redrive-error-class %q, want %q", name, m[retry.HeaderErrorClass], want.class)
		}
		if a := ck.decimalHeader(name, m, retry.HeaderAttempt); a != want.attempt {
			ck.errorf("%s: redrive-attempt %d, want %d", name, a, want.attempt)
		}
		if e := m[retry.HeaderError]; e == "" || len(e) > retry.MaxErrorBytes || !utf8.ValidString(e) {
			ck.errorf("%s: redrive-error %.100q: want 1 to 1024 bytes of UTF-8", name, e)
		}
		if r.fate == "invalid" && !strings.Contains(m[retry.HeaderError], retry.HeaderAttempt) {
			ck.errorf("%s: redrive-error %q does not name the bad header %s", name, m[retry.HeaderError], retry.HeaderAttempt)
		}
		first := ck.msHeader(name, m, retry.HeaderFirstErrorAt, start, end)
		last := ck.msHeader(name, m, retry.HeaderLastErrorAt, start, end)
		if first > last {
			ck.errorf("%s: first error at %d after the last at %d", name, first, last)
		}
		if r.fate == "exhausted" && last-first < 900 {
			ck.errorf("%s: the two attempts were %d ms apart, the tier is 1s", name, last-first)
		}
		if r.fate == "expired" && o.Timestamp != r.timestamp {
			ck.errorf("%s: origin timestamp %d, produced with %d", name, o.Timestamp, r.timestamp)
		}
		if m[retry.HeaderGroup] != p.groupName {
			ck.errorf("%s: redrive-group %q, want %q", name, m[retry.HeaderGroup], p.groupName)
		}
		if m[retry.HeaderInstance] != instance {
			ck.errorf("%s: redrive-instance %q, want %q", name, m[retry.HeaderInstance], instance)
		}
		if p.style == dlq.StyleRedrive && len(hs.compat) > 0 {
			ck.errorf("%s: compatibility headers without header_style: %v", name, hs.compat)
		}
		calls := map[string]int{"permanent": 1, "exhausted": 2}[r.fate]
		checkCalls(ck, name, s.callsOf(p.solverPath, r), p, r, calls)
	}
	for _, r := range p.reqs {
		if r.fate != "ok" && got[r.ident()] != 1 {
			ck.errorf("%s's %s %s request %s has %d dead letters, want 1", r.client, r.compression, r.fate, showBytes([]byte(r.ident())), got[r.ident()])
		}
	}
	t.Logf("%s: %d dead letters checked", p.dead, len(p.deadOut))
}

// pythonDLQ runs the Python DLQ consumer and returns its records.
func pythonDLQ(t *testing.T, python, script, brokers, topic string, filter ...string) []kcatRecord {
	t.Helper()
	out := run(t, 90*time.Second, nil, python, append([]string{script, "dlq", brokers, topic}, filter...)...)
	var recs []kcatRecord
	dec := func(s *string) []byte {
		if s == nil {
			return nil
		}
		b, err := base64.StdEncoding.DecodeString(*s)
		if err != nil {
			t.Fatalf("python dlq: %v", err)
		}
		return b
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var raw struct {
			Partition int32        `json:"partition"`
			Offset    int64        `json:"offset"`
			Key       *string      `json:"key"`
			Value     *string      `json:"value"`
			Headers   [][2]*string `json:"headers"`
		}
		if err := json.Unmarshal(line, &raw); err != nil {
			t.Fatalf("python dlq line %.200q: %v", line, err)
		}
		r := kcatRecord{Topic: topic, Partition: raw.Partition, Offset: raw.Offset, Key: dec(raw.Key), Value: dec(raw.Value)}
		for _, h := range raw.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: *h[0], Value: dec(h[1])})
		}
		recs = append(recs, r)
	}
	return recs
}

// checkPythonRaw: librdkafka's raw bytes agree with kcat's -J, header for
// header, on every dead letter.
func checkPythonRaw(t *testing.T, python, script, brokers string, p *pipe) {
	ck := &checker{t: t, what: p.dead + " (python)"}
	recs := pythonDLQ(t, python, script, brokers, p.dead)
	if len(recs) != len(p.deadOut) {
		ck.errorf("python read %d dead letters, kcat %d", len(recs), len(p.deadOut))
	}
	p.pythonDead = map[string][]kgo.RecordHeader{}
	for _, r := range recs {
		p.pythonDead[identOf(r.Value, r.Headers)] = r.Headers
		k, ok := p.deadByIdent[identOf(r.Value, r.Headers)]
		if !ok {
			ck.errorf("python read a dead letter kcat did not: %s", showBytes(r.Value))
			continue
		}
		if !sameBytes(k.Key, r.Key) || !sameBytes(k.Value, r.Value) || !sameHeaders(k.Headers, r.Headers) || k.Partition != r.Partition || k.Offset != r.Offset {
			ck.errorf("python and kcat disagree on %d/%d:\npython key %s headers %s\nkcat   key %s headers %s",
				r.Partition, r.Offset, showBytes(r.Key), showHeaders(r.Headers), showBytes(k.Key), showHeaders(k.Headers))
		}
	}
}

// checkSpring: Spring Kafka's DeadLetterPublishingRecoverer headers, the
// partition a 4-byte and offset and timestamp 8-byte big-endian numbers,
// checked on the raw bytes librdkafka (Python) read.
func checkSpring(t *testing.T, p *pipe) {
	ck := &checker{t: t, what: p.dead + " spring"}
	for v, hs := range p.pythonDead {
		r := p.byIdent[v]
		if r == nil {
			continue
		}
		name := fmt.Sprintf("%s's %s dead letter %s", r.client, r.fate, showBytes(r.value[:min(40, len(r.value))]))
		sp := splitHeaders(hs)
		o := p.origin[v]
		want := map[string][]byte{
			dlq.SpringOriginalTopic:     []byte(p.topic),
			dlq.SpringOriginalPartition: binary.BigEndian.AppendUint32(nil, uint32(o.Partition)),
			dlq.SpringOriginalOffset:    binary.BigEndian.AppendUint64(nil, uint64(o.Offset)),
			dlq.SpringOriginalTimestamp: binary.BigEndian.AppendUint64(nil, uint64(o.Timestamp)),
			dlq.SpringExceptionMessage:  []byte(sp.redrive[retry.HeaderError]),
			dlq.SpringExceptionFQCN:     []byte("redrive." + sp.redrive[retry.HeaderErrorClass]),
		}
		for k, w := range want {
			g, ok := sp.compat[k]
			if !ok {
				ck.errorf("%s: no %s", name, k)
				continue
			}
			if !bytes.Equal(g, w) {
				ck.errorf("%s: %s = % x, want % x", name, k, g, w)
			}
		}
		if len(sp.compat) != len(want) {
			ck.errorf("%s: compatibility headers %v, want %d", name, keys(sp.compat), len(want))
		}
		// Decoded as Spring's recoverer would (ByteBuffer.getInt/getLong).
		if len(sp.compat[dlq.SpringOriginalPartition]) == 4 && int32(binary.BigEndian.Uint32(sp.compat[dlq.SpringOriginalPartition])) != o.Partition {
			ck.errorf("%s: original partition decodes wrong", name)
		}
		if len(sp.compat[dlq.SpringOriginalTimestamp]) == 8 && int64(binary.BigEndian.Uint64(sp.compat[dlq.SpringOriginalTimestamp])) != o.Timestamp {
			ck.errorf("%s: original timestamp decodes wrong", name)
		}
	}
	if len(p.pythonDead) == 0 {
		t.Fatal("no dead letters read with python")
	}
}

// checkConnect: Kafka Connect's DLQ reporter headers, numbers as decimal
// strings.
func checkConnect(t *testing.T, p *pipe) {
	ck := &checker{t: t, what: p.dead + " connect"}
	for v, rec := range p.deadByIdent {
		r := p.byIdent[v]
		if r == nil {
			continue
		}
		name := fmt.Sprintf("%s's %s dead letter %s", r.client, r.fate, showBytes(r.value[:min(40, len(r.value))]))
		sp := splitHeaders(rec.Headers)
		o := p.origin[v]
		want := map[string]string{
			dlq.ConnectTopic:     p.topic,
			dlq.ConnectPartition: strconv.Itoa(int(o.Partition)),
			dlq.ConnectOffset:    strconv.FormatInt(o.Offset, 10),
			dlq.ConnectClassName: "redrive." + sp.redrive[retry.HeaderErrorClass],
			dlq.ConnectMessage:   sp.redrive[retry.HeaderError],
		}
		for k, w := range want {
			g, ok := sp.compat[k]
			if !ok {
				ck.errorf("%s: no %s", name, k)
				continue
			}
			if string(g) != w {
				ck.errorf("%s: %s = %q, want %q", name, k, g, w)
			}
		}
		if len(sp.compat) != len(want) {
			ck.errorf("%s: compatibility headers %v, want %d", name, keys(sp.compat), len(want))
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkFilter: a DLQ consumer in Python filters on redrive-reason and
// redrive-error-code, as README documents, and gets exactly the requests
// that failed that way.
func checkFilter(t *testing.T, python, script, brokers string, p *pipe) {
	cases := []struct {
		reason, code string
		fates        []string
	}{
		{"permanent", "", []string{"permanent"}},
		{"exhausted", "ERROR_NO_SLOT_AVAILABLE", []string{"exhausted"}},
		{"invalid", "bad_header", []string{"invalid"}},
		{"expired", "ttl", []string{"expired"}},
		{"", "ERROR_WRONG_USER_KEY", []string{"permanent"}},
		{"permanent", "ERROR_NO_SLOT_AVAILABLE", nil},
	}
	for _, tc := range cases {
		var args []string
		if tc.reason != "" {
			args = append(args, "--reason", tc.reason)
		}
		if tc.code != "" {
			args = append(args, "--code", tc.code)
		}
		want := map[string]bool{}
		for _, r := range p.reqs {
			for _, f := range tc.fates {
				if r.fate == f {
					want[r.ident()] = true
				}
			}
		}
		got := map[string]bool{}
		for _, r := range pythonDLQ(t, python, script, brokers, p.dead, args...) {
			id := identOf(r.Value, r.Headers)
			if got[id] {
				t.Errorf("filter %v: %s twice", args, showBytes(r.Value))
			}
			got[id] = true
			if !want[id] {
				t.Errorf("filter %v: got %s, which failed otherwise", args, showBytes(r.Value))
			}
		}
		for v := range want {
			if !got[v] {
				t.Errorf("filter %v: missed %s", args, showBytes([]byte(v)))
			}
		}
		t.Logf("python DLQ consumer %v: %d dead letters, as expected %d", args, len(got), len(want))
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
