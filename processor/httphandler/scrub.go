package httphandler

import (
	"encoding/base64"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/redrive/redrive/internal/redact"
)

// secretFloor is the shortest configured secret that is masked in free
// text. A shorter value ("1", "on", "abc") would turn every match in a
// message into xxxxx and hide nothing worth the name; such a value still
// never shows where it stands under a secret-looking name (redact.Text).
const secretFloor = 4

// withheld replaces an error text that still shows a configured secret
// after masking (a secret that masking itself brings back, which only a
// secret made of x's and the text around it can do).
const withheld = "(error text withheld: it quoted a configured secret)"

// scrubber keeps the handler's configured secrets out of the texts that
// become redrive-error: whatever a service echoes (the URL, the headers,
// the body it was sent), the secrets it quotes show as redact.Mask. A nil
// scrubber masks only what redact.Text does.
type scrubber struct {
	forms   []string // the secrets as a service may write them, ASCII lower case, longest first
	longest int      // bytes of the longest form
}

// newScrubber collects o's secrets: the user info password and the values
// of secret-named query parameters of URL and Poll.URL (and of URLs given
// as Query or Form values, a pingback's token), the values of
// secret-named Query and Form fields and Poll.Body parameters, the value
// of every secret-named header (and the credential of an Authorization or
// Cookie value), header values and path segments of the configured URLs
// that look like credentials (looksLikeCredential), and o.Secrets.
func newScrubber(o Options) *scrubber {
	var vals []string
	add := func(v ...string) { vals = append(vals, v...) }
	add(urlSecrets(o.URL)...)
	for _, fields := range []map[string]string{o.Query, o.Form} {
		for k, v := range fields {
			switch {
			case redact.SecretName(k):
				add(v)
			case strings.Contains(v, "://"):
				add(urlSecrets(v)...)
			}
		}
	}
	for k, v := range o.Headers {
		switch {
		case redact.SecretName(k):
			add(v)
			add(credentials(http.CanonicalHeaderKey(k), v)...)
		case looksLikeCredential(v):
			add(v)
		}
	}
	if p := o.Poll; p != nil {
		add(urlSecrets(p.URL)...)
		add(paramSecrets(expandTemplate(p.Body, templateMarker, false))...)
	}
	add(o.Secrets...)

	s := &scrubber{}
	seen := map[string]bool{}
	for _, v := range vals {
		// Texts are made valid UTF-8 before they are scrubbed.
		v = strings.TrimSpace(strings.ToValidUTF8(v, "\uFFFD"))
		if len(v) < secretFloor {
			continue
		}
		js, _ := json.Marshal(v) // a string: never fails
		jsText := string(js[1 : len(js)-1])
		for _, f := range []string{v, url.QueryEscape(v), url.PathEscape(v), jsText,
			strings.ReplaceAll(jsText, "/", `\/`), html.EscapeString(v)} {
			f = lowerASCII(f)
			if seen[f] || strings.Contains(redact.Mask, f) {
				// A secret that is part of the mask cannot be told from it.
				continue
			}
			seen[f] = true
			s.forms = append(s.forms, f)
			s.longest = max(s.longest, len(f))
		}
	}
	slices.SortFunc(s.forms, func(a, b string) int { return len(b) - len(a) })
	return s
}

// urlSecrets are the secrets written in raw, a URL (or a poll URL
// template): its user info password, the values of its secret-named query
// and fragment parameters, and its path segments that look like
// credentials (a bot token in /bot<token>/send). The job id placeholder
// is never a secret.
func urlSecrets(raw string) []string {
	// A template's placeholder becomes a marker that escaping keeps as it is.
	u, err := url.Parse(expandTemplate(raw, templateMarker, true))
	if err != nil {
		return nil
	}
	var out []string
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			// net/http sends user info as Authorization: Basic; an echo
			// shows it so.
			basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pw))
			out = append(out, pw, basic)
		}
	}
	for seg := range strings.SplitSeq(u.EscapedPath(), "/") {
		for part := range strings.SplitSeq(seg, templateMarker) {
			if looksLikeCredential(part) {
				out = append(out, part)
				if p, err := url.PathUnescape(part); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	out = append(out, paramSecrets(u.RawQuery)...)
	return append(out, paramSecrets(u.EscapedFragment())...)
}

// paramSecrets are the values of the secret-named parameters of q (a
// query or a form body, its placeholder expanded to templateMarker), as
// written and unescaped, without the job id.
func paramSecrets(q string) []string {
	var out []string
	for part := range strings.FieldsFuncSeq(q, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		if u, err := url.QueryUnescape(k); err == nil {
			k = u
		}
		if !redact.SecretName(k) {
			continue
		}
		for w := range strings.SplitSeq(v, templateMarker) {
			out = append(out, w)
			if u, err := url.QueryUnescape(w); err == nil {
				out = append(out, u)
			}
		}
	}
	return out
}

// credentials are the parts of a secret header's value that a service may
// echo alone: the credential after an Authorization scheme (and, for
// Basic, the decoded user:password and the password), the values of a
// Cookie's pairs.
func credentials(name, v string) []string {
	var out []string
	if strings.Contains(strings.ToLower(name), "cookie") {
		for pair := range strings.SplitSeq(v, ";") {
			if _, val, ok := strings.Cut(pair, "="); ok {
				out = append(out, val)
			}
		}
		return out
	}
	scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		return nil
	}
	cred = strings.TrimSpace(cred)
	out = append(out, cred)
	if strings.EqualFold(scheme, "Basic") {
		if dec, err := base64.StdEncoding.DecodeString(cred); err == nil {
			out = append(out, string(dec))
			if _, pw, ok := strings.Cut(string(dec), ":"); ok {
				out = append(out, pw)
			}
		}
	}
	return out
}

// looksLikeCredential reports whether s, a path segment or a header value
// under a name that says nothing, looks like a key or a token rather
// than a word: at least 16 bytes holding at least 2 digits and 2
// letters (a 2captcha key, a bot token, a Slack webhook's secret; not
// getTaskResult, recaptchaV2Enterprise or an 18-digit id).
func looksLikeCredential(s string) bool {
	if len(s) < 16 {
		return false
	}
	var digits, letters int
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			digits++
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			letters++
		}
	}
	return digits >= 2 && letters >= 2
}

// text is t with the secrets it shows masked: redact.Text's (secret-named
// parameters and JSON members, user info passwords), then every
// configured secret in any of its forms (raw, query-escaped,
// path-escaped, JSON- and HTML-escaped; ASCII case ignored), and at the
// end of t the start of a secret (at least secretFloor bytes) that a cut
// left there. Scrub before cutting: a cut after scrubbing only ever cuts
// a mask.
func (s *scrubber) text(t string) string {
	t = redact.Text(strings.ToValidUTF8(t, "\uFFFD"))
	if s == nil || len(s.forms) == 0 {
		return t
	}
	t = s.maskTail(t)
	// Masking can join a mask and the text beside it into a secret again
	// (only a secret holding x's can): mask until nothing is left.
	for range 4 {
		m, changed := s.mask(t)
		if !changed {
			return t
		}
		t = m
	}
	if _, changed := s.mask(t); changed {
		return withheld
	}
	return t
}

// mask masks every occurrence of a form in t; changed reports whether
// there was one.
func (s *scrubber) mask(t string) (string, bool) {
	lower := lowerASCII(t)
	var hidden []bool // by byte of t
	for _, f := range s.forms {
		for i := 0; i <= len(lower)-len(f); {
			j := strings.Index(lower[i:], f)
			if j < 0 {
				break
			}
			if hidden == nil {
				hidden = make([]bool, len(t))
			}
			for k := i + j; k < i+j+len(f); k++ {
				hidden[k] = true
			}
			i += j + 1
		}
	}
	if hidden == nil {
		return t, false
	}
	var b strings.Builder
	for i := 0; i < len(t); {
		if !hidden[i] {
			b.WriteByte(t[i])
			i++
			continue
		}
		b.WriteString(redact.Mask)
		for i < len(t) && hidden[i] {
			i++
		}
	}
	return b.String(), true
}

// maskTail masks the longest start of a form (at least secretFloor bytes,
// not the whole form) that t ends with: what a cut made before scrubbing
// left of a secret.
func (s *scrubber) maskTail(t string) string {
	lower := lowerASCII(t)
	n := 0
	for _, f := range s.forms {
		for k := min(len(f)-1, len(lower)); k >= secretFloor && k > n; k-- {
			if strings.HasSuffix(lower, f[:k]) {
				n = k
				break
			}
		}
	}
	if n == 0 {
		return t
	}
	return t[:len(t)-n] + redact.Mask
}

// snippet is snippet(b, n) with the secrets masked, scrubbed before it is
// cut: the window scrubbed holds every secret that starts in the first n
// bytes.
func (s *scrubber) snippet(b []byte, n int) string {
	window := n
	if s != nil {
		window += s.longest
	}
	return strings.TrimSpace(s.text(truncate(s.text(snippet(b, window)), n)))
}

// describe is describe(v) with the secrets of a string masked before it
// is cut.
func (s *scrubber) describe(v any) string {
	if str, ok := v.(string); ok {
		v = s.text(str)
	}
	return describe(v)
}

// code is cleanCode(raw) with the secrets masked: a service's code
// becomes redrive-error-code and may quote what it was sent.
func (s *scrubber) code(raw string) string {
	c := cleanCode(s.text(raw))
	if m := s.text(c); m != c {
		c = cleanCode(m)
	}
	return c
}

// err is e, or, when its text shows a secret, e behind a redactedError
// that shows the text masked (errors.Is and errors.As still see e).
func (s *scrubber) err(e error) error {
	if e == nil {
		return nil
	}
	msg := e.Error()
	if m := s.text(msg); m != msg {
		return &redactedError{msg: truncate(m, maxErrorBytes), err: e}
	}
	return e
}

// redactedError is an error whose text had secrets masked.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// lowerASCII is s with ASCII letters in lower case, every byte where it
// was (so that offsets in it are offsets in s).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
