package httphandler

import (
	"errors"
	"strings"

	"github.com/redrive/redrive/processor"
)

// CodeCallbackError is the code of a callback whose error field held only
// blanks or control characters.
const CodeCallbackError = "callback_error"

// ErrCallback is the cause of a callback's failure, for errors.Is.
var ErrCallback = errors.New("the callback is a failure")

// CallbackError is Outcome.Err of a callback that says the job failed.
type CallbackError struct {
	JobID string // the job the callback is for
	Code  string // the outcome's code
	Text  string // the service's error, or the result that is a configured code
	// JobID, Code and Text quote the callback; CallbackOutcome masks the
	// configured secrets in them before it fills them in.
}

// Error is "callback for job <id>: <text>", at most 1 KiB.
func (e *CallbackError) Error() string {
	return truncate("callback for job "+snippet([]byte(e.JobID), bodySnippet)+": "+snippet([]byte(e.Text), maxErrorBytes), maxErrorBytes)
}

// Unwrap returns ErrCallback.
func (e *CallbackError) Unwrap() error { return ErrCallback }

// CallbackOutcome is what a callback (processor.Callback, written by the
// callback intake) means for the record waiting for its job, by the
// handler's code rules:
//
//   - cb.Error set: a failure with that code (cleaned as the codes of an
//     answer are; callback_error when nothing is left): a pause code
//     pauses; a not_ready code polls the job again after Poll.Every; a
//     permanent code fails; any other is transient (marked RequestFault
//     for a request_fault code, as for an answer). A transient failure
//     carries no state, so the next attempt submits again: the job itself
//     is over.
//   - the result, trimmed, is exactly a configured code (CaptchaAI calls
//     back with code=ERROR_CAPTCHA_UNSOLVABLE): the same, by that code.
//   - otherwise: Succeed(cb.Result), the result as it came.
//
// codes.min_delay applies as for an answer. A code never becomes a success.
// No configured secret shows in the outcome's Err or Code, whatever the
// callback quoted.
func (h *Handler) CallbackOutcome(cb processor.Callback) processor.Outcome {
	return h.seal(h.callbackOutcome(cb))
}

func (h *Handler) callbackOutcome(cb processor.Callback) processor.Outcome {
	var code, text string
	switch {
	case cb.Error != "":
		text = h.scrub.text(cb.Error)
		if code = h.scrub.code(cb.Error); code == "" {
			code = CodeCallbackError
		}
	case h.isCode(strings.TrimSpace(string(cb.Result))):
		code = strings.TrimSpace(string(cb.Result))
		text = code
	default:
		return processor.Succeed(cb.Result)
	}
	err := &CallbackError{JobID: h.scrub.text(cb.JobID), Code: code, Text: text}
	minDelay := h.minDelay[code]
	class := h.classOf[code]
	transient := func() processor.Outcome {
		out := processor.RetryAfter(code, err, minDelay)
		out.RequestFault = class.requestFault
		return out
	}
	if h.poll != nil && h.poll.resubmit[code] {
		return transient() // the job failed: submitted anew
	}
	if d, ok := h.pause[code]; ok {
		return processor.Pause(code, err, d)
	}
	switch class.kind {
	case processor.NotReady:
		var every = minDelay
		if h.poll != nil {
			every = max(every, h.poll.every)
		}
		out := processor.Poll([]byte(cb.JobID), every)
		out.Code, out.Err = code, err
		return out
	case processor.Permanent:
		return processor.Fail(code, err)
	}
	return transient()
}

// isCode reports whether code is in the code rules (a class or a pause).
func (h *Handler) isCode(code string) bool {
	if code == "" {
		return false
	}
	if _, ok := h.classOf[code]; ok {
		return true
	}
	if h.poll != nil && h.poll.resubmit[code] {
		return true
	}
	_, ok := h.pause[code]
	return ok
}
