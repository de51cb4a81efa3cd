package httphandler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// Error codes of a job API (Options.Poll).
const (
	CodeNoJobID       = "no_job_id"      // an ok submit answer without a usable job id at Poll.StateField
	CodeNoStatus      = "no_status"      // an ok poll answer without Poll.Status.Field
	CodeUnknownStatus = "unknown_status" // a status value in none of Poll.Status's lists
	CodeNoResult      = "no_result"      // a done poll answer without Poll.ResultField
)

// Causes of a job API's ResponseError, for errors.Is.
var (
	// ErrNoJobID: an ok submit answer held no usable job id.
	ErrNoJobID = errors.New("no job id in the answer")
	// ErrNoStatus: an ok poll answer had no status field.
	ErrNoStatus = errors.New("no status in the answer")
	// ErrUnknownStatus: the status field held a value in none of the lists.
	ErrUnknownStatus = errors.New("unknown status")
	// ErrJobFailed: the status field held a value of Poll.Status.Failed.
	ErrJobFailed = errors.New("the job failed")
	// ErrNoResult: a done poll answer had no result field.
	ErrNoResult = errors.New("no result in the answer")
)

// statusClass is what a status value means.
type statusClass int

const (
	statusUnknown statusClass = iota
	statusDone
	statusPending
	statusFailed
)

// poller is a checked Poll.
type poller struct {
	url, body             string // templates
	method                string // GET or POST
	statePath, resultPath []string
	stateName, resultName string // as configured, for messages
	firstAfter, every     time.Duration
	status                *statusTable
	resubmit              map[string]bool // Poll.Resubmit
	scrub                 *scrubber       // masks the secrets of the values quoted
}

// statusTable is a checked StatusTable.
type statusTable struct {
	path  []string
	name  string
	class map[string]statusClass // by statusKey
}

// validate checks a Poll whose defaults are filled in (WithDefaults).
func (p *Poll) validate() []error {
	var errs []error
	bad := func(field string, index int, format string, args ...any) {
		errs = append(errs, &processor.FieldError{Field: field, Index: index, Msg: fmt.Sprintf(format, args...)})
	}
	urlErr := checkURLTemplate(p.URL)
	if urlErr != nil {
		bad("Poll.URL", -1, "%v", urlErr)
	}
	switch p.Method {
	case http.MethodGet:
		if p.Body != "" {
			bad("Poll.Body", -1, "needs method POST: a GET poll has no body")
		}
	case http.MethodPost:
	default:
		bad("Poll.Method", -1, "%q: want GET or POST", p.Method)
	}
	if err := checkBodyTemplate(p.Body); err != nil {
		bad("Poll.Body", -1, "%v", err)
	}
	inBody := p.Method == http.MethodPost && strings.Contains(p.Body, statePlaceholder)
	if urlErr == nil && !strings.Contains(p.URL, statePlaceholder) && !inBody {
		bad("Poll.URL", -1, "no %s: the job id must be in the URL (or, with method POST, in the body)", statePlaceholder)
	}
	if p.StateField == "" {
		bad("Poll.StateField", -1, "required with poll: the path of the job id in the submit's answer, e.g. request")
	} else if _, err := splitPath(p.StateField); err != nil {
		bad("Poll.StateField", -1, "%v", err)
	}
	if p.ResultField != "" {
		if _, err := splitPath(p.ResultField); err != nil {
			bad("Poll.ResultField", -1, "%v", err)
		}
	}
	for i, code := range p.Resubmit {
		if strings.TrimSpace(code) == "" {
			bad("Poll.Resubmit", i, "empty code")
		}
	}
	if p.FirstAfter <= 0 {
		bad("Poll.FirstAfter", -1, "%s: must be more than 0", p.FirstAfter)
	}
	if p.Every <= 0 {
		bad("Poll.Every", -1, "%s: must be more than 0", p.Every)
	}
	if st := p.Status; st != nil {
		if st.Field == "" {
			bad("Poll.Status.Field", -1, "required with status: the path of the status, e.g. status")
		} else if _, err := splitPath(st.Field); err != nil {
			bad("Poll.Status.Field", -1, "%v", err)
		}
		if len(st.Done) == 0 {
			bad("Poll.Status.Done", -1, "required with status: the values that mean done, e.g. [Completed]")
		}
		in := map[string]string{}
		for _, l := range []struct {
			field, name string
			values      []string
		}{{"Poll.Status.Done", "done", st.Done}, {"Poll.Status.Pending", "pending", st.Pending}, {"Poll.Status.Failed", "failed", st.Failed}} {
			for i, v := range l.values {
				k := statusKey(v)
				if k == "" {
					bad(l.field, i, "empty value")
					continue
				}
				if other, dup := in[k]; dup && other != l.name {
					bad(l.field, i, "%q is in %s too (values match without case); a value has one meaning", v, other)
				}
				in[k] = l.name
			}
		}
	}
	return errs
}

// compilePoll is p (checked) as the handler uses it.
func compilePoll(p *Poll) *poller {
	c := &poller{url: p.URL, body: p.Body, method: p.Method, stateName: p.StateField, resultName: p.ResultField,
		firstAfter: p.FirstAfter, every: p.Every}
	c.statePath, _ = splitPath(p.StateField)
	if len(p.Resubmit) > 0 {
		c.resubmit = make(map[string]bool, len(p.Resubmit))
		for _, code := range p.Resubmit {
			c.resubmit[code] = true
		}
	}
	if p.ResultField != "" {
		c.resultPath, _ = splitPath(p.ResultField)
	}
	if st := p.Status; st != nil {
		t := &statusTable{name: st.Field, class: map[string]statusClass{}}
		t.path, _ = splitPath(st.Field)
		for _, l := range []struct {
			values []string
			class  statusClass
		}{{st.Done, statusDone}, {st.Pending, statusPending}, {st.Failed, statusFailed}} {
			for _, v := range l.values {
				t.class[statusKey(v)] = l.class
			}
		}
		c.status = t
	}
	return c
}

// statusKey is how a status value is compared: trimmed, in lower case.
func statusKey(v string) string { return strings.ToLower(strings.TrimSpace(v)) }

// scalarText is a JSON scalar as text: a string as is, a number in its
// decimal form (1.0 is "1"), a bool as true or false.
func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		if f, err := strconv.ParseFloat(x.String(), 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10), true
		}
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// jobID is the job id in a submit's answer, or why there is none.
func (p *poller) jobID(body []byte) (string, string) {
	doc, err := decodeJSON(body)
	if err != nil {
		return "", p.scrub.text("body is not JSON: " + err.Error())
	}
	v, found := lookup(doc, p.statePath)
	var id string
	switch x := v.(type) {
	case string:
		id = x
	case json.Number:
		id = x.String() // as written: 23501 is "23501"
	default:
		if !found {
			return "", p.stateName + " missing"
		}
		return "", fmt.Sprintf("%s is %s, want a string or a number", p.stateName, p.scrub.describe(v))
	}
	switch {
	case strings.TrimSpace(id) == "":
		return "", p.stateName + " is empty"
	case len(id) > retry.MaxStateBytes:
		return "", fmt.Sprintf("%s is %d bytes long, more than %d", p.stateName, len(id), retry.MaxStateBytes)
	}
	return id, ""
}

// pollCall is the request that polls job.
func (h *Handler) pollCall(job string) call {
	p := h.poll
	raw := expandTemplate(p.url, job, true)
	c := call{method: p.method, url: raw, sent: []byte(job)}
	if u, err := url.Parse(raw); err == nil {
		c.safeURL = h.scrub.text(messageURL(u))
	} else { // not reached: FuzzPollURL
		c.safeURL = h.pollSafeURL
	}
	if p.method == http.MethodPost {
		c.body = []byte(expandTemplate(p.body, job, false))
		c.ctype = formType
	}
	return c
}

// submitted is the outcome of a job API's submit: an ok answer holds the
// job id and means "poll it after FirstAfter".
func (h *Handler) submitted(c call, out processor.Outcome, status int) processor.Outcome {
	if out.Kind != processor.Success {
		return out
	}
	id, detail := h.poll.jobID(out.Result)
	if detail != "" {
		return processor.Retry(CodeNoJobID, &ResponseError{Method: c.method, URL: c.safeURL, StatusCode: status, Code: CodeNoJobID,
			Cause: ErrNoJobID, Detail: "no job id: " + detail, Body: h.scrub.snippet(out.Result, bodySnippet)})
	}
	return processor.Poll([]byte(id), h.poll.firstAfter)
}

// polled is the outcome of a poll of job: every failure but a permanent
// one keeps the job id as its state, so that the next call polls again
// instead of submitting again (a resubmit is charged again) — except a
// code in Poll.Resubmit: the job itself failed and may be tried anew
// (2captcha's ERROR_CAPTCHA_UNSOLVABLE), a transient failure without
// state. An ok answer is read by the status table and the result field.
func (h *Handler) polled(c call, job []byte, out processor.Outcome, status int) processor.Outcome {
	if h.poll.resubmit[out.Code] && out.Kind != processor.Success {
		out.Kind, out.State, out.MinDelay = processor.Transient, nil, 0
		return out
	}
	switch out.Kind {
	case processor.NotReady:
		out.State, out.MinDelay = job, max(out.MinDelay, h.poll.every)
	case processor.Transient, processor.Paused:
		out.State = job
	case processor.Success:
		out = h.done(c, job, status, out.Result)
	}
	return out
}

// done reads an ok poll answer: its status (Poll.Status) and its result
// (Poll.ResultField, else the whole body).
func (h *Handler) done(c call, job []byte, status int, body []byte) processor.Outcome {
	p := h.poll
	rerr := func(code string, cause error, detail string, n int) *ResponseError {
		return &ResponseError{Method: c.method, URL: c.safeURL, StatusCode: status, Code: code, Cause: cause, Detail: detail, Body: h.scrub.snippet(body, n)}
	}
	retryJob := func(code string, cause error, detail string) processor.Outcome {
		out := processor.Retry(code, rerr(code, cause, detail, bodySnippet))
		out.State = job
		return out
	}
	var doc any
	if p.status != nil || p.resultPath != nil {
		var err error
		if doc, err = decodeJSON(body); err != nil {
			return retryJob(CodeBadResponse, ErrBadResponse, h.scrub.text("body is not JSON: "+err.Error()))
		}
	}
	if t := p.status; t != nil {
		v, found := lookup(doc, t.path)
		if !found || v == nil {
			return retryJob(CodeNoStatus, ErrNoStatus, t.name+" missing")
		}
		text, scalar := scalarText(v)
		class := statusUnknown
		if scalar {
			class = t.class[statusKey(text)]
		}
		detail := fmt.Sprintf("%s is %s", t.name, p.scrub.describe(v))
		switch class {
		case statusPending:
			code := h.scrub.code(text)
			out := processor.Poll(job, p.every)
			out.Code, out.Err = code, rerr(code, nil, detail+": pending", bodySnippet)
			return out
		case statusFailed:
			code := h.scrub.code(text)
			return processor.Fail(code, rerr(code, ErrJobFailed, detail+": failed", maxErrorBytes))
		case statusUnknown:
			return retryJob(CodeUnknownStatus, ErrUnknownStatus, detail+", in none of done, pending and failed")
		}
	}
	if p.resultPath == nil {
		return processor.Succeed(body)
	}
	v, found := lookup(doc, p.resultPath)
	if !found {
		return retryJob(CodeNoResult, ErrNoResult, p.resultName+" missing")
	}
	return processor.Succeed(resultBytes(v))
}

// resultBytes is a result field's value: a string as is, anything else as
// its JSON text.
func resultBytes(v any) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil { // not reached: v was decoded from JSON
		return nil
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
