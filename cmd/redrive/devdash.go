package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/internal/obs"
)

// devDashboard is the page `redrive dev` serves: the processor's counters
// (read back from its own metrics registry) and the latest dead letters
// (tailed from the DLQ topics). The DLQ analyzer's dashboard replaces it
// once the analyzer exists.
type devDashboard struct {
	o       *obs.Server
	started time.Time

	mu       sync.Mutex
	recent   []deadLetterRow // newest first, at most 50
	byReason map[string]int
	byCode   map[string]int
}

type deadLetterRow struct {
	At       string `json:"at"`
	Topic    string `json:"topic"`
	Reason   string `json:"reason"`
	Code     string `json:"code"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
	Key      string `json:"key"`
	Value    string `json:"value"`
}

type devSnapshot struct {
	Uptime      string             `json:"uptime"`
	Counters    map[string]float64 `json:"counters"` // metric{label=value} → value
	ByReason    map[string]int     `json:"dead_letters_by_reason"`
	ByCode      map[string]int     `json:"dead_letters_by_code"`
	DeadLetters []deadLetterRow    `json:"recent_dead_letters"`
	Ready       string             `json:"ready"`
}

func newDevDashboard(ctx context.Context, c *config.Config, o *obs.Server) (*devDashboard, error) {
	d := &devDashboard{o: o, started: time.Now(), byReason: map[string]int{}, byCode: map[string]int{}}
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return nil, err
	}
	var dlqs []string
	for _, p := range c.Pipelines {
		dlqs = append(dlqs, p.DLQTopic())
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(dlqs...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, err
	}
	go func() {
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(d.add)
		}
	}()
	return d, nil
}

func (d *devDashboard) add(r *kgo.Record) {
	dl, err := dlq.Decode(r)
	if err != nil {
		slog.Warn("dashboard: undecodable dead letter", "err", err)
	}
	row := deadLetterRow{At: r.Timestamp.Format("15:04:05"), Topic: dl.OriginTopic, Reason: string(dl.Reason), Code: dl.Code,
		Attempts: dl.Attempt, Error: dl.Error, Key: printable(dl.Key), Value: printable(dl.Value)}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byReason[row.Reason]++
	d.byCode[row.Code]++
	d.recent = append([]deadLetterRow{row}, d.recent...)
	if len(d.recent) > 50 {
		d.recent = d.recent[:50]
	}
}

func printable(b []byte) string {
	if !utf8.Valid(b) {
		return "(binary, " + strconv.Itoa(len(b)) + " bytes)"
	}
	s := string(b)
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func (d *devDashboard) snapshot() devSnapshot {
	s := devSnapshot{Uptime: time.Since(d.started).Round(time.Second).String(), Counters: map[string]float64{}}
	mfs, _ := d.o.Registry.Gather()
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "redrive_") || strings.HasPrefix(name, "redrive_kafka_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() == "pipeline" {
					continue
				}
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				s.Counters[key] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				s.Counters[key] += m.GetGauge().GetValue()
			case m.Histogram != nil:
				s.Counters[key+" count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if err := d.o.IsReady(); err != nil {
		s.Ready = "not ready: " + err.Error()
	} else {
		s.Ready = "ready"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s.ByReason, s.ByCode = copyMap(d.byReason), copyMap(d.byCode)
	s.DeadLetters = append([]deadLetterRow(nil), d.recent...)
	return s
}

func copyMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (d *devDashboard) serveJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d.snapshot())
}

type kv struct {
	K string
	V float64
}

func (d *devDashboard) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s := d.snapshot()
	var rows []kv
	for k, v := range s.Counters {
		rows = append(rows, kv{k, v})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].K < rows[j].K })
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = devPage.Execute(w, struct {
		S    devSnapshot
		Rows []kv
	}{s, rows})
}

var devPage = template.Must(template.New("dev").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>redrive dev</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#eee}.n{text-align:right}</style></head>
<body><h1>redrive dev</h1>
<p>up {{.S.Uptime}} · {{.S.Ready}} · <a href="/metrics">/metrics</a> · <a href="/api/dev">/api/dev</a></p>
<h2>Dead letters by reason</h2><table><tr><th>reason</th><th>count</th></tr>
{{range $k, $v := .S.ByReason}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
<h2>Dead letters by code</h2><table><tr><th>code</th><th>count</th></tr>
{{range $k, $v := .S.ByCode}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
<h2>Latest dead letters</h2><table><tr><th>at</th><th>origin</th><th>reason</th><th>code</th><th>attempts</th><th>error</th><th>key</th><th>value</th></tr>
{{range .S.DeadLetters}}<tr><td>{{.At}}</td><td>{{.Topic}}</td><td>{{.Reason}}</td><td>{{.Code}}</td><td class="n">{{.Attempts}}</td><td>{{.Error}}</td><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>
<h2>Processor</h2><table><tr><th>series</th><th>value</th></tr>
{{range .Rows}}<tr><td>{{.K}}</td><td class="n">{{printf "%.0f" .V}}</td></tr>{{end}}</table>
</body></html>`))

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// summary is the one-line status `redrive dev` prints.
func (s devSnapshot) summary() string {
	var handled, dead, inflight, waiting float64
	tiers := map[string]float64{}
	for k, v := range s.Counters {
		name, labels, _ := strings.Cut(k, "{")
		switch name {
		case "redrive_outcomes_total":
			handled += v
		case "redrive_dead_letters_total":
			dead += v
		case "redrive_inflight_records":
			inflight += v
		case "redrive_waiting_records":
			waiting += v
		case "redrive_retries_scheduled_total":
			for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
				if t, ok := strings.CutPrefix(l, "tier="); ok {
					tiers[t] += v
				}
			}
		}
	}
	names := make([]string, 0, len(tiers))
	for t := range tiers {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := time.ParseDuration(names[i])
		b, _ := time.ParseDuration(names[j])
		return a < b
	})
	var rt []string
	for _, t := range names {
		rt = append(rt, fmt.Sprintf("%s:%.0f", t, tiers[t]))
	}
	return fmt.Sprintf("up %s  handled %.0f  retried [%s]  dead-lettered %.0f  in flight %.0f  waiting %.0f  %s",
		s.Uptime, handled, strings.Join(rt, " "), dead, inflight, waiting, s.Ready)
}
