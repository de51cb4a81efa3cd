package analyzer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/redrive/redrive/topics"
)

// Tier is one retry tier of a pipeline, for the flow view.
type Tier struct {
	Name  string // its delay, as in redrive-tier ("30s")
	Topic string
}

// FlowResponse is GET /api/pipelines: every pipeline's flow, main topic →
// tiers → results / DLQ, derived from Kafka alone (end offsets and the
// consumer groups' committed offsets), so it covers every processor
// replica and needs none of their addresses.
type FlowResponse struct {
	Now       string `json:"now"`
	Pipelines []Flow `json:"pipelines"`
	// DevOutage says POST /api/dev/outage works: the analyzer runs inside
	// `redrive dev` (Options.DemoOutage is set). Absent otherwise.
	DevOutage bool `json:"dev_outage,omitempty"`
}

// Flow is one pipeline in FlowResponse.
type Flow struct {
	Name  string `json:"name"`
	Group string `json:"group"` // the processors' consumer group
	// WindowSeconds is the time the rates are taken over; 0 until a second
	// sample exists (rates are then 0).
	WindowSeconds float64 `json:"window_seconds"`
	// SampledAt is when the offsets were read; empty before the first read.
	SampledAt string `json:"sampled_at,omitempty"`
	Error     string `json:"error,omitempty"` // the last read failed
	// Processors is what the processors in Options.Processors report of
	// this pipeline (GET /api/pipelines on each); Inflight is their sum,
	// the p99s their largest. Empty without Options.Processors.
	Processors []FlowProcessor `json:"processors,omitempty"`
	// Line is the processors' flow control of the pipeline in one word:
	// the furthest from running of the states they report ("stopped" if
	// any is stopped, else "probing" if any probes, else "running");
	// empty when none reports one. Each one's is in Processors[i].Line.
	Line string `json:"line,omitempty"`
	// Callbacks are the reachable processors' callbacks of the pipeline,
	// summed (held, received, matched, duplicate, late, polls, finished
	// via callback and via poll); absent when none reports any (a
	// pipeline without handler.callback). Each one's is in Processors[i].
	Callbacks          *ProcessorCallbacks `json:"callbacks,omitempty"`
	Inflight           int64               `json:"inflight"`
	HandlerP99Seconds  float64             `json:"handler_p99_seconds"`
	LatenessP99Seconds float64             `json:"lateness_p99_seconds"`
	Main               FlowTopic           `json:"main"`
	Tiers              []FlowTopic         `json:"tiers"`
	Results            *FlowTopic          `json:"results,omitempty"`
	DLQ                FlowTopic           `json:"dlq"`
}

// FlowTopic is one topic of a Flow.
type FlowTopic struct {
	Role  string `json:"role"` // main, tier, results, dlq
	Name  string `json:"name"` // "main", the tier's delay, "results", "dlq"
	Topic string `json:"topic"`
	// End is the sum of the partitions' end offsets; InPerSecond how fast
	// it grows: records written to the topic.
	End         int64   `json:"end"`
	InPerSecond float64 `json:"in_per_second"`
	// Group consumes the topic (the processors; the rule worker for the
	// DLQ); empty for results, which redrive does not read.
	Group string `json:"group,omitempty"`
	// Share: Group is a share group (the main topic of a pipeline with
	// consume: share); Committed is then its share-partition start
	// offsets: every record before them is acknowledged, and Waiting
	// counts the records after them, acquired ones included.
	Share bool `json:"share,omitempty"`
	// Committed is the sum of Group's committed offsets (the log start
	// where it committed none); Waiting = End − Committed, the records not
	// yet finished (consumer lag); DonePerSecond how fast Committed grows.
	Committed     int64   `json:"committed"`
	Waiting       int64   `json:"waiting"`
	DonePerSecond float64 `json:"done_per_second"`
	// Held (tiers): of Waiting, the records the reachable processors hold in
	// memory until due; LatenessP99Seconds the largest of their p99s of how
	// late past due the tier's records were handled.
	Held               int64   `json:"held,omitempty"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds,omitempty"`
}

// FlowProcessor is one processor's live state of a pipeline, as its
// GET /api/pipelines reported it at the last sample.
type FlowProcessor struct {
	URL                string  `json:"url"`
	Instance           string  `json:"instance,omitempty"`
	Error              string  `json:"error,omitempty"` // unreachable or not a redrive processor
	Inflight           int64   `json:"inflight"`
	Waiting            int64   `json:"waiting"`
	HandlerP99Seconds  float64 `json:"handler_p99_seconds"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
	// Line is whether handler calls may start there, and why not; absent
	// when the processor was not reached, does not run the pipeline, or
	// reports no line (older than flow control).
	Line *ProcessorLine `json:"line,omitempty"`
	// Callbacks: its callbacks of the pipeline, counts since it started;
	// absent when it reports none.
	Callbacks *ProcessorCallbacks `json:"callbacks,omitempty"`
}

// flowWindow is the least time rates are taken over.
const flowWindow = 15 * time.Second

type flowSample struct {
	at        time.Time
	end, done map[string]int64 // topic → sums of end and committed offsets
	err       error
}

// flowState is one pipeline's recent samples, oldest first.
type flowState struct {
	mu      sync.Mutex
	samples []flowSample
	err     error
}

// flowTopics are p's topics in flow order with role and name.
func (p *pipe) flowTopics() []FlowTopic {
	g := "redrive." + p.cfg.Name
	main := FlowTopic{Role: "main", Name: "main", Topic: p.cfg.Topic, Group: g}
	if p.cfg.Share {
		main.Group, main.Share = topics.ShareGroupID(p.cfg.Name), true
	}
	ts := []FlowTopic{main}
	for _, t := range p.cfg.Tiers {
		ts = append(ts, FlowTopic{Role: "tier", Name: t.Name, Topic: t.Topic, Group: g})
	}
	if p.cfg.Results != "" {
		ts = append(ts, FlowTopic{Role: "results", Name: "results", Topic: p.cfg.Results})
	}
	return append(ts, FlowTopic{Role: "dlq", Name: "dlq", Topic: p.cfg.DLQ, Group: p.cfg.GroupID()})
}

// flowLoop samples every pipeline's offsets every FlowEvery.
func (a *Analyzer) flowLoop(ctx context.Context) {
	adm := kadm.NewClient(a.admin)
	t := time.NewTicker(a.o.FlowEvery)
	defer t.Stop()
	for {
		a.pollProcessors(ctx)
		for _, p := range a.pipes {
			s := a.sampleFlow(ctx, adm, p)
			p.flow.mu.Lock()
			p.flow.err = s.err
			if s.err == nil {
				p.flow.samples = append(p.flow.samples, s)
				// Keep the newest sample at least flowWindow old as the base.
				for len(p.flow.samples) > 2 && s.at.Sub(p.flow.samples[1].at) >= flowWindow {
					p.flow.samples = p.flow.samples[1:]
				}
			}
			p.flow.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleFlow reads the end offsets of p's topics and the committed offsets
// of the groups that consume them.
func (a *Analyzer) sampleFlow(ctx context.Context, adm *kadm.Client, p *pipe) flowSample {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s := flowSample{at: a.o.Now(), end: map[string]int64{}, done: map[string]int64{}}
	fts := p.flowTopics()
	var names []string
	for _, t := range fts {
		names = append(names, t.Topic)
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		s.err = fmt.Errorf("listing end offsets: %w", err)
		return s
	}
	starts, err := adm.ListStartOffsets(ctx, names...)
	if err != nil {
		s.err = fmt.Errorf("listing start offsets: %w", err)
		return s
	}
	committed := map[string]kadm.OffsetResponses{}
	for _, t := range fts {
		if t.Group == "" || committed[t.Group] != nil {
			continue
		}
		if t.Share {
			acked, err := topics.ShareAcknowledged(ctx, adm, t.Group, t.Topic, ends)
			if err != nil {
				s.err = fmt.Errorf("describing the offsets of share group %s: %w", t.Group, err)
				return s
			}
			or := kadm.OffsetResponses{}
			for part, at := range acked {
				or.Add(kadm.OffsetResponse{Offset: kadm.Offset{Topic: t.Topic, Partition: part, At: at}})
			}
			committed[t.Group] = or
			continue
		}
		// A group that never committed answers with no offsets, not an
		// error, on Apache Kafka; some brokers (kfake) answer
		// GROUP_ID_NOT_FOUND for a group that does not exist yet: the same.
		or, err := adm.FetchOffsets(ctx, t.Group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			or, err = kadm.OffsetResponses{}, nil
		}
		if err != nil {
			s.err = fmt.Errorf("fetching the committed offsets of %s: %w", t.Group, err)
			return s
		}
		committed[t.Group] = or
	}
	for _, t := range fts {
		for part, lo := range ends[t.Topic] {
			if lo.Err != nil {
				s.err = fmt.Errorf("end offset of %s/%d: %w", t.Topic, part, lo.Err)
				return s
			}
			s.end[t.Topic] += lo.Offset
			if t.Group == "" {
				continue
			}
			// Where the group committed nothing it starts at the log start
			// (the processors and the rule worker reset to the earliest).
			at := starts[t.Topic][part].Offset
			if or, ok := committed[t.Group].Lookup(t.Topic, part); ok && or.Err == nil && or.At >= 0 {
				at = or.At
			}
			s.done[t.Topic] += min(at, lo.Offset)
		}
	}
	return s
}

// flowNow is p's Flow from its samples.
func (p *pipe) flowNow() Flow {
	f := Flow{Name: p.cfg.Name, Group: "redrive." + p.cfg.Name}
	p.flow.mu.Lock()
	var cur, base *flowSample
	if n := len(p.flow.samples); n > 0 {
		cur, base = &p.flow.samples[n-1], &p.flow.samples[0]
	}
	if p.flow.err != nil {
		f.Error = p.flow.err.Error()
	}
	p.flow.mu.Unlock()
	var dt float64
	if cur != nil {
		f.SampledAt = cur.at.UTC().Format(time.RFC3339)
		dt = cur.at.Sub(base.at).Seconds()
		f.WindowSeconds = dt
	}
	rate := func(now, then int64) float64 {
		if dt <= 0 || now < then {
			return 0
		}
		return float64(now-then) / dt
	}
	for _, t := range p.flowTopics() {
		if cur != nil {
			t.End, t.InPerSecond = cur.end[t.Topic], rate(cur.end[t.Topic], base.end[t.Topic])
			if t.Group != "" {
				t.Committed = cur.done[t.Topic]
				t.Waiting = max(0, t.End-t.Committed)
				t.DonePerSecond = rate(cur.done[t.Topic], base.done[t.Topic])
			}
		}
		switch t.Role {
		case "main":
			f.Main = t
		case "tier":
			f.Tiers = append(f.Tiers, t)
		case "results":
			f.Results = &t
		case "dlq":
			f.DLQ = t
		}
	}
	if f.Tiers == nil {
		f.Tiers = []FlowTopic{}
	}
	return f
}

// serveFlow is GET /api/pipelines.
func (a *Analyzer) serveFlow(w http.ResponseWriter, r *http.Request) {
	want, ok := a.pipelineFilter(w, r)
	if !ok {
		return
	}
	resp := FlowResponse{Now: a.o.Now().UTC().Format(time.RFC3339), Pipelines: []Flow{}, DevOutage: a.o.DemoOutage != nil}
	for _, p := range a.pipes {
		if want == "" || p.cfg.Name == want {
			f := p.flowNow()
			a.addProcessors(&f)
			resp.Pipelines = append(resp.Pipelines, f)
		}
	}
	writeJSON(w, resp)
}
