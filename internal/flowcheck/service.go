package flowcheck

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Protocol headers of the HTTP handler (processor/httphandler), written
// out so that this package stays free of the processor.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerAttempt        = "Redrive-Attempt"
	headerState          = "Redrive-State"
	headerErrorCode      = "Redrive-Error-Code"
	headerRetryAfter     = "Retry-After"
	// HeaderReplica names the replica that calls (each replica's handler
	// sends it): a crash kills that one.
	HeaderReplica = "Flowcheck-Replica"
)

// WarmUp starts the ids of the requests a run writes before its clock
// starts, one per partition, so that the replicas consume: the service
// answers them 200 and the checker does not count them.
const WarmUp = "warm-"

// Call is one call as the service saw it.
type Call struct {
	ID      string
	Attempt int    // Redrive-Attempt
	State   string // Redrive-State sent: "" on a submit, the job's on a poll
	At, End time.Duration
	Kind    Kind
	// RetryAfter is the Retry-After answered, in seconds (0: none).
	RetryAfter int
	// Cause is why it got that answer: script, outage, limit.
	Cause string
	// Replica is the replica that called (HeaderReplica).
	Replica string
}

// Service is the scripted service of one run: it answers each request by
// its script (the outage and the rate limit first) and logs every call.
// Its clock starts at Start.
type Service struct {
	sc    *Scenario
	byID  map[string]*Request
	lim   *rate.Limiter
	epoch time.Time

	mu       sync.Mutex
	calls    []Call
	scripted map[string]int // calls the script answered, per request
	foreign  int            // calls with an id not in the scenario

	steps []ClockStep // the wall-clock steps made, at their times on the service's clock

	// Crash is told the replica a Crash answer kills; nil: none is.
	Crash func(replica string)
	// StepClock steps the replicas' wall clock by d; nil: nothing steps.
	StepClock func(d time.Duration)
}

// Step steps the replicas' wall clock by d now, and logs it.
func (s *Service) Step(d time.Duration) {
	if s.StepClock == nil {
		return
	}
	at := s.Since()
	s.StepClock(d)
	s.mu.Lock()
	s.steps = append(s.steps, ClockStep{At: at, By: d})
	s.mu.Unlock()
}

// Steps are the wall-clock steps made so far, in order.
func (s *Service) Steps() []ClockStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.steps)
}

// NewService is sc's service.
func NewService(sc *Scenario) *Service {
	s := &Service{sc: sc, byID: map[string]*Request{}, scripted: map[string]int{}, epoch: time.Now()}
	for i := range sc.Requests {
		s.byID[sc.Requests[i].ID] = &sc.Requests[i]
	}
	if sc.RateLimit > 0 {
		s.lim = rate.NewLimiter(rate.Limit(sc.RateLimit), max(1, sc.RateLimit/10))
	}
	return s
}

// Start sets the service's clock to 0: the run's first burst.
func (s *Service) Start() {
	s.mu.Lock()
	s.epoch = time.Now()
	s.mu.Unlock()
}

// Since is the time since Start.
func (s *Service) Since() time.Duration {
	s.mu.Lock()
	e := s.epoch
	s.mu.Unlock()
	return time.Since(e)
}

// Calls is the log so far, in arrival order, and how many calls carried an
// id not in the scenario.
func (s *Service) Calls() (calls []Call, foreign int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls), s.foreign
}

// ScriptedCalls is how many calls the script answered, per request.
func (s *Service) ScriptedCalls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.scripted)
}

// ServeHTTP answers one call.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := s.Since()
	_, _ = io.Copy(io.Discard, r.Body)
	c := Call{ID: r.Header.Get(headerIdempotencyKey), State: r.Header.Get(headerState), At: at, Replica: r.Header.Get(HeaderReplica)}
	c.Attempt, _ = strconv.Atoi(r.Header.Get(headerAttempt))
	req := s.byID[c.ID]
	if req == nil {
		if !strings.HasPrefix(c.ID, WarmUp) {
			s.mu.Lock()
			s.foreign++
			s.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	var st Step
	switch {
	case s.sc.Outage.Contains(at):
		st, c.Cause = Step{Kind: Transient}, "outage"
	case s.lim != nil && !s.lim.Allow():
		st, c.Cause = Step{Kind: Throttle, RetryAfter: 1}, "limit"
	default:
		s.mu.Lock()
		s.scripted[c.ID]++
		n := s.scripted[c.ID]
		s.mu.Unlock()
		st, c.Cause = req.Step(n), "script"
	}
	c.Kind, c.RetryAfter = st.Kind, st.RetryAfter
	if st.Clock != 0 {
		s.Step(st.Clock)
	}
	defer func() {
		c.End = s.Since()
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
	}()
	switch st.Kind {
	case OK:
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "done:"+c.ID)
	case Transient:
		if c.Cause == "outage" {
			w.Header().Set(headerErrorCode, "ERROR_NO_SLOT_AVAILABLE")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	case Permanent:
		w.Header().Set(headerErrorCode, "ERROR_BAD_REQUEST")
		w.WriteHeader(http.StatusBadRequest)
	case Throttle:
		if st.RetryAfter > 0 {
			w.Header().Set(headerRetryAfter, strconv.Itoa(st.RetryAfter))
		}
		w.WriteHeader(http.StatusTooManyRequests)
	case NotReady:
		s.mu.Lock()
		n := s.scripted[c.ID]
		s.mu.Unlock()
		w.Header().Set(headerState, c.ID+"-job-"+strconv.Itoa(n))
		w.WriteHeader(http.StatusAccepted)
	case Crash:
		if s.Crash != nil {
			s.Crash(c.Replica)
		}
		// No answer: the replica dies with the call in flight.
		t := time.NewTimer(s.sc.Timeout + time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusInternalServerError)
	case Slow:
		t := time.NewTimer(s.sc.Timeout + time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			w.WriteHeader(http.StatusOK) // to no one: the handler timed out
		case <-r.Context().Done():
			c.Kind = Hangup
		}
	}
}
