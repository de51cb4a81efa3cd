package httphandler

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/redrive/redrive/internal/redact"
)

// statePlaceholder is the one placeholder of a poll template: the job id.
const statePlaceholder = "{state}"

// placeholderRE finds what looks like a placeholder: {name}. Other braces
// ({"a":1} in a query) are kept as written.
var placeholderRE = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_.-]*\}`)

// expandTemplate is tpl with every {state} replaced by state, escaped for
// where it stands: in a URL's path (before the first '?' or '#') with
// url.PathEscape, in a URL's query and in a form body (url false) with
// url.QueryEscape. Nothing else of tpl changes.
func expandTemplate(tpl, state string, isURL bool) string {
	if !strings.Contains(tpl, statePlaceholder) {
		return tpl
	}
	query := url.QueryEscape(state)
	if !isURL {
		return strings.ReplaceAll(tpl, statePlaceholder, query)
	}
	cut := len(tpl)
	if i := strings.IndexAny(tpl, "?#"); i >= 0 {
		cut = i
	}
	path := url.PathEscape(state)
	return strings.ReplaceAll(tpl[:cut], statePlaceholder, path) + strings.ReplaceAll(tpl[cut:], statePlaceholder, query)
}

// dotSegment reports whether state, put into tpl's path, makes a path
// segment "." or ".." (as written or percent-encoded: %2e), and which.
// A server resolves such a segment as a step in place or up, so the poll
// would reach another resource. Escaping cannot prevent it: url.PathEscape
// keeps dots, and an escaped dot (%2E) means the same to most servers.
func dotSegment(tpl, state string) (string, bool) {
	path := tpl
	if i := strings.IndexAny(tpl, "?#"); i >= 0 {
		path = tpl[:i]
	}
	if !strings.Contains(path, statePlaceholder) {
		return "", false
	}
	esc := url.PathEscape(state)
	for seg := range strings.SplitSeq(path, "/") {
		if !strings.Contains(seg, statePlaceholder) {
			continue
		}
		seg = strings.ReplaceAll(seg, statePlaceholder, esc)
		dec := seg
		if u, err := url.PathUnescape(seg); err == nil {
			dec = u
		}
		if dec == "." || dec == ".." {
			return seg, true
		}
	}
	return "", false
}

// templateMarker stands for the job id when a template is checked: only
// letters, so that no escaping changes it and any part of a URL may hold it.
const templateMarker = "redrivejobidmarker"

// sampleStates are job ids a checked URL template must take and still be
// a URL with the same scheme and host.
var sampleStates = []string{"2122988149", "a b/c?d=e&f#g%h+i", "ü\x00\xff{state}"}

// checkPlaceholders reports a {name} in tpl other than {state}.
func checkPlaceholders(tpl string) error {
	for _, m := range placeholderRE.FindAllString(tpl, -1) {
		if m == statePlaceholder {
			continue
		}
		if strings.EqualFold(m, statePlaceholder) {
			return fmt.Errorf("unknown %s: the placeholder is %s, in lower case", m, statePlaceholder)
		}
		return fmt.Errorf("unknown %s: the only placeholder is %s (the job id)", m, statePlaceholder)
	}
	return nil
}

// checkURLTemplate checks a poll URL template: only {state} placeholders,
// none of them in the scheme, user info, host, port or fragment; once
// expanded (with any job id) an absolute http or https URL with a host.
// Its messages show the template with its secrets masked.
func checkURLTemplate(tpl string) error {
	if tpl == "" {
		return errors.New("required")
	}
	shown := redact.URL(tpl)
	if err := checkPlaceholders(tpl); err != nil {
		return fmt.Errorf("%q: %w", shown, err)
	}
	u, err := url.Parse(expandTemplate(tpl, templateMarker, true))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text quotes the whole URL, secrets included
		}
		return fmt.Errorf("%q: %v", shown, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an absolute http:// or https:// URL", shown)
	}
	if strings.Contains(strings.ToLower(u.Host), templateMarker) || strings.Contains(u.User.String(), templateMarker) {
		return fmt.Errorf("%q: %s may not be in the host, port or user info; put it in the path or the query", shown, statePlaceholder)
	}
	if strings.Contains(u.Fragment, templateMarker) {
		return fmt.Errorf("%q: %s in the fragment is never sent; put it in the path or the query", shown, statePlaceholder)
	}
	for _, s := range sampleStates {
		e, err := url.Parse(expandTemplate(tpl, s, true))
		if err != nil || e.Scheme != u.Scheme || e.Host != u.Host {
			return fmt.Errorf("%q: does not stay one URL with the job id %q in it", shown, s)
		}
	}
	return nil
}

// checkBodyTemplate checks a poll body template (a form): only {state}
// placeholders.
func checkBodyTemplate(tpl string) error {
	if err := checkPlaceholders(tpl); err != nil {
		return fmt.Errorf("%q: %w", redact.Text(tpl), err)
	}
	return nil
}
