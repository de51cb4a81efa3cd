package analyzer

import (
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// The guards every request to the analyzer's dashboard and API passes
// (Handler wraps its routes in guard), kept apart from the routes.

// loopbackHosts are always allowed in a request's Host.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// contentSecurityPolicy is the dashboard's policy (as its <meta> tag has
// it) plus what only a header can say: no framing.
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// replayWriteTimeout is how long POST /api/replay may take to answer: it
// scans the whole DLQ, longer than the server's write timeout allows.
const replayWriteTimeout = 30 * time.Minute

// query is r's query string parsed, with the error url.Values drops: a
// query over Go's parameter limit or with a bad escape ("%zz") would
// otherwise lose its filters and limit silently.
func query(r *http.Request) (url.Values, error) {
	return url.ParseQuery(r.URL.RawQuery)
}

// hostAllowed reports whether the request's Host names this analyzer:
// a loopback name, or one of allowed ("*": any). A page on another
// domain that rebinds its name to 127.0.0.1 (DNS rebinding) sends its
// own name, and is refused.
func hostAllowed(host string, allowed []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	for _, list := range [][]string{loopbackHosts, allowed} {
		for _, a := range list {
			if a == "*" || strings.EqualFold(strings.TrimSuffix(strings.Trim(a, "[]"), "."), host) {
				return true
			}
		}
	}
	return false
}

// guard wraps h: the security headers on every response; a Host that is
// not this analyzer's is a 421; a query string that does not parse is a
// 400 for every route (so the routes' r.URL.Query() never sees a lossy
// parse).
func (a *Analyzer) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("Referrer-Policy", "no-referrer")
		if !hostAllowed(r.Host, a.o.AllowedHosts) {
			httpError(w, http.StatusMisdirectedRequest, "host not allowed: add it to analyzer.allowed_hosts to reach the analyzer by this name")
			return
		}
		if _, err := query(r); err != nil {
			httpError(w, http.StatusBadRequest, "query string: "+err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether a browser sent r from a page of this
// analyzer: its Origin is http(s)://<the Host r is addressed to> (a Host
// the guard allowed) and its Sec-Fetch-Site, when sent, is same-origin.
// Browsers send Origin with every POST, and a form or script on another
// site (or a sandboxed frame: "null") cannot send this one's. A client
// that sends no Origin is not a browser page: false.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	u, err := url.Parse(o)
	if o == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	if !strings.EqualFold(u.Host, r.Host) {
		return false
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return false
	}
	return true
}

// noDirs serves files from fsys with h, and 404 for a directory (no
// listing of /vendor/); "/" serves index.html.
func noDirs(fsys fs.FS, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name != "" {
			if st, err := fs.Stat(fsys, name); err == nil && st.IsDir() {
				http.NotFound(w, r)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// longReply lets a handler that runs long (a replay scans the whole DLQ)
// answer after the server's write timeout: its write deadline moves out
// to d. (The read timeout needs nothing: once the body is read, net/http
// clears the read deadline.) Writers that cannot (tests' recorders) are
// left as they are.
func longReply(w http.ResponseWriter, d time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}
