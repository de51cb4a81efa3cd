package analyzer

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redrive/redrive/internal/bearer"
)

// MaxDevOutage is the longest outage POST /api/dev/outage asks for: the
// demo solver's cap (demosolver.MaxOutage).
const MaxDevOutage = 10 * time.Minute

// devOutageTimeout bounds one call of Options.DemoOutage.
const devOutageTimeout = 5 * time.Second

// DevOutageResponse is the answer of POST /api/dev/outage.
type DevOutageResponse struct {
	For string `json:"for"` // the outage asked for ("30s"; "0s" ended one)
	// Until is when it ends (RFC 3339); absent when for=0 ended one.
	Until string `json:"until,omitempty"`
}

// serveDevOutage is POST /api/dev/outage?for=30s: under `redrive dev`
// (Options.DemoOutage set; a 404 otherwise) it makes the demo solver fail
// every call for that long, so that the processors' breakers can be seen
// opening and closing again. It needs no token from the dashboard, whose
// request is same-origin (sameOrigin: its Origin names this analyzer);
// without an Origin (curl, scripts) the bearer token is required as for
// POST /api/replay; a request from another origin is refused (403) even
// with it.
func (a *Analyzer) serveDevOutage(token string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if a.o.DemoOutage == nil {
			httpError(w, http.StatusNotFound, "POST /api/dev/outage exists only in `redrive dev`: this analyzer has no demo solver")
			return
		}
		switch {
		case r.Header.Get("Origin") != "":
			if !sameOrigin(r) { // httpsafe.go
				httpError(w, http.StatusForbidden, "cross-origin request refused: only the dashboard's own page, or a client with the bearer token and no Origin, may do this")
				return
			}
		case !bearer.Valid(r.Header.Get("Authorization"), token):
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive analyzer"`)
			httpError(w, http.StatusUnauthorized, "missing or wrong bearer token (or send it from the dashboard, whose requests are same-origin)")
			return
		}
		d, err := outageParam(r)
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), devOutageTimeout)
		defer cancel()
		now := a.o.Now()
		if err := a.o.DemoOutage(ctx, d); err != nil {
			httpError(w, http.StatusBadGateway, "demo solver: "+err.Error())
			return
		}
		a.log.Info("dev: demo solver outage", "for", d, "by", r.RemoteAddr)
		resp := DevOutageResponse{For: d.String()}
		if d > 0 {
			resp.Until = now.Add(d).UTC().Format(time.RFC3339)
		}
		writeJSON(w, resp)
	}
}

// outageParam is the request's ?for=: a duration from 0 to MaxDevOutage,
// given once.
func outageParam(r *http.Request) (time.Duration, error) {
	want := "want ?for=<duration> from 0 (ends the outage) to " + strings.TrimSuffix(MaxDevOutage.String(), "0s") + ", e.g. ?for=30s"
	q, err := query(r) // the guard refused what does not parse
	if err != nil {
		return 0, fmt.Errorf("query string: %w", err)
	}
	v := q["for"]
	switch {
	case len(v) > 1:
		return 0, fmt.Errorf("for: given %d times; %s", len(v), want)
	case len(v) == 0 || v[0] == "":
		return 0, fmt.Errorf("for: missing; %s", want)
	}
	d, err := time.ParseDuration(v[0])
	if err != nil {
		return 0, fmt.Errorf("for %q: not a duration; %s", v[0], want)
	}
	if d < 0 || d > MaxDevOutage {
		return 0, fmt.Errorf("for %q: out of range; %s", v[0], want)
	}
	return d, nil
}
