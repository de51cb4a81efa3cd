package analyzer

import (
	"net/http"
	"net/url"
)

// The guards every request to the analyzer's dashboard and API passes
// (Handler wraps its routes in guard), kept apart from the routes.

// query is r's query string parsed, with the error url.Values drops: a
// query over Go's parameter limit or with a bad escape ("%zz") would
// otherwise lose its filters and limit silently.
func query(r *http.Request) (url.Values, error) {
	return url.ParseQuery(r.URL.RawQuery)
}

// guard wraps h: a query string that does not parse is a 400 for every
// route (so the routes' r.URL.Query() never sees a lossy parse).
func (a *Analyzer) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := query(r); err != nil {
			httpError(w, http.StatusBadRequest, "query string: "+err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}
