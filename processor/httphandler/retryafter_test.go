package httphandler

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"007", 7 * time.Second, true},
		{"86400", 24 * time.Hour, true},
		{"86401", MaxRetryAfter, true},
		{"99999999999999999999999", MaxRetryAfter, true},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(90 * time.Second).Format(time.RFC850), 90 * time.Second, true},
		{now.Add(90 * time.Second).Format(time.ANSIC), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{now.Format(http.TimeFormat), 0, false},
		{now.Add(72 * time.Hour).Format(http.TimeFormat), MaxRetryAfter, true},
		{"Sun, 99 Feb 2026 12:00:00 GMT", 0, false},
	}
	for _, c := range cases {
		got, ok := parseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("%q: %s %v, want %s %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "5", "-1", "86401", "1e3", "Sun, 01 Mar 2026 12:01:30 GMT", "Sunday, 01-Mar-26 12:01:30 GMT", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, now)
		if d < 0 || d > MaxRetryAfter {
			t.Fatalf("%q: %s out of [0, %s]", v, d, MaxRetryAfter)
		}
		if !ok && d != 0 {
			t.Fatalf("%q: %s but not ok", v, d)
		}
	})
}
