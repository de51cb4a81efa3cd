package httphandler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/processor"
)

// formType is the content type of a form body.
const formType = "application/x-www-form-urlencoded"

// call is one HTTP request the handler makes: a submit (a plain call of
// the protocol, or a job API's submit) or a poll of a job.
type call struct {
	method  string // GET or POST
	url     string
	safeURL string // for messages: no query, no user info
	body    []byte
	ctype   string // "": no Content-Type
	sent    []byte // the state sent in Redrive-State
	// submitJob: a job API's submit, whose 202 is read like any 2xx (the
	// job id is in its body).
	submitJob bool
}

// encodeFields is fields as a query or form: sorted by name, escaped.
func encodeFields(fields map[string]string) string {
	v := url.Values{}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v.Set(k, fields[k])
	}
	return v.Encode()
}

// addQuery is raw (a URL) with the encoded fields added to its query, the
// query it has kept as written.
func addQuery(raw, fields string) string {
	if fields == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil { // not reached: New checked the URL
		return raw
	}
	if u.RawQuery == "" {
		u.RawQuery = fields
	} else {
		u.RawQuery = strings.TrimSuffix(u.RawQuery, "&") + "&" + fields
	}
	u.ForceQuery = false
	return u.String()
}

// isForm reports whether ctype is application/x-www-form-urlencoded.
func isForm(ctype string) bool {
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil {
		mt, _, _ = strings.Cut(ctype, ";")
	}
	return strings.EqualFold(strings.TrimSpace(mt), formType)
}

// submitCall is the request that submits req's record: POST url (with the
// Query fields), the record value as the body with the record's content
// type, the Form fields added to a form body, or to the query of any other.
func (h *Handler) submitCall(req *processor.Request) call {
	c := call{method: http.MethodPost, url: h.url, safeURL: h.safeURL, ctype: h.ctype, sent: req.State, submitJob: h.poll != nil}
	recordType := ""
	if req.Record != nil {
		c.body = req.Record.Value
		for _, hd := range req.Record.Headers {
			if strings.EqualFold(hd.Key, "content-type") && len(hd.Value) > 0 && validValue(string(hd.Value)) {
				recordType = string(hd.Value)
				c.ctype = recordType
				break
			}
		}
	}
	if h.form == "" {
		return c
	}
	switch {
	case recordType == "" && !h.ctypeSet:
		c.ctype = formType // a record without a type is sent as a form
	case isForm(c.ctype):
	default: // JSON, or anything else that is not a form: the fields go to the query
		c.url = h.urlWithForm
		return c
	}
	body := make([]byte, 0, len(c.body)+1+len(h.form))
	body = append(body, c.body...)
	if len(body) > 0 && body[len(body)-1] != '&' {
		body = append(body, '&')
	}
	c.body = append(body, h.form...)
	return c
}

// do makes the call c for req and classifies the answer. status is the
// answer's status code (0 when none came).
func (h *Handler) do(ctx context.Context, req *processor.Request, c call) (out processor.Outcome, status int) {
	actx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var body io.Reader
	if c.method != http.MethodGet {
		body = bytes.NewReader(c.body)
	}
	hr, err := http.NewRequestWithContext(actx, c.method, c.url, body)
	if err != nil { // the URL was checked in New; not reached in practice
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its text repeats the URL, query included
		}
		return processor.Retry(CodeNetwork, fmt.Errorf("%s %s: %w", c.method, c.safeURL, err)), 0
	}
	hr.Header = h.headers.Clone()
	if c.ctype != "" {
		hr.Header.Set("Content-Type", c.ctype)
	}
	if req.ID != "" {
		// With this header net/http treats the POST as replayable: when a
		// reused keep-alive connection breaks before any answer, it resends
		// the request on a fresh connection within this attempt. A solver
		// that read the request and then hung up sees it again at once; it
		// would anyway on the next attempt, and dedupes by this key.
		hr.Header.Set(HeaderIdempotencyKey, req.ID)
	}
	hr.Header.Set(HeaderAttempt, strconv.Itoa(req.Attempt))
	if len(req.State) > 0 {
		setBytes(hr.Header, HeaderState, HeaderStateEncoding, req.State)
	}
	if req.Record != nil && req.Record.Key != nil {
		setBytes(hr.Header, HeaderKey, HeaderKeyEncoding, req.Record.Key)
	}

	resp, err := h.client.Do(hr)
	if err != nil {
		return h.transportFailure(ctx, c, err), 0
	}
	defer resp.Body.Close()
	data, tooLarge, err := readBody(resp.Body, h.maxBody)
	if err != nil && (isSuccess(resp.StatusCode) || ctx.Err() != nil) {
		// A failure's body only adds detail; a success's is the result.
		return h.transportFailure(ctx, c, err), 0
	}
	return h.classifyCall(c, resp.StatusCode, resp.Header, data, tooLarge, time.Now()), resp.StatusCode
}
