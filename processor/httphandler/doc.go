// Package httphandler is redrive's built-in processor.Handler: it POSTs each
// record to one URL (and, for a job API, polls the job it started) and
// turns the HTTP response into an Outcome, following the protocol in
// docs/http-protocol.md.
//
// Request. Body: the record value. Headers:
//
//	Content-Type            the record's content-type header (matched case-insensitively),
//	                        else a static Content-Type, else application/octet-stream
//	Idempotency-Key         the request id (redrive-id); the same on every attempt and poll
//	Redrive-Attempt         this attempt, 1-based (a not-ready poll repeats its attempt's number)
//	Redrive-State           the state the last not-ready answer carried, when there is one
//	Redrive-State-Encoding  base64url, when the state is not printable ASCII and was encoded
//	Redrive-Key             the record key; absent when the key is null
//	Redrive-Key-Encoding    base64url, when the key is not printable ASCII and was encoded
//	(static headers)        Options.Headers; they cannot replace the headers above
//
// "Printable ASCII" is bytes 0x20 to 0x7E, not starting or ending with a
// space (HTTP would trim it); anything else is sent as unpadded base64url
// (RFC 4648 §5). An empty non-null key is sent as an empty Redrive-Key.
//
// Response → Outcome:
//
//	202                       not-ready; State from Redrive-State (the sent state is kept
//	                          when the answer has none), MinDelay from Retry-After
//	other 2xx                 success, Result = the body (in JSON mode: see below)
//	408, 425, 429, 5xx        transient, MinDelay from Retry-After
//	other 4xx                 permanent
//	1xx, 3xx, anything else   transient (redirects are never followed)
//	no response in Timeout    transient, code timeout
//	cannot connect            transient, code connect (dial, DNS, TLS certificate)
//	other transport failure   transient, code network (reset, malformed response)
//	the caller's ctx is done  transient, code canceled
//	2xx body > MaxBodyBytes   transient, code body_too_large (never truncated)
//	id with control chars     invalid, code bad_request_id (not sent: it cannot be a header)
//
// Retry-After is read as delay-seconds or an HTTP-date, on any failure
// (not only 429/503); negative, unparseable and past values are ignored and
// values above 24h are capped at 24h.
//
// Error code, first match wins: the Redrive-Error-Code response header; the
// JSON code field (JSON mode, any status whose body decodes); redrive's own:
// http_<status> (http_202 for a bare not-ready), timeout, connect, network,
// canceled, body_too_large, bad_response, not_ok. Codes are trimmed, made
// valid UTF-8 and cut to 64 bytes. Code rules (Options.Codes) then set the
// class of any failure by its code, redrive's own codes included (a
// Codes.RequestFault code is transient, marked Outcome.RequestFault so that
// the circuit breaker does not count it), and raise MinDelay; they never
// turn a success into a failure or back.
//
// JSON mode (Options.JSON), for services that answer 200 with an error in
// the body (2captcha: {"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}): a
// 2xx other than 202 is a success only when the value at OKField equals
// OKValue; otherwise it is a transient failure with the code at CodeField
// (not_ok when there is none) unless a code rule says otherwise. A 2xx body
// that is not JSON is transient, code bad_response.
//
// Without OKField (CodeField set), an answer is ok when the code field is
// absent, null or "" (SMM panels: {"order":23501}; {"error":"..."} is not
// ok, its code the error text).
//
// Query and form fields (Options.Query, Options.Form) are added to the
// URL's query and to a form body: of a record whose content type is
// application/x-www-form-urlencoded, or of a record without one when no
// static Content-Type is set (it is then sent as a form). Any other
// record's body is sent as it is, and the form fields go to the query.
//
// Job APIs (Options.Poll). A request without State is a submit; an ok
// answer (a 202 is read like a 200) holds the job id at Poll.StateField
// and becomes processor.Poll(job id, FirstAfter), or a transient failure
// no_job_id. A request with State polls that job: GET (or POST with a
// form body) Poll.URL with {state} replaced by the job id (path-escaped
// in the path, query-escaped in the query and body), classified as above;
// then a not-ready answer is Poll(job id, Every), an ok answer is read by
// Poll.Status (done, pending, failed; other values unknown_status, none
// no_status) and Poll.ResultField (no_result when missing). Every
// transient or paused outcome of a poll carries the job id as its State,
// so that the next attempt polls again instead of submitting again.
//
// CallbackOutcome says what a callback (processor.Callback) means, by the
// same code rules; see its documentation.
//
// A job id that would make a path segment of the poll URL "." or ".."
// (the server would resolve it to another resource) is never sent: the
// outcome is invalid, code bad_state (processor.CodeBadState).
//
// Errors. Outcome.Err is a *ResponseError for an answer that was not a
// success and wraps the transport error otherwise. Its text, which becomes
// redrive-error, is at most 1 KiB of valid UTF-8 and names the URL without
// its query or user info, which often carry API keys, after the method
// (POST, or GET for a poll).
//
// No configured secret shows in an outcome's Err or Code, whatever the
// service or a callback echoes (scrub.go). The secrets are: user info
// passwords (and the Basic credential net/http makes of them) and the
// values of secret-named parameters (redact.SecretName) in URL, Poll.URL,
// Poll.Body and URLs given as Query or Form values; the values of
// secret-named Query and Form fields; the values of secret-named headers
// (and the credential after an Authorization scheme, a Cookie's values);
// header values and path segments of the configured URLs that look like
// credentials (16 bytes or more with 2 digits and 2 letters: /bot<token>/);
// and Options.Secrets. Each is masked as xxxxx as written, query- or
// path-escaped, JSON- or HTML-escaped, in any ASCII case; values shorter
// than 4 bytes are not (they would mask every match in the text). Texts
// quoted from the service (body snippets, JSON values, codes, a callback's
// error) are besides scrubbed by redact.Text, and scrubbed before they are
// cut, so no cut leaves the start of a secret. ResponseError and
// CallbackError hold only scrubbed text; any other error whose text showed
// a secret is wrapped (errors.Is and errors.As still see it).
//
// The package must never follow a redirect, read an unbounded body, or panic
// on a response; a Handler is safe for concurrent use.
package httphandler
