// Package demosolver is a small, deliberately flaky "CAPTCHA solving"
// service that speaks redrive's HTTP handler protocol, for `redrive dev`,
// demos and tests.
//
// POST /solve answers, for each attempt, one of:
//
//	200  {"status":1,"request":"<answer>"}          solved; the answer depends on the value only
//	503  ERROR_NO_SLOT_AVAILABLE, Retry-After: 1    share FailRate of attempts
//	202  CAPCHA_NOT_READY, Redrive-State: task-<n>   share NotReadyRate: a task to poll
//	400  ERROR_WRONG_USER_KEY                        share PermanentRate, and every value containing "bad-key"
//
// Failures carry the code in Redrive-Error-Code and in a 2captcha-style
// body ({"status":0,"request":"<code>"}), so that both the header mode and
// the JSON mode of the handler can be shown. A request carrying
// Redrive-State: task-<n> polls that task, which is ready (200) on its
// PollsToReady-th poll and 202 before; an unknown task is 400
// ERROR_WRONG_CAPTCHA_ID.
//
// Which answer an attempt gets is a pure function of Seed, the request's
// Idempotency-Key and its Redrive-Attempt (a request without the key draws
// by arrival order instead), so runs are reproducible whatever the
// concurrency and a re-sent attempt gets the same answer.
//
// Idempotency-Key is honoured: a key that was solved gets the same answer
// again, and a key with a task still pending gets that task again; both are
// counted as duplicates and never solved (charged) twice. The service
// remembers the last 65536 keys and tasks.
//
// An outage can be switched on to show what a processor does when the
// service is down (its circuit breaker opens): POST /outage?for=30s makes
// every /solve call, new requests and polls alike, answer 503
// ERROR_SERVICE_OUTAGE (no Retry-After) for that long, replacing an outage
// already running; for=0 ends it; a missing or unparsable for, or one
// above MaxOutage (10m), is a 400. GET /outage (and the POST) answer
// {"active": true, "until": "<RFC 3339>"}, or {"active": false}. SetOutage
// and Outage do the same from Go.
//
// GET /stats returns Stats as JSON. The service never sleeps past a
// request's context and holds nothing on disk.
package demosolver
