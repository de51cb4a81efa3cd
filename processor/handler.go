package processor

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Kind is what a handler made of one attempt.
type Kind int

const (
	// Success: done; Result (optional) goes to the results topic if configured.
	Success Kind = iota
	// Transient: may work later; goes to the next tier, DLQ "exhausted" after max_attempts.
	Transient
	// NotReady: accepted, poll again later; carries State; not a failed attempt.
	NotReady
	// Permanent: will never work; DLQ "permanent" at once.
	Permanent
	// Invalid: the record itself is unusable; DLQ "invalid" at once.
	Invalid
)

func (k Kind) String() string {
	switch k {
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
	}
	return "unknown"
}

// Class is the error class written to redrive-error-class for a failed kind.
func (k Kind) Class() retry.Class {
	switch k {
	case Transient:
		return retry.ClassTransient
	case NotReady:
		return retry.ClassNotReady
	case Permanent:
		return retry.ClassPermanent
	case Invalid:
		return retry.ClassInvalid
	}
	return retry.ClassNone
}

// Outcome is a handler's verdict on one attempt.
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
// for concurrent use.
type Handler interface {
	Handle(ctx context.Context, req *Request) Outcome
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request) Outcome

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req *Request) Outcome { return f(ctx, req) }
