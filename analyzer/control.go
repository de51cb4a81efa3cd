package analyzer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/topicread"
	"github.com/redrive/redrive/processor/control"
)

// The control topic as the analyzer sees it: a group-less follower reads
// it from its start into a control.State (GET /api/control: every
// replica's status, the operator's pause, the line's stops), and the
// dashboard's Pause and Resume buttons write an operator's pause to it
// (POST /api/control/{pipeline}/pause|resume). The analyzer never needs
// it to do its own work: a control topic it cannot read is reported, in
// the log once and in the API, and the rest goes on.

// controlRetry is how often the control reader lists the topic again
// while it cannot (missing, refused, the broker away).
const controlRetry = 2 * time.Second

// controlErrorKept is how long GET /api/control reports a fetch error of
// the control reader after the last one: kgo retries a failing fetch, and
// a poll without error does not mean the next one will have none.
const controlErrorKept = 30 * time.Second

// controlWriteTimeout bounds a pause or resume: the broker's
// acknowledgement, then reading it back.
const controlWriteTimeout = 15 * time.Second

// controlReadBack bounds how long a pause or resume waits, once
// acknowledged, for the control reader to read it: the answer then shows
// it, and so does the next GET /api/control.
const controlReadBack = 5 * time.Second

// skippedLogs bounds the log lines about malformed control records: a
// topic full of foreign records must not flood the log.
const skippedLogs = 10 // a minute

// MaxPauseReason bounds the reason of a pause or resume, in bytes.
const MaxPauseReason = 1024

// maxPauseBody bounds the body of a pause or resume: room for a reason of
// MaxPauseReason bytes written as JSON escapes.
const maxPauseBody = 8 << 10

// ControlResponse is GET /api/control.
type ControlResponse struct {
	Now   string `json:"now"`
	Topic string `json:"topic"`
	// Ready: the control topic was read to the end it had when the
	// analyzer started (or when it could first be listed).
	Ready bool `json:"ready"`
	// Control is what is wrong with reading the control topic ("" when
	// nothing): missing, refused, or the broker away. The rest of the
	// analyzer goes on without it.
	Control string `json:"control"`
	// Skipped counts the records control.Decode refused (logged, at most
	// 10 lines a minute).
	Skipped int64 `json:"skipped"`
	// Pipelines are the analyzer's configured pipelines, in order.
	Pipelines []ControlPipeline `json:"pipelines"`
}

// ControlPipeline is one pipeline in GET /api/control.
type ControlPipeline struct {
	Name string `json:"name"`
	// Paused: an operator's pause is in force (every replica obeys it
	// until resumed). Reason, By and Since are of the latest pause or
	// resume: why, who wrote it (a host, or "analyzer:<instance>") and
	// when; empty when there was none.
	Paused bool      `json:"paused"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Since  time.Time `json:"since,omitzero"`
	Line   LineStops `json:"line"`
	// Replicas are the processors running the pipeline, by instance, each
	// with its latest status; stale ones have not published for three of
	// their status intervals (killed, or cut off from the control topic).
	Replicas []control.Replica `json:"replicas"`
}

// LineStops are a pipeline's shared stops in force, each null when there
// is none: the breaker open or half-open, a pause code's stop, the guard's.
// A stop whose until has passed, or written before an operator's resume,
// is not in force.
type LineStops struct {
	Breaker   *LineStop `json:"breaker"`
	PauseCode *LineStop `json:"pause_code"`
	Guard     *LineStop `json:"guard"`
}

// LineStop is one stop: the control record's line (state, until, why,
// code), the replica that wrote it and when.
type LineStop struct {
	control.Line
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// PauseRequest is the optional body of POST /api/control/{pipeline}/pause
// and .../resume.
type PauseRequest struct {
	Reason string `json:"reason"`
}

// PauseResponse is the answer of POST /api/control/{pipeline}/pause and
// .../resume, sent once the broker acknowledged the record.
type PauseResponse struct {
	Pipeline string `json:"pipeline"`
	Paused   bool   `json:"paused"`
	Reason   string `json:"reason"`
	By       string `json:"by"`
	// Seen: the analyzer read the record back from the control topic
	// within 5 s, so GET /api/control shows it already.
	Seen bool `json:"seen"`
}

// controlView is the control topic read so far, with its own lock.
type controlView struct {
	topic string

	mu      sync.Mutex
	state   *control.State
	readTo  map[int32]int64 // per partition, the offset after the last record read
	moved   chan struct{}   // closed, and replaced, whenever readTo moves
	ready   bool
	listErr error // listing the topic failed; nil once it was listed
	lastErr error // the latest fetch error, at errAt
	errAt   time.Time
	skipped int64

	// The malformed records logged this minute (from logFrom).
	logFrom time.Time
	logged  int
	unsaid  int // skipped without a line since the last one
}

func newControlView(topic string) *controlView {
	return &controlView{topic: topic, state: control.NewState(), readTo: map[int32]int64{}, moved: make(chan struct{})}
}

// followControl follows the control topic from its start until ctx ends.
// It never stops the analyzer: what goes wrong is logged and reported in
// GET /api/control.
func (a *Analyzer) followControl(ctx context.Context) {
	c := a.ctl
	f, err := topicread.Open(ctx, c.topic, a.o.ClientOpts, a.fromEarliest(c.topic),
		topicread.RetryList(controlRetry, func(err error) {
			if c.failedList(err) {
				a.log.Warn("cannot read the control topic; the replicas view and the pause buttons wait for it (retrying)", "topic", c.topic, "err", err)
			}
		}),
		topicread.FetchMaxWait(500*time.Millisecond),
		topicread.FetchMaxBytes(4<<20),
		topicread.PollWait(2*time.Second),
	)
	if err != nil {
		if ctx.Err() == nil {
			c.failedList(err)
			a.log.Warn("control topic: no reader; the replicas view stays empty", "topic", c.topic, "err", err)
		}
		return
	}
	defer f.Close()
	if c.listed() {
		a.log.Info("control topic readable again", "topic", c.topic)
	}
	var lastLog time.Time
	for {
		if f.CaughtUp() {
			c.caughtUp()
		}
		b, err := f.Poll(ctx)
		if err != nil {
			return
		}
		for _, e := range b.Errs {
			c.fetchFailed(e.Err)
			if time.Since(lastLog) >= time.Minute {
				lastLog = time.Now()
				a.log.Warn("control topic: fetch failed (logged once a minute)", "topic", e.Topic, "partition", e.Partition, "err", e.Err)
			}
		}
		for _, r := range b.Records {
			if err := c.apply(r); err != nil {
				if say, unsaid := c.logSkip(time.Now()); say {
					a.log.Warn("control topic: record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err, "skipped_unlogged", unsaid)
				}
			}
		}
	}
}

// apply takes one record of the control topic; a record control.Decode
// refuses is counted and its error returned.
func (c *controlView) apply(rec *kgo.Record) error {
	r, err := control.Decode(rec.Key, rec.Value)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.state.Apply(r)
	} else {
		c.skipped++
	}
	if rec.Offset+1 > c.readTo[rec.Partition] {
		c.readTo[rec.Partition] = rec.Offset + 1
		close(c.moved)
		c.moved = make(chan struct{})
	}
	c.lastErr = nil // records came: the fetch works
	return err
}

// logSkip reports whether a skipped record gets its log line (at most
// skippedLogs a minute), and how many went without one before it.
func (c *controlView) logSkip(now time.Time) (say bool, unsaid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.logFrom) >= time.Minute {
		c.logFrom, c.logged = now, 0
	}
	if c.logged >= skippedLogs {
		c.unsaid++
		return false, 0
	}
	c.logged++
	unsaid, c.unsaid = c.unsaid, 0
	return true, unsaid
}

// failedList notes that the topic could not be listed; true the first
// time in a row (the one to log).
func (c *controlView) failedList(err error) (first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first = c.listErr == nil
	c.listErr = err
	return first
}

// listed notes that the topic was listed; true if it failed before.
func (c *controlView) listed() (again bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	again = c.listErr != nil
	c.listErr = nil
	return again
}

func (c *controlView) fetchFailed(err error) {
	c.mu.Lock()
	c.lastErr, c.errAt = err, time.Now()
	c.mu.Unlock()
}

func (c *controlView) caughtUp() {
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
}

// problem is what GET /api/control reports as wrong ("" when nothing).
func (c *controlView) problem() string {
	switch {
	case c.listErr != nil:
		return c.listErr.Error()
	case c.lastErr != nil && time.Since(c.errAt) < controlErrorKept:
		return c.lastErr.Error()
	}
	return ""
}

// waitRead waits until the control reader has read every partition up to
// ends (end offsets listed after a write), or ctx ends; it reports
// whether it has.
func (c *controlView) waitRead(ctx context.Context, ends map[int32]int64) bool {
	for {
		c.mu.Lock()
		done := true
		for p, end := range ends {
			done = done && c.readTo[p] >= end
		}
		moved := c.moved
		c.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-moved:
		}
	}
}

// response is GET /api/control for the pipelines named, at now.
func (c *controlView) response(names []string, now time.Time) ControlResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := ControlResponse{Now: now.UTC().Format(time.RFC3339Nano), Topic: c.topic, Ready: c.ready,
		Control: c.problem(), Skipped: c.skipped, Pipelines: []ControlPipeline{}}
	replicas := c.state.Replicas(now)
	for _, name := range names {
		p := ControlPipeline{Name: name, Replicas: []control.Replica{}}
		if r, ok := c.state.Get(control.KindPause, name); ok && r.Pause != nil {
			p.Paused, p.Reason, p.By, p.Since = r.Pause.Paused, r.Pause.Reason, r.Instance, r.At
		}
		p.Line = LineStops{
			Breaker:   c.stop(control.KindBreaker, name, now),
			PauseCode: c.stop(control.KindPauseCode, name, now),
			Guard:     c.stop(control.KindGuard, name, now),
		}
		for _, r := range replicas {
			if r.Pipeline == name {
				p.Replicas = append(p.Replicas, r)
			}
		}
		resp.Pipelines = append(resp.Pipelines, p)
	}
	return resp
}

// stop is pipeline's stop of kind in force at now (control.State.InForce),
// or nil. c.mu is held.
func (c *controlView) stop(kind control.Kind, pipeline string, now time.Time) *LineStop {
	r, ok := c.state.InForce(kind, pipeline, now)
	if !ok {
		return nil
	}
	return &LineStop{Line: *r.Line, By: r.Instance, At: r.At}
}

func (a *Analyzer) serveControl(w http.ResponseWriter, r *http.Request) {
	names := make([]string, len(a.pipes))
	for i, p := range a.pipes {
		names[i] = p.cfg.Name
	}
	writeJSON(w, a.ctl.response(names, a.o.Now()))
}

// controlWriter is who the analyzer's pause and resume records say wrote
// them.
func (a *Analyzer) controlWriter() string {
	if a.o.Instance == "" {
		return "analyzer"
	}
	return "analyzer:" + a.o.Instance
}

// serveSetPause is POST /api/control/{pipeline}/pause (paused) or
// .../resume: it writes the operator's pause with control.SetPause and
// answers once the broker acknowledged it (and the reader read it back,
// 5 s at most). The caller was let through by HandlerAccess's write rule.
func (a *Analyzer) serveSetPause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("pipeline")
		if a.pipe(name) == nil {
			httpError(w, http.StatusNotFound, fmt.Sprintf("pipeline %q is not configured", name))
			return
		}
		req, err := decodePauseRequest(http.MaxBytesReader(w, r.Body, maxPauseBody))
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), controlWriteTimeout)
		defer cancel()
		by := a.controlWriter()
		if err := control.SetPause(ctx, a.admin, a.ctl.topic, name, by, paused, req.Reason); err != nil {
			httpError(w, http.StatusBadGateway, fmt.Sprintf("the control topic %s did not take it: %v", a.ctl.topic, err))
			return
		}
		what := "resume"
		if paused {
			what = "pause"
		}
		a.log.Info("operator's "+what+" written", "pipeline", name, "reason", req.Reason, "topic", a.ctl.topic, "by", r.RemoteAddr)
		resp := PauseResponse{Pipeline: name, Paused: paused, Reason: req.Reason, By: by}
		rctx, rcancel := context.WithTimeout(ctx, controlReadBack)
		defer rcancel()
		if bounds, err := a.dlqBounds(rctx, a.ctl.topic); err == nil {
			ends := make(map[int32]int64, len(bounds))
			for p, b := range bounds {
				ends[p] = b.End
			}
			resp.Seen = a.ctl.waitRead(rctx, ends)
		}
		writeJSON(w, resp)
	}
}

// decodePauseRequest reads the optional body of a pause or resume: empty,
// or one JSON object with known fields only and a reason of at most
// MaxPauseReason bytes. Every error starts with "body".
func decodePauseRequest(r io.Reader) (PauseRequest, error) {
	var req PauseRequest
	b, err := io.ReadAll(r)
	if err != nil {
		return req, fmt.Errorf("body: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return req, nil
	}
	if b[0] != '{' {
		return req, errors.New(`body: want nothing, or one JSON object ({"reason": "..."})`)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return PauseRequest{}, fmt.Errorf("body: %w", err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return PauseRequest{}, errors.New("body: want exactly one JSON object; something follows it")
	}
	if len(req.Reason) > MaxPauseReason {
		return PauseRequest{}, fmt.Errorf("body: reason of %d bytes, more than %d", len(req.Reason), MaxPauseReason)
	}
	return req, nil
}
