package httphandler

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps the delay a Retry-After can ask for.
const MaxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3), relative to now. ok is false for an absent, malformed
// or negative value and for a date not after now; d is never above
// MaxRetryAfter.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if allDigits(v) {
		v = strings.TrimLeft(v, "0")
		if len(v) > 9 { // more than 31 years: no need to parse it
			return MaxRetryAfter, true
		}
		secs, _ := strconv.Atoi(v) // "" (all zeros) is 0
		return min(time.Duration(secs)*time.Second, MaxRetryAfter), true
	}
	t, err := http.ParseTime(v)
	if err != nil || !t.After(now) {
		return 0, false
	}
	return min(t.Sub(now), MaxRetryAfter), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
