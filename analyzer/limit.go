package analyzer

import (
	"errors"
	"fmt"
	"net/http"
)

// The defaults of Limits.
const (
	DefaultRecentValueBytes = 1 << 10  // 1 KiB of each value in the recent list
	DefaultRecentBytes      = 64 << 20 // 64 MiB for a pipeline's recent list
	DefaultResponseBytes    = 8 << 20  // 8 MiB per answer of GET /api/deadletters
	DefaultMaxRequests      = 4        // dead-letter requests answered at once
)

// Bounds of Limits.ResponseBytes: a listing must hold at least one dead
// letter, and one record batch read by offset must stay within what the
// Kafka client accepts (1 GiB per response).
const (
	MinResponseBytes = 4 << 10
	MaxResponseBytes = 256 << 20
)

// Limits bound the analyzer's memory by bytes, not by counts, however
// large the dead letters and however many requests come in. Zero fields
// take the defaults.
type Limits struct {
	// RecentValueBytes is how much of each dead letter's value the recent
	// list keeps (default 1 KiB); GET /api/deadletters marks a value cut
	// (value_cut) and GET /api/deadletters/{partition}/{offset} reads it
	// whole from the DLQ.
	RecentValueBytes int64
	// RecentBytes bounds each pipeline's recent list (default 64 MiB): the
	// oldest dead letters leave it first.
	RecentBytes int64
	// ResponseBytes bounds each answer of GET /api/deadletters (default 8
	// MiB; it stops adding dead letters and says "truncated") and the
	// record batch read for one dead letter by offset.
	ResponseBytes int64
	// MaxRequests is how many requests for dead letters (the listing and
	// by offset) are answered at once (default 4); more are answered 503
	// with Retry-After at once, not queued.
	MaxRequests int
}

// LimitError is one problem of a Limits: Field is its Go field name.
type LimitError struct {
	Field string
	Msg   string
}

func (e *LimitError) Error() string { return "analyzer: " + e.Field + ": " + e.Msg }

// WithDefaults is l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.RecentValueBytes == 0 {
		l.RecentValueBytes = DefaultRecentValueBytes
	}
	if l.RecentBytes == 0 {
		l.RecentBytes = DefaultRecentBytes
	}
	if l.ResponseBytes == 0 {
		l.ResponseBytes = DefaultResponseBytes
	}
	if l.MaxRequests == 0 {
		l.MaxRequests = DefaultMaxRequests
	}
	return l
}

// Validate reports every problem of l (Problems), joined, or nil.
func (l Limits) Validate() error {
	var errs []error
	for _, p := range l.Problems() {
		errs = append(errs, p)
	}
	return errors.Join(errs...)
}

// Problems are what is wrong with l: a negative field, a ResponseBytes
// outside MinResponseBytes to MaxResponseBytes, a RecentValueBytes larger
// than RecentBytes (after defaults).
func (l Limits) Problems() []*LimitError {
	var out []*LimitError
	bad := func(field, format string, args ...any) {
		out = append(out, &LimitError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"RecentValueBytes", l.RecentValueBytes}, {"RecentBytes", l.RecentBytes}, {"ResponseBytes", l.ResponseBytes}, {"MaxRequests", int64(l.MaxRequests)}} {
		if f.v < 0 {
			bad(f.name, "%d: must not be negative (0 is the default)", f.v)
		}
	}
	d := l.WithDefaults()
	if l.ResponseBytes > 0 && (l.ResponseBytes < MinResponseBytes || l.ResponseBytes > MaxResponseBytes) {
		bad("ResponseBytes", "%d: want %d (4 KiB) to %d (256 MiB)", l.ResponseBytes, MinResponseBytes, MaxResponseBytes)
	}
	if l.RecentValueBytes > 0 && l.RecentBytes >= 0 && d.RecentValueBytes > d.RecentBytes {
		bad("RecentValueBytes", "%d: more than the whole recent list may hold (%d)", d.RecentValueBytes, d.RecentBytes)
	}
	return out
}

// enter takes one of the MaxRequests places for an expensive request, or
// answers 503 with Retry-After at once and returns false. A caller that
// entered calls leave.
func (a *Analyzer) enter(w http.ResponseWriter) bool {
	select {
	case a.busy <- struct{}{}:
		return true
	default:
	}
	w.Header().Set("Retry-After", "1")
	httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("busy: %d requests for dead letters are being answered (analyzer.max_requests); retry in a second", cap(a.busy)))
	return false
}

func (a *Analyzer) leave() { <-a.busy }
