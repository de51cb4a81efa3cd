package httphandler

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

const (
	maxErrorBytes = retry.MaxErrorBytes // redrive-error's bound
	maxCodeBytes  = 64                  // longer codes are cut (metrics label them "other" anyway)
	bodySnippet   = 200                 // bytes of a failure's body quoted in its error
)

// Causes a ResponseError can wrap, for errors.Is.
var (
	// ErrBodyTooLarge: a 2xx body was longer than Options.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("response body too large")
	// ErrBadResponse: JSON mode, a 2xx body was not one JSON value.
	ErrBadResponse = errors.New("response body is not JSON")
	// ErrNotOK: JSON mode, the ok field did not hold the ok value.
	ErrNotOK = errors.New("response is not ok")
)

// ResponseError is Outcome.Err for an HTTP answer that was not a success.
type ResponseError struct {
	Method     string // GET or POST; "" is POST
	URL        string // the URL called, without query or user info, its secrets masked
	StatusCode int
	Code       string // the outcome's code
	Cause      error  // ErrBodyTooLarge, ErrBadResponse, ErrNotOK, or nil for a failing status
	Detail     string // what was wrong with a 2xx answer
	Body       string // the start of the body, valid UTF-8, control characters as spaces
	// Code, Detail and Body quote the service; the handler masks the
	// configured secrets in them (and in URL) before it fills them in.
}

// Error is "<method> <url>: <status>[: <detail>][: <body>]", at most 1 KiB.
func (e *ResponseError) Error() string {
	var b strings.Builder
	if e.Method == "" {
		b.WriteString(http.MethodPost)
	} else {
		b.WriteString(e.Method)
	}
	b.WriteString(" ")
	b.WriteString(e.URL)
	b.WriteString(": ")
	b.WriteString(strings.TrimSpace(strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)))
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(e.Body)
	}
	return truncate(b.String(), maxErrorBytes)
}

// Unwrap returns Cause.
func (e *ResponseError) Unwrap() error { return e.Cause }

// classify maps one HTTP answer to an Outcome. body holds at most
// MaxBodyBytes bytes; tooLarge says the answer had more. sent is the state
// the request carried. It must not panic, whatever the answer.
func (h *Handler) classify(status int, header http.Header, body []byte, tooLarge bool, sent []byte, now time.Time) processor.Outcome {
	return h.classifyCall(call{method: http.MethodPost, safeURL: h.safeURL, sent: sent}, status, header, body, tooLarge, now)
}

// classifyCall is classify for the answer to c: its method and URL name
// it in errors; the state it sent is kept on a not-ready answer without
// one; a job API's submit reads a 202 like any 2xx.
func (h *Handler) classifyCall(c call, status int, header http.Header, body []byte, tooLarge bool, now time.Time) processor.Outcome {
	a := answer{status: status, header: header, body: body, tooLarge: tooLarge, docErr: ErrBadResponse}
	if h.json != nil && !tooLarge {
		a.doc, a.docErr = decodeJSON(body)
	}
	rerr := &ResponseError{Method: c.method, URL: c.safeURL, StatusCode: status}
	kind, fallback, ok := h.statusKind(a, c.submitJob, rerr)
	if ok {
		return processor.Succeed(body)
	}
	code := h.codeOf(a, fallback)
	class, ruled := h.classOf[code]
	if ruled {
		kind = class.kind
	}
	minDelay, _ := parseRetryAfter(header.Get(HeaderRetryAfter), now)
	if d := h.minDelay[code]; d > minDelay {
		minDelay = d
	}
	rerr.Code = code
	rerr.Body = h.scrub.snippet(body, bodySnippet)
	if d, ok := h.pause[code]; ok {
		// The account is blocked, not this request: whatever the status.
		return processor.Pause(code, rerr, d)
	}
	out := failure(a, kind, class, code, rerr, minDelay, c.sent)
	// Every failure says which code and answer it was, and keeps the delay
	// asked for (a code rule may have turned it permanent).
	out.Code, out.Err, out.MinDelay = code, rerr, minDelay
	return out
}

// answer is one HTTP answer as classifyCall reads it.
type answer struct {
	status   int
	header   http.Header
	body     []byte // at most MaxBodyBytes
	tooLarge bool   // the body had more
	doc      any    // the body decoded, JSON mode
	docErr   error  // why doc is missing; ErrBadResponse when not decoded
}

// statusKind is the kind the status gives a (code rules may change it) and
// the code of a failure when the service names none; ok: a success. A 2xx
// that is not a success fills rerr's Cause and Detail. submitJob: a job
// API's submit, whose 202 is read like any 2xx.
func (h *Handler) statusKind(a answer, submitJob bool, rerr *ResponseError) (kind processor.Kind, fallback string, ok bool) {
	fallback = "http_" + strconv.Itoa(a.status)
	switch {
	case a.status == http.StatusAccepted && !submitJob:
		return processor.NotReady, fallback, false
	case isSuccess(a.status):
		if fallback, ok = h.judge2xx(a, rerr); ok {
			return 0, "", true
		}
		return processor.Transient, fallback, false
	case a.status == http.StatusRequestTimeout, a.status == http.StatusTooEarly, a.status == http.StatusTooManyRequests,
		a.status >= 500 && a.status <= 599:
		return processor.Transient, fallback, false
	case a.status >= 400 && a.status <= 499:
		return processor.Permanent, fallback, false
	default: // 1xx, 3xx (redirects are not followed), nonsense
		return processor.Transient, fallback, false
	}
}

// judge2xx says whether a 2xx answer is a success: a body within
// MaxBodyBytes and, in JSON mode, JSON whose ok field holds the ok value.
// When it is not, it fills rerr's Cause and Detail and gives the code.
func (h *Handler) judge2xx(a answer, rerr *ResponseError) (code string, ok bool) {
	switch {
	case a.tooLarge:
		rerr.Cause = ErrBodyTooLarge
		rerr.Detail = fmt.Sprintf("body longer than %d bytes", h.maxBody)
		return CodeBodyTooLarge, false
	case h.json == nil:
		return "", true
	case a.docErr != nil:
		rerr.Cause = ErrBadResponse
		rerr.Detail = h.scrub.text("body is not JSON: " + a.docErr.Error())
		return CodeBadResponse, false
	}
	ok, detail := h.json.ok(a.doc)
	if ok {
		return "", true
	}
	rerr.Cause, rerr.Detail = ErrNotOK, detail
	return CodeNotOK, false
}

// codeOf is the failure's code: the error code header's, else (JSON mode)
// the body's code field, else fallback.
func (h *Handler) codeOf(a answer, fallback string) string {
	code := h.scrub.code(a.header.Get(HeaderErrorCode))
	if code == "" && h.json != nil && a.docErr == nil {
		code = h.scrub.code(h.json.code(a.doc))
	}
	if code == "" {
		code = fallback
	}
	return code
}

// failure is the Outcome of an answer that is not a success, of kind
// (after code rules; class is the code's rule). sent is the state the
// call carried, kept by a not-ready answer without one.
func failure(a answer, kind processor.Kind, class codeClass, code string, rerr *ResponseError, minDelay time.Duration, sent []byte) processor.Outcome {
	switch kind {
	case processor.NotReady:
		state := sent
		if s := a.header.Get(HeaderState); s != "" {
			state = []byte(s)
		}
		return processor.Poll(state, minDelay)
	case processor.Permanent:
		return processor.Fail(code, rerr)
	}
	// Code rules name only transient, not-ready and permanent.
	switch {
	case class.requestFault:
		return processor.RetryRequestFault(code, rerr)
	case a.status == http.StatusTooManyRequests:
		// The service asks us to slow down: neither it nor the
		// request failed.
		return processor.Throttled(code, rerr, minDelay)
	default:
		return processor.Retry(code, rerr)
	}
}

// cleanCode makes a code fit for a header and a metric label: trimmed,
// valid UTF-8, no control characters, at most maxCodeBytes.
func cleanCode(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return strings.TrimSpace(truncate(s, maxCodeBytes))
}

// snippet is the first n bytes of b as one line of valid UTF-8.
func snippet(b []byte, n int) string {
	if len(b) > n+utf8.UTFMax {
		b = b[:n+utf8.UTFMax]
	}
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "\uFFFD"))
	return strings.TrimSpace(truncate(s, n))
}

// truncate cuts s to at most n bytes of valid UTF-8.
func truncate(s string, n int) string { return retry.TruncateUTF8(s, n) }
