// Package redact keeps secrets out of errors and logs. It is the one place
// that decides what looks like a secret: the password of a URL's user
// info, the values of query (and fragment) parameters with a secret-looking
// name (SecretName), and, in free text such as an error message, both of
// those wherever they appear.
//
// Redaction replaces a secret by Mask. It never removes anything else, so
// the text still says which URL or parameter was meant.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a secret: the same text url.URL.Redacted puts in place of
// a password.
const Mask = "xxxxx"

// secretWords are the parts of a name (lower-cased, without '-', '_' and
// '.') that make it secret-looking wherever they appear in it.
var secretWords = []string{"token", "secret", "passw", "apikey", "auth", "signature", "credential", "privatekey", "accesskey", "sessionid", "cookie"}

// secretNames are names that are secret-looking only as a whole: "sig" is,
// "design" is not.
var secretNames = map[string]bool{"key": true, "pass": true, "pwd": true, "sig": true, "jwt": true, "session": true}

// SecretName reports whether a query parameter, header or configuration
// key of this name holds a secret, in any case: key, api_key, apikey,
// X-Api-Key, token, access_token, secret, client_secret, password, pass,
// pwd, auth, Authorization, signature, sig, X-Amz-Signature, cookie, ...
// It errs on the side of hiding.
func SecretName(name string) bool {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '-' || c == '_' || c == '.' || c == ' ':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	n := b.String()
	if n == "" {
		return false
	}
	if secretNames[n] || strings.HasSuffix(n, "key") {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// URL is raw fit for an error or a log: the password of its user info
// replaced by Mask (as url.URL.Redacted does), and the values of its query
// and fragment parameters with a SecretName replaced by Mask. Everything
// else is kept as written. A raw that does not parse as a URL is scrubbed
// as Text.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Text(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
	}
	u.RawQuery = params(u.RawQuery)
	if u.Fragment != "" {
		f := params(u.EscapedFragment())
		if g, err := url.PathUnescape(f); err == nil {
			u.Fragment, u.RawFragment = g, f
		} else {
			u.Fragment, u.RawFragment = Mask, ""
		}
	}
	if u.Opaque != "" {
		u.Opaque = Text(u.Opaque)
	}
	return u.String()
}

// params masks the values of secret-looking parameters in a query string,
// keeping the order, the separators and everything else as written.
func params(q string) string {
	if q == "" {
		return q
	}
	var b strings.Builder
	for i := 0; i <= len(q); {
		j := strings.IndexAny(q[i:], "&;")
		if j < 0 {
			j = len(q) - i
		}
		part := q[i : i+j]
		if k, _, ok := strings.Cut(part, "="); ok && secretParam(k) {
			part = k + "=" + Mask
		}
		b.WriteString(part)
		if i+j < len(q) {
			b.WriteByte(q[i+j])
		}
		i += j + 1
	}
	return b.String()
}

func secretParam(k string) bool {
	if u, err := url.QueryUnescape(k); err == nil {
		k = u
	}
	return SecretName(k)
}

var (
	// userinfo: scheme://user:password@ (the password up to the last @
	// before the path).
	userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s"'<>]*:)([^/?#\s"'<>]*)@`)
	// param: name=value after a start, a separator, a space or a quote.
	paramRE = regexp.MustCompile(`(^|[?&;#\s"'(\[{,])([A-Za-z0-9_.%\-\[\]]+)=([^&;#\s"'<>)\]},]*)`)
)

// Text is s (an error message, a log line) with the secrets it shows
// replaced by Mask: the password of every scheme://user:password@ and the
// value of every name=value whose name is a SecretName. Use it where a
// message may quote a URL that did not parse, or a value of unknown form.
func Text(s string) string {
	s = userinfoRE.ReplaceAllString(s, "${1}"+Mask+"@")
	return paramRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := paramRE.FindStringSubmatch(m)
		if !secretParam(sub[2]) {
			return m
		}
		return sub[1] + sub[2] + "=" + Mask
	})
}
