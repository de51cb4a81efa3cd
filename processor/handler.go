package processor

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Kind is what a handler made of one attempt.
//
// The zero Kind is KindUnset, never Success: an Outcome built without a
// Kind (Outcome{Err: err}, Outcome{}) is a handler mistake, and the
// processor retries it as Transient rather than commit a failed record as
// done. Build outcomes with Succeed, Retry, RetryAfter, Poll, Fail and Reject.
type Kind int

const (
	// KindUnset: the handler set no Kind. Treated as Transient (retried,
	// attempts counted, DLQ "exhausted" in the end), never as success; the
	// processor logs a warning once per pipeline.
	KindUnset Kind = iota
	// Success: done; Result (optional) goes to the results topic if configured.
	Success
	// Transient: may work later; goes to the next tier, DLQ "exhausted" after max_attempts.
	Transient
	// NotReady: accepted, poll again later; carries State; not a failed attempt.
	NotReady
	// Permanent: will never work; DLQ "permanent" at once.
	Permanent
	// Invalid: the record itself is unusable; DLQ "invalid" at once.
	Invalid
	// Paused: the service refused because the whole account is blocked
	// (no balance, banned IP), not this request: the pipeline stops
	// calling for MinDelay and the record is called again after it
	// without spending an attempt. Built by Pause.
	Paused
)

// ErrNoKind is the error of an Outcome that had neither a Kind nor an Err.
var ErrNoKind = errors.New("handler returned an Outcome without a Kind")

func (k Kind) String() string {
	switch k {
	case KindUnset:
		return "unset"
	case Success:
		return "success"
	case Transient:
		return "transient"
	case NotReady:
		return "not-ready"
	case Permanent:
		return "permanent"
	case Invalid:
		return "invalid"
	case Paused:
		return "paused"
	}
	return "unknown"
}

// valid reports whether k is one of the kinds a handler may return.
func (k Kind) valid() bool { return k >= Success && k <= Paused }

// Class is the error class written to redrive-error-class for a failed kind.
// An unset or unknown kind is retried, so its class is transient.
func (k Kind) Class() retry.Class {
	switch k {
	case Success:
		return retry.ClassNone
	case NotReady:
		return retry.ClassNotReady
	case Permanent:
		return retry.ClassPermanent
	case Invalid:
		return retry.ClassInvalid
	}
	return retry.ClassTransient
}

// Outcome is a handler's verdict on one attempt. Build it with one of the
// constructors (Succeed, Retry, RetryAfter, Poll, Fail, Reject); the fields
// stay exported for handlers that add a code or an error to a Poll.
type Outcome struct {
	Kind Kind
	// Result is the success payload, written as the value of the results record.
	Result []byte
	// Code is a machine error code: the service's (ERROR_NO_SLOT_AVAILABLE)
	// or redrive's (http_503, timeout, connect).
	Code string
	// Err describes the failure; its text becomes redrive-error.
	Err error
	// State is opaque handler state carried to the next attempt (redrive-state).
	State []byte
	// MinDelay asks for at least this long before the next attempt (Retry-After).
	MinDelay time.Duration
	// RequestFault marks a Transient outcome as the request's own fault
	// (a task the service cannot solve, a link the user may fix): it is
	// retried like any other, but the circuit breaker never counts it
	// against the service. See RetryRequestFault.
	RequestFault bool
	// Throttled marks a Transient outcome as the service asking to slow
	// down (HTTP 429): the breaker does not count it, the pipeline learns
	// the service's rate from it, and the record waits (in memory, not in
	// a worker) for MinDelay (its Retry-After; 1s without one) and up to
	// half again at random, and is called again with the same attempt,
	// up to MaxThrottleWaits times when MinDelay is at most
	// MaxThrottleWait; otherwise it goes to the tier covering MinDelay,
	// again with no attempt spent. See Throttled.
	Throttled bool
}

// Throttling a record waits out in memory (Outcome.Throttled): a wait of
// at most MaxThrottleWait, at most MaxThrottleWaits times per handling.
// Longer waits, or more, go through the tiers (no attempt spent either).
const (
	MaxThrottleWait  = 5 * time.Second
	MaxThrottleWaits = 10
)

// Throttled: the service asked to slow down (HTTP 429, Retry-After d):
// see Outcome.Throttled.
func Throttled(code string, err error, d time.Duration) Outcome {
	return Outcome{Kind: Transient, Code: code, Err: err, MinDelay: d, Throttled: true}
}

// Succeed: the attempt worked. result (may be nil) is the value of the
// results record when the pipeline has a results topic.
func Succeed(result []byte) Outcome { return Outcome{Kind: Success, Result: result} }

// Retry: the attempt failed but may work later (Transient). The record goes
// to the next tier, or to the DLQ as "exhausted" after max_attempts.
func Retry(code string, err error) Outcome { return Outcome{Kind: Transient, Code: code, Err: err} }

// RetryRequestFault is Retry for a failure that is the request's own, not
// the service's (Outcome.RequestFault): the circuit breaker does not count
// it.
func RetryRequestFault(code string, err error) Outcome {
	return Outcome{Kind: Transient, Code: code, Err: err, RequestFault: true}
}

// RetryAfter is Retry with a minimum delay before the next attempt (a
// Retry-After): the record goes to the smallest tier that covers d.
func RetryAfter(code string, err error, d time.Duration) Outcome {
	return Outcome{Kind: Transient, Code: code, Err: err, MinDelay: d}
}

// Poll: the request was accepted and is not ready yet (NotReady). The
// handler is called again after at least d (0: the first tier) with state
// (UTF-8, at most retry.MaxStateBytes) in Request.State; a poll spends no
// attempt.
func Poll(state []byte, d time.Duration) Outcome {
	return Outcome{Kind: NotReady, State: state, MinDelay: d}
}

// Fail: the request will never work (Permanent). The record goes to the
// DLQ as "permanent" at once.
func Fail(code string, err error) Outcome { return Outcome{Kind: Permanent, Code: code, Err: err} }

// Reject: the record itself is unusable (Invalid), e.g. its value does not
// parse. The record goes to the DLQ as "invalid" at once.
func Reject(code string, err error) Outcome { return Outcome{Kind: Invalid, Code: code, Err: err} }

// Pause: the account is blocked, not this request (ERROR_ZERO_BALANCE,
// an IP ban). The pipeline stops calling the handler for d (at least 1s)
// as if its breaker were open, and this record is called again after the
// pause with the same attempt number.
func Pause(code string, err error, d time.Duration) Outcome {
	return Outcome{Kind: Paused, Code: code, Err: err, MinDelay: d}
}

// checked is out as the processor acts on it: an Outcome whose Kind is unset
// or unknown becomes Transient (with ErrNoKind and CodeNoKind when it had no
// error or code), and mistake reports that it was one.
func checked(out Outcome) (_ Outcome, mistake bool) {
	if out.Kind.valid() {
		return out, false
	}
	out.Kind = Transient
	if out.Err == nil {
		out.Err = ErrNoKind
	}
	if out.Code == "" {
		out.Code = CodeNoKind
	}
	return out, true
}

// Request is one attempt at one record.
type Request struct {
	// Record is the consumed record; its Headers are the user's headers only
	// (redrive-* headers are decoded into Meta). Handlers must not modify it.
	Record *kgo.Record
	// ID is the stable request id (redrive-id), usable as an idempotency key.
	ID string
	// Attempt is this attempt's number, 1-based (not-ready polls excluded).
	Attempt int
	// Polls is the number of not-ready polls made so far.
	Polls int
	// State is the state the previous outcome carried, if any.
	State []byte
	// Meta is the decoded redrive-* headers of the record as consumed.
	Meta retry.Meta
}

// Handler handles one attempt. It must honour ctx (cancelled on shutdown
// past the grace period and when the partition is revoked) and must be safe
// for concurrent use. req is the handler's until Handle returns: the
// processor reuses it for the next record (copy what is kept longer).
type Handler interface {
	Handle(ctx context.Context, req *Request) Outcome
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request) Outcome

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req *Request) Outcome { return f(ctx, req) }
