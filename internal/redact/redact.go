// Package redact keeps secrets out of errors and logs. It is the one place
// that decides what looks like a secret: the password of a URL's user
// info, the values of query (and fragment) parameters with a secret-looking
// name (SecretName), and, in free text such as an error message, both of
// those wherever they appear, and the values of JSON members with a
// secret-looking name.
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
var secretWords = []string{"token", "secret", "passw", "passphrase", "apikey", "auth", "signature", "credential",
	"privatekey", "accesskey", "sessionid", "cookie", "hmac"}

// secretNames are names that are secret-looking only as a whole: "sig" is,
// "design" is not. A nonce is not among them: it is sent in the clear and
// used once, and hiding it only makes a failed request harder to trace.
var secretNames = map[string]bool{"key": true, "pass": true, "pwd": true, "sig": true, "jwt": true, "session": true,
	"otp": true, "totp": true}

// secretSuffixes make a name secret-looking at its end: api_key, api_hash
// (Telegram's), X-Content-Hash; not hashtag or hash_type.
var secretSuffixes = []string{"key", "hash"}

// SecretName reports whether a query parameter, header or configuration
// key of this name holds a secret, in any case: key, api_key, apikey,
// X-Api-Key, token, access_token, secret, client_secret, password, pass,
// pwd, passphrase, auth, Authorization, signature, sig, X-Amz-Signature,
// cookie, hash, api_hash, hmac, X-Hmac-Sha256, otp, ... It errs on the side
// of hiding.
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
	if secretNames[n] {
		return true
	}
	for _, w := range secretSuffixes {
		if strings.HasSuffix(n, w) {
			return true
		}
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
// replaced by Mask: the password of every scheme://user:password@, the
// value of every name=value whose name is a SecretName, and the value
// (a string or a number) of every JSON member "name": value whose name is
// a SecretName, also when the JSON is itself inside a JSON string. Use it
// where a message may quote a URL that did not parse, a service's answer,
// or a value of unknown form.
func Text(s string) string {
	s = userinfoRE.ReplaceAllString(s, "${1}"+Mask+"@")
	s = paramRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := paramRE.FindStringSubmatch(m)
		if !secretParam(sub[2]) {
			return m
		}
		return sub[1] + sub[2] + "=" + Mask
	})
	s = members(s, `\"`)
	return members(s, `"`)
}

// members masks the values of the secret-named JSON members of s, whose
// quote is q: `"` for JSON, `\"` for JSON inside a JSON string. It tries
// every quote as the start of a name (an answer cut short or a string
// holding quotes must not hide the members after it) and reads a value
// only after a secret name, so it takes time in proportion to s. A string
// value that does not end (a cut answer) is masked to the end of s.
func members(s, q string) string {
	if !strings.Contains(s, q) {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); i++ {
		if !strings.HasPrefix(s[i:], q) {
			continue
		}
		n := i + len(q)
		j := n
		for j < len(s) && j-n < maxMemberName && nameByte(s[j]) {
			j++
		}
		if j == n || !strings.HasPrefix(s[j:], q) || !SecretName(s[n:j]) {
			continue
		}
		k := j + len(q)
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if k == len(s) || s[k] != ':' {
			continue
		}
		k++
		for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') {
			k++
		}
		end := valueEnd(s, k, q)
		if end == k {
			continue
		}
		b.WriteString(s[done:k])
		b.WriteString(q + Mask + q)
		done, i = end, end-1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// maxMemberName bounds the names members reads, so that each quote costs
// little.
const maxMemberName = 64

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

// valueEnd is where the JSON value at s[k:] (a string quoted with q, or a
// number) ends; k when there is none there.
func valueEnd(s string, k int, q string) int {
	if strings.HasPrefix(s[k:], q) {
		for e := k + len(q); e < len(s); e++ {
			switch {
			case strings.HasPrefix(s[e:], q):
				return e + len(q)
			case s[e] == '\\':
				e++ // an escaped character: \" in JSON, \\ or \n inside a JSON string
			}
		}
		return len(s)
	}
	e := k
	if e < len(s) && s[e] == '-' {
		e++
	}
	if e == len(s) || s[e] < '0' || s[e] > '9' {
		return k
	}
	for e < len(s) && strings.IndexByte("0123456789.eE+-", s[e]) >= 0 {
		e++
	}
	return e
}
