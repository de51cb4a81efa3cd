package intake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/bearer"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// Defaults of Options.
const (
	DefaultIDField      = "id"
	DefaultResultField  = "code"
	DefaultMaxBodyBytes = 64 << 10 // 64 KiB
	// DefaultMaxResultBytes bounds a callback's result: room for the
	// longest CAPTCHA tokens, while a held callback stays small
	// (processor.Callbacks.MaxBytes counts them).
	DefaultMaxResultBytes = 32 << 10 // 32 KiB
	// MaxMaxBodyBytes bounds MaxBodyBytes, so that a callback's record
	// fits a topic's default max.message.bytes (1 MiB).
	MaxMaxBodyBytes = 512 << 10
	// AckTimeout is how long a request waits for the broker to
	// acknowledge its write before it is answered 503 (Options.AckTimeout).
	AckTimeout = 10 * time.Second
)

// Options are one pipeline's intake.
type Options struct {
	// Pipeline names the pipeline in metrics and logs. Required.
	Pipeline string
	// Path is served (exactly) by NewMux: "/cb". Required, starting with
	// "/", a clean path of printable ASCII without '%', '?' or '#'.
	Path string
	// Token is the shared secret a request must carry in the token query
	// parameter or the Redrive-Callback-Token header; "": none is asked.
	// A token set must pass bearer.Check (16 printable characters or
	// more, no spaces).
	Token string
	// IDField, ResultField and ErrorField name the request's fields of the
	// job id (default DefaultIDField), the result (default
	// DefaultResultField) and the service's error ("": none).
	IDField, ResultField, ErrorField string
	// Topic is the callbacks topic (topics.CallbacksTopic of the main
	// topic, usually). Required.
	Topic string
	// DLQ is the pipeline's dead-letter topic, for invalid callbacks.
	// Required.
	DLQ string
	// DLQHeaderStyle adds compatibility headers to those dead letters, as
	// the processor's (dlq.BuildOptions.HeaderStyle).
	DLQHeaderStyle string
	// Instance is written to redrive-instance on those dead letters.
	Instance string
	// MaxBodyBytes bounds a request's body and its query, each (default
	// DefaultMaxBodyBytes; at most MaxMaxBodyBytes): a longer one is
	// answered 413.
	MaxBodyBytes int64
	// MaxResultBytes bounds the result field (default
	// DefaultMaxResultBytes; at most MaxBodyBytes): a callback with a
	// longer one is answered 413 and not written, as one whose error is
	// longer than MaxErrorBytes; its job is polled after the wait. The job
	// id is bounded by retry.MaxStateBytes (a longer one is invalid).
	MaxResultBytes int
	// AckTimeout bounds the wait for the broker's acknowledgement
	// (default AckTimeout).
	AckTimeout time.Duration
	// Client writes the records. It must produce with acks=all and a
	// record delivery timeout (ProducerOpts does both): a broker that is
	// down then fails the write instead of keeping it buffered.
	Client *kgo.Client
	// Logger gets a line per request answered 503 and per invalid
	// callback (default slog.Default()).
	Logger *slog.Logger
	// Registerer gets the intake's metrics (nil: not registered). Intakes
	// of several pipelines may share one.
	Registerer prometheus.Registerer
}

// ProducerOpts are the client options the intake's Client needs: acks from
// every in-sync replica, no linger (each callback waits for its own
// write), a record delivery timeout of AckTimeout, so that a write to
// a broker that is down fails instead of waiting in the buffer, and no
// compression. Add them after the connection options (kafkaconn).
//
// Uncompressed because a caller chooses what a callback holds: a
// megabyte of one repeated byte compresses to almost nothing, and every
// processor's callbacks reader, whose fetches are bounded in bytes as
// fetched, would decompress many of them at once.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(AckTimeout),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}
}

// WithDefaults fills the zero values: IDField, ResultField, MaxBodyBytes,
// MaxResultBytes, AckTimeout and Logger.
func (o Options) WithDefaults() Options {
	if o.IDField == "" {
		o.IDField = DefaultIDField
	}
	if o.ResultField == "" {
		o.ResultField = DefaultResultField
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = int(min(DefaultMaxResultBytes, o.MaxBodyBytes))
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = AckTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate checks options whose defaults are filled in (WithDefaults),
// all but Client. Each problem is a *processor.FieldError naming the
// field (Path, IDField, ...), joined.
func (o Options) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &processor.FieldError{Field: field, Index: -1, Msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case o.Pipeline == "":
		add("Pipeline", "required")
	case !topics.LegalChars(o.Pipeline):
		add("Pipeline", "%q: use letters, digits, '.', '_' and '-'", o.Pipeline)
	}
	if msg := CheckPath(o.Path); msg != "" {
		add("Path", "%s", msg)
	}
	if o.Token != "" {
		if err := bearer.Check(o.Token); err != nil {
			errs = append(errs, &processor.FieldError{Field: "Token", Index: -1, Msg: err.Error(), Err: err})
		}
	}
	fields := map[string]string{"IDField": o.IDField, "ResultField": o.ResultField, "ErrorField": o.ErrorField}
	for _, f := range []string{"IDField", "ResultField", "ErrorField"} {
		v := fields[f]
		switch {
		case v == "" && f != "ErrorField":
			add(f, "required")
		case v == TokenParam:
			add(f, "%q is the token's parameter, not a field", v)
		case len(v) > 256:
			add(f, "%d bytes: at most 256", len(v))
		}
	}
	if o.ResultField != "" && o.ResultField == o.IDField {
		add("ResultField", "%q is the id field too", o.ResultField)
	}
	if o.ErrorField != "" && (o.ErrorField == o.IDField || o.ErrorField == o.ResultField) {
		add("ErrorField", "%q is the id or result field too", o.ErrorField)
	}
	for _, t := range []struct{ field, name string }{{"Topic", o.Topic}, {"DLQ", o.DLQ}} {
		if err := topics.ValidateName(t.name); err != nil {
			errs = append(errs, &processor.FieldError{Field: t.field, Index: -1, Msg: err.Error(), Err: err})
		}
	}
	if o.Topic != "" && o.Topic == o.DLQ {
		add("Topic", "%q is the DLQ too", o.Topic)
	}
	switch o.DLQHeaderStyle {
	case "", "spring", "connect":
	default:
		add("DLQHeaderStyle", "%q: want \"spring\", \"connect\" or nothing", o.DLQHeaderStyle)
	}
	if o.MaxBodyBytes < 1 || o.MaxBodyBytes > MaxMaxBodyBytes {
		add("MaxBodyBytes", "%d: want 1 to %d (512KiB)", o.MaxBodyBytes, MaxMaxBodyBytes)
	} else if o.MaxResultBytes < 1 || int64(o.MaxResultBytes) > o.MaxBodyBytes {
		add("MaxResultBytes", "%d: want 1 to max_body_bytes (%d)", o.MaxResultBytes, o.MaxBodyBytes)
	}
	if o.AckTimeout <= 0 {
		add("AckTimeout", "%s: must be more than 0", o.AckTimeout)
	}
	return errors.Join(errs...)
}

// CheckPath says what is wrong with a callback path, or "".
func CheckPath(p string) string {
	switch {
	case p == "":
		return "required"
	case p[0] != '/':
		return fmt.Sprintf("%q: must start with /", p)
	case len(p) > 1024:
		return fmt.Sprintf("%d bytes: at most 1024", len(p))
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '?' || c == '#' {
			return fmt.Sprintf("%q: printable ASCII only, without spaces, '%%', '?' or '#'", p)
		}
	}
	if path.Clean(p) != p {
		return fmt.Sprintf("%q: not a clean path (want %q)", p, path.Clean(p))
	}
	return ""
}

// Intake is one pipeline's callback endpoint, an http.Handler. NewMux
// serves several on one server by path.
type Intake struct {
	o        Options
	requests map[string]prometheus.Counter // by result
	ack      prometheus.Observer
	now      func() time.Time
}

// ErrClient is wrapped by New's error for a Client that is missing or
// does not produce with acks=all and a record delivery timeout.
var ErrClient = errors.New("callback intake client")

// New makes the intake of o (after WithDefaults and Validate).
func New(o Options) (*Intake, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := checkClient(o.Client); err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	in := &Intake{o: o, requests: map[string]prometheus.Counter{}, now: time.Now}
	for _, r := range Results {
		in.requests[r] = m.requests.WithLabelValues(o.Pipeline, r)
	}
	in.ack = m.ack.WithLabelValues(o.Pipeline)
	return in, nil
}

func checkClient(cl *kgo.Client) error {
	if cl == nil {
		return fmt.Errorf("%w: none", ErrClient)
	}
	if acks, _ := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return fmt.Errorf("%w: it must produce with acks=all (kgo.RequiredAcks(kgo.AllISRAcks()), ProducerOpts)", ErrClient)
	}
	if d, _ := cl.OptValue(kgo.RecordDeliveryTimeout).(time.Duration); d <= 0 {
		return fmt.Errorf("%w: it needs a record delivery timeout (kgo.RecordDeliveryTimeout, ProducerOpts), or a broker that is down keeps writes buffered", ErrClient)
	}
	return nil
}

// Options are the intake's options, defaults filled in.
func (in *Intake) Options() Options { return in.o }

// Path is the path the intake serves.
func (in *Intake) Path() string { return in.o.Path }

// The fixed answers: nothing a caller sent is ever in one.
const (
	bodyOK          = "OK\n"
	bodyForbidden   = "forbidden\n"
	bodyTooLarge    = "request too large\n"
	bodyUnavailable = "unavailable, try again\n"
	bodyMethod      = "method not allowed\n"
	bodyBadRequest  = "bad request\n"
	bodyNotFound    = "not found\n"
)

func answer(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// ServeHTTP takes one callback; see the package documentation.
func (in *Intake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		in.count(ResultMethod)
		w.Header().Set("Allow", "GET, POST")
		answer(w, http.StatusMethodNotAllowed, bodyMethod)
		return
	}
	if !in.authorized(r) {
		in.count(ResultForbidden)
		answer(w, http.StatusForbidden, bodyForbidden)
		return
	}
	if int64(len(r.URL.RawQuery)) > in.o.MaxBodyBytes {
		in.count(ResultTooLarge)
		answer(w, http.StatusRequestEntityTooLarge, bodyTooLarge)
		return
	}
	req := Request{Method: r.Method, Query: r.URL.RawQuery}
	if r.Method == http.MethodPost {
		req.ContentType = r.Header.Get("Content-Type")
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, in.o.MaxBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			in.count(ResultTooLarge)
			answer(w, http.StatusRequestEntityTooLarge, bodyTooLarge)
			return
		case err != nil:
			// The caller went away or stalled past the server's read
			// timeout: nothing was received whole, nothing is written.
			in.o.Logger.Debug("callback body not read", "pipeline", in.o.Pipeline, "err", err)
			answer(w, http.StatusBadRequest, bodyBadRequest)
			return
		}
		req.Body = body
	}

	p, perr := Parse(req, in.fields())
	if errors.Is(perr, ErrTooLarge) {
		// Not written: the store would hold it, on every replica. The
		// job is polled after the wait.
		in.count(ResultTooLarge)
		in.o.Logger.Info("callback refused: a field is too large (answered 413; its job is polled)", "pipeline", in.o.Pipeline, "err", perr)
		answer(w, http.StatusRequestEntityTooLarge, bodyTooLarge)
		return
	}
	rec, result := in.record(p, perr)
	if err := in.write(rec); err != nil {
		in.count(ResultUnavailable)
		in.o.Logger.Warn("callback not written: answered 503", "pipeline", in.o.Pipeline, "topic", rec.Topic, "err", err)
		answer(w, http.StatusServiceUnavailable, bodyUnavailable)
		return
	}
	in.count(result)
	if result == ResultInvalid {
		in.o.Logger.Info("invalid callback written to the DLQ", "pipeline", in.o.Pipeline, "topic", rec.Topic, "code", Code(perr))
	}
	answer(w, http.StatusOK, bodyOK)
}

func (in *Intake) fields() Fields {
	return Fields{ID: in.o.IDField, Result: in.o.ResultField, Error: in.o.ErrorField, Token: in.o.Token,
		MaxResult: in.o.MaxResultBytes, MaxError: MaxErrorBytes}
}

func (in *Intake) count(result string) { in.requests[result].Inc() }

// authorized checks the token, in constant time: the query parameter and
// the header are both compared (bearer.Equal), whatever either holds.
func (in *Intake) authorized(r *http.Request) bool {
	if in.o.Token == "" {
		return true
	}
	q := bearer.Equal(tokenParam(r.URL.RawQuery), in.o.Token)
	h := bearer.Equal(r.Header.Get(HeaderToken), in.o.Token)
	return q || h
}

// tokenParam is the first token parameter of a query ("" if none), also
// when another part of the query does not parse.
func tokenParam(q string) string {
	for _, pair := range strings.Split(q, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err != nil || uk != TokenParam {
			continue
		}
		uv, _ := url.QueryUnescape(v)
		return uv
	}
	return ""
}

// record is what a parsed request becomes: the callback record, or the
// dead letter of an invalid one; and the result it is counted as once
// acknowledged.
func (in *Intake) record(p Parsed, perr error) (*kgo.Record, string) {
	now := in.now()
	if perr == nil {
		cb := p.Callback
		cb.At = now
		return processor.CallbackRecord(in.o.Topic, cb), ResultAccepted
	}
	what := "query"
	var user []kgo.RecordHeader
	if p.Method == http.MethodPost {
		what = "body"
	}
	if p.ContentType != "" {
		user = append(user, kgo.RecordHeader{Key: "content-type", Value: []byte(p.ContentType)})
	}
	if p.Query != "" {
		user = append(user, kgo.RecordHeader{Key: "query", Value: []byte(p.Query)})
	}
	msg := fmt.Sprintf("callback to %s not written to %s: %s; the value is the %s as received (token removed)",
		in.o.Path, in.o.Topic, scrubText(perr.Error(), in.o.Token), what)
	meta := retry.Meta{
		ID:        newID(),
		HasOrigin: true, OriginTopic: in.o.Topic, OriginTimestamp: now,
		FirstErrorAt: now, LastErrorAt: now,
		Error: retry.TruncateUTF8(msg, retry.MaxErrorBytes), ErrorCode: Code(perr), ErrorClass: retry.ClassInvalid,
		Reason: string(dlq.ReasonInvalid),
	}
	src := &kgo.Record{Topic: in.o.Topic, Value: p.Raw, Timestamp: now}
	return dlq.Build(src, meta, user, dlq.BuildOptions{Topic: in.o.DLQ, Instance: in.o.Instance, HeaderStyle: in.o.DLQHeaderStyle}), ResultInvalid
}

// newID is an invalid callback's redrive-id: it never was a record, so it
// has no topic/partition/offset to be named by.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "callback-" + hex.EncodeToString(b[:])
}

// write produces rec and waits for the broker's acknowledgement, at most
// AckTimeout. Not ProduceSync: a request already sent cannot be failed
// early by an idempotent producer, so ProduceSync may outlast its context;
// the caller gets its 503 at AckTimeout here whatever the broker does. A
// write acknowledged after that is a duplicate at worst.
func (in *Intake) write(rec *kgo.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), in.o.AckTimeout)
	defer cancel()
	done := make(chan error, 1) // the promise never blocks, also after a timeout
	start := time.Now()
	in.o.Client.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		in.ack.Observe(time.Since(start).Seconds())
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no acknowledgement from the broker within %s", in.o.AckTimeout)
	}
}

// Ready reports whether the intake's topics (the callbacks topic and the
// DLQ) exist and every partition has a leader, from fresh metadata: nil
// when the intake can write.
func (in *Intake) Ready(ctx context.Context) error {
	adm := kadm.NewClient(in.o.Client)
	want := []string{in.o.Topic, in.o.DLQ}
	md, err := adm.Metadata(kadm.WithAuthorizedOps(ctx), want...)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", strings.Join(want, ", "), err)
	}
	var errs []error
	for _, t := range want {
		td, ok := md.Topics[t]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: not in the metadata", t))
		case td.Err != nil:
			errs = append(errs, fmt.Errorf("%s: %w (redrive topics ensure creates it)", t, td.Err))
		case len(td.Partitions) == 0:
			errs = append(errs, fmt.Errorf("%s: no partitions", t))
		default:
			for _, p := range td.Partitions {
				if p.Err != nil || p.Leader < 0 {
					errs = append(errs, fmt.Errorf("%s: partition %d has no leader", t, p.Partition))
					break
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Mux serves intakes by their exact paths; any other path is 404.
type Mux struct {
	routes map[string]*Intake
}

// NewMux serves the intakes; two with the same path are an error.
func NewMux(intakes ...*Intake) (*Mux, error) {
	m := &Mux{routes: make(map[string]*Intake, len(intakes))}
	for _, in := range intakes {
		if prev, ok := m.routes[in.o.Path]; ok {
			return nil, fmt.Errorf("callback path %s: pipelines %s and %s", in.o.Path, prev.o.Pipeline, in.o.Pipeline)
		}
		m.routes[in.o.Path] = in
	}
	return m, nil
}

func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, ok := m.routes[r.URL.Path]
	if !ok {
		answer(w, http.StatusNotFound, bodyNotFound)
		return
	}
	in.ServeHTTP(w, r)
}

// Intakes are the served intakes, in no order.
func (m *Mux) Intakes() []*Intake {
	out := make([]*Intake, 0, len(m.routes))
	for _, in := range m.routes {
		out = append(out, in)
	}
	return out
}
