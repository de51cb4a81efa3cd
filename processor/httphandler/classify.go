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
	sent := c.sent
	var doc any
	var docErr error = ErrBadResponse
	if h.json != nil && !tooLarge {
		doc, docErr = decodeJSON(body)
	}
	rerr := &ResponseError{Method: c.method, URL: c.safeURL, StatusCode: status}
	var kind processor.Kind
	fallback := "http_" + strconv.Itoa(status)
	switch {
	case status == http.StatusAccepted && !c.submitJob:
		kind = processor.NotReady
	case isSuccess(status):
		switch {
		case tooLarge:
			fallback, rerr.Cause = CodeBodyTooLarge, ErrBodyTooLarge
			rerr.Detail = fmt.Sprintf("body longer than %d bytes", h.maxBody)
		case h.json == nil:
			return processor.Succeed(body)
		case docErr != nil:
			fallback, rerr.Cause = CodeBadResponse, ErrBadResponse
			rerr.Detail = h.scrub.text("body is not JSON: " + docErr.Error())
		default:
			ok, detail := h.json.ok(doc)
			if ok {
				return processor.Succeed(body)
			}
			fallback, rerr.Cause, rerr.Detail = CodeNotOK, ErrNotOK, detail
		}
		kind = processor.Transient
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests,
		status >= 500 && status <= 599:
		kind = processor.Transient
	case status >= 400 && status <= 499:
		kind = processor.Permanent
	default: // 1xx, 3xx (redirects are not followed), nonsense
		kind = processor.Transient
	}

	code := h.scrub.code(header.Get(HeaderErrorCode))
	if code == "" && h.json != nil && docErr == nil {
		code = h.scrub.code(h.json.code(doc))
	}
	if code == "" {
		code = fallback
	}
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
	var out processor.Outcome
	switch kind {
	case processor.NotReady:
		state := sent
		if s := header.Get(HeaderState); s != "" {
			state = []byte(s)
		}
		out = processor.Poll(state, minDelay)
	case processor.Permanent:
		out = processor.Fail(code, rerr)
	default: // code rules name only transient, not-ready and permanent
		switch {
		case class.requestFault:
			out = processor.RetryRequestFault(code, rerr)
		case status == http.StatusTooManyRequests:
			// The service asks us to slow down: neither it nor the
			// request failed.
			out = processor.Throttled(code, rerr, minDelay)
		default:
			out = processor.Retry(code, rerr)
		}
	}
	// Every failure says which code and answer it was, and keeps the delay
	// asked for (a code rule may have turned it permanent).
	out.Code, out.Err, out.MinDelay = code, rerr, minDelay
	return out
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
