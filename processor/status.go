package processor

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/redrive/redrive/internal/bearer"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/retry"
)

// Status is this processor instance's live state, GET /api/pipelines.
// Other replicas of the same pipelines have their own; what all of them
// share (rates, records waiting in Kafka, lag) the analyzer derives from
// the topics' offsets.
type Status struct {
	Instance  string           `json:"instance"`
	Now       time.Time        `json:"now"`
	Pipelines []PipelineStatus `json:"pipelines"`
}

// PipelineStatus is one pipeline in Status.
type PipelineStatus struct {
	Name    string `json:"name"`
	Group   string `json:"group"`
	Topic   string `json:"topic"`
	Results string `json:"results,omitempty"`
	DLQ     string `json:"dlq"`
	// Joined: the instance is in the consumer group.
	Joined bool `json:"joined"`
	// Partitions assigned to this instance (main and tiers).
	Partitions int `json:"partitions"`
	// Inflight records are with a handler or their outcome is being written.
	Inflight      int   `json:"inflight"`
	InflightBytes int64 `json:"inflight_bytes"`
	// Waiting tier records are held in memory until due.
	Waiting          int `json:"waiting"`
	PausedPartitions int `json:"paused_partitions"`
	// HandlerP99Seconds and LatenessP99Seconds are over the last minute
	// (since start if younger); 0 with no calls (records) in it.
	HandlerP99Seconds  float64      `json:"handler_p99_seconds"`
	HandlerCalls       uint64       `json:"handler_calls"` // in the same window
	LatenessP99Seconds float64      `json:"lateness_p99_seconds"`
	Tiers              []TierStatus `json:"tiers"`
	// WriteError is the outcome write failing right now, if any.
	WriteError string `json:"write_error,omitempty"`
	// Line is whether handler calls may start, and why not.
	Line LineStatus `json:"line"`
	// Callbacks: a pipeline with Callbacks; counts since this instance
	// started.
	Callbacks *CallbackStatus `json:"callbacks,omitempty"`
	// Delivery is "at-least-once" or "exactly-once"; Held (exactly-once)
	// counts outcomes held for the next transaction, TransactionError the
	// last transaction failure until one commits.
	Delivery         string `json:"delivery"`
	Held             int64  `json:"held,omitempty"`
	TransactionError string `json:"transaction_error,omitempty"`
	// Consume is "group" or "share"; with share, ShareGroup reads the main
	// topic (Group then reads the tiers), ShareHeld counts the records it
	// acquired and has not acknowledged yet, and Members the replicas this
	// one counts to take its share of the budgets.
	Consume    string `json:"consume"`
	ShareGroup string `json:"share_group,omitempty"`
	ShareHeld  int    `json:"share_held,omitempty"`
	Members    int    `json:"members,omitempty"`
}

// CallbackStatus is a pipeline's callbacks (callback.go) in
// PipelineStatus; counts since this instance started.
type CallbackStatus struct {
	Topic string `json:"topic"`
	Wait  string `json:"wait"`
	// Held: callbacks in memory now (matched ones kept to spot duplicates).
	Held int `json:"held"`
	// Received: callback records read. Matched: records finished by their
	// callback. Duplicate: a callback for a job already called back.
	// Late: a callback for a job this instance finished by polling.
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

// LineStatus is a pipeline's flow control (line.go, line_breaker.go) in PipelineStatus.
type LineStatus struct {
	// State: "running", "probing" (the breaker is half-open: a few calls
	// go through) or "stopped" (no call starts; Reasons say why).
	State   string       `json:"state"`
	Reasons []StopReason `json:"reasons,omitempty"`
	// Breaker: "closed", "half-open", "open" or "disabled"; since when.
	Breaker      string    `json:"breaker"`
	BreakerSince time.Time `json:"breaker_since,omitzero"`
	// OpenFor is how long the breaker stays open this time (doubling).
	OpenFor string `json:"open_for,omitempty"`
	// Why the breaker is open or half-open: the counts that opened it
	// ("20 counted failures in a row", "3 of 5 probes failed").
	Why string `json:"why,omitempty"`
	// Counts: what the breaker counted (nil: disabled).
	Counts     *BreakerCounts `json:"counts,omitempty"`
	Guard      bool           `json:"guard"`                // the guard is on
	RateLimit  float64        `json:"rate_limit,omitempty"` // calls per second, 0: none
	FailoverTo string         `json:"failover_to,omitempty"`
	// LearnedRate is the calls per second this process learned from the
	// service's 429s and keeps its calls to (0: none learned).
	LearnedRate float64 `json:"learned_rate,omitempty"`
}

// BreakerCounts is what the circuit breaker counted, so that an outage
// (counted failures) can be told from a few bad requests (failures not
// counted: a record's earlier failure again, or a request-fault code).
type BreakerCounts struct {
	// Window is the rolling window the closed breaker counts over; Calls
	// and Failures are its counted calls in it, InARow the counted
	// failures in a row, NotCounted the transient failures it put on the
	// requests. The window starts empty when the breaker closes.
	Window     string `json:"window"`
	Calls      int    `json:"calls"`
	Failures   int    `json:"failures"`
	InARow     int    `json:"in_a_row"`
	NotCounted int    `json:"not_counted"`
	// Half-open: probe slots taken, probes that succeeded and failed.
	Probes       int `json:"probes,omitempty"`
	ProbesOK     int `json:"probes_ok,omitempty"`
	ProbesFailed int `json:"probes_failed,omitempty"`
}

// StopReason is one reason the line is stopped.
type StopReason struct {
	// Reason: "breaker", "pause_code", "guard" or "manual".
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Until is when it ends by itself; absent: when an operator resumes
	// (guard, manual) or the probes succeed (breaker half-open).
	Until  time.Time `json:"until,omitzero"`
	Detail string    `json:"detail"`
}

// TierStatus is one retry tier in PipelineStatus.
type TierStatus struct {
	Name               string  `json:"name"` // its name (retry.Schedule.TierName), as in redrive-tier
	Topic              string  `json:"topic"`
	Waiting            int     `json:"waiting"`
	PausedPartitions   int     `json:"paused_partitions"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
}

// statusWindow is the window the p99s are taken over.
const statusWindow = time.Minute

// Status reports every pipeline's live state. It holds each pipeline's
// lock only to count its partitions.
func (pr *Processor) Status() Status {
	now := time.Now()
	s := Status{Instance: pr.cfg.Instance, Now: now.UTC()}
	for _, p := range pr.pipelines {
		s.Pipelines = append(s.Pipelines, pr.hist.pipelineStatus(p, now))
	}
	return s
}

// StatusHandler serves Status as JSON as anyone may see it (Public): a
// manual pause without who paused and why.
func (pr *Processor) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, pr.Status().Public())
	})
}

func writeStatus(w http.ResponseWriter, s Status) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Vary", "Authorization")
	_ = json.NewEncoder(w).Encode(s)
}

// ManualDetailHidden is a manual pause's Detail in Status.Public.
const ManualDetailHidden = "by hand; who and why: GET /api/pipelines with processor.token"

// Public is s without what only an operator should read: a manual
// pause's Detail (the pauser's address and the reason they gave, free
// text) is ManualDetailHidden. That the line is paused by hand, and
// since when, stays.
func (s Status) Public() Status {
	s.Pipelines = slices.Clone(s.Pipelines)
	for i := range s.Pipelines {
		l := &s.Pipelines[i].Line
		l.Reasons = slices.Clone(l.Reasons)
		for j := range l.Reasons {
			if l.Reasons[j].Reason == stopManual {
				l.Reasons[j].Detail = ManualDetailHidden
			}
		}
	}
	return s
}

// ErrNoPipeline is returned by Pause and Resume for a name no pipeline has.
var ErrNoPipeline = errors.New("no such pipeline")

func (pr *Processor) pipelineNamed(name string) (*pipeline, error) {
	for _, p := range pr.pipelines {
		if p.cfg.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoPipeline, name)
}

// Pause stops the named pipeline's handler calls in this process until
// Resume: records already polled wait, fetching pauses, no attempt is
// spent. detail says who and why (logged, shown in Status).
func (pr *Processor) Pause(name, detail string) error {
	p, err := pr.pipelineNamed(name)
	if err != nil {
		return err
	}
	p.line.pauseByHand(detail)
	pr.publishPause(name, true, detail)
	return nil
}

// publishPause tells every process of the pipeline an operator's pause or
// resume, through the control topic.
func (pr *Processor) publishPause(name string, paused bool, detail string) {
	if pr.ctl != nil {
		pr.ctl.publish(control.Record{Kind: control.KindPause, Pipeline: name, Instance: pr.ctl.writer,
			At: time.Now(), Pause: &control.Pause{Paused: paused, Reason: detail}})
	}
}

// Resume clears every stop of the named pipeline in this process: a
// manual pause, the guard, a pause code's pause, and an open breaker
// (it starts closed again).
func (pr *Processor) Resume(name, detail string) error {
	p, err := pr.pipelineNamed(name)
	if err != nil {
		return err
	}
	p.line.resume(detail)
	pr.publishPause(name, false, detail)
	return nil
}

// PipelinesHandler serves GET /api/pipelines (Status) and POST
// /api/pipelines/{name}/pause and /resume, which need the header
// "Authorization: Bearer <token>" (the scheme in any case, the token
// compared in constant time; 401 otherwise): without a token configured
// they are refused (403). A pause or resume answers with the pipeline's
// status; errors are JSON ({"error": "..."}), as the analyzer's.
//
// GET /api/pipelines needs no token and then shows Status.Public: the
// live state holds no record's key, value or headers (names, topics,
// counts, p99s, breaker and pause states), and the analyzer reads it
// without one. Who paused a line by hand and why (their address, their
// free-text reason) are only for a GET with the token; a GET with a wrong
// one is a 401, so that a caller does not mistake it for the full view.
// That is also why the processor, unlike the analyzer, listens on any
// address without a token: its http_addr serves /metrics, /healthz and
// /readyz to Prometheus and the kubelet, and its writes are off without
// processor.token.
func (pr *Processor) PipelinesHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/pipelines", func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		switch {
		case auth == "" || token == "":
			writeStatus(w, pr.Status().Public())
		case bearer.Valid(auth, token):
			writeStatus(w, pr.Status())
		default:
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			jsonError(w, http.StatusUnauthorized, "wrong bearer token: send Authorization: Bearer <processor.token>, or none for the public view")
		}
	})
	act := func(w http.ResponseWriter, r *http.Request, pause bool) {
		w.Header().Set("Cache-Control", "no-store")
		if token == "" {
			jsonError(w, http.StatusForbidden, "pause and resume are off: set processor.token (REDRIVE_PROCESSOR_TOKEN)")
			return
		}
		if !bearer.Valid(r.Header.Get("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			jsonError(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <processor.token>")
			return
		}
		name := r.PathValue("name")
		detail := "by " + r.RemoteAddr
		if reason := r.URL.Query().Get("reason"); reason != "" {
			detail += ": " + retry.TruncateUTF8(reason, 200)
		}
		var err error
		if pause {
			err = pr.Pause(name, detail)
		} else {
			err = pr.Resume(name, detail)
		}
		if err != nil {
			jsonError(w, http.StatusNotFound, err.Error())
			return
		}
		p, _ := pr.pipelineNamed(name)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pr.hist.pipelineStatus(p, time.Now()))
	}
	mux.HandleFunc("POST /api/pipelines/{name}/pause", func(w http.ResponseWriter, r *http.Request) { act(w, r, true) })
	mux.HandleFunc("POST /api/pipelines/{name}/resume", func(w http.ResponseWriter, r *http.Request) { act(w, r, false) })
	return mux
}

// ValidBearer reports whether the Authorization header value auth is
// "Bearer <token>" with token: the scheme in any case (RFC 9110), spaces
// after it skipped, the token compared in constant time (as SHA-256
// hashes, so its length does not show); never with token empty. It is
// the check PipelinesHandler uses, for callers of this package that
// serve their own endpoints.
func ValidBearer(auth, token string) bool { return bearer.Valid(auth, token) }

func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (hw *histWindows) pipelineStatus(p *pipeline, now time.Time) PipelineStatus {
	tiers := make([]TierStatus, len(p.tiers))
	for i, t := range p.tiers {
		tiers[i] = TierStatus{Name: p.cfg.Schedule.TierName(i), Topic: t}
	}
	ps := PipelineStatus{Name: p.cfg.Name, Group: p.cfg.GroupID(), Topic: p.cfg.Topic, Results: p.cfg.Results,
		DLQ: p.cfg.DLQ, Joined: p.joined.Load(), Tiers: tiers}
	ps.Line = p.line.status(now)
	ps.Callbacks = p.callbackStatus()
	ps.Delivery, ps.Held = string(p.cfg.Delivery), p.commits.held()
	ps.Consume = string(p.cfg.Consume)
	if p.share != nil {
		ps.ShareGroup, ps.ShareHeld = p.cfg.ShareGroupID(), p.share.heldNow()
		if sh := p.shareNow.Load(); sh != nil {
			ps.Members = sh.members
		}
	}
	if err := p.commits.failure(); err != nil {
		ps.TransactionError = err.Error()
	}
	p.mu.Lock()
	ps.Inflight, ps.InflightBytes, ps.Waiting = p.inflight, p.bytes, p.waiting
	for _, st := range p.parts {
		if st.gone {
			continue
		}
		ps.Partitions++
		if st.tier >= 0 && st.tier < len(tiers) {
			tiers[st.tier].Waiting += st.waiting
			if st.paused {
				tiers[st.tier].PausedPartitions++
				ps.PausedPartitions++
			}
		}
	}
	p.mu.Unlock()
	if p.writeFails.Load() > 0 {
		p.lastWriteMu.Lock()
		if p.lastWrite != nil {
			ps.WriteError = p.lastWrite.Error()
		}
		p.lastWriteMu.Unlock()
	}

	// The histograms the metrics already keep; their series exist from start.
	var handler hist
	for _, k := range []Kind{Success, Transient, NotReady, Permanent, Invalid} {
		handler.add(readHist(p.hot.handlerFor(k)))
	}
	d := hw.delta(p.cfg.Name+"\x00handler", handler, now)
	ps.HandlerP99Seconds, ps.HandlerCalls = d.quantile(0.99), d.count
	var all hist
	for i := range tiers {
		h := readHist(p.hot.latenessFor(i, tiers[i].Name))
		all.add(h)
		tiers[i].LatenessP99Seconds = hw.delta(p.cfg.Name+"\x00tier\x00"+tiers[i].Name, h, now).quantile(0.99)
	}
	ps.LatenessP99Seconds = hw.delta(p.cfg.Name+"\x00lateness", all, now).quantile(0.99)
	return ps
}

// hist is a histogram's cumulative bucket counts.
type hist struct {
	upper []float64
	cum   []uint64
	count uint64
}

func readHist(o prometheus.Observer) hist {
	m, ok := o.(prometheus.Metric)
	if !ok {
		return hist{}
	}
	var pb dto.Metric
	if m.Write(&pb) != nil || pb.Histogram == nil {
		return hist{}
	}
	h := hist{count: pb.Histogram.GetSampleCount()}
	for _, b := range pb.Histogram.GetBucket() {
		h.upper = append(h.upper, b.GetUpperBound())
		h.cum = append(h.cum, b.GetCumulativeCount())
	}
	return h
}

// add sums o into h; both have the same buckets (one vector) or h is empty.
func (h *hist) add(o hist) {
	if len(h.upper) == 0 {
		h.upper, h.cum = append([]float64(nil), o.upper...), make([]uint64, len(o.cum))
	}
	for i := range o.cum {
		if i < len(h.cum) {
			h.cum[i] += o.cum[i]
		}
	}
	h.count += o.count
}

func (h hist) sub(o hist) hist {
	if len(o.cum) != len(h.cum) || o.count > h.count {
		return h
	}
	d := hist{upper: h.upper, cum: make([]uint64, len(h.cum)), count: h.count - o.count}
	for i := range h.cum {
		d.cum[i] = h.cum[i] - o.cum[i]
	}
	return d
}

// quantile interpolates within the bucket holding the q-quantile, as
// Prometheus' histogram_quantile does; past the last bucket it is that
// bucket's bound.
func (h hist) quantile(q float64) float64 {
	if h.count == 0 || len(h.cum) == 0 {
		return 0
	}
	rank := q * float64(h.count)
	i := sort.Search(len(h.cum), func(i int) bool { return float64(h.cum[i]) >= rank })
	if i == len(h.cum) {
		return h.upper[len(h.upper)-1]
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.upper[i-1], h.cum[i-1]
	}
	if math.IsInf(h.upper[i], 1) {
		return lo
	}
	in := h.cum[i] - below
	if in == 0 {
		return h.upper[i]
	}
	return lo + (h.upper[i]-lo)*(rank-float64(below))/float64(in)
}

// histWindows keeps snapshots of each histogram so that a p99 is over the
// last statusWindow, not since start: a slow hour long ago does not hide
// a fast minute now.
type histWindows struct {
	mu    sync.Mutex
	snaps map[string][]histSnap // oldest first
}

type histSnap struct {
	at time.Time
	h  hist
}

// delta is cur minus the newest snapshot at least statusWindow old (the
// oldest one, while younger), and records cur.
func (hw *histWindows) delta(key string, cur hist, now time.Time) hist {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.snaps == nil {
		hw.snaps = map[string][]histSnap{}
	}
	ss := hw.snaps[key]
	for len(ss) > 1 && now.Sub(ss[1].at) >= statusWindow {
		ss = ss[1:]
	}
	d := cur
	if len(ss) > 0 {
		d = cur.sub(ss[0].h)
	}
	// A snapshot every few seconds bounds the list however often Status is
	// called.
	if len(ss) == 0 || now.Sub(ss[len(ss)-1].at) >= 5*time.Second {
		ss = append(ss, histSnap{at: now, h: cur})
	}
	hw.snaps[key] = ss
	return d
}
