package intake

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/processor"
)

const testToken = "s3cr3t-t0ken-for-tests"

// closedAddr is a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// buffered counts the records a client was asked to produce.
type buffered struct{ n atomic.Int64 }

func (b *buffered) OnProduceRecordBuffered(*kgo.Record) { b.n.Add(1) }

func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, ProducerOpts()...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func baseOptions(cl *kgo.Client, reg prometheus.Registerer) Options {
	return Options{
		Pipeline: "captcha", Path: "/cb", Token: testToken, ErrorField: "error",
		Topic: "captcha.requests.callbacks", DLQ: "captcha.requests.dlq",
		Client: cl, Registerer: reg,
	}
}

func mustNew(t *testing.T, o Options) *Intake {
	t.Helper()
	in, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

type reply struct {
	status int
	body   string
	header http.Header
	err    error
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header}
}

func newReq(t *testing.T, method, u string, body string, header ...string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// noEcho fails t when an answer holds anything the caller sent.
func noEcho(t *testing.T, r reply, sent ...string) {
	t.Helper()
	for _, s := range sent {
		if strings.Contains(r.body, s) {
			t.Errorf("answer %q echoes %q", r.body, s)
		}
		for k, vs := range r.header {
			for _, v := range vs {
				if strings.Contains(v, s) {
					t.Errorf("answer header %s: %q echoes %q", k, v, s)
				}
			}
		}
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
}

func TestOptionsValidate(t *testing.T) {
	cl := newClient(t, []string{closedAddr(t)})
	good := baseOptions(cl, nil).WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("good options: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(o *Options)
	}{
		{"Pipeline", func(o *Options) { o.Pipeline = "" }},
		{"Pipeline", func(o *Options) { o.Pipeline = "a b" }},
		{"Path", func(o *Options) { o.Path = "" }},
		{"Path", func(o *Options) { o.Path = "cb" }},
		{"Path", func(o *Options) { o.Path = "/cb?x=1" }},
		{"Path", func(o *Options) { o.Path = "/c%62" }},
		{"Path", func(o *Options) { o.Path = "/cb/" }},
		{"Path", func(o *Options) { o.Path = "/a//b" }},
		{"Path", func(o *Options) { o.Path = "/a b" }},
		{"IDField", func(o *Options) { o.IDField = "token" }},
		{"ResultField", func(o *Options) { o.ResultField = o.IDField }},
		{"ErrorField", func(o *Options) { o.ErrorField = o.ResultField }},
		{"Topic", func(o *Options) { o.Topic = "" }},
		{"Topic", func(o *Options) { o.Topic = "a/b" }},
		{"Topic", func(o *Options) { o.Topic = o.DLQ }},
		{"DLQ", func(o *Options) { o.DLQ = "" }},
		{"DLQHeaderStyle", func(o *Options) { o.DLQHeaderStyle = "kafka" }},
		{"MaxBodyBytes", func(o *Options) { o.MaxBodyBytes = -1 }},
		{"MaxBodyBytes", func(o *Options) { o.MaxBodyBytes = MaxMaxBodyBytes + 1 }},
		{"AckTimeout", func(o *Options) { o.AckTimeout = -time.Second }},
	} {
		o := good
		tc.edit(&o)
		err := o.Validate()
		var fe *processor.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: err %v, want a FieldError for %s", o, err, tc.field)
		}
	}
	for _, p := range []string{"/", "/cb", "/hooks/2captcha", "/a-b_c.d~e"} {
		if msg := CheckPath(p); msg != "" {
			t.Errorf("CheckPath(%q) = %q", p, msg)
		}
	}
}

func TestNewChecksTheClient(t *testing.T) {
	addr := closedAddr(t)
	for name, cl := range map[string]*kgo.Client{
		"no client":           nil,
		"acks=1":              newClient(t, []string{addr}, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()),
		"no delivery timeout": newClient(t, []string{addr}, kgo.RecordDeliveryTimeout(0)),
	} {
		if _, err := New(baseOptions(cl, nil)); !errors.Is(err, ErrClient) {
			t.Errorf("%s: New = %v, want ErrClient", name, err)
		}
	}
}

// Refused requests are answered at once with a fixed text and write
// nothing: 405, 403 (token missing or wrong), 413 (query or body too
// large), 404 (another path).
func TestRefusedRequestsWriteNothing(t *testing.T) {
	var hook buffered
	cl := newClient(t, []string{closedAddr(t)}, kgo.WithHooks(&hook))
	reg := prometheus.NewRegistry()
	o := baseOptions(cl, reg)
	o.MaxBodyBytes = 100
	in := mustNew(t, o)
	mux, err := NewMux(in)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cb := srv.URL + "/cb"
	const id, code = "job-4711", "ANSWER-xyz"
	q := "?id=" + id + "&code=" + code

	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		body   string
	}{
		{"PUT", newReq(t, "PUT", cb+q+"&token="+testToken, "id="+id), 405, bodyMethod},
		{"HEAD", newReq(t, "HEAD", cb+q+"&token="+testToken, ""), 405, ""},
		{"DELETE", newReq(t, "DELETE", cb+q+"&token="+testToken, ""), 405, bodyMethod},
		{"no token", newReq(t, "GET", cb+q, ""), 403, bodyForbidden},
		{"wrong token", newReq(t, "GET", cb+q+"&token=wrong-"+testToken, ""), 403, bodyForbidden},
		{"token prefix", newReq(t, "GET", cb+q+"&token="+testToken[:10], ""), 403, bodyForbidden},
		{"wrong header", newReq(t, "POST", cb, "id="+id, "Redrive-Callback-Token", "nope", "Content-Type", "application/x-www-form-urlencoded"), 403, bodyForbidden},
		{"empty token", newReq(t, "GET", cb+q+"&token=", ""), 403, bodyForbidden},
		{"query too large", newReq(t, "GET", cb+q+"&token="+testToken+"&pad="+strings.Repeat("p", 100), ""), 413, bodyTooLarge},
		{"body too large", newReq(t, "POST", cb+"?token="+testToken, "id="+id+"&code="+strings.Repeat("c", 200), "Content-Type", "application/x-www-form-urlencoded"), 413, bodyTooLarge},
		{"other path", newReq(t, "GET", srv.URL+"/cb2"+q+"&token="+testToken, ""), 404, bodyNotFound},
	} {
		r := do(t, tc.req)
		if r.err != nil {
			t.Fatalf("%s: %v", tc.name, r.err)
		}
		if r.status != tc.status || r.body != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.name, r.status, r.body, tc.status, tc.body)
		}
		if tc.status == 405 && r.header.Get("Allow") != "GET, POST" {
			t.Errorf("%s: Allow %q", tc.name, r.header.Get("Allow"))
		}
		noEcho(t, r, id, code, testToken, "wrong", "nope")
	}
	if n := hook.n.Load(); n != 0 {
		t.Errorf("%d records produced for refused requests", n)
	}
	for result, want := range map[string]float64{ResultMethod: 3, ResultForbidden: 5, ResultTooLarge: 2, ResultAccepted: 0, ResultInvalid: 0, ResultUnavailable: 0} {
		if got := testutil.ToFloat64(in.requests[result]); got != want {
			t.Errorf("redrive_callback_requests_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	// Every series exists from the start, for the pipeline.
	if n := testutil.CollectAndCount(reg, "redrive_callback_requests_total"); n != len(Results) {
		t.Errorf("%d request series, want %d", n, len(Results))
	}
}

func TestMuxRefusesTwoIntakesOnOnePath(t *testing.T) {
	cl := newClient(t, []string{closedAddr(t)})
	reg := prometheus.NewRegistry()
	a := mustNew(t, baseOptions(cl, reg))
	o := baseOptions(cl, reg) // the same Registerer: the series are shared
	o.Pipeline, o.Topic, o.DLQ = "other", "other.callbacks", "other.dlq"
	b := mustNew(t, o)
	if _, err := NewMux(a, b); err == nil || !strings.Contains(err.Error(), "/cb") {
		t.Errorf("NewMux with one path twice = %v", err)
	}
	o.Path = "/cb-other"
	c := mustNew(t, o)
	if m, err := NewMux(a, c); err != nil || len(m.Intakes()) != 2 {
		t.Errorf("NewMux = %v, %v", m, err)
	}
}

// With the broker down, a callback is answered 503, not 200: nothing is
// claimed that is not in Kafka. The client's record delivery timeout
// (1s here, AckTimeout in ProducerOpts) fails the write.
func TestBrokerDownIs503(t *testing.T) {
	cl := newClient(t, []string{closedAddr(t)}, kgo.RecordDeliveryTimeout(time.Second))
	o := baseOptions(cl, prometheus.NewRegistry())
	o.AckTimeout = 5 * time.Second
	in := mustNew(t, o)
	srv := httptest.NewServer(in)
	defer srv.Close()

	for _, u := range []string{
		srv.URL + "/cb?id=J1&code=C1&token=" + testToken, // a callback
		srv.URL + "/cb?code=C1&token=" + testToken,       // an invalid one: its dead letter fails too
	} {
		start := time.Now()
		r := do(t, newReq(t, "GET", u, ""))
		took := time.Since(start)
		if r.err != nil || r.status != http.StatusServiceUnavailable || r.body != bodyUnavailable {
			t.Errorf("broker down: %d %q %v, want 503", r.status, r.body, r.err)
		}
		if took > 30*time.Second {
			t.Errorf("answered after %s", took)
		}
		noEcho(t, r, "J1", "C1", testToken)
	}
	if got := testutil.ToFloat64(in.requests[ResultUnavailable]); got != 2 {
		t.Errorf("unavailable = %v, want 2", got)
	}
	if got := testutil.ToFloat64(in.requests[ResultAccepted]) + testutil.ToFloat64(in.requests[ResultInvalid]); got != 0 {
		t.Errorf("accepted+invalid = %v with the broker down", got)
	}
}

// holdProduce makes c hold every Produce request until release is
// closed; held is closed when the first one arrives.
func holdProduce(c *kfake.Cluster) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { close(held) })
		c.SleepControl(func() { <-release })
		return nil, nil, false // then the broker handles it as usual
	})
	return held, release
}

// The intake answers 200 only after the broker acknowledged the write.
//
// kfake here, not the real broker: the property is about an answer the
// broker has not given yet, and only kfake can hold a broker's answer back
// (ControlKey on Produce + SleepControl) while the test looks at the HTTP
// side. A real broker answers as fast as it can.
func TestAnswersOnlyAfterTheBrokerAck(t *testing.T) {
	const topic, dlqTopic = "captcha.requests.callbacks", "captcha.requests.dlq"
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, topic, dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, release := holdProduce(c)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	cl := newClient(t, c.ListenAddrs())
	o := baseOptions(cl, prometheus.NewRegistry())
	o.AckTimeout = time.Minute // the hold, not the timeout, decides here
	in := mustNew(t, o)
	srv := httptest.NewServer(in)
	defer srv.Close()

	answered := make(chan reply, 1)
	go func() {
		answered <- do(t, newReq(t, "GET", srv.URL+"/cb?id=2122988149&code=03AGdBq2&token="+testToken, ""))
	}()
	select {
	case <-held:
	case r := <-answered:
		t.Fatalf("answered %d %q before the write reached the broker", r.status, r.body)
	case <-time.After(30 * time.Second):
		t.Fatal("no produce request reached the broker in 30s")
	}
	// The write is at the broker, its answer held: the request must still
	// be waiting. (A lower bound: no answer within this window.)
	select {
	case r := <-answered:
		t.Fatalf("answered %d %q while the broker held its ack", r.status, r.body)
	case <-time.After(500 * time.Millisecond):
	}
	if got := testutil.ToFloat64(in.requests[ResultAccepted]); got != 0 {
		t.Fatalf("accepted = %v before the ack", got)
	}

	close(release)
	released = true
	var r reply
	select {
	case r = <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer 30s after the broker's ack was released")
	}
	if r.err != nil || r.status != http.StatusOK || r.body != bodyOK {
		t.Fatalf("after the ack: %d %q %v, want 200 OK", r.status, r.body, r.err)
	}
	noEcho(t, r, "2122988149", "03AGdBq2", testToken)

	// And the record is in the topic.
	rd := newClient(t, c.ListenAddrs(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 && ctx.Err() == nil {
		fs := rd.PollFetches(ctx)
		recs = append(recs, fs.Records()...)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records in %s, want 1", len(recs), topic)
	}
	cb, err := processor.DecodeCallback(recs[0])
	if err != nil || cb.JobID != "2122988149" || string(cb.Result) != "03AGdBq2" || cb.Error != "" {
		t.Errorf("record = %+v, %v", cb, err)
	}
	if testutil.ToFloat64(in.requests[ResultAccepted]) != 1 {
		t.Error("accepted not counted")
	}
}

// A write the broker does not acknowledge within AckTimeout is answered
// 503, though it is still in flight.
func TestNoAckWithinTheTimeoutIs503(t *testing.T) {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "captcha.requests.callbacks", "captcha.requests.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cl := newClient(t, c.ListenAddrs())
	o := baseOptions(cl, prometheus.NewRegistry())
	o.AckTimeout = 2 * time.Second
	in := mustNew(t, o)
	// Warm the client up (metadata, producer id, connection) so that the
	// callback's write is sent at once and is in flight at the timeout.
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: o.Topic, Key: []byte("warm-up")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	held, release := holdProduce(c)
	defer close(release)
	srv := httptest.NewServer(in)
	defer srv.Close()

	start := time.Now()
	r := do(t, newReq(t, "POST", srv.URL+"/cb", url.Values{"id": {"9"}, "code": {"x"}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded", HeaderToken, testToken))
	took := time.Since(start)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the write never reached the broker")
	}
	if r.err != nil || r.status != http.StatusServiceUnavailable || r.body != bodyUnavailable {
		t.Fatalf("no ack: %d %q %v, want 503", r.status, r.body, r.err)
	}
	if took < o.AckTimeout {
		t.Errorf("answered after %s, before the ack timeout %s", took, o.AckTimeout)
	}
}
