package analyzer

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/dlqread"
)

// MaxReplay bounds one POST /api/replay.
const MaxReplay = 100000

// PipelineStats is one pipeline in GET /api/stats.
type PipelineStats struct {
	Name  string `json:"name"`
	Topic string `json:"topic"` // the main topic: where replay and republish write by default
	DLQ   string `json:"dlq"`
	Ready bool   `json:"ready"` // statistics rebuilt from the earliest offset
	// Depth: dead letters not yet handled by the rule worker.
	Depth int64 `json:"depth"`
	// OldestUnhandledSeconds: age of the oldest of those it holds; 0 if none.
	OldestUnhandledSeconds float64           `json:"oldest_unhandled_seconds"`
	Stats                  dlq.StatsSnapshot `json:"stats"`
}

// StatsResponse is GET /api/stats.
type StatsResponse struct {
	Now       string          `json:"now"`
	Pipelines []PipelineStats `json:"pipelines"`
}

// DeadLettersResponse is GET /api/deadletters.
type DeadLettersResponse struct {
	Pipeline    string     `json:"pipeline"`
	DeadLetters []dlq.View `json:"dead_letters"`
}

// ReplayRequest is the body of POST /api/replay.
type ReplayRequest struct {
	Pipeline string            `json:"pipeline"`
	Codes    []string          `json:"codes"`
	Reasons  []string          `json:"reasons"`
	Since    string            `json:"since"` // RFC 3339 or relative ("2h")
	Until    string            `json:"until"`
	Key      string            `json:"key"`
	Headers  map[string]string `json:"headers"`
	Limit    int               `json:"limit"` // default and cap MaxReplay
	To       string            `json:"to"`    // default the pipeline's main topic
	DryRun   bool              `json:"dry_run"`
}

// ReplayResponse is the answer of POST /api/replay.
type ReplayResponse struct {
	Scanned     int        `json:"scanned"`
	Matched     int        `json:"matched"`
	Republished int        `json:"republished"`
	Truncated   int        `json:"truncated"` // matched, but the value was cut to fit the DLQ: not republished
	DryRun      bool       `json:"dry_run"`
	To          string     `json:"to"`
	DeadLetters []dlq.View `json:"dead_letters"` // the first 100 matched
}

// Handler serves the JSON API and the dashboard. token guards mutating
// endpoints; empty turns them off.
func (a *Analyzer) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/stats", a.serveStats)
	mux.HandleFunc("GET /api/deadletters", a.serveDeadLetters)
	mux.HandleFunc("GET /api/pipelines", a.serveFlow) // flow.go
	mux.HandleFunc("POST /api/replay", func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			httpError(w, http.StatusForbidden, "mutating endpoints are off: set analyzer.token (REDRIVE_ANALYZER_TOKEN) to turn them on")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive analyzer"`)
			httpError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		a.serveReplay(w, r)
	})
	mux.Handle("GET /", webHandler())
	return mux
}

func (a *Analyzer) serveStats(w http.ResponseWriter, r *http.Request) {
	want := r.URL.Query().Get("pipeline")
	if want != "" && a.pipe(want) == nil {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("pipeline %q is not configured", want))
		return
	}
	now := a.o.Now()
	resp := StatsResponse{Now: now.UTC().Format(time.RFC3339)}
	for _, p := range a.pipes {
		if want != "" && p.cfg.Name != want {
			continue
		}
		p.mu.Lock()
		ps := PipelineStats{Name: p.cfg.Name, Topic: p.cfg.Topic, DLQ: p.cfg.DLQ, Ready: p.ready, Depth: p.depth}
		if !p.oldestUnseen.IsZero() {
			ps.OldestUnhandledSeconds = now.Sub(p.oldestUnseen).Seconds()
		}
		p.mu.Unlock()
		ps.Stats = p.stats.Snapshot(now, 10)
		resp.Pipelines = append(resp.Pipelines, ps)
	}
	writeJSON(w, resp)
}

func (a *Analyzer) pipe(name string) *pipe {
	for _, p := range a.pipes {
		if p.cfg.Name == name {
			return p
		}
	}
	return nil
}

// pipeParam picks the pipeline a request names (or the only one).
func (a *Analyzer) pipeParam(name string) (*pipe, error) {
	if name == "" {
		if len(a.pipes) == 1 {
			return a.pipes[0], nil
		}
		return nil, errors.New("pipeline is required: more than one is configured")
	}
	if p := a.pipe(name); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("pipeline %q is not configured", name)
}

// parseFilter reads the shared filter parameters.
func parseFilter(q func(string) []string, now time.Time) (dlq.Filter, error) {
	var f dlq.Filter
	f.Codes, f.Reasons = splitAll(q("code")), splitAll(q("reason"))
	for _, reason := range f.Reasons {
		if _, err := dlq.ParseReason(reason); err != nil {
			return f, fmt.Errorf("reason: %w", err)
		}
	}
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if vs := q(b.name); len(vs) > 0 && vs[0] != "" {
			t, err := dlq.ParseTime(vs[0], now)
			if err != nil {
				return f, fmt.Errorf("%s: %w", b.name, err)
			}
			*b.to = t
		}
	}
	if vs := q("key"); len(vs) > 0 {
		k, err := dlq.ParseKeyFilter(vs[0])
		if err != nil {
			return f, fmt.Errorf("key: %w", err)
		}
		f.Key = k
	}
	if hs := q("header"); len(hs) > 0 {
		m, err := dlq.ParseHeaderFilters(hs)
		if err != nil {
			return f, fmt.Errorf("header: %w", err)
		}
		f.Headers = m
	}
	return f, f.Validate()
}

func splitAll(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

func (a *Analyzer) serveDeadLetters(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	for k := range qs {
		switch k {
		case "pipeline", "code", "reason", "since", "until", "key", "header", "limit":
		default:
			httpError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q (known: pipeline, code, reason, since, until, key, header, limit)", k))
			return
		}
	}
	p, err := a.pipeParam(qs.Get("pipeline"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, err := parseFilter(func(k string) []string { return qs[k] }, a.o.Now())
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit := 100
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a whole number from 1 to 10000", v))
			return
		}
		limit = n
	}
	resp := DeadLettersResponse{Pipeline: p.cfg.Name, DeadLetters: []dlq.View{}}
	for _, d := range p.find(f, limit) {
		resp.DeadLetters = append(resp.DeadLetters, dlq.NewView(d))
	}
	writeJSON(w, resp)
}

func (a *Analyzer) serveReplay(w http.ResponseWriter, r *http.Request) {
	var req ReplayRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	p, err := a.pipeParam(req.Pipeline)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	params := map[string][]string{"code": req.Codes, "reason": req.Reasons}
	if req.Since != "" {
		params["since"] = []string{req.Since}
	}
	if req.Until != "" {
		params["until"] = []string{req.Until}
	}
	if req.Key != "" {
		params["key"] = []string{req.Key}
	}
	for k, v := range req.Headers {
		params["header"] = append(params["header"], k+"="+v)
	}
	f, err := parseFilter(func(k string) []string { return params[k] }, a.o.Now())
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Limit <= 0 || req.Limit > MaxReplay {
		req.Limit = MaxReplay
	}
	to := req.To
	if to == "" {
		to = p.cfg.Topic
	}
	if to == p.cfg.DLQ {
		httpError(w, http.StatusBadRequest, "to: republishing into the DLQ it reads would loop")
		return
	}
	resp, err := a.replay(r.Context(), p, f, req.Limit, to, req.DryRun)
	if err != nil {
		httpError(w, http.StatusBadGateway, fmt.Sprintf("replay stopped after %d republished: %v", resp.Republished, err))
		return
	}
	writeJSON(w, resp)
}

// replay scans p's DLQ and republishes what f matches (at least once: a
// record counts only once acknowledged).
func (a *Analyzer) replay(ctx context.Context, p *pipe, f dlq.Filter, limit int, to string, dryRun bool) (ReplayResponse, error) {
	resp := ReplayResponse{DryRun: dryRun, To: to, DeadLetters: []dlq.View{}}
	var batch []*kgo.Record
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := a.admin.ProduceSync(ctx, batch...).FirstErr()
		if err == nil {
			resp.Republished += len(batch)
		}
		batch = batch[:0]
		return err
	}
	errLimit := errors.New("limit reached")
	err := dlqread.Scan(ctx, a.admin, p.cfg.DLQ, func(r *kgo.Record) error {
		resp.Scanned++
		d, err := dlq.Decode(r)
		if err != nil || !f.Match(d) {
			return nil
		}
		resp.Matched++
		if d.Truncated > 0 {
			resp.Truncated++ // its value was cut to fit the DLQ: never republished
			return nil
		}
		if len(resp.DeadLetters) < 100 {
			resp.DeadLetters = append(resp.DeadLetters, dlq.NewView(d))
		}
		if !dryRun {
			batch = append(batch, dlq.Republish(d, to))
			if len(batch) >= 500 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if resp.Matched >= limit {
			return errLimit
		}
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return resp, err
	}
	if err := flush(); err != nil {
		return resp, err
	}
	a.log.Info("replay", "pipeline", p.cfg.Name, "scanned", resp.Scanned, "matched", resp.Matched, "republished", resp.Republished, "to", to, "dry_run", dryRun)
	return resp, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
