package intake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/processor"
)

// Error codes of the dead letters the intake writes (redrive-error-code,
// reason invalid; docs/outcomes.md).
const (
	// CodeNoID: the callback carried no job id in IDField, or one that
	// processor.CheckJobID refuses (too long, not UTF-8).
	CodeNoID = "callback_no_id"
	// CodeBadBody: the query or body does not parse (a form with a bad
	// escape, JSON that is not one object or not UTF-8, a content type the
	// intake does not read).
	CodeBadBody = "callback_bad_body"
)

// MaxErrorBytes bounds a callback's error field (Fields.MaxError as the
// intake sets it): a dead letter keeps 1 KiB of an error anyway.
const MaxErrorBytes = 4 << 10

// Errors of Parse. Code maps them to the dead letter's code.
var (
	// ErrNoID: no job id, or a bad one (CodeNoID).
	ErrNoID = errors.New("callback without a valid job id")
	// ErrBadBody: the query or body does not parse (CodeBadBody).
	ErrBadBody = errors.New("callback query or body does not parse")
	// ErrMethod: neither GET nor POST.
	ErrMethod = errors.New("callback method not GET or POST")
	// ErrTooLarge: the result or the error is longer than its limit
	// (Fields.MaxResult, Fields.MaxError). The intake answers 413 and
	// writes nothing: the job is polled after the wait.
	ErrTooLarge = errors.New("callback field too large")
)

// Code is the dead-letter code of a Parse error: CodeNoID or CodeBadBody
// ("" for nil, ErrMethod and ErrTooLarge, which are answered 405 and 413
// and never written).
func Code(err error) string {
	switch {
	case errors.Is(err, ErrNoID):
		return CodeNoID
	case errors.Is(err, ErrBadBody):
		return CodeBadBody
	}
	return ""
}

// Fields names the fields Parse reads and the secret it keeps out of what
// it returns.
type Fields struct {
	ID     string // the job id's field (required)
	Result string // the result's field (absent: an empty result)
	Error  string // the service's error field; "": none is read
	// Token is the shared secret. The token query parameter (and a form
	// body's token field) is dropped from Parsed.Raw and Parsed.Query, and
	// any other occurrence of its text there and in the result and the
	// error is replaced.
	Token string
	// MaxResult and MaxError bound the result's and the error's length in
	// bytes (0: no bound); a longer one is ErrTooLarge.
	MaxResult, MaxError int
}

// Request is what Parse reads of an HTTP request: its method, its
// Content-Type header, its raw query (URL.RawQuery) and its body, read
// whole (bounded by the caller).
type Request struct {
	Method      string
	ContentType string
	Query       string
	Body        []byte
}

// Parsed is a parsed callback request.
type Parsed struct {
	// Method is the request's, GET or POST.
	Method string
	// Callback has the job id, the result and the error (At is left zero).
	// JobID is "" unless Parse returned no error.
	Callback processor.Callback
	// Raw is what was received, the token removed: the query for GET, the
	// body for POST. It is the value of an invalid callback's dead letter.
	Raw []byte
	// Query is a POST's query, the token removed ("" for GET: it is Raw).
	Query string
	// ContentType is a POST's Content-Type as received ("" for GET).
	ContentType string
}

// TokenParam is the query parameter (and form field) that carries the
// shared secret; HeaderToken is the request header that may carry it
// instead.
const (
	TokenParam  = "token"
	HeaderToken = "Redrive-Callback-Token"
)

// Parse reads a callback: GET takes its fields from the query; POST from
// the query and the body (the body's win), an
// application/x-www-form-urlencoded form or an application/json object
// (string values as they are, numbers as written, null as absent, other
// values as their JSON text). A POST without a Content-Type is read as JSON
// when its body starts with '{', else as a form; an empty body adds no
// fields whatever its type. Where a field repeats, its first value counts.
//
// The error is ErrMethod for another method, ErrBadBody when the query or
// body does not parse, ErrNoID when the job id is missing or fails
// processor.CheckJobID, ErrTooLarge when the result or the error is longer
// than its bound. Raw, Query and ContentType are set whatever the
// error (but ErrMethod), so that an invalid callback can be kept; they
// never hold f.Token's text. Parse never panics, and a Callback it returns
// without error always has a JobID that passes processor.CheckJobID.
func Parse(req Request, f Fields) (Parsed, error) {
	p := Parsed{Method: req.Method}
	switch req.Method {
	case http.MethodGet:
		p.Raw = []byte(scrubQuery(req.Query, f.Token))
	case http.MethodPost:
		p.Query = scrubQuery(req.Query, f.Token)
		p.ContentType = scrubText(req.ContentType, f.Token)
		p.Raw = scrubBody(req.ContentType, req.Body, f.Token)
	default:
		return Parsed{}, ErrMethod
	}

	vals, err := queryFields(req.Query)
	if err != nil {
		return p, fmt.Errorf("%w: the query is not a valid URL query", ErrBadBody)
	}
	if req.Method == http.MethodPost && len(req.Body) > 0 {
		body, err := bodyFields(req.ContentType, req.Body)
		if err != nil {
			return p, err
		}
		for k, v := range body {
			vals[k] = v // the body's win
		}
	}

	id, ok := vals[f.ID]
	id = scrubText(id, f.Token) // the key of the callback record
	if !ok || id == "" {
		return p, fmt.Errorf("%w: no %q field", ErrNoID, f.ID)
	}
	if err := processor.CheckJobID(id); err != nil {
		return p, fmt.Errorf("%w: the %q field: %v", ErrNoID, f.ID, strings.TrimPrefix(err.Error(), processor.ErrBadCallback.Error()+": "))
	}
	var result, errText string
	if f.Result != "" {
		result = vals[f.Result]
	}
	if f.Error != "" {
		errText = vals[f.Error]
	}
	if f.MaxResult > 0 && len(result) > f.MaxResult {
		return p, fmt.Errorf("%w: the %q field has %d bytes, more than %d", ErrTooLarge, f.Result, len(result), f.MaxResult)
	}
	if f.MaxError > 0 && len(errText) > f.MaxError {
		return p, fmt.Errorf("%w: the %q field has %d bytes, more than %d", ErrTooLarge, f.Error, len(errText), f.MaxError)
	}
	// A service that echoes what it was sent must not put the token into
	// the callbacks topic, which more people read than hold the token.
	p.Callback.JobID = id
	if _, ok := vals[f.Result]; ok && f.Result != "" {
		p.Callback.Result = []byte(scrubText(result, f.Token))
	}
	p.Callback.Error = scrubText(errText, f.Token)
	return p, nil
}

// queryFields reads a query's fields, each its first value. A query that
// does not parse is an error (nothing from it is used).
func queryFields(q string) (map[string]string, error) {
	vs, err := url.ParseQuery(q)
	if err != nil {
		return nil, err
	}
	return first(vs), nil
}

func first(vs url.Values) map[string]string {
	out := make(map[string]string, len(vs))
	for k, v := range vs {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

// Content types the intake reads.
const (
	typeForm = "application/x-www-form-urlencoded"
	typeJSON = "application/json"
)

// bodyType is the media type a body is read as: its Content-Type's, or,
// without one, JSON when the body starts with '{' and a form otherwise.
func bodyType(contentType string, body []byte) (string, error) {
	if strings.TrimSpace(contentType) == "" {
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '{' {
			return typeJSON, nil
		}
		return typeForm, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", fmt.Errorf("%w: the Content-Type does not parse", ErrBadBody)
	}
	switch {
	case mt == typeForm, mt == typeJSON:
		return mt, nil
	case strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return typeJSON, nil
	}
	return "", fmt.Errorf("%w: content type %q is not read (want %s or %s)", ErrBadBody, truncate(mt, 100), typeForm, typeJSON)
}

func bodyFields(contentType string, body []byte) (map[string]string, error) {
	mt, err := bodyType(contentType, body)
	if err != nil {
		return nil, err
	}
	if mt == typeForm {
		vs, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fmt.Errorf("%w: the body is not a valid %s form", ErrBadBody, typeForm)
		}
		return first(vs), nil
	}
	return jsonFields(body)
}

// jsonFields reads a JSON object's members: a string as it is, null as
// absent, anything else as its JSON text (a number as written). Where a
// member repeats, the first counts, as in a form.
func jsonFields(body []byte) (map[string]string, error) {
	if !utf8.Valid(body) {
		// encoding/json would read invalid bytes as U+FFFD: a job id that
		// a query could not carry (CheckJobID refuses it there).
		return nil, fmt.Errorf("%w: the JSON body is not UTF-8", ErrBadBody)
	}
	bad := fmt.Errorf("%w: the body is not one JSON object", ErrBadBody)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, bad
	}
	out := map[string]string{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, bad
		}
		k, ok := kt.(string)
		if !ok {
			return nil, bad
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, bad
		}
		if _, seen := out[k]; seen {
			continue
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case string(raw) == "null":
		case len(raw) > 0 && raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, bad
			}
			out[k] = s
		default:
			out[k] = string(raw)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, bad
	}
	if _, err := dec.Token(); err == nil {
		return nil, bad // more after the object
	}
	return out, nil
}

// scrubQuery is a query (or a form body) without its token parameters,
// the other pairs byte for byte, and then scrubText.
func scrubQuery(q, token string) string {
	if q == "" {
		return ""
	}
	pairs := strings.Split(q, "&")
	kept := pairs[:0]
	for _, pair := range pairs {
		k, _, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if k == TokenParam {
			continue
		}
		kept = append(kept, pair)
	}
	return scrubText(strings.Join(kept, "&"), token)
}

// scrubBody is a POST body as stored: a form's token fields dropped,
// then scrubText.
func scrubBody(contentType string, body []byte, token string) []byte {
	if len(body) == 0 {
		return []byte{}
	}
	if mt, err := bodyType(contentType, body); err == nil && mt == typeForm {
		return []byte(scrubQuery(string(body), token))
	}
	return []byte(scrubText(string(body), token))
}

// scrubText replaces every occurrence of token's text (and of its
// URL-escaped forms) in s by dlq.Redacted. Should a replacement make the
// token appear again (a token that overlaps "[redacted]"), the
// occurrences are deleted instead until none is left.
func scrubText(s, token string) string {
	if token == "" || s == "" {
		return s
	}
	out := s
	for _, form := range []string{token, url.QueryEscape(token), url.PathEscape(token)} {
		out = strings.ReplaceAll(out, form, dlq.Redacted)
	}
	if !strings.Contains(out, token) {
		return out
	}
	for strings.Contains(s, token) { // each pass makes s shorter: it ends
		s = strings.ReplaceAll(s, token, "")
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
