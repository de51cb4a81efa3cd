package analyzer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/replay"
	"github.com/redrive/redrive/internal/bearer"
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
	OldestUnhandledSeconds float64 `json:"oldest_unhandled_seconds"`
	// Stats with, in PerMinute, only the minutes asked for (?minutes=,
	// DefaultStatsMinutes); the totals count every dead letter.
	Stats dlq.StatsSnapshot `json:"stats"`
}

// StatsResponse is GET /api/stats.
type StatsResponse struct {
	Now       string          `json:"now"`
	Pipelines []PipelineStats `json:"pipelines"`
}

// DeadLettersResponse is GET /api/deadletters.
type DeadLettersResponse struct {
	Pipeline    string           `json:"pipeline"`
	DeadLetters []DeadLetterView `json:"dead_letters"`
	// Matched is how many dead letters matched, at most limit; more than
	// len(DeadLetters) when Truncated.
	Matched int `json:"matched"`
	// Truncated says the answer stopped before Limits.ResponseBytes was
	// passed: ask with a smaller limit or a narrower filter (until=) for
	// the rest.
	Truncated bool `json:"truncated"`
}

// DeadLetterView is one dead letter of GET /api/deadletters: dlq.View
// with the value the recent list keeps, which may be only its first bytes
// (Limits.RecentValueBytes).
type DeadLetterView struct {
	dlq.View
	// ValueSize is the value's size in the DLQ record, in bytes.
	ValueSize int `json:"value_size"`
	// ValueCut says Value holds only the first bytes of it; GET
	// /api/deadletters/{partition}/{offset} reads it whole.
	ValueCut bool `json:"value_cut"`
	// ValueSHA256 is set when values are hidden (Options.HideValues): the
	// value's ValueHash ("sha256:<hex>"); Value is null and ValueEncoding
	// "hidden" then. Absent otherwise, and for a null value.
	ValueSHA256 string `json:"value_sha256,omitempty"`
}

// ReplayRequest is the body of POST /api/replay. Its filter fields go
// through dlq.ParseFilter, as the CLI's flags and the rules' match do.
// Classes and Origins were added beside the first fields; a list entry may
// also be a comma-separated list.
type ReplayRequest struct {
	Pipeline string            `json:"pipeline"`
	Codes    []string          `json:"codes"`
	Reasons  []string          `json:"reasons"`
	Classes  []string          `json:"classes"` // error classes: transient, not-ready, permanent, invalid, expired
	Origins  []string          `json:"origins"` // origin topics, exactly or by prefix with a trailing "*"
	Since    string            `json:"since"`   // RFC 3339 or relative ("2h")
	Until    string            `json:"until"`
	Key      string            `json:"key"`
	Headers  map[string]string `json:"headers"`
	// Limit is how many dead letters to republish at most (default and
	// cap MaxReplay); truncated ones, never republished, do not count.
	Limit  int    `json:"limit"`
	To     string `json:"to"` // default the pipeline's main topic
	DryRun bool   `json:"dry_run"`
	// All must be true to republish with no filter at all (every dead
	// letter); a dry run needs no All. All with a filter is a 400.
	All bool `json:"all"`
}

// ReplayResponse is the answer of POST /api/replay.
type ReplayResponse struct {
	Scanned     int `json:"scanned"`
	Matched     int `json:"matched"` // truncated ones included
	Republished int `json:"republished"`
	Truncated   int `json:"truncated"` // matched, but the value was cut to fit the DLQ: not republished
	// Undecodable counts the DLQ records that are not redrive dead
	// letters: skipped, never matched (added field).
	Undecodable int `json:"undecodable"`
	// Limited says the scan stopped at the limit (added field).
	Limited bool   `json:"limited"`
	DryRun  bool   `json:"dry_run"`
	To      string `json:"to"`
	// DeadLetters are the first (at most 100) selected for republishing,
	// each value cut to Limits.RecentValueBytes as in GET
	// /api/deadletters; SampleCut says the sample stopped early because it
	// reached Limits.ResponseBytes.
	DeadLetters []DeadLetterView `json:"dead_letters"`
	SampleCut   bool             `json:"sample_cut"`
}

// maxReplaySample is how many dead letters a replay answer shows.
const maxReplaySample = 100

// Access is who may call the API (analyzer.token, analyzer.read_token).
// With neither set, the API is open to whoever reaches it (`redrive
// analyze` then listens only on loopback unless told otherwise) and the
// writes (replay, pause, resume) are off.
type Access struct {
	// Token allows every call: the reads, POST /api/replay and the
	// pause and resume of POST /api/control/{pipeline}/pause|resume.
	Token string
	// ReadToken allows the reads only (GET /api/*: the dashboard's data).
	ReadToken string
}

// open reports whether no token is set: every read is allowed.
func (ac Access) open() bool { return ac.Token == "" && ac.ReadToken == "" }

// reads reports whether r's bearer token is Token or ReadToken (each
// compared in constant time, both always compared).
func (ac Access) reads(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	full := bearer.Valid(auth, ac.Token)
	read := bearer.Valid(auth, ac.ReadToken)
	return full || read
}

// Handler is HandlerAccess with only the full-access token (empty: none).
func (a *Analyzer) Handler(token string) http.Handler {
	return a.HandlerAccess(Access{Token: token})
}

// HandlerAccess serves the JSON API and the dashboard. With a token set
// (ac), every /api/ call needs "Authorization: Bearer <token>" with
// ac.Token or ac.ReadToken, else 401; POST /api/replay and POST
// /api/control/{pipeline}/pause|resume need ac.Token (403 without one
// configured, or with the read-only token).
// Options.OpenReads lets the reads through without one. POST
// /api/dev/outage, only under `redrive dev`, keeps its own rule
// (devoutage.go): the dashboard's same-origin request or ac.Token. The
// dashboard's files (no data) load without a token: the page asks for it.
func (a *Analyzer) HandlerAccess(ac Access) http.Handler {
	// read guards a route: with a token set, only a caller with one of
	// them reaches it.
	read := func(h http.HandlerFunc) http.HandlerFunc {
		if ac.open() || a.o.OpenReads {
			return h
		}
		return func(w http.ResponseWriter, r *http.Request) {
			if !ac.reads(r) {
				unauthorized(w, "this analyzer needs a token: send Authorization: Bearer <analyzer.token or analyzer.read_token>")
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/stats", read(a.serveStats))
	mux.HandleFunc("GET /api/deadletters", read(a.serveDeadLetters))
	mux.HandleFunc("GET /api/deadletters/{partition}/{offset}", read(a.serveDeadLetter))
	mux.HandleFunc("GET /api/pipelines", read(a.serveFlow))  // flow.go
	mux.HandleFunc("GET /api/control", read(a.serveControl)) // control.go
	// Only under `redrive dev` (loopback): its own rule, the dashboard's
	// same-origin request or the full token; it shows no data.
	mux.HandleFunc("POST /api/dev/outage", a.serveDevOutage(ac.Token)) // devoutage.go
	// write guards a route that writes to Kafka: only ac.Token reaches
	// it, and none does when it is not set.
	write := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch {
			case ac.Token == "":
				if ac.ReadToken != "" && !ac.reads(r) {
					unauthorized(w, "missing or wrong bearer token")
					return
				}
				httpError(w, http.StatusForbidden, "mutating endpoints are off: set analyzer.token (REDRIVE_ANALYZER_TOKEN) to turn them on")
				return
			case bearer.Valid(r.Header.Get("Authorization"), ac.Token):
			case bearer.Valid(r.Header.Get("Authorization"), ac.ReadToken):
				httpError(w, http.StatusForbidden, "the read-only token (analyzer.read_token) cannot replay, pause or resume: use analyzer.token")
				return
			default:
				unauthorized(w, "missing or wrong bearer token")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /api/replay", write(a.serveReplay))
	mux.HandleFunc("POST /api/control/{pipeline}/pause", write(a.serveSetPause(true)))   // control.go
	mux.HandleFunc("POST /api/control/{pipeline}/resume", write(a.serveSetPause(false))) // control.go
	// Every other path is a file of the dashboard (no data) or a 404.
	mux.Handle("GET /", webHandler())
	return a.guard(mux) // httpsafe.go
}

// unauthorized answers 401 with msg and the WWW-Authenticate challenge.
func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="redrive analyzer"`)
	w.Header().Set("Cache-Control", "no-store")
	httpError(w, http.StatusUnauthorized, msg)
}

// pipelineFilter is the optional ?pipeline= of a listing: "" for all; a
// name that is not configured answers 400 and ok is false.
func (a *Analyzer) pipelineFilter(w http.ResponseWriter, r *http.Request) (name string, ok bool) {
	name = r.URL.Query().Get("pipeline")
	if name != "" && a.pipe(name) == nil {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("pipeline %q is not configured", name))
		return "", false
	}
	return name, true
}

// DefaultStatsMinutes is how many minutes of per_minute GET /api/stats
// answers without ?minutes=: the dashboard's default chart, the last hour.
const DefaultStatsMinutes = 60

// statsMinutes reads ?minutes= of GET /api/stats: how many minutes of
// per_minute, up to now, to answer (0 to the 1440 the statistics keep;
// empty or absent: DefaultStatsMinutes). All 1440 are 64 KB a pipeline,
// asked for every 5 s by a dashboard that draws 60 of them.
func statsMinutes(qs url.Values) (int, error) {
	v := qs.Get("minutes")
	if strings.TrimSpace(v) == "" {
		return DefaultStatsMinutes, nil
	}
	n, err := strconv.Atoi(v)
	if most := int(dlq.StatsWindow / time.Minute); err != nil || n < 0 || n > most {
		return 0, fmt.Errorf("minutes %q: want a whole number from 0 to %d", v, most)
	}
	return n, nil
}

func (a *Analyzer) serveStats(w http.ResponseWriter, r *http.Request) {
	want, ok := a.pipelineFilter(w, r)
	if !ok {
		return
	}
	minutes, err := statsMinutes(r.URL.Query())
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
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
		ps.OldestUnhandledSeconds = age(now, p.oldestUnseen) // clock.go
		p.mu.Unlock()
		ps.Stats = p.stats.Snapshot(now, 10)
		pm := ps.Stats.PerMinute
		ps.Stats.PerMinute = pm[max(0, len(pm)-minutes):]
		resp.Pipelines = append(resp.Pipelines, ps)
	}
	if pretty, _ := strconv.ParseBool(r.URL.Query().Get("pretty")); pretty {
		writeJSON(w, resp)
		return
	}
	writeCompactJSON(w, resp)
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

// filterParams are the query parameters dlq.ParseFilter reads (and
// header.NAME=value).
var filterParams = dlq.FilterKeys

// parseFilter reads the filter parameters of a query with dlq.ParseFilter,
// the parser of the CLI's flags and the rules' match. An empty parameter
// (an empty form field) is as if not given; but header.NAME= asks for an
// empty header NAME.
func parseFilter(qs url.Values, now time.Time) (dlq.Filter, error) {
	kv := map[string][]string{}
	for k, vs := range qs {
		for _, v := range vs {
			if strings.TrimSpace(v) != "" || strings.HasPrefix(k, "header.") {
				kv[k] = append(kv[k], v)
			}
		}
	}
	return dlq.ParseFilter(kv, now)
}

func (a *Analyzer) serveDeadLetters(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	for k := range qs {
		if k != "pipeline" && k != "limit" && !slices.Contains(filterParams, k) && !strings.HasPrefix(k, "header.") {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q (known: pipeline, %s, limit)", k, strings.Join(filterParams, ", ")))
			return
		}
	}
	p, err := a.pipeParam(qs.Get("pipeline"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	fq := url.Values{}
	for k, v := range qs {
		if k != "pipeline" && k != "limit" {
			fq[k] = v
		}
	}
	f, err := parseFilter(fq, a.o.Now())
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
	if !a.enter(w) {
		return
	}
	defer a.leave()
	a.writeDeadLetters(w, p.cfg.Name, p.find(f, limit))
}

// writeDeadLetters writes a DeadLettersResponse of ks, item by item, and
// stops before the answer passes Limits.ResponseBytes: its memory is one
// item, its size bounded, whatever limit asked for.
func (a *Analyzer) writeDeadLetters(w http.ResponseWriter, pipeline string, ks []*kept) {
	name, _ := json.Marshal(pipeline)
	head := append(append([]byte(`{"pipeline":`), name...), `,"dead_letters":[`...)
	const tailMax = len(`],"matched":,"truncated":false}`) + 20 + 1
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	used := int64(len(head) + tailMax)
	_, err := w.Write(head)
	truncated := false
	for i, k := range ks {
		if err != nil {
			return // the client is gone
		}
		b, merr := json.Marshal(k.view())
		if merr != nil { // cannot happen: strings and numbers
			b = []byte("null")
		}
		if used+int64(len(b))+1 > a.o.ResponseBytes {
			truncated = true
			break
		}
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		used += int64(len(b))
		_, err = w.Write(b)
	}
	if err == nil {
		_, _ = fmt.Fprintf(w, "],\"matched\":%d,\"truncated\":%t}\n", len(ks), truncated)
	}
}

func (a *Analyzer) serveReplay(w http.ResponseWriter, r *http.Request) {
	req, err := decodeReplayRequest(http.MaxBytesReader(w, r.Body, maxReplayBody))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	longReply(w, replayWriteTimeout) // httpsafe.go
	p, err := a.pipeParam(req.Pipeline)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	params := map[string][]string{"codes": req.Codes, "reasons": req.Reasons, "classes": req.Classes, "origins": req.Origins}
	for k, v := range map[string]string{"since": req.Since, "until": req.Until, "key": req.Key} {
		if v != "" {
			params[k] = []string{v}
		}
	}
	for name, v := range req.Headers {
		params["headers."+name] = []string{v} // a name may hold "="
	}
	f, err := dlq.ParseFilter(params, a.o.Now())
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case f.IsZero() && !req.All && !req.DryRun:
		httpError(w, http.StatusBadRequest, `no filter: this would republish every dead letter; set "all": true to mean it, or give a filter (codes, reasons, classes, origins, since, until, key, headers)`)
		return
	case !f.IsZero() && req.All:
		httpError(w, http.StatusBadRequest, `"all": true and a filter: give one or the other`)
		return
	}
	if req.Limit == 0 || req.Limit > MaxReplay {
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

// maxReplayBody bounds a POST /api/replay body.
const maxReplayBody = 1 << 20

// decodeReplayRequest reads a POST /api/replay body: exactly one JSON
// object (not null, not an array, nothing after it) with known fields
// only, and a limit that is not negative. Every error starts with "body".
func decodeReplayRequest(r io.Reader) (ReplayRequest, error) {
	var req ReplayRequest
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return req, errors.New("body: empty; want a JSON object")
		}
		return req, fmt.Errorf("body: %w", err)
	}
	if b := bytes.TrimLeft(raw, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return req, errors.New("body: want one JSON object ({...}), not null, an array or a single value")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return req, errors.New("body: want exactly one JSON object; something follows it")
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&req); err != nil {
		return ReplayRequest{}, fmt.Errorf("body: %w", err)
	}
	if req.Limit < 0 {
		return ReplayRequest{}, fmt.Errorf("body: limit %d: want 0 (the default, %d) to %d", req.Limit, MaxReplay, MaxReplay)
	}
	return req, nil
}

// replay scans p's DLQ and republishes what f matches, with replay.Run,
// as `redrive replay` does (at least once: a record counts only once
// acknowledged).
func (a *Analyzer) replay(ctx context.Context, p *pipe, f dlq.Filter, limit int, to string, dryRun bool) (ReplayResponse, error) {
	resp := ReplayResponse{DryRun: dryRun, To: to, DeadLetters: []DeadLetterView{}}
	// The sample is bounded like a listing: value prefixes, and no more
	// than Limits.ResponseBytes of them (keys and headers count too).
	var used int64
	c, err := replay.Run(ctx, replay.Options{
		Client: a.admin, DLQ: p.cfg.DLQ, To: to, Filter: f, Limit: limit, DryRun: dryRun,
		Report: func(r replay.Result) error {
			if r.Err != nil || len(resp.DeadLetters) >= maxReplaySample || resp.SampleCut {
				return nil
			}
			k := keep(r.DeadLetter, a.o.RecentValueBytes, a.o.HideValues)
			if used+k.cost > a.o.ResponseBytes {
				resp.SampleCut = true
				return nil
			}
			used += k.cost
			resp.DeadLetters = append(resp.DeadLetters, k.view())
			return nil
		},
	})
	resp.Scanned, resp.Matched, resp.Republished, resp.Truncated, resp.Undecodable, resp.Limited =
		c.Scanned, c.Matched, c.Republished, c.Truncated, c.Undecodable, c.Limited
	if err != nil {
		return resp, err
	}
	a.log.Info("replay", "pipeline", p.cfg.Name, "scanned", resp.Scanned, "matched", resp.Matched, "republished", resp.Republished,
		"truncated", resp.Truncated, "undecodable", resp.Undecodable, "to", to, "dry_run", dryRun)
	return resp, nil
}

// writeJSON answers v indented, for a person reading it.
func writeJSON(w http.ResponseWriter, v any) { encodeJSON(w, v, "  ") }

// writeCompactJSON answers v on one line: GET /api/stats, which the
// dashboard asks for every 5 s, and which indenting alone doubled.
func writeCompactJSON(w http.ResponseWriter, v any) { encodeJSON(w, v, "") }

func encodeJSON(w http.ResponseWriter, v any, indent string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", indent)
	_ = enc.Encode(v)
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
