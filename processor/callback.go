package processor

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// Callbacks: the pipeline's service calls back with a job's answer (a
// pingback). A record whose submit was accepted (a NotReady outcome of a
// call without State: its State is the job id) waits up to Wait for the
// callback of that job instead of being polled; when it arrives the record
// is finished with the callback's answer and no handler call. Without one
// by Wait the record is polled as usual (the handler is called with the
// job id in Request.State).
//
// Every processor reads Topic (all partitions, no consumer group, from
// Wait+CallbackMargin before it started) into a map by job id bounded by
// MaxEntries and MaxBytes. The callback intake (processor/intake) writes
// the records.
type Callbacks struct {
	// Topic holds the callbacks: key = job id, value = the result,
	// HeaderCallbackError = the service's error (CallbackRecord).
	// Default topics.CallbacksTopic(Pipeline.Topic), "<topic>.callbacks".
	Topic string
	// Wait is how long a submitted job waits for its callback before it
	// is polled. Default DefaultCallbackWait.
	Wait time.Duration
	// MaxEntries bounds the callbacks held in memory per pipeline (oldest
	// dropped first: its record is polled). Default DefaultCallbackEntries.
	MaxEntries int
	// MaxBytes bounds the memory those callbacks take: each counts its job
	// id, result and error plus CallbackEntryOverhead; a used callback
	// keeps only its job id (to tell a duplicate), and the jobs finished by
	// polling count too. Past it the oldest go first, as at MaxEntries.
	// The callbacks topic can be written by anyone who reaches the intake,
	// so this is what bounds a replica's memory. Default
	// DefaultCallbackBytes; at least MinCallbackBytes.
	MaxBytes int64
}

// Defaults of Callbacks.
const (
	DefaultCallbackWait    = 2 * time.Minute
	DefaultCallbackEntries = 100_000
	DefaultCallbackBytes   = 16 << 20 // 16 MiB
	// MinCallbackBytes is the least MaxBytes: room for a few callbacks of
	// the largest size the intake takes.
	MinCallbackBytes = 1 << 20
	// CallbackEntryOverhead is what a held callback costs besides its
	// bytes: the map slot, the list element and the entry.
	CallbackEntryOverhead = 160
	// CallbackMargin is added to Wait for how long a callback is kept
	// and how far back a processor reads the callbacks topic at start.
	CallbackMargin = 5 * time.Minute
)

// HeaderCallbackError is the callback record header holding the service's
// error (the intake's error_field); absent when the callback has none.
const HeaderCallbackError = "redrive-callback-error"

// Callback is one callback from the service, as the intake wrote it.
type Callback struct {
	JobID  string    // the record key
	Result []byte    // the record value: the result field as received
	Error  string    // HeaderCallbackError; "" when the callback carried none
	At     time.Time // the record timestamp: when the intake received it
}

// CallbackHandler is a Handler that can tell what a callback means: the
// outcome of the waiting record (usually Succeed with the result, or a
// failure classified by the handler's code rules). The HTTP handler is one.
// A Handler that is not gets DefaultCallbackOutcome.
type CallbackHandler interface {
	Handler
	CallbackOutcome(cb Callback) Outcome
}

// DefaultCallbackOutcome: a callback with an Error is a transient failure
// with that code; any other is Succeed(Result).
func DefaultCallbackOutcome(cb Callback) Outcome {
	if cb.Error != "" {
		return Retry(cb.Error, fmt.Errorf("callback for job %s: %s", cb.JobID, cb.Error))
	}
	return Succeed(cb.Result)
}

// ErrBadCallback is wrapped by CheckJobID and DecodeCallback errors.
var ErrBadCallback = errors.New("bad callback")

// CheckJobID checks a job id for a callback record: not empty, valid
// UTF-8, at most retry.MaxStateBytes (it is a record's redrive-state).
func CheckJobID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: no job id", ErrBadCallback)
	case len(id) > retry.MaxStateBytes:
		return fmt.Errorf("%w: job id of %d bytes, more than %d", ErrBadCallback, len(id), retry.MaxStateBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: job id is not UTF-8", ErrBadCallback)
	}
	return nil
}

// CallbackRecord is the record the intake writes for cb to topic (At is
// left to the producer: the record timestamp).
func CallbackRecord(topic string, cb Callback) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: []byte(cb.JobID), Value: cb.Result}
	if cb.Error != "" {
		r.Headers = []kgo.RecordHeader{{Key: HeaderCallbackError, Value: []byte(cb.Error)}}
	}
	if !cb.At.IsZero() {
		r.Timestamp = cb.At
	}
	return r
}

// DecodeCallback reads a callback record (CallbackRecord). A record
// without a valid job id is an error wrapping ErrBadCallback.
func DecodeCallback(r *kgo.Record) (Callback, error) {
	cb := Callback{JobID: string(r.Key), Result: r.Value, At: r.Timestamp}
	if err := CheckJobID(cb.JobID); err != nil {
		return Callback{}, err
	}
	for _, h := range r.Headers {
		if h.Key == HeaderCallbackError {
			cb.Error = string(h.Value)
		}
	}
	return cb, nil
}
