package demosolver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redrive/redrive/internal/seeded"
)

// Codes the solver answers with, in Redrive-Error-Code and in the body.
const (
	CodeNoSlot       = "ERROR_NO_SLOT_AVAILABLE" // 503: busy, try again later
	CodeNotReady     = "CAPCHA_NOT_READY"        // 202: accepted, poll again (2captcha's spelling)
	CodeWrongUserKey = "ERROR_WRONG_USER_KEY"    // 400: will never work
	CodeWrongID      = "ERROR_WRONG_CAPTCHA_ID"  // 400: polled a task it does not know
	CodeOutage       = "ERROR_SERVICE_OUTAGE"    // 503: every call during an outage (SetOutage)
)

const (
	// RetryAfter is what 503 and 202 answers send as Retry-After.
	RetryAfter = time.Second
	// MaxBodyBytes bounds a request body; a longer one is 413.
	MaxBodyBytes = 1 << 20
	// maxTasks bounds the tasks and keys remembered; the oldest go first.
	maxTasks = 1 << 16
	// MaxOutage is the longest outage SetOutage and POST /outage accept.
	MaxOutage = 10 * time.Minute
)

// ErrOutageRange: an outage's length is below zero or above MaxOutage.
var ErrOutageRange = errors.New("outage length out of range")

// Config is the solver's behaviour. The zero Config solves everything at once.
type Config struct {
	// FailRate is the share of attempts answered 503 ERROR_NO_SLOT_AVAILABLE.
	FailRate float64
	// NotReadyRate is the share of attempts accepted as a task to poll (202).
	NotReadyRate float64
	// PermanentRate is the share of attempts answered 400 ERROR_WRONG_USER_KEY.
	// Rates are clamped to [0, 1] and taken in the order permanent, fail,
	// not-ready; what they leave is solved at once.
	PermanentRate float64
	// Latency is added to every /solve answer.
	Latency time.Duration
	// Seed makes the mix of answers reproducible.
	Seed uint64
	// PollsToReady is the poll on which a task is ready (at least the first).
	PollsToReady int
	// Now is the clock outages are timed by (tests); nil: time.Now.
	Now func() time.Time
}

// Stats counts what the solver did.
type Stats struct {
	Requests    int64 `json:"requests"`     // POST /solve requests
	Solved      int64 `json:"solved"`       // answers solved, each once per key (what a real service charges)
	Duplicates  int64 `json:"duplicates"`   // requests for a key already solved or with a task pending
	NoSlot      int64 `json:"no_slot"`      // 503 ERROR_NO_SLOT_AVAILABLE
	Accepted    int64 `json:"accepted"`     // new tasks (202)
	Polls       int64 `json:"polls"`        // requests polling a task (carrying Redrive-State)
	NotReady    int64 `json:"not_ready"`    // 202 answers in all: new tasks, duplicates of pending ones, early polls
	Permanent   int64 `json:"permanent"`    // 400 ERROR_WRONG_USER_KEY
	UnknownTask int64 `json:"unknown_task"` // 400 ERROR_WRONG_CAPTCHA_ID
	Rejected    int64 `json:"rejected"`     // wrong method or path, body too large
	Pending     int64 `json:"pending"`      // tasks accepted and not yet solved
	Outage      int64 `json:"outage"`       // 503 ERROR_SERVICE_OUTAGE: calls during an outage
}

// Outage is the answer of GET and POST /outage: whether the solver is in
// an outage, and until when.
type Outage struct {
	Active bool       `json:"active"`
	Until  *time.Time `json:"until,omitempty"` // only while active
}

// task is one accepted request, pending or solved.
type task struct {
	id     uint64
	key    string // Idempotency-Key, "" without one
	polls  int
	answer string // "" while pending
}

// Solver is the demo service, an http.Handler. It is safe for concurrent use.
type Solver struct {
	cfg                     Config
	pPerm, pFail, pNotReady float64 // cumulative thresholds

	mu     sync.Mutex
	seq    uint64 // requests without an Idempotency-Key, for their draw
	nextID uint64
	tasks  map[uint64]*task
	byKey  map[string]*task
	order  []uint64 // task ids, oldest first, for eviction
	stats  Stats
	// outageUntil: every /solve call before it is answered 503
	// ERROR_SERVICE_OUTAGE; zero or past: no outage.
	outageUntil time.Time
}

var _ http.Handler = (*Solver)(nil)

// New returns a Solver behaving as cfg says.
func New(cfg Config) *Solver {
	clamp := func(f float64) float64 { return min(max(f, 0), 1) } // NaN → 0
	s := &Solver{cfg: cfg, tasks: map[uint64]*task{}, byKey: map[string]*task{}}
	s.pPerm = clamp(cfg.PermanentRate)
	s.pFail = min(s.pPerm+clamp(cfg.FailRate), 1)
	s.pNotReady = min(s.pFail+clamp(cfg.NotReadyRate), 1)
	if s.cfg.PollsToReady < 1 {
		s.cfg.PollsToReady = 1
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	return s
}

// SetOutage makes every /solve call (new requests and polls alike) fail
// with 503 ERROR_SERVICE_OUTAGE for d from now, replacing any outage
// running; d == 0 ends one. d below zero or above MaxOutage is
// ErrOutageRange. It returns the outage now in force.
func (s *Solver) SetOutage(d time.Duration) (Outage, error) {
	if d < 0 || d > MaxOutage {
		return s.Outage(), fmt.Errorf("%w: %s, want 0 (ends it) to %s", ErrOutageRange, d, fmtDuration(MaxOutage))
	}
	s.mu.Lock()
	if d == 0 {
		s.outageUntil = time.Time{}
	} else {
		s.outageUntil = s.cfg.Now().Add(d)
	}
	s.mu.Unlock()
	return s.Outage(), nil
}

// Outage reports whether an outage runs now, and until when.
func (s *Solver) Outage() Outage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outageLocked(s.cfg.Now())
}

// outageLocked is the outage at now. Caller holds mu.
func (s *Solver) outageLocked(now time.Time) Outage {
	if !now.Before(s.outageUntil) {
		return Outage{}
	}
	u := s.outageUntil.UTC()
	return Outage{Active: true, Until: &u}
}

// Stats returns the counters so far.
func (s *Solver) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	for _, t := range s.tasks {
		if t.answer == "" {
			st.Pending++
		}
	}
	return st
}

// ServeHTTP serves POST /solve, GET /stats, and GET and POST /outage.
func (s *Solver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/outage":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.Outage())
		case http.MethodPost:
			s.postOutage(w, r)
		default:
			s.reject(w, "GET, POST")
		}
	case "/solve":
		if r.Method != http.MethodPost {
			s.reject(w, http.MethodPost)
			return
		}
		s.solve(w, r)
	case "/stats":
		if r.Method != http.MethodGet {
			s.reject(w, http.MethodGet)
			return
		}
		writeJSON(w, http.StatusOK, s.Stats())
	default:
		s.count(func(st *Stats) { st.Rejected++ })
		http.NotFound(w, r)
	}
}

// postOutage is POST /outage?for=<duration>: an outage of that length
// from now (0 ends one); a missing, unparsable or out-of-range for is a
// 400 saying what is wanted.
func (s *Solver) postOutage(w http.ResponseWriter, r *http.Request) {
	want := "want ?for=<duration> from 0 (ends the outage) to " + fmtDuration(MaxOutage) + ", e.g. ?for=30s"
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, "query string: "+err.Error(), http.StatusBadRequest)
		return
	}
	v := q["for"]
	switch {
	case len(v) > 1:
		http.Error(w, fmt.Sprintf("for: given %d times; %s", len(v), want), http.StatusBadRequest)
		return
	case len(v) == 0 || v[0] == "":
		http.Error(w, "for: missing; "+want, http.StatusBadRequest)
		return
	}
	d, err := time.ParseDuration(v[0])
	if err != nil {
		http.Error(w, fmt.Sprintf("for %q: not a duration; %s", v[0], want), http.StatusBadRequest)
		return
	}
	o, err := s.SetOutage(d)
	if err != nil {
		http.Error(w, fmt.Sprintf("for %q: %s", v[0], want), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// fmtDuration is d as ParseDuration reads it, without a trailing "0s" ("10m").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if t := strings.TrimSuffix(s, "0s"); t != s && strings.HasSuffix(t, "m") {
		return t
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Solver) reject(w http.ResponseWriter, allow string) {
	s.count(func(st *Stats) { st.Rejected++ })
	w.Header().Set("Allow", allow)
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
}

func (s *Solver) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

func (s *Solver) solve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.stats.Requests++
	down := s.outageLocked(s.cfg.Now()).Active
	if down {
		s.stats.Outage++
	}
	s.mu.Unlock()
	if down { // the whole service is down: no task, key or poll is looked at
		fail(w, http.StatusServiceUnavailable, CodeOutage, false)
		return
	}
	if s.cfg.Latency > 0 {
		t := time.NewTimer(s.cfg.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the client is gone
		}
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		s.count(func(st *Stats) { st.Rejected++ })
		if errors.As(err, &tooBig) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		}
		return
	}
	key := r.Header.Get("Idempotency-Key")
	state := r.Header.Get("Redrive-State")
	attempt := r.Header.Get("Redrive-Attempt")

	s.mu.Lock()
	if t := s.byKey[key]; key != "" && t != nil && t.answer != "" {
		s.stats.Duplicates++
		s.mu.Unlock()
		answer(w, t)
		return
	}
	if state != "" {
		s.stats.Polls++
		t := s.taskOf(state)
		switch {
		case t == nil:
			s.stats.UnknownTask++
			s.mu.Unlock()
			fail(w, http.StatusBadRequest, CodeWrongID, false)
		case t.answer != "":
			s.stats.Duplicates++
			s.mu.Unlock()
			answer(w, t)
		default:
			t.polls++
			if t.polls >= s.cfg.PollsToReady {
				t.answer = s.answerFor(value)
				s.stats.Solved++
				s.mu.Unlock()
				answer(w, t)
				return
			}
			s.stats.NotReady++
			s.mu.Unlock()
			accepted(w, t)
		}
		return
	}
	if t := s.byKey[key]; key != "" && t != nil { // pending: the same task again
		s.stats.Duplicates++
		s.stats.NotReady++
		s.mu.Unlock()
		accepted(w, t)
		return
	}
	var u float64
	if key == "" {
		s.seq++
		u = unit(s.cfg.Seed, "#"+strconv.FormatUint(s.seq, 10), attempt)
	} else {
		u = unit(s.cfg.Seed, key, attempt)
	}
	switch {
	case strings.Contains(string(value), "bad-key") || u < s.pPerm:
		s.stats.Permanent++
		s.mu.Unlock()
		fail(w, http.StatusBadRequest, CodeWrongUserKey, false)
	case u < s.pFail:
		s.stats.NoSlot++
		s.mu.Unlock()
		fail(w, http.StatusServiceUnavailable, CodeNoSlot, true)
	case u < s.pNotReady:
		t := s.newTask(key)
		s.stats.Accepted++
		s.stats.NotReady++
		s.mu.Unlock()
		accepted(w, t)
	default:
		t := &task{answer: s.answerFor(value)}
		if key != "" {
			t = s.newTask(key)
			t.answer = s.answerFor(value)
		}
		s.stats.Solved++
		s.mu.Unlock()
		answer(w, t)
	}
}

// taskOf is the task a Redrive-State names, nil if unknown. Caller holds mu.
func (s *Solver) taskOf(state string) *task {
	n, ok := strings.CutPrefix(state, "task-")
	if !ok {
		return nil
	}
	id, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return nil
	}
	return s.tasks[id]
}

// newTask remembers a task for key, forgetting the oldest past maxTasks.
// Caller holds mu.
func (s *Solver) newTask(key string) *task {
	s.nextID++
	t := &task{id: s.nextID, key: key}
	s.tasks[t.id] = t
	if key != "" {
		s.byKey[key] = t
	}
	s.order = append(s.order, t.id)
	for len(s.tasks) > maxTasks {
		old := s.tasks[s.order[0]]
		s.order = s.order[1:]
		if old == nil {
			continue
		}
		delete(s.tasks, old.id)
		if s.byKey[old.key] == old {
			delete(s.byKey, old.key)
		}
	}
	return t
}

// answerFor is the "solution" of value: six characters, the same for the same value.
func (s *Solver) answerFor(value []byte) string {
	const alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
	h := seeded.Mix(s.cfg.Seed ^ seeded.Hash(string(value)))
	b := make([]byte, 6)
	for i := range b {
		b[i] = alphabet[h%uint64(len(alphabet))]
		h /= uint64(len(alphabet))
	}
	return string(b)
}

type body struct {
	Status  int    `json:"status"`
	Request string `json:"request"`
}

func write(w http.ResponseWriter, status int, b body) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}

func answer(w http.ResponseWriter, t *task) {
	write(w, http.StatusOK, body{Status: 1, Request: t.answer})
}

func accepted(w http.ResponseWriter, t *task) {
	w.Header().Set("Redrive-State", "task-"+strconv.FormatUint(t.id, 10))
	w.Header().Set("Redrive-Error-Code", CodeNotReady)
	w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	write(w, http.StatusAccepted, body{Status: 0, Request: CodeNotReady})
}

func fail(w http.ResponseWriter, status int, code string, retryAfter bool) {
	w.Header().Set("Redrive-Error-Code", code)
	if retryAfter {
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	}
	write(w, status, body{Status: 0, Request: code})
}

// unit draws a number in [0, 1) from seed, key and attempt.
func unit(seed uint64, key, attempt string) float64 {
	return seeded.Unit(seeded.Mix(seed ^ seeded.Hash(key) ^ seeded.Mix(seeded.Hash(attempt))))
}
