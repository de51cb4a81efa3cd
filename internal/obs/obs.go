// Package obs serves what every long-running redrive command exposes:
// /metrics (Prometheus), /healthz (liveness: every registered loop has
// beaten recently) and /readyz (readiness: every check reports ready).
//
// It never decides readiness itself; the processor and the analyzer report
// into it through Ready and Beat.
package obs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultStall is how long a loop may go without a beat before /healthz fails.
const DefaultStall = 30 * time.Second

// Server holds the state behind the three endpoints.
type Server struct {
	// Registry holds every metric served on /metrics, with the Go and
	// process collectors already registered.
	Registry *prometheus.Registry
	// Stall is how long a loop may be silent before /healthz fails.
	Stall time.Duration
	// Mux serves the endpoints; callers may add their own handlers.
	Mux *http.ServeMux
	// Limits bound the HTTP server's reads, writes and idle connections
	// (zero fields: the Default* values).
	Limits Limits

	now    func() time.Time
	readyG *prometheus.GaugeVec
	mu     sync.Mutex
	checks map[string]error  // nil: ready
	notes  map[string]string // degraded but ready: said in /readyz
	beats  map[string]time.Time
}

// New returns a Server with a fresh registry.
func New() *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Server{
		Registry: reg,
		Stall:    DefaultStall,
		Mux:      http.NewServeMux(),
		now:      time.Now,
		checks:   map[string]error{},
		notes:    map[string]string{},
		beats:    map[string]time.Time{},
	}
	s.readyG = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "redrive_ready", Help: "1 while the named readiness check passes (the same checks as /readyz), else 0.",
	}, []string{"check"})
	reg.MustRegister(s.readyG)
	s.Mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.Mux.HandleFunc("GET /healthz", s.healthz)
	s.Mux.HandleFunc("GET /readyz", s.readyz)
	return s
}

// Ready records check name as ready (err == nil) or not, and why.
func (s *Server) Ready(name string, err error) {
	s.mu.Lock()
	s.checks[name] = err
	s.mu.Unlock()
	v := 0.0
	if err == nil {
		v = 1
	}
	s.readyG.WithLabelValues(name).Set(v)
}

// Degraded says in /readyz that name works in a degraded way (detail),
// without making the process unready ("" clears it): the part is not on
// the path of a record, and restarting the pod would not fix it.
func (s *Server) Degraded(name, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if detail == "" {
		delete(s.notes, name)
		return
	}
	s.notes[name] = detail
}

// Beat records that loop name made progress now.
func (s *Server) Beat(name string) {
	t := s.now()
	s.mu.Lock()
	s.beats[name] = t
	s.mu.Unlock()
}

// Forget removes a loop and a check of that name (a loop that ended on purpose).
func (s *Server) Forget(name string) {
	s.mu.Lock()
	delete(s.beats, name)
	delete(s.checks, name)
	s.mu.Unlock()
	s.readyG.DeleteLabelValues(name)
}

// status is the JSON body of /healthz and /readyz.
type status struct {
	OK     bool              `json:"ok"`
	Checks map[string]string `json:"checks"`
}

// Healthy reports nil when every loop beat within Stall.
func (s *Server) Healthy() error {
	_, err := s.health()
	return err
}

func (s *Server) health() (map[string]string, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	var errs []error
	for name, t := range s.beats {
		if age := now.Sub(t); age > s.Stall {
			out[name] = fmt.Sprintf("no progress for %s", age.Round(time.Second))
			errs = append(errs, fmt.Errorf("%s: %s", name, out[name]))
		} else {
			out[name] = "ok"
		}
	}
	sortErrs(errs)
	return out, errors.Join(errs...)
}

// IsReady reports nil when at least one check exists and all are ready.
func (s *Server) IsReady() error {
	_, err := s.readiness()
	return err
}

func (s *Server) readiness() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	var errs []error
	if len(s.checks) == 0 {
		errs = append(errs, errors.New("starting: nothing has reported yet"))
	}
	for name, err := range s.checks {
		if err != nil {
			out[name] = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		} else {
			out[name] = "ok"
		}
	}
	for name, detail := range s.notes {
		out[name] = "degraded (still ready): " + detail
	}
	sortErrs(errs)
	return out, errors.Join(errs...)
}

func sortErrs(errs []error) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	checks, err := s.health()
	reply(w, checks, err)
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	checks, err := s.readiness()
	reply(w, checks, err)
}

func reply(w http.ResponseWriter, checks map[string]string, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(status{OK: err == nil, Checks: checks})
}

// Serve listens on addr and serves until ctx is done; it returns once the
// listener is bound (or failed), the serving goroutine shuts down with ctx.
// The returned address is the bound one (useful with port 0).
func (s *Server) Serve(ctx context.Context, addr string, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("http_addr %s: %w", addr, err)
	}
	srv := HTTPServer(s.Mux, s.Limits)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return ln.Addr().String(), nil
}

// The limits of every HTTP server redrive runs (HTTPServer).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included:
	// a body trickled byte by byte is cut there.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing a response; a handler that
	// needs longer (POST /api/replay) extends its own deadline with
	// http.ResponseController.
	DefaultWriteTimeout   = 60 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultMaxHeaderBytes = 256 << 10
)

// Limits are an HTTP server's timeouts and header bound; a zero field
// means its Default* value.
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
}

// HTTPServer is the http.Server every redrive server uses: h behind
// SecurityHeaders, with l's timeouts (no connection, idle or trickling,
// holds a server forever).
func HTTPServer(h http.Handler, l Limits) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return &http.Server{
		Handler:           SecurityHeaders(h),
		ReadHeaderTimeout: or(l.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       or(l.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:      or(l.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       or(l.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// SecurityHeaders sets the standard protective headers on every response
// of h: no MIME sniffing, no framing, no referrer. A handler may set a
// fuller Content-Security-Policy of its own (the analyzer's dashboard does).
func SecurityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Content-Security-Policy", "frame-ancestors 'none'")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}
