// Package intake is the callback intake: the HTTP endpoint a job API
// (CaptchaAI's and 2captcha's pingback, an SMM panel's webhook) calls with
// a job's answer. Each callback becomes one record in the pipeline's
// callbacks topic (processor.CallbackRecord: key = job id, value = the
// result, redrive-callback-error = the service's error), which every
// processor reads to finish the record waiting for that job without
// polling (processor.Callbacks).
//
// The guarantee: a callback answered 200 is in Kafka. The intake produces
// with acks=all and answers 200 only after the broker acknowledged the
// write; any produce error, or no acknowledgement within AckTimeout, is
// answered 503 so that the service may call again (and fallback polling
// covers a callback that never comes). A write that is acknowledged after
// its 503 leaves a duplicate at worst, which the processor counts and
// ignores.
//
// A callback that cannot be matched — no job id, or a query or body that
// does not parse — is written to the pipeline's DLQ as reason invalid
// (CodeNoID, CodeBadBody) with what was received as its value, the token
// removed, and answered 200 too once that write is acknowledged: nothing
// is lost, and the service is not told to repeat something that will
// never parse.
//
// Requests are checked in this order: the method (GET or POST, else 405),
// the shared secret when one is configured (the token query parameter or
// the Redrive-Callback-Token header, compared in constant time; else 403),
// the size (query and body each at most MaxBodyBytes, else 413). None of
// these writes anything. Answers are fixed texts ("OK\n", "forbidden\n",
// ...): nothing a caller sent is ever echoed back.
//
// [Parse] is the pure part (a request's method, content type, query and
// body to a processor.Callback), fuzzed by FuzzParseCallback.
package intake
