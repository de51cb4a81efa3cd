package httphandler

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redrive/redrive/internal/redact"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// Request and response headers of the protocol.
const (
	HeaderIdempotencyKey = "Idempotency-Key"        // the request id (redrive-id)
	HeaderAttempt        = "Redrive-Attempt"        // this attempt, 1-based
	HeaderState          = "Redrive-State"          // opaque state: sent back on a poll, read from a 202
	HeaderStateEncoding  = "Redrive-State-Encoding" // "base64url" when the sent state was encoded
	HeaderKey            = "Redrive-Key"            // the record key
	HeaderKeyEncoding    = "Redrive-Key-Encoding"   // "base64url" when the key was encoded
	HeaderErrorCode      = "Redrive-Error-Code"     // response: the service's error code
	HeaderRetryAfter     = "Retry-After"            // response: seconds or an HTTP-date

	// EncodingBase64URL is the value of the -Encoding headers: unpadded
	// base64url, RFC 4648 §5.
	EncodingBase64URL = "base64url"
)

// Error codes the handler itself gives (a service's own codes win).
const (
	CodeTimeout      = "timeout"        // no complete answer within Options.Timeout
	CodeConnect      = "connect"        // could not connect: dial, DNS, TLS certificate
	CodeNetwork      = "network"        // the connection failed after it was made
	CodeCanceled     = "canceled"       // the caller's context ended (shutdown, revoke)
	CodeBodyTooLarge = "body_too_large" // a 2xx body longer than Options.MaxBodyBytes
	CodeBadResponse  = "bad_response"   // JSON mode: a 2xx body that is not JSON
	CodeNotOK        = "not_ok"         // JSON mode: not ok, and no code in the body
	CodeBadID        = "bad_request_id" // the request id cannot be sent as a header
)

// Defaults of Options.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	DefaultConcurrency  = 256 // idle connections kept per host without Options.Concurrency
)

// Options configures a Handler.
type Options struct {
	// URL is where records are POSTed: absolute, http or https.
	URL string
	// Timeout bounds one attempt, from sending to the last byte of the
	// answer. Default 30s.
	Timeout time.Duration
	// Headers are sent with every request, already ${ENV}-expanded. They
	// cannot name a protocol header (Idempotency-Key, Redrive-*), Host or
	// Content-Length; a Content-Type here is used for records without one.
	Headers map[string]string
	// JSON, when set, reads the ok flag and the error code from the body.
	JSON *JSONRule
	// MaxBodyBytes bounds the response body that is read. Default 1 MiB.
	// A longer 2xx body is a transient failure (body_too_large), never a
	// truncated result; of a failure's body only the start is read.
	MaxBodyBytes int64
	// Codes override the class of a failure by its code.
	Codes Codes
	// Client sends the requests. Default: a client of its own with pooled
	// connections. Redirects are not followed unless Client.CheckRedirect
	// is set.
	Client *http.Client
	// Concurrency is how many requests may run at once (the pipeline's
	// concurrency): the default client keeps that many idle connections to
	// the host, so none is closed and reopened between requests. Default
	// DefaultConcurrency.
	Concurrency int
	// Query fields are added to the submit URL's query (an api key,
	// json=1, a pingback URL), values URL-escaped.
	Query map[string]string
	// Form fields are added to the body of a form record
	// (application/x-www-form-urlencoded, or a record without a content
	// type, which is then sent as a form).
	Form map[string]string
	// Poll, when set, makes the handler speak a job API: the call is a
	// submit; its answer, when ok, holds the job id (StateField) and means
	// not ready; the record is then called again with the job id as its
	// state, and that call polls Poll.URL instead of submitting again.
	Poll *Poll
	// Secrets are more values that no error may show, besides those the
	// handler finds in the options itself (see the package doc, Errors):
	// the values of the ${NAME}s expanded into the options, say. Values
	// shorter than 4 bytes are not masked in free text.
	Secrets []string
}

// Poll is the poll side of a job API (submit, then poll).
type Poll struct {
	// URL is a template: {state} becomes the job id, query-escaped. http
	// or https, absolute.
	URL string
	// Method is GET (default) or POST.
	Method string
	// Body is the form body template of a POST poll; {state} becomes the
	// job id, query-escaped.
	Body string
	// StateField is the JSON path of the job id in the submit's answer
	// ("request" for {"status":1,"request":"2122988149"}, "order" for
	// {"order":23501}); a number is used as written. Required.
	StateField string
	// ResultField is the JSON path of the result in a done poll answer;
	// empty: the whole answer is the result.
	ResultField string
	// FirstAfter is how long after the submit the first poll is made;
	// Every how long after a not-ready poll the next is. Defaults
	// DefaultPollFirstAfter, DefaultPollEvery.
	FirstAfter, Every time.Duration
	// Status, when set, reads a status field of the poll answer.
	Status *StatusTable
	// Resubmit are codes of a poll answer (or a callback) meaning the job
	// failed and may be submitted again (2captcha's
	// ERROR_CAPTCHA_UNSOLVABLE): a transient failure without the job id,
	// so the next attempt submits anew. Any other failed poll keeps the
	// job id and polls the same job again.
	Resubmit []string
}

// StatusTable classifies a poll answer by the value of a status field
// (SMM panels: {"status":"In progress"}). Values match without regard to
// case; a number matches its decimal form ("1" and 1 are the same).
type StatusTable struct {
	Field   string   // JSON path; required
	Done    []string // success: the whole answer (or ResultField) is the result
	Pending []string // not ready: polled again after Poll.Every
	Failed  []string // permanent failure; the answer is the error
}

// Defaults of Poll.
const (
	DefaultPollFirstAfter = 5 * time.Second
	DefaultPollEvery      = 5 * time.Second
)

// JSONRule is JSON mode: the body of a 2xx answer says whether it worked.
type JSONRule struct {
	// OKField is the dot path of the ok flag, e.g. "status" or "data.ok";
	// a numeric segment indexes an array ("items.0.ok").
	OKField string
	// OKValue is the value meaning ok: a string, a bool or a number
	// (compared by value: 1 equals 1.0). Types must match: "1" is not 1.
	OKValue any
	// CodeField is the dot path of the error code (optional). A string is
	// the code; a number or bool is used as written.
	CodeField string
}

// Codes are the code rules: the class a failure with that code gets, and a
// minimum delay before the next attempt. Codes match exactly (case matters).
type Codes struct {
	Transient []string
	// RequestFault codes are transient too, and the outcome is marked
	// processor.Outcome.RequestFault: the request's own fault (a CAPTCHA
	// the workers cannot solve), so the circuit breaker, which judges the
	// service, never counts it.
	RequestFault []string
	NotReady     []string
	Permanent    []string
	// MinDelay raises the outcome's MinDelay (e.g. above Retry-After).
	MinDelay map[string]time.Duration
	// Pause: an answer with one of these codes means the whole account
	// is blocked (ERROR_ZERO_BALANCE): the outcome is processor.Pause
	// with that duration (at least 1s), whatever the HTTP status.
	Pause map[string]time.Duration
}

// Handler is the HTTP processor.Handler. It is safe for concurrent use.
type Handler struct {
	url         string // as configured, with the Query fields
	urlWithForm string // url with the Form fields too, for records that are not forms
	safeURL     string // for messages: no query, no user info, secrets masked
	timeout     time.Duration
	maxBody     int64
	headers     http.Header
	ctype       string // default Content-Type
	ctypeSet    bool   // Options.Headers has a Content-Type
	form        string // the Form fields, encoded
	json        *jsonRule
	classOf     map[string]codeClass
	minDelay    map[string]time.Duration
	pause       map[string]time.Duration
	poll        *poller // nil: no job API
	pollSafeURL string  // the poll URL template for messages
	client      *http.Client
	scrub       *scrubber // masks the configured secrets in every error
}

var (
	_ processor.Handler         = (*Handler)(nil)
	_ processor.CallbackHandler = (*Handler)(nil)
)

// ErrOptions is wrapped by every error New returns.
var ErrOptions = errors.New("httphandler: bad options")

// WithDefaults is o with Timeout and MaxBodyBytes filled in when zero
// (DefaultTimeout, DefaultMaxBodyBytes), and a Poll's (a copy: the
// caller's is not changed) Method (GET when empty, upper-cased),
// FirstAfter and Every (DefaultPollFirstAfter, DefaultPollEvery).
func (o Options) WithDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Poll != nil {
		p := o.Poll.WithDefaults()
		o.Poll = &p
	}
	return o
}

// WithDefaults is p with Method (GET when empty, else upper-cased),
// FirstAfter and Every (DefaultPollFirstAfter, DefaultPollEvery) filled in.
func (p Poll) WithDefaults() Poll {
	p.Method = strings.ToUpper(strings.TrimSpace(p.Method))
	if p.Method == "" {
		p.Method = http.MethodGet
	}
	if p.FirstAfter == 0 {
		p.FirstAfter = DefaultPollFirstAfter
	}
	if p.Every == 0 {
		p.Every = DefaultPollEvery
	}
	return p
}

// Validate checks options whose defaults are filled in (WithDefaults). It
// reports every problem, each a *processor.FieldError naming the Options
// field ("URL", "Headers" with its Key, "JSON.OKField", "Codes.Permanent"
// with its Index, "Poll.URL", "Poll.Status.Done" with its Index), joined
// with errors.Join. New runs it.
func (o Options) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &processor.FieldError{Field: field, Index: -1, Msg: fmt.Sprintf(format, args...)})
	}
	if o.URL == "" {
		bad("URL", "required")
	} else if u, err := url.Parse(o.URL); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text quotes the whole URL, secrets included
		}
		bad("URL", "%q: %v", redact.URL(o.URL), err)
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("URL", "%q: want an absolute http:// or https:// URL", redact.URL(o.URL))
	}
	if o.Timeout <= 0 {
		bad("Timeout", "%s: must be more than 0", o.Timeout)
	}
	if o.MaxBodyBytes < 1 {
		bad("MaxBodyBytes", "%d: must be at least 1", o.MaxBodyBytes)
	}
	if err := ValidateHeaders(o.Headers); err != nil {
		errs = append(errs, err.(interface{ Unwrap() []error }).Unwrap()...)
	}
	if j := o.JSON; j != nil {
		switch {
		case j.OKField == "" && j.CodeField == "":
			bad("JSON.OKField", "required with json unless code_field is set: the path of the ok flag, e.g. status")
		case j.OKField != "":
			if _, err := splitPath(j.OKField); err != nil {
				bad("JSON.OKField", "%v", err)
			}
		}
		if j.CodeField != "" {
			if _, err := splitPath(j.CodeField); err != nil {
				bad("JSON.CodeField", "%v", err)
			}
		}
		switch {
		case j.OKField == "" && j.OKValue != nil:
			bad("JSON.OKValue", "needs ok_field; without one an answer is ok when code_field is absent, null or empty")
		case j.OKField == "":
		case j.OKValue == nil:
			bad("JSON.OKValue", "required with ok_field: the value that means ok, e.g. 1")
		default:
			if _, err := normalise(j.OKValue); err != nil {
				bad("JSON.OKValue", "%v", err)
			}
		}
	}
	for _, f := range []struct {
		name   string
		fields map[string]string
	}{{"Query", o.Query}, {"Form", o.Form}} {
		for _, k := range slices.Sorted(maps.Keys(f.fields)) {
			if k == "" {
				bad(f.name, "empty field name")
			}
		}
	}
	if p := o.Poll; p != nil {
		errs = append(errs, p.validate()...)
	}
	if err := o.Codes.Validate(); err != nil {
		errs = append(errs, err.(interface{ Unwrap() []error }).Unwrap()...)
	}
	if len(errs) > 0 {
		// The messages quote URLs and templates: they mask what the
		// handler's errors mask (a token in a path, a header's value).
		s := newScrubber(o)
		for _, e := range errs {
			if fe, ok := e.(*processor.FieldError); ok {
				fe.Msg = s.text(fe.Msg)
			}
		}
	}
	return errors.Join(errs...)
}

// reservedHeader reports whether the handler sets header ck (canonical)
// itself, so that it cannot be configured.
func reservedHeader(ck string) bool {
	switch ck {
	case HeaderIdempotencyKey, "Host", "Content-Length", "Transfer-Encoding":
		return true
	}
	return strings.HasPrefix(ck, "Redrive-")
}

// ValidateHeaders checks static request headers (Options.Headers): valid
// names and values, no header the handler sets itself (Idempotency-Key,
// Redrive-*, Host, Content-Length, Transfer-Encoding), no name twice in
// different case. It reports every problem, each a *processor.FieldError
// with Field "Headers" and the header's Key, joined with errors.Join.
func ValidateHeaders(headers map[string]string) error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, &processor.FieldError{Field: "Headers", Index: -1, Key: k, Msg: fmt.Sprintf(format, args...)})
	}
	canon := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		if !validToken(k) {
			bad(k, "%q is not a valid HTTP header name", k)
			continue
		}
		if !validValue(headers[k]) {
			bad(k, "the value holds control characters (a newline?)")
		}
		ck := http.CanonicalHeaderKey(k)
		if reservedHeader(ck) {
			bad(k, "%s is set by the handler and cannot be configured", ck)
		}
		if other, dup := canon[ck]; dup {
			bad(k, "the same header as %q (header names ignore case)", other)
		}
		canon[ck] = k
	}
	return errors.Join(errs...)
}

// codeClass is the class a code rule gives an answer's code.
type codeClass struct {
	kind         processor.Kind
	requestFault bool // Codes.RequestFault: kind is Transient
}

// classList is one class of Codes: its field, its YAML name and its codes.
type classList struct {
	field, name string
	class       codeClass
	codes       []string
}

// classes are c's classes, in the order Validate reports a code twice.
func (c Codes) classes() []classList {
	return []classList{
		{"Codes.Transient", "transient", codeClass{kind: processor.Transient}, c.Transient},
		{"Codes.RequestFault", "request_fault", codeClass{kind: processor.Transient, requestFault: true}, c.RequestFault},
		{"Codes.NotReady", "not_ready", codeClass{kind: processor.NotReady}, c.NotReady},
		{"Codes.Permanent", "permanent", codeClass{kind: processor.Permanent}, c.Permanent},
	}
}

// Validate checks code rules: no empty code, no code in two classes
// (transient, request_fault, not_ready, permanent, pause), no negative
// minimum delay. It reports every problem, each a *processor.FieldError
// ("Codes.Transient" with its Index, "Codes.MinDelay" with its Key),
// joined with errors.Join.
func (c Codes) Validate() error {
	var errs []error
	in := map[string]string{}
	for _, l := range c.classes() {
		for j, code := range l.codes {
			fe := &processor.FieldError{Field: l.field, Index: j}
			if code == "" {
				fe.Msg = "empty code"
				errs = append(errs, fe)
				continue
			}
			if other, dup := in[code]; dup && other != l.name {
				fe.Msg = fmt.Sprintf("%q is in %s too; a code has one class", code, other)
				errs = append(errs, fe)
			}
			in[code] = l.name
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.MinDelay)) {
		if k == "" {
			errs = append(errs, &processor.FieldError{Field: "Codes.MinDelay", Index: -1, Msg: "empty code"})
		}
		if d := c.MinDelay[k]; d < 0 {
			errs = append(errs, &processor.FieldError{Field: "Codes.MinDelay", Index: -1, Key: k, Msg: fmt.Sprintf("%s: must not be negative", d)})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Pause)) {
		if k == "" {
			errs = append(errs, &processor.FieldError{Field: "Codes.Pause", Index: -1, Msg: "empty code"})
			continue
		}
		if d := c.Pause[k]; d < time.Second || d > 24*time.Hour {
			errs = append(errs, &processor.FieldError{Field: "Codes.Pause", Index: -1, Key: k, Msg: fmt.Sprintf("%s: must be 1s to 24h", d)})
		}
		if other, dup := in[k]; dup {
			errs = append(errs, &processor.FieldError{Field: "Codes.Pause", Index: -1, Key: k, Msg: fmt.Sprintf("%q is in %s too; a code has one class", k, other)})
		}
	}
	return errors.Join(errs...)
}

// New checks o (WithDefaults, then Validate) and returns a Handler. Every
// error it returns wraps ErrOptions.
func New(o Options) (*Handler, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	u, _ := url.Parse(o.URL) // checked by Validate
	scrub := newScrubber(o)
	h := &Handler{
		url:      addQuery(o.URL, encodeFields(o.Query)),
		form:     encodeFields(o.Form),
		scrub:    scrub,
		safeURL:  scrub.text(messageURL(u)),
		timeout:  o.Timeout,
		maxBody:  o.MaxBodyBytes,
		headers:  http.Header{},
		ctype:    "application/octet-stream",
		classOf:  map[string]codeClass{},
		minDelay: map[string]time.Duration{},
		pause:    map[string]time.Duration{},
	}
	for k, v := range o.Headers {
		ck := http.CanonicalHeaderKey(k)
		if ck == "Content-Type" {
			h.ctype, h.ctypeSet = v, true
			continue
		}
		h.headers.Set(ck, v)
	}
	if o.JSON != nil {
		var err error
		if h.json, err = compileJSON(o.JSON); err != nil { // not reached: Validate checked it
			return nil, fmt.Errorf("%w: json: %w", ErrOptions, err)
		}
		h.json.scrub = scrub
	}
	for _, l := range o.Codes.classes() {
		for _, c := range l.codes {
			h.classOf[c] = l.class
		}
	}
	maps.Copy(h.minDelay, o.Codes.MinDelay)
	maps.Copy(h.pause, o.Codes.Pause)
	h.urlWithForm = addQuery(h.url, h.form)
	if o.Poll != nil {
		h.poll = compilePoll(o.Poll)
		h.poll.scrub = scrub
		pu, _ := url.Parse(expandTemplate(o.Poll.URL, templateMarker, true)) // checked by Validate
		h.pollSafeURL = strings.ReplaceAll(scrub.text(messageURL(pu)), templateMarker, statePlaceholder)
	}
	h.client = o.Client
	if h.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// A processor runs up to `concurrency` requests to one host.
		t.MaxIdleConnsPerHost = DefaultConcurrency
		if o.Concurrency > 0 {
			t.MaxIdleConnsPerHost = o.Concurrency
		}
		t.MaxIdleConns = max(t.MaxIdleConns, t.MaxIdleConnsPerHost)
		h.client = &http.Client{Transport: t}
	}
	if h.client.CheckRedirect == nil {
		c := *h.client // a copy: never change the caller's client
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		h.client = &c
	}
	return h, nil
}

// Handle POSTs req's record and maps the answer to an Outcome. With a
// job API (Options.Poll), a request with State polls that job instead.
// No configured secret shows in the outcome's Err or Code, whatever the
// service echoed.
func (h *Handler) Handle(ctx context.Context, req *processor.Request) processor.Outcome {
	return h.seal(h.handle(ctx, req))
}

// seal masks the configured secrets in what out says about the failure:
// its Err (wrapped, so that errors.Is and errors.As still see the cause)
// and its Code. Every error the handler makes is scrubbed already; this
// is the last guard.
func (h *Handler) seal(out processor.Outcome) processor.Outcome {
	out.Err = h.scrub.err(out.Err)
	if out.Code != "" {
		out.Code = h.scrub.code(out.Code)
	}
	return out
}

func (h *Handler) handle(ctx context.Context, req *processor.Request) processor.Outcome {
	if req.ID != "" && !validValue(req.ID) {
		return processor.Reject(CodeBadID,
			fmt.Errorf("request id %q cannot be sent as %s: it holds control characters", truncate(req.ID, 200), HeaderIdempotencyKey))
	}
	if len(req.ID) > retry.MaxIDBytes {
		// The processor never passes one (redrive-id is bounded); a Go
		// caller might.
		return processor.Reject(CodeBadID,
			fmt.Errorf("request id of %d bytes cannot be sent as %s: longer than %d bytes", len(req.ID), HeaderIdempotencyKey, retry.MaxIDBytes))
	}
	if h.poll != nil && len(req.State) > 0 {
		job := bytes.Clone(req.State)
		if seg, dot := dotSegment(h.poll.url, string(job)); dot {
			// The server would resolve it as a step up or in place: the
			// poll would go to another resource, the API key with it.
			return processor.Reject(processor.CodeBadState,
				fmt.Errorf("job id %q cannot be put in the path of the poll URL %s: it makes the path segment %q; not sent",
					truncate(string(job), 200), h.pollSafeURL, seg))
		}
		c := h.pollCall(string(job))
		out, status := h.do(ctx, req, c)
		return h.polled(c, job, out, status)
	}
	c := h.submitCall(req)
	out, status := h.do(ctx, req, c)
	if h.poll != nil {
		return h.submitted(c, out, status)
	}
	return out
}

// readBody reads at most limit bytes of r; tooLarge reports that there was more.
func readBody(r io.Reader, limit int64) (body []byte, tooLarge bool, err error) {
	body, err = io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(body)) > limit {
		return body[:limit], true, err
	}
	return body, false, err
}

func isSuccess(status int) bool { return status >= 200 && status < 300 }

// transportFailure is the outcome of a call that got no (complete) answer.
func (h *Handler) transportFailure(ctx context.Context, c call, err error) processor.Outcome {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // its text repeats the URL, query included
	}
	code, what := CodeNetwork, "network error"
	var nerr net.Error
	var operr *net.OpError
	var dnserr *net.DNSError
	var tlserr *tls.RecordHeaderError
	var certerr *tls.CertificateVerificationError
	switch {
	case ctx.Err() != nil:
		code, what = CodeCanceled, "canceled"
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()):
		code, what = CodeTimeout, fmt.Sprintf("no answer within %s", h.timeout)
	case errors.As(err, &operr) && operr.Op == "dial", errors.As(err, &dnserr),
		errors.As(err, &tlserr), errors.As(err, &certerr):
		code, what = CodeConnect, "cannot connect"
	}
	// Its text may quote what the service sent back (a malformed answer).
	msg := h.scrub.text(fmt.Sprintf("%s %s: %s: %v", c.method, c.safeURL, what, err))
	return processor.Retry(code, &transportError{msg: truncate(msg, maxErrorBytes), err: err})
}

// transportError keeps the cause for errors.Is with a message of bounded length.
type transportError struct {
	msg string
	err error
}

func (e *transportError) Error() string { return e.msg }
func (e *transportError) Unwrap() error { return e.err }

// setBytes sets name to v, or to v in base64url with enc set when v is not
// printable ASCII.
func setBytes(h http.Header, name, enc string, v []byte) {
	if printable(v) {
		h.Set(name, string(v))
		return
	}
	h.Set(name, base64.RawURLEncoding.EncodeToString(v))
	h.Set(enc, EncodingBase64URL)
}

// printable: 0x20-0x7E only, no space at either end (HTTP trims it).
func printable(v []byte) bool {
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

// validValue reports whether v can be sent as an HTTP header value.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// validToken reports whether s is an HTTP token (a header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// messageURL is u for messages: without user info, query and fragment.
func messageURL(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}
