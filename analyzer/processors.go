package analyzer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redrive/redrive/internal/redact"
)

// ErrProcessorStatus: a processor's GET /api/pipelines answer is not one.
var ErrProcessorStatus = errors.New("not a redrive processor status")

// processorStatus is the part of a processor's GET /api/pipelines (the
// processor package's Status) the flow view shows.
type processorStatus struct {
	Instance  string `json:"instance"`
	Pipelines []struct {
		Name               string  `json:"name"`
		Inflight           int64   `json:"inflight"`
		Waiting            int64   `json:"waiting"`
		HandlerP99Seconds  float64 `json:"handler_p99_seconds"`
		LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
		Tiers              []struct {
			Name               string  `json:"name"`
			Waiting            int64   `json:"waiting"`
			LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
		} `json:"tiers"`
		// Line is absent from processors older than flow control.
		Line *ProcessorLine `json:"line"`
		// Callbacks is absent for a pipeline without handler.callback (and
		// from processors older than callbacks).
		Callbacks *ProcessorCallbacks `json:"callbacks"`
	} `json:"pipelines"`
}

// ProcessorCallbacks is one processor's callbacks of a pipeline, as its GET
// /api/pipelines reports them (the processor package's CallbackStatus):
// counts since that processor started.
type ProcessorCallbacks struct {
	Topic string `json:"topic"`
	Wait  string `json:"wait"` // how long a submitted job waits for its callback ("2m0s")
	// Held: callbacks in memory now.
	Held int64 `json:"held"`
	// Received: callback records read; Matched: records finished by their
	// callback; Duplicate: a second callback for a job; Late: a callback
	// for a job already finished by polling.
	Received  uint64 `json:"received"`
	Matched   uint64 `json:"matched"`
	Duplicate uint64 `json:"duplicate"`
	Late      uint64 `json:"late"`
	// Polls: handler calls that polled a job (fallback polls included).
	Polls uint64 `json:"polls"`
	// ViaCallback, ViaPoll: jobs finished by a callback, by a poll.
	ViaCallback uint64 `json:"via_callback"`
	ViaPoll     uint64 `json:"via_poll"`
}

// add sums o's counts into c (Topic and Wait: the first processor's).
func (c *ProcessorCallbacks) add(o *ProcessorCallbacks) {
	if c.Topic == "" {
		c.Topic, c.Wait = o.Topic, o.Wait
	}
	c.Held += o.Held
	c.Received += o.Received
	c.Matched += o.Matched
	c.Duplicate += o.Duplicate
	c.Late += o.Late
	c.Polls += o.Polls
	c.ViaCallback += o.ViaCallback
	c.ViaPoll += o.ViaPoll
}

// ProcessorLine is one processor's flow control of a pipeline, as its GET
// /api/pipelines reports it (the processor package's LineStatus): whether
// handler calls may start there, and why not.
type ProcessorLine struct {
	// State: "running", "probing" (the breaker is half-open: a few calls
	// go through) or "stopped" (no call starts; Reasons say why).
	State   string       `json:"state"`
	Reasons []LineReason `json:"reasons,omitempty"`
	// Breaker: "closed", "half-open", "open" or "disabled"; since when.
	Breaker      string    `json:"breaker"`
	BreakerSince time.Time `json:"breaker_since,omitzero"`
	// OpenFor is how long an open breaker stays open this time ("30s").
	OpenFor string `json:"open_for,omitempty"`
	// Why the breaker is not closed ("20 counted failures in a row").
	Why string `json:"why,omitempty"`
	// Counts: what the breaker counted (absent: disabled, or an older
	// processor).
	Counts     *BreakerCounts `json:"counts,omitempty"`
	Guard      bool           `json:"guard"`                // the guard is on
	RateLimit  float64        `json:"rate_limit,omitempty"` // handler calls per second, 0: none
	FailoverTo string         `json:"failover_to,omitempty"`
	// LearnedRate: handler calls per second the processor learned from
	// the service's 429s (0: none learned).
	LearnedRate float64 `json:"learned_rate,omitempty"`
}

// BreakerCounts is what a processor's breaker counted (the processor
// package's BreakerCounts): counted calls and failures of the service in
// its window, failures in a row, transient failures it put on the
// requests (not counted), and while half-open its probes.
type BreakerCounts struct {
	Window       string `json:"window"`
	Calls        int    `json:"calls"`
	Failures     int    `json:"failures"`
	InARow       int    `json:"in_a_row"`
	NotCounted   int    `json:"not_counted"`
	Probes       int    `json:"probes,omitempty"`
	ProbesOK     int    `json:"probes_ok,omitempty"`
	ProbesFailed int    `json:"probes_failed,omitempty"`
}

// LineReason is one reason a processor's line is stopped.
type LineReason struct {
	// Reason: "breaker", "pause_code", "guard" or "manual".
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Until is when it ends by itself; absent: when an operator resumes
	// or the breaker's probes succeed.
	Until time.Time `json:"until,omitzero"`
	// Detail is as the processor shows it without a token: for a manual
	// pause, not who paused nor why (the processor keeps those for
	// processor.token, which the analyzer neither has nor needs; an older
	// processor sends them, and they reach only who passes this
	// analyzer's own access rules).
	Detail string `json:"detail"`
}

// maxLineReasons bounds the reasons of one line a processor may report
// (it has four).
const maxLineReasons = 16

// lineRank orders line states from running to stopped, for Flow.Line: a
// state this analyzer does not know ranks between running and probing.
func lineRank(state string) int {
	switch state {
	case "running":
		return 0
	case "probing":
		return 2
	case "stopped":
		return 3
	}
	return 1
}

// maxStatusBytes bounds what is read of one processor's answer.
const maxStatusBytes = 1 << 20

// decodeProcessorStatus reads a processor's answer, refusing what cannot
// be one: counts below zero, p99s below zero or not finite.
func decodeProcessorStatus(r io.Reader) (*processorStatus, error) {
	var s processorStatus
	dec := json.NewDecoder(io.LimitReader(r, maxStatusBytes))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProcessorStatus, err)
	}
	bad := func(n int64, q ...float64) bool {
		for _, f := range q {
			if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
				return true
			}
		}
		return n < 0
	}
	for _, p := range s.Pipelines {
		if bad(p.Inflight, p.HandlerP99Seconds, p.LatenessP99Seconds) || p.Waiting < 0 {
			return nil, fmt.Errorf("%w: pipeline %q has negative or non-finite numbers", ErrProcessorStatus, p.Name)
		}
		if c := p.Callbacks; c != nil && c.Held < 0 {
			return nil, fmt.Errorf("%w: pipeline %q holds a negative number of callbacks", ErrProcessorStatus, p.Name)
		}
		if l := p.Line; l != nil {
			if bad(0, l.RateLimit, l.LearnedRate) {
				return nil, fmt.Errorf("%w: pipeline %q has a negative rate limit", ErrProcessorStatus, p.Name)
			}
			if len(l.Reasons) > maxLineReasons {
				return nil, fmt.Errorf("%w: pipeline %q has %d reasons to be stopped, more than %d", ErrProcessorStatus, p.Name, len(l.Reasons), maxLineReasons)
			}
		}
		for _, t := range p.Tiers {
			if bad(t.Waiting, t.LatenessP99Seconds) {
				return nil, fmt.Errorf("%w: pipeline %q tier %q has negative or non-finite numbers", ErrProcessorStatus, p.Name, t.Name)
			}
		}
	}
	return &s, nil
}

// processorPoll is the last answer of each processor in Options.Processors.
type processorPoll struct {
	mu   sync.Mutex
	last map[string]processorAnswer // by URL
}

type processorAnswer struct {
	s   *processorStatus
	err error
}

// pollProcessors asks every processor for its status, in parallel.
func (a *Analyzer) pollProcessors(ctx context.Context) {
	if len(a.o.Processors) == 0 {
		return
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var wg sync.WaitGroup
	answers := make([]processorAnswer, len(a.o.Processors))
	for i, u := range a.o.Processors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = fetchProcessor(ctx, client, u)
		}()
	}
	wg.Wait()
	a.procs.mu.Lock()
	defer a.procs.mu.Unlock()
	if a.procs.last == nil {
		a.procs.last = map[string]processorAnswer{}
	}
	for i, u := range a.o.Processors {
		a.procs.last[u] = answers[i]
	}
}

func fetchProcessor(ctx context.Context, client *http.Client, base string) processorAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/api/pipelines", nil)
	if err != nil {
		return processorAnswer{err: errors.New(redact.Text(err.Error()))}
	}
	resp, err := client.Do(req)
	if err != nil {
		return processorAnswer{err: errors.New(redact.Text(err.Error()))} // it quotes the URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return processorAnswer{err: fmt.Errorf("%w: %s", ErrProcessorStatus, resp.Status)}
	}
	s, err := decodeProcessorStatus(resp.Body)
	return processorAnswer{s: s, err: err}
}

// addProcessors puts the processors' last answers about f's pipeline into f.
func (a *Analyzer) addProcessors(f *Flow) {
	if len(a.o.Processors) == 0 {
		return
	}
	a.procs.mu.Lock()
	defer a.procs.mu.Unlock()
	for _, u := range a.o.Processors {
		fp := FlowProcessor{URL: redact.URL(u)}
		ans, ok := a.procs.last[u]
		switch {
		case !ok:
			fp.Error = "not asked yet"
		case ans.err != nil:
			fp.Error = ans.err.Error()
		default:
			fp.Instance = ans.s.Instance
			for _, p := range ans.s.Pipelines {
				if p.Name != f.Name {
					continue
				}
				fp.Inflight, fp.Waiting = p.Inflight, p.Waiting
				fp.HandlerP99Seconds, fp.LatenessP99Seconds = p.HandlerP99Seconds, p.LatenessP99Seconds
				if p.Line != nil {
					l := *p.Line
					l.Reasons = slices.Clone(l.Reasons) // the answer is kept; f is the caller's
					if l.Counts != nil {
						c := *l.Counts
						l.Counts = &c
					}
					fp.Line = &l
					if f.Line == "" || lineRank(l.State) > lineRank(f.Line) {
						f.Line = l.State
					}
				}
				if p.Callbacks != nil {
					c := *p.Callbacks
					fp.Callbacks = &c
					if f.Callbacks == nil {
						f.Callbacks = &ProcessorCallbacks{}
					}
					f.Callbacks.add(&c)
				}
				f.Inflight += p.Inflight
				f.HandlerP99Seconds = max(f.HandlerP99Seconds, p.HandlerP99Seconds)
				f.LatenessP99Seconds = max(f.LatenessP99Seconds, p.LatenessP99Seconds)
				for _, pt := range p.Tiers {
					for i := range f.Tiers {
						if f.Tiers[i].Name == pt.Name {
							f.Tiers[i].Held += pt.Waiting
							f.Tiers[i].LatenessP99Seconds = max(f.Tiers[i].LatenessP99Seconds, pt.LatenessP99Seconds)
						}
					}
				}
			}
		}
		f.Processors = append(f.Processors, fp)
	}
}
