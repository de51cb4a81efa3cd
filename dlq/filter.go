package dlq

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// ErrBadFilter is wrapped by every error about a filter: a bad time, a bad
// header or key filter, a reason or class that does not exist.
var ErrBadFilter = errors.New("bad dead-letter filter")

// Filter selects dead letters: the `replay` and `dlq` commands' flags, the
// analyzer's /api/deadletters query and the match of a Rule.
//
// Every field that is set must match (AND); within a list, any entry may
// match (OR). An empty field matches everything, so the zero Filter
// matches every dead letter.
type Filter struct {
	// Codes match redrive-error-code exactly; an entry ending in "*"
	// matches by prefix ("http_5*"), and "*" alone matches any code,
	// none included.
	Codes []string
	// Reasons match redrive-reason exactly: exhausted, permanent,
	// invalid, expired, crashed.
	Reasons []string
	// Classes match redrive-error-class exactly: transient, not-ready,
	// permanent, invalid, expired.
	Classes []string
	// Origins match redrive-origin-topic like Codes (exactly, or by prefix
	// with a trailing "*").
	Origins []string
	// Since and Until bound the dead-lettering time (the DLQ record's
	// timestamp, DeadLetter.Timestamp): Since <= t < Until. A zero bound
	// is open.
	Since, Until time.Time
	// Key matches the record key byte for byte (a Go string holds any
	// bytes; see ParseKeyFilter for binary keys). Empty matches every
	// key, the null key included.
	Key string
	// Headers match header values: for every name, some header of that
	// name (case-insensitive) must have exactly that value (an empty value
	// matches an empty header, not a missing one). User headers are
	// searched, and for a redrive-* name also the redrive headers as
	// Decode read them (DeadLetter.Meta, written as on the wire: decimal
	// integers, Unix milliseconds), so "redrive-instance=pod-1" and
	// "redrive-redrives=2" work. Compatibility headers (kafka_dlt-*,
	// __connect.errors.*) are user headers here: their binary values
	// match byte for byte.
	Headers map[string]string
}

// Match reports whether d passes f. A nil d matches nothing.
func (f Filter) Match(d *DeadLetter) bool {
	if d == nil {
		return false
	}
	if !matchPattern(f.Codes, d.Code) || !matchExact(f.Reasons, string(d.Reason)) ||
		!matchExact(f.Classes, string(d.Class)) || !matchPattern(f.Origins, d.OriginTopic) {
		return false
	}
	if !f.Since.IsZero() && d.Timestamp.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !d.Timestamp.Before(f.Until) {
		return false
	}
	if f.Key != "" && string(d.Key) != f.Key {
		return false
	}
	if len(f.Headers) == 0 {
		return true
	}
	var own []kgo.RecordHeader // redrive's headers, encoded once when asked for
	for name, want := range f.Headers {
		if hasHeader(d.UserHeaders, name, want) {
			continue
		}
		if !isRedriveName(name) {
			return false
		}
		if own == nil {
			own = retry.Encode(d.Meta, nil)
		}
		if !hasHeader(own, name, want) {
			return false
		}
	}
	return true
}

// IsZero reports whether f selects nothing out: it matches every dead
// letter. Replay asks for an explicit "all" before it republishes with one.
func (f Filter) IsZero() bool {
	return len(f.Codes) == 0 && len(f.Reasons) == 0 && len(f.Classes) == 0 && len(f.Origins) == 0 &&
		f.Since.IsZero() && f.Until.IsZero() && f.Key == "" && len(f.Headers) == 0
}

// Validate reports what is wrong with f, every problem joined, each
// wrapping ErrBadFilter: an empty list entry, an unknown reason or class,
// an empty header name, Since not before Until.
func (f Filter) Validate() error {
	var errs []error
	for _, p := range f.problems() {
		errs = append(errs, fmt.Errorf("%w: %s", ErrBadFilter, p))
	}
	return errors.Join(errs...)
}

func (f Filter) problems() []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, l := range []struct {
		list  []string
		check func(string) string
	}{{f.Codes, checkCode}, {f.Reasons, checkReason}, {f.Classes, checkClass}, {f.Origins, checkOrigin}} {
		for _, s := range l.list {
			if msg := l.check(s); msg != "" {
				bad("%s", msg)
			}
		}
	}
	if _, empty := f.Headers[""]; empty {
		bad("empty header name")
	}
	if msg := checkSpan(f.Since, f.Until); msg != "" {
		bad("%s", msg)
	}
	return out
}

// The checks of one list entry: "" when fine, else what is wrong. The
// messages quote the entry, so that they read well after a flag name, a
// query parameter or a configuration path.

func checkCode(s string) string {
	if s == "" {
		return "empty code"
	}
	return ""
}

func checkReason(s string) string {
	if _, err := ParseReason(s); err != nil {
		return fmt.Sprintf("unknown dead-letter reason %q: want %s", s, reasonList())
	}
	return ""
}

func checkClass(s string) string {
	if s == "" || !retry.Class(s).Valid() {
		return fmt.Sprintf("unknown error class %q: want transient, not-ready, permanent, invalid or expired", s)
	}
	return ""
}

// checkOrigin: a topic name, or a prefix of one ending in "*". A character
// Kafka does not allow in topic names could never match: an error, not a
// silent empty result.
func checkOrigin(s string) string {
	if s == "" {
		return "empty topic"
	}
	if prefix, ok := strings.CutSuffix(s, "*"); ok {
		if strings.IndexFunc(prefix, notTopicRune) >= 0 {
			return fmt.Sprintf("%q: a topic prefix uses only letters, digits, '.', '_' and '-'", s)
		}
		return ""
	}
	if strings.IndexFunc(s, notTopicRune) >= 0 {
		return fmt.Sprintf("%q: a topic name uses only letters, digits, '.', '_' and '-'", s)
	}
	return ""
}

func notTopicRune(c rune) bool {
	return !(c == '.' || c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z')
}

func checkSpan(since, until time.Time) string {
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return fmt.Sprintf("since %s is not before until %s", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	return ""
}

func matchExact(list []string, s string) bool {
	return len(list) == 0 || slices.Contains(list, s)
}

func matchPattern(list []string, s string) bool {
	if len(list) == 0 {
		return true
	}
	for _, p := range list {
		if p == s {
			return true
		}
		if n := len(p); n > 0 && p[n-1] == '*' && strings.HasPrefix(s, p[:n-1]) {
			return true
		}
	}
	return false
}

func hasHeader(hs []kgo.RecordHeader, name, value string) bool {
	for _, h := range hs {
		if strings.EqualFold(h.Key, name) && string(h.Value) == value {
			return true
		}
	}
	return false
}

func isRedriveName(name string) bool {
	return len(name) > len(retry.HeaderPrefix) && strings.EqualFold(name[:len(retry.HeaderPrefix)], retry.HeaderPrefix)
}

// ParseHeaderFilter reads a "name=value" header filter (the --header flag):
// the name is everything before the first "=", the value everything after
// it, unchanged (it may be empty and may hold "=").
func ParseHeaderFilter(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%w: header %q: want name=value", ErrBadFilter, s)
	case name == "":
		return "", "", fmt.Errorf("%w: header %q: empty name", ErrBadFilter, s)
	}
	return name, value, nil
}

// Base64Prefix marks a key filter given as base64 (standard alphabet,
// padding optional), for keys that are not text.
const Base64Prefix = "base64:"

// ParseKeyFilter reads a --key flag into Filter.Key: the text itself, or
// "base64:<data>" for a binary key (as DisplayBytes shows it). A text key
// that starts with "base64:" is given in base64 too.
func ParseKeyFilter(s string) (string, error) {
	data, ok := strings.CutPrefix(s, Base64Prefix)
	if !ok {
		return s, nil
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(data)
	}
	if err != nil {
		return "", fmt.Errorf("%w: key %q: bad base64", ErrBadFilter, s)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("%w: key %q: empty", ErrBadFilter, s)
	}
	return string(b), nil
}

// ParseTime reads a --since/--until time or a since= query parameter:
//
//   - RFC 3339, "2024-05-01T10:00:00Z" or with an offset and fractional
//     seconds; a space may stand for the "T";
//   - a date, "2024-05-01", meaning its midnight UTC;
//   - "now";
//   - a relative time, how long before now: "2h", "30m", "90s", "7d",
//     "1w", "1d12h", "1.5h" (Go duration units plus d = 24h and w = 7d).
//
// A time without a zone is an error, not a guess.
func ParseTime(s string, now time.Time) (time.Time, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return time.Time{}, fmt.Errorf("%w: empty time: want %s", ErrBadFilter, timeForms)
	}
	if t == "now" {
		return now, nil
	}
	if looksLikeDate(t) {
		return parseAbsolute(s, t)
	}
	if t[0] == '-' || t[0] == '+' {
		return time.Time{}, fmt.Errorf("%w: time %q: a relative time is how long ago, without a sign (2h)", ErrBadFilter, s)
	}
	if _, unit := agoUnits[t]; !unit && strings.Trim(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
		// A word ("yesterday", "today"): no number or unit to point at.
		return time.Time{}, fmt.Errorf("%w: time %q is not one redrive reads: want %s", ErrBadFilter, s, timeForms)
	}
	ago, err := parseAgo(t)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: time %q: %v; want %s", ErrBadFilter, s, err, timeForms)
	}
	return now.Add(-ago), nil
}

// timeForms names every form ParseTime reads, for its errors.
const timeForms = "how long ago (2h, 30m, 1d, 1d12h, 7d), a date (2024-05-01, from 00:00 UTC), RFC 3339 (2024-05-01T10:00:00Z) or now"

// looksLikeDate: four digits and a dash, the start of every absolute form.
func looksLikeDate(t string) bool {
	if len(t) < 5 || t[4] != '-' {
		return false
	}
	for i := range 4 {
		if t[i] < '0' || t[i] > '9' {
			return false
		}
	}
	return true
}

func parseAbsolute(s, t string) (time.Time, error) {
	if len(t) == len(time.DateOnly) {
		d, err := time.Parse(time.DateOnly, t)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: date %q: want YYYY-MM-DD", ErrBadFilter, s)
		}
		return d, nil
	}
	if len(t) > 10 && t[10] == ' ' {
		t = t[:10] + "T" + t[11:]
	}
	v, err := time.Parse(time.RFC3339Nano, t)
	if err == nil {
		return v, nil
	}
	if _, nerr := time.Parse("2006-01-02T15:04:05.999999999", t); nerr == nil {
		return time.Time{}, fmt.Errorf("%w: time %q has no zone: add Z (UTC) or an offset such as +02:00", ErrBadFilter, s)
	}
	return time.Time{}, fmt.Errorf("%w: time %q: want RFC 3339, e.g. 2024-05-01T10:00:00Z", ErrBadFilter, s)
}

var agoUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour,
	"d": 24 * time.Hour, "w": 7 * 24 * time.Hour,
}

// parseAgo reads a duration with Go's units plus d and w. "0" alone is 0.
func parseAgo(t string) (time.Duration, error) {
	if t == "0" {
		return 0, nil
	}
	const maxDur = time.Duration(1<<63 - 1)
	var total time.Duration
	for rest := t; rest != ""; {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		num := rest[:i]
		j := i
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
			j++
		}
		unit := rest[i:j]
		rest = rest[j:]
		whole, frac, _ := strings.Cut(num, ".")
		if whole == "" && frac == "" {
			return 0, fmt.Errorf("a number must come before %q", unit)
		}
		if strings.Contains(frac, ".") {
			return 0, fmt.Errorf("bad number %q", num)
		}
		u, ok := agoUnits[unit]
		if !ok {
			if unit == "" {
				return 0, fmt.Errorf("%q has no unit", num)
			}
			return 0, fmt.Errorf("unknown unit %q (want ms, s, m, h, d or w)", unit)
		}
		var n int64
		if whole != "" {
			var err error
			if n, err = strconv.ParseInt(whole, 10, 64); err != nil || n > int64(maxDur/u) {
				return 0, errors.New("too long ago")
			}
		}
		v := time.Duration(n) * u
		if frac != "" {
			if len(frac) > 18 {
				frac = frac[:18] // beyond a nanosecond of a week
			}
			f, _ := strconv.ParseInt(frac, 10, 64)
			v += time.Duration(float64(u) * float64(f) / pow10(len(frac)))
		}
		if v < 0 || total > maxDur-v {
			return 0, errors.New("too long ago")
		}
		total += v
	}
	return total, nil
}

func pow10(n int) float64 {
	p := 1.0
	for range n {
		p *= 10
	}
	return p
}

// FieldError is one problem with one field of a filter or a rule given as
// text (ParseFilter, CompileRule). Its Error is "<key>: <Err>: <Msg>",
// e.g. `--since: bad dead-letter filter: time "yesterday": ...`; a caller
// with its own idea of where the field is (a configuration file's path and
// line) uses Path and Msg.
type FieldError struct {
	// Key is the field as the caller named it: "reason", "--since",
	// "codes", "match.headers", "action".
	Key string
	// Index is which of the key's values is wrong, counting from 0; -1
	// when the problem is the key as a whole (one value, a header given
	// twice, since not before until).
	Index int
	// Msg says what is wrong, quoting the value: `unknown dead-letter
	// reason "tired": want exhausted, permanent, invalid, expired or crashed`.
	Msg string
	// Err is the kind: ErrBadFilter or ErrBadRule.
	Err error
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() + ": " + e.Msg }

// Unwrap gives the kind, for errors.Is.
func (e *FieldError) Unwrap() error { return e.Err }

// Path is Key with the index of the value: "reasons[1]", or Key alone.
func (e *FieldError) Path() string {
	if e.Index < 0 {
		return e.Key
	}
	return e.Key + "[" + strconv.Itoa(e.Index) + "]"
}

// FieldErrors are the FieldErrors in err (ParseFilter's and CompileRule's
// errors.Join of them), in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if errors.As(err, &fe) {
				out = append(out, fe)
			}
		}
	}
	walk(err)
	return out
}

// FilterKeys are the keys ParseFilter knows, in their singular form.
var FilterKeys = []string{"code", "reason", "class", "origin", "since", "until", "key", "header"}

// ParseFilter reads a filter given as key → values: the command-line
// filter flags, the analyzer's /api/deadletters query string, a POST
// /api/replay body and a rule's match in the configuration all come
// through here, so they accept and refuse the same things.
//
// Keys, each in its singular form (the query parameter), its plural form
// (the configuration's and the replay request's field) or as the flag
// (a leading "--"):
//
//	code, codes       error codes: exactly, or by prefix with a trailing "*"
//	reason, reasons   exhausted, permanent, invalid, expired, crashed
//	class, classes    transient, not-ready, permanent, invalid, expired
//	origin, origins   origin topics: a topic name, or a prefix with "*"
//	since, until      one time each (ParseTime, relative to now)
//	key               the record key (ParseKeyFilter: base64:<data> for binary)
//	header, headers   name=value (ParseHeaderFilter), one per value
//	header.NAME       the header NAME must have the value given (for a
//	                  name holding "=": the configuration's and the replay
//	                  request's header maps come this way)
//
// Each value of a list key is itself a comma-separated list (spaces around
// entries trimmed, empty entries skipped, but a value with no entry at all
// is an error). An empty since, until or key is as if not given. A header
// name may be given once (in any case).
//
// Every problem is reported, joined, each a *FieldError wrapping
// ErrBadFilter that names the key as given and, for a list, which value
// (FieldError.Index). An unknown key is a problem too.
func ParseFilter(kv map[string][]string, now time.Time) (Filter, error) {
	var f Filter
	var errs []error
	bad := func(key string, i int, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Index: i, Msg: fmt.Sprintf(format, args...), Err: ErrBadFilter})
	}
	type header struct{ key, name, value string }
	var headers []header
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys) // problems in a stable order
	one := func(key string, vals []string) (string, bool) {
		if len(vals) > 1 {
			bad(key, -1, "given %d times: want one value", len(vals))
			return "", false
		}
		if len(vals) == 0 || strings.TrimSpace(vals[0]) == "" {
			return "", false
		}
		return vals[0], true
	}
	for _, key := range keys {
		vals := kv[key]
		name := strings.TrimPrefix(key, "--")
		if _, h, ok := cutHeaderKey(name); ok {
			switch {
			case len(vals) > 1:
				bad(key, -1, "given %d times: want one value", len(vals))
			case len(vals) == 1: // an empty value matches an empty header
				headers = append(headers, header{key, h, vals[0]})
			}
			continue
		}
		list := func(to *[]string, check func(string) string) {
			for i, v := range vals {
				n := 0
				for item := range strings.SplitSeq(v, ",") {
					if item = strings.TrimSpace(item); item == "" {
						continue
					}
					n++
					if msg := check(item); msg != "" {
						bad(key, i, "%s", msg)
						continue
					}
					*to = append(*to, item)
				}
				if n == 0 {
					bad(key, i, "%s", check(""))
				}
			}
		}
		switch name {
		case "code", "codes":
			list(&f.Codes, checkCode)
		case "reason", "reasons":
			list(&f.Reasons, checkReason)
		case "class", "classes":
			list(&f.Classes, checkClass)
		case "origin", "origins":
			list(&f.Origins, checkOrigin)
		case "since", "until":
			v, ok := one(key, vals)
			if !ok {
				continue
			}
			t, err := ParseTime(v, now)
			if err != nil {
				bad(key, -1, "%s", strings.TrimPrefix(err.Error(), ErrBadFilter.Error()+": "))
				continue
			}
			if name == "since" {
				f.Since = t
			} else {
				f.Until = t
			}
		case "key":
			v, ok := one(key, vals)
			if !ok {
				continue
			}
			k, err := ParseKeyFilter(v)
			if err != nil {
				bad(key, -1, "%s", strings.TrimPrefix(err.Error(), ErrBadFilter.Error()+": "))
				continue
			}
			f.Key = k
		case "header", "headers":
			for i, v := range vals {
				n, hv, err := ParseHeaderFilter(v)
				if err != nil {
					bad(key, i, "%s", strings.TrimPrefix(err.Error(), ErrBadFilter.Error()+": "))
					continue
				}
				headers = append(headers, header{key, n, hv})
			}
		default:
			bad(key, -1, "unknown filter key (known: %s)", strings.Join(FilterKeys, ", "))
		}
	}
	seen := map[string]string{}
	for _, h := range headers {
		base := h.key // "header.NAME" problems name the key "header"
		if b, _, ok := cutHeaderKey(strings.TrimPrefix(h.key, "--")); ok {
			base = h.key[:len(h.key)-len(strings.TrimPrefix(h.key, "--"))] + b
		}
		if h.name == "" {
			bad(base, -1, "empty header name")
			continue
		}
		lower := strings.ToLower(h.name)
		if prev, dup := seen[lower]; dup {
			bad(base, -1, "header %q given twice (header names ignore case)", prev)
			continue
		}
		seen[lower] = h.name
		if f.Headers == nil {
			f.Headers = map[string]string{}
		}
		f.Headers[h.name] = h.value
	}
	if msg := checkSpan(f.Since, f.Until); msg != "" {
		bad("until", -1, "%s", msg)
	}
	return f, errors.Join(errs...)
}

// cutHeaderKey splits "header.NAME" or "headers.NAME" (the base key kept
// as given).
func cutHeaderKey(key string) (base, name string, ok bool) {
	for _, b := range []string{"header.", "headers."} {
		if n, found := strings.CutPrefix(key, b); found {
			return strings.TrimSuffix(b, "."), n, true
		}
	}
	return "", "", false
}
