// Package fakeapi holds two fake third-party services that speak their
// real, publicly documented wire formats, for `redrive dev`, `redrive
// demo-solver --captchaai --smm` and tests of the HTTP handler's job-API
// mode and the callback intake. Nothing in it talks to anything but
// 127.0.0.1.
//
// # CaptchaAI / 2captcha (CaptchaAI)
//
// The "in.php / res.php" API that CaptchaAI, 2captcha and compatible
// services document:
//
//	GET or POST /in.php   key, method, json=1, pingback, task fields   → {"status":1,"request":"<task id>"}
//	GET or POST /res.php  key, action=get, id, json=1                  → {"status":0,"request":"CAPCHA_NOT_READY"}, then {"status":1,"request":"<token>"}
//	                      action=getbalance                             → {"status":1,"request":"<balance>"}
//	GET /stats            the counters (CaptchaStats) as JSON
//
// Parameters are read from the query and from a form body (urlencoded or
// multipart), as the services do. Without json=1 the answers are the plain
// text forms ("OK|<id>", "CAPCHA_NOT_READY", "OK|<token>", "ERROR_…").
// Every answer is 200, as the services answer; an error is
// {"status":0,"request":"<code>"}.
//
// A submit is answered, in this order: ERROR_TOO_BIG_CAPTCHA_FILESIZE (a
// body over MaxBodyBytes; an unparsable one is ERROR_BAD_PARAMETERS),
// ERROR_WRONG_USER_KEY (no key, or
// not 32 characters), ERROR_KEY_DOES_NOT_EXIST (another key),
// ERROR_ZERO_BALANCE (SetZeroBalance), ERROR_BAD_PARAMETERS (no method,
// or a pingback URL that is not http(s) on 127.0.0.1, ::1 or localhost:
// the fake never calls anything else), ERROR_NO_SLOT_AVAILABLE (a share
// NoSlotRatio of submits), else a new task with a numeric id. A task is
// solved SolveMin to SolveMax after its submit (drawn per task); its token
// is CaptchaToken of the task's fields, so a test can compute it from what
// it submitted. A share UnsolvableRatio of tasks ends in
// ERROR_CAPTCHA_UNSOLVABLE instead. res.php answers CAPCHA_NOT_READY
// before that, ERROR_WRONG_ID_FORMAT for an id that is not a number and
// ERROR_WRONG_CAPTCHA_ID for one it does not know.
//
// Pingbacks: a task submitted with pingback=<url> is reported to that URL
// once solved, as a GET with id=<task>&code=<token> appended to its query
// (CaptchaAI's style) or a POST form with id and code (2captcha's), by
// PingbackOptions.Style. An answer other than 200 (or none) is tried again
// up to Retries more times, the wait doubling from RetryDelay, as the
// services do. To exercise a receiver, a share of tasks (drawn per task
// from the seed) has its pingback dropped (never sent: the receiver must
// poll), sent twice (it must dedupe), or sent early: the task is solved at
// once and its pingback delivered before in.php answers the submit, so the
// receiver hears of a job id it has not been told yet.
//
// # SMM panel API v2 (SMMPanel)
//
// The API v2 that SMM panels document: POST (or GET) /api/v2 with form
// fields key and action.
//
//	action=add      service, link, quantity     → {"order":23501}  (ids increase)
//	action=status   order=N                     → {"charge":"0.27819","start_count":"3572","status":"In progress","remains":"157","currency":"USD"}
//	action=status   orders=N,M,…                → {"N":{…},"M":{"error":"Incorrect order ID"}}
//	action=balance                              → {"balance":"100.84","currency":"USD"}
//	GET /stats                                  the counters (SMMStats) as JSON
//
// An order's status answers are Progress (default "In progress" twice),
// then Terminal (default "Completed"; "Partial" and "Canceled" too) for
// good. Errors are {"error":"…"}: "Invalid API key", "Incorrect request"
// (unknown action, missing or bad fields), "Not enough funds on balance"
// (SetNoFunds), "Incorrect order ID".
//
// Both fakes are http.Handlers, safe for concurrent use, deterministic for
// a seed (draws depend on the seed and the task or order number, not on
// timing), bounded in memory (the oldest tasks and orders are forgotten)
// and count what they did, in total and per task or order.
package fakeapi
