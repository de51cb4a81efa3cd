package dlq

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

// t0 is the dead-lettering time of the test dead letters.
var t0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

// spec describes a test dead letter; zero fields get usual values.
type spec struct {
	at       time.Time // default t0
	code     string
	reason   Reason // default exhausted
	class    retry.Class
	origin   string // default solve.requests; "-" for none
	key      string
	redrives int
	user     []kgo.RecordHeader
	style    string
}

// build makes the dead letter as the processor would and reads it back,
// so that Meta and the fields agree as they do in a real DLQ.
func (s spec) build(t testing.TB) *DeadLetter {
	t.Helper()
	if s.at.IsZero() {
		s.at = t0
	}
	if s.reason == "" {
		s.reason = ReasonExhausted
	}
	switch s.origin {
	case "":
		s.origin = "solve.requests"
	case "-":
		s.origin = ""
	}
	src := &kgo.Record{Topic: s.origin, Partition: 1, Offset: 7, Value: []byte(`{"site":"x"}`)}
	if s.key != "" {
		src.Key = []byte(s.key)
	}
	m := retry.Meta{ID: "req-1", Attempt: 4, Error: "it failed", ErrorCode: s.code, ErrorClass: s.class,
		Reason: string(s.reason), Redrives: s.redrives, FirstErrorAt: s.at.Add(-time.Minute), LastErrorAt: s.at}
	if s.origin != "" {
		m.HasOrigin, m.OriginTopic, m.OriginPartition, m.OriginOffset, m.OriginTimestamp = true, s.origin, 1, 7, s.at.Add(-2*time.Minute)
	}
	r := Build(src, m, s.user, BuildOptions{Topic: "solve.requests.dlq", Group: "redrive.solve", Instance: "pod-1", HeaderStyle: s.style})
	r.Partition, r.Offset, r.Timestamp = 0, 42, s.at
	d, err := Decode(r)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return d
}

func hdr(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

func TestFilterMatch(t *testing.T) {
	base := spec{code: "ERROR_NO_SLOT_AVAILABLE", class: retry.ClassTransient, key: "user-7",
		user: []kgo.RecordHeader{hdr("Tenant", "acme"), hdr("trace", "a"), hdr("trace", "b"), hdr("empty", ""), hdr("redrive-future", "x")}}
	tests := []struct {
		name string
		f    Filter
		d    spec
		want bool
	}{
		{"zero filter", Filter{}, base, true},
		{"code", Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}}, base, true},
		{"code is exact", Filter{Codes: []string{"ERROR_NO_SLOT"}}, base, false},
		{"code is case-sensitive", Filter{Codes: []string{"error_no_slot_available"}}, base, false},
		{"one of the codes", Filter{Codes: []string{"http_503", "ERROR_NO_SLOT_AVAILABLE"}}, base, true},
		{"code prefix", Filter{Codes: []string{"http_5*"}}, spec{code: "http_503"}, true},
		{"code prefix no match", Filter{Codes: []string{"http_5*"}}, spec{code: "http_429"}, false},
		{"star matches no code", Filter{Codes: []string{"*"}}, spec{}, true},
		{"no code", Filter{Codes: []string{"X"}}, spec{}, false},
		{"reason", Filter{Reasons: []string{"permanent", "exhausted"}}, base, true},
		{"other reason", Filter{Reasons: []string{"permanent"}}, base, false},
		{"class", Filter{Classes: []string{"transient"}}, base, true},
		{"other class", Filter{Classes: []string{"not-ready"}}, base, false},
		{"origin", Filter{Origins: []string{"solve.requests"}}, base, true},
		{"origin prefix", Filter{Origins: []string{"solve.*"}}, base, true},
		{"other origin", Filter{Origins: []string{"webhooks.out"}}, base, false},
		{"no origin", Filter{Origins: []string{"solve.requests"}}, spec{origin: "-"}, false},
		{"since is inclusive", Filter{Since: t0}, base, true},
		{"before since", Filter{Since: t0.Add(time.Millisecond)}, base, false},
		{"until is exclusive", Filter{Until: t0}, base, false},
		{"before until", Filter{Until: t0.Add(time.Millisecond)}, base, true},
		{"in range", Filter{Since: t0.Add(-time.Hour), Until: t0.Add(time.Hour)}, base, true},
		{"key", Filter{Key: "user-7"}, base, true},
		{"other key", Filter{Key: "user-8"}, base, false},
		{"key is not a prefix", Filter{Key: "user"}, base, false},
		{"null key", Filter{Key: "user-7"}, spec{}, false},
		{"header", Filter{Headers: map[string]string{"Tenant": "acme"}}, base, true},
		{"header name in any case", Filter{Headers: map[string]string{"tenant": "acme"}}, base, true},
		{"header value is exact", Filter{Headers: map[string]string{"Tenant": "ACME"}}, base, false},
		{"any header of the name", Filter{Headers: map[string]string{"trace": "b"}}, base, true},
		{"missing header", Filter{Headers: map[string]string{"plan": "enterprise"}}, base, false},
		{"empty value", Filter{Headers: map[string]string{"empty": ""}}, base, true},
		{"empty value is not missing", Filter{Headers: map[string]string{"plan": ""}}, base, false},
		{"every header", Filter{Headers: map[string]string{"Tenant": "acme", "trace": "a"}}, base, true},
		{"every header, one wrong", Filter{Headers: map[string]string{"Tenant": "acme", "trace": "c"}}, base, false},
		{"redrive header", Filter{Headers: map[string]string{"redrive-instance": "pod-1", "redrive-group": "redrive.solve"}}, base, true},
		{"redrive header in any case", Filter{Headers: map[string]string{"Redrive-Instance": "pod-1"}}, base, true},
		{"redrive header value", Filter{Headers: map[string]string{"redrive-instance": "pod-2"}}, base, false},
		{"redrive number header", Filter{Headers: map[string]string{"redrive-redrives": "2"}}, spec{redrives: 2}, true},
		{"redrive time header", Filter{Headers: map[string]string{"redrive-last-error-at": "1714557600000"}}, base, true},
		{"unknown redrive header", Filter{Headers: map[string]string{"redrive-future": "x"}}, base, true},
		{"redrive header not there", Filter{Headers: map[string]string{"redrive-state": "x"}}, base, false},
		{"connect header", Filter{Headers: map[string]string{"__connect.errors.topic": "solve.requests"}}, spec{style: StyleConnect}, true},
		{"all fields", Filter{Codes: []string{"ERROR_*"}, Reasons: []string{"exhausted"}, Classes: []string{"transient"}, Origins: []string{"solve.requests"},
			Since: t0, Until: t0.Add(time.Second), Key: "user-7", Headers: map[string]string{"tenant": "acme"}}, base, true},
		{"all fields, one wrong", Filter{Codes: []string{"ERROR_*"}, Reasons: []string{"exhausted"}, Classes: []string{"permanent"}, Origins: []string{"solve.requests"}}, base, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Match(tt.d.build(t)); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
	if (Filter{}).Match(nil) {
		t.Errorf("a nil dead letter matches")
	}
}

func TestFilterValidate(t *testing.T) {
	if err := (Filter{Reasons: []string{"exhausted"}, Classes: []string{"not-ready"}, Since: t0, Until: t0.Add(1)}).Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
	f := Filter{Codes: []string{""}, Reasons: []string{"tired"}, Classes: []string{"fatal"}, Headers: map[string]string{"": "x"}, Since: t0, Until: t0}
	err := f.Validate()
	for _, w := range []string{"empty code", `unknown dead-letter reason "tired"`, `unknown error class "fatal"`, "empty header name", "is not before until"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate = %v; want %q", err, w)
		}
	}
	if !errors.Is(err, ErrBadFilter) {
		t.Errorf("not ErrBadFilter: %v", err)
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2024, 5, 8, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2024-05-01T10:00:00Z", t0},
		{"2024-05-01T12:00:00+02:00", t0},
		{"2024-05-01T10:00:00.5Z", t0.Add(500 * time.Millisecond)},
		{"2024-05-01 10:00:00Z", t0},
		{" 2024-05-01T10:00:00Z ", t0},
		{"2024-05-01", time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)},
		{"now", now},
		{"0", now},
		{"2h", now.Add(-2 * time.Hour)},
		{"30m", now.Add(-30 * time.Minute)},
		{"90s", now.Add(-90 * time.Second)},
		{"500ms", now.Add(-500 * time.Millisecond)},
		{"7d", now.Add(-7 * 24 * time.Hour)},
		{"1w", now.Add(-7 * 24 * time.Hour)},
		{"1d12h", now.Add(-36 * time.Hour)},
		{"1.5h", now.Add(-90 * time.Minute)},
		{"0.5d", now.Add(-12 * time.Hour)},
		{".5h", now.Add(-30 * time.Minute)},
		{"1h30m", now.Add(-90 * time.Minute)},
	}
	for _, tt := range tests {
		got, err := ParseTime(tt.in, now)
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", "empty time"},
		{"  ", "empty time"},
		{"-2h", "without a sign"},
		{"+2h", "without a sign"},
		{"2", `"2" has no unit`},
		{"2x", `unknown unit "x"`},
		{"2 h", `unknown unit " h"`},
		{"h", "a number must come before"},
		{".h", "a number must come before"},
		{"1..5h", "bad number"},
		{"2024-05-01T10:00:00", "has no zone"},
		{"2024-13-01", "want YYYY-MM-DD"},
		{"2024-05-01T25:00:00Z", "want RFC 3339"},
		{"yesterday", `time "yesterday" is not one redrive reads: want how long ago (2h, 30m, 1d, 1d12h, 7d), a date (2024-05-01, from 00:00 UTC), RFC 3339 (2024-05-01T10:00:00Z) or now`},
		{"99999999999999999999h", "too long ago"},
		{"16000000w", "too long ago"},
		{"200000d200000d", "too long ago"},
	}
	for _, tt := range bad {
		_, err := ParseTime(tt.in, now)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadFilter) {
			t.Errorf("ParseTime(%q) = %v; want an error with %q", tt.in, err, tt.want)
		}
	}
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2024-05-01T10:00:00Z", "2024-05-01T12:00:00.123456789+02:00", "2024-05-01", "now", "0", "2h", "1d12h30m",
		"1.5w", ".5ms", "7d", "-2h", "2", "2024-05-01T10:00:00", "9999999999w", "1.0000000000000000000001h", "2µs", "1e3s"} {
		f.Add(s)
	}
	now := time.Date(2024, 5, 8, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s, now)
		if err != nil {
			if !errors.Is(err, ErrBadFilter) {
				t.Fatalf("error %v is not ErrBadFilter", err)
			}
			return
		}
		if !looksLikeDate(strings.TrimSpace(s)) && got.After(now) {
			t.Fatalf("relative time %q is after now: %v", s, got)
		}
		// Written as RFC 3339, it reads back as the same instant.
		back, err := ParseTime(got.Format(time.RFC3339Nano), now)
		if err != nil || !back.Equal(got) {
			if got.Year() < 0 || got.Year() > 9999 {
				return // RFC 3339 has four-digit years
			}
			t.Fatalf("%q → %v → %q → %v, %v", s, got, got.Format(time.RFC3339Nano), back, err)
		}
	})
}

func TestParseHeaderFilter(t *testing.T) {
	tests := []struct{ in, name, value, err string }{
		{in: "tenant=acme", name: "tenant", value: "acme"},
		{in: "k=a=b", name: "k", value: "a=b"},
		{in: "k=", name: "k", value: ""},
		{in: "redrive-instance=pod-1", name: "redrive-instance", value: "pod-1"},
		{in: "k", err: "want name=value"},
		{in: "=v", err: "empty name"},
	}
	for _, tt := range tests {
		n, v, err := ParseHeaderFilter(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrBadFilter) {
				t.Errorf("ParseHeaderFilter(%q) = %v; want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || n != tt.name || v != tt.value {
			t.Errorf("ParseHeaderFilter(%q) = %q, %q, %v", tt.in, n, v, err)
		}
	}
	// Repeated header filters, through the one parser.
	now := time.Now()
	f, err := ParseFilter(map[string][]string{"header": {"a=1", "b=2"}}, now)
	if m := f.Headers; err != nil || len(m) != 2 || m["a"] != "1" || m["b"] != "2" {
		t.Errorf("ParseFilter(header a=1, b=2) = %v, %v", m, err)
	}
	if f, err := ParseFilter(map[string][]string{"header": nil}, now); f.Headers != nil || err != nil {
		t.Errorf("ParseFilter(no header) = %v, %v", f.Headers, err)
	}
	if _, err := ParseFilter(map[string][]string{"header": {"Tenant=a", "tenant=b"}}, now); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("ParseFilter(header twice) = %v", err)
	}
	if _, err := ParseFilter(map[string][]string{"header": {"x"}}, now); err == nil {
		t.Errorf("ParseFilter(bad header) = nil")
	}
}

func TestParseKeyFilter(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{in: "user-7", want: "user-7"},
		{in: "base64:AAEC/w==", want: "\x00\x01\x02\xff"},
		{in: "base64:AAEC/w", want: "\x00\x01\x02\xff"},
		{in: "base64:YmFzZTY0OmtleQ==", want: "base64:key"},
		{in: "base64:!!", err: "bad base64"},
		{in: "base64:", err: "empty"},
	}
	for _, tt := range tests {
		got, err := ParseKeyFilter(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrBadFilter) {
				t.Errorf("ParseKeyFilter(%q) = %v; want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseKeyFilter(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	// What DisplayBytes shows, ParseKeyFilter reads back, and the filter matches.
	key := []byte{0, 1, 2, 0xff}
	text, b64 := DisplayBytes(key)
	k, err := ParseKeyFilter(Base64Prefix + text)
	if !b64 || err != nil || !(Filter{Key: k}).Match(&DeadLetter{Key: key}) {
		t.Errorf("DisplayBytes %q %v → ParseKeyFilter %q, %v", text, b64, k, err)
	}
}

func ExampleParseTime() {
	now := time.Date(2024, 5, 8, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"2h", "7d", "2024-05-01T10:00:00+02:00", "2024-05-01"} {
		t, _ := ParseTime(s, now)
		fmt.Println(s, "→", t.UTC().Format(time.RFC3339))
	}
	// Output:
	// 2h → 2024-05-08T10:00:00Z
	// 7d → 2024-05-01T12:00:00Z
	// 2024-05-01T10:00:00+02:00 → 2024-05-01T08:00:00Z
	// 2024-05-01 → 2024-05-01T00:00:00Z
}

func TestParseFilter(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	f, err := ParseFilter(map[string][]string{
		"code":         {"http_5*, timeout", "ERROR_X"},
		"reasons":      {"exhausted"},
		"--class":      {"transient"},
		"origin":       {"solve.*"},
		"since":        {"2h"},
		"until":        {""}, // empty: not given
		"key":          {"base64:AAH/"},
		"header":       {"tenant=acme", "k=a=b"},
		"headers.x=y":  {"z"},
		"header.Empty": {""},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := Filter{Codes: []string{"http_5*", "timeout", "ERROR_X"}, Reasons: []string{"exhausted"}, Classes: []string{"transient"},
		Origins: []string{"solve.*"}, Since: now.Add(-2 * time.Hour), Key: "\x00\x01\xff",
		Headers: map[string]string{"tenant": "acme", "k": "a=b", "x=y": "z", "Empty": ""}}
	if fmt.Sprintf("%+v", f) != fmt.Sprintf("%+v", want) {
		t.Errorf("ParseFilter =\n%+v\nwant\n%+v", f, want)
	}
	if f, err := ParseFilter(nil, now); err != nil || fmt.Sprint(f) != fmt.Sprint(Filter{}) {
		t.Errorf("ParseFilter(nil) = %+v, %v", f, err)
	}

	for _, tt := range []struct {
		kv   map[string][]string
		want []string // Path | Msg
	}{
		{map[string][]string{"reason": {"exhausted", "tired"}}, []string{`reason[1] | unknown dead-letter reason "tired": want exhausted, permanent, invalid, expired or crashed`}},
		{map[string][]string{"classes": {""}}, []string{`classes[0] | unknown error class "": want transient, not-ready, permanent, invalid or expired`}},
		{map[string][]string{"codes": {"X", ","}}, []string{"codes[1] | empty code"}},
		{map[string][]string{"origins": {"a b", "c d*", ""}}, []string{
			`origins[0] | "a b": a topic name uses only letters, digits, '.', '_' and '-'`,
			`origins[1] | "c d*": a topic prefix uses only letters, digits, '.', '_' and '-'`, "origins[2] | empty topic"}},
		{map[string][]string{"--since": {"yesterday"}}, []string{`--since | time "yesterday" is not one redrive reads: want how long ago (2h, 30m, 1d, 1d12h, 7d), a date (2024-05-01, from 00:00 UTC), RFC 3339 (2024-05-01T10:00:00Z) or now`}},
		{map[string][]string{"since": {"1h", "2h"}}, []string{"since | given 2 times: want one value"}},
		{map[string][]string{"since": {"1h"}, "until": {"2h"}}, []string{"until | since 2024-05-02T09:00:00Z is not before until 2024-05-02T08:00:00Z"}},
		{map[string][]string{"key": {"base64:!!"}}, []string{`key | key "base64:!!": bad base64`}},
		{map[string][]string{"header": {"tenant"}}, []string{`header[0] | header "tenant": want name=value`}},
		{map[string][]string{"header": {"Tenant=a"}, "headers.tenant": {"b"}}, []string{`headers | header "Tenant" given twice (header names ignore case)`}},
		{map[string][]string{"headers.": {"x"}}, []string{"headers | empty header name"}},
		{map[string][]string{"colour": {"red"}}, []string{"colour | unknown filter key (known: code, reason, class, origin, since, until, key, header)"}},
	} {
		_, err := ParseFilter(tt.kv, now)
		var got []string
		for _, fe := range FieldErrors(err) {
			got = append(got, fe.Path()+" | "+fe.Msg)
		}
		if !slices.Equal(got, tt.want) || !errors.Is(err, ErrBadFilter) {
			t.Errorf("ParseFilter(%v):\n%q\nwant\n%q", tt.kv, got, tt.want)
		}
	}
	// The error reads as the flag, the parameter or the field it came from.
	_, err = ParseFilter(map[string][]string{"--header": {"tenant"}}, now)
	if err == nil || err.Error() != `--header: bad dead-letter filter: header "tenant": want name=value` {
		t.Errorf("error text %q", err)
	}
}

// FuzzParseFilter: whatever a query string or a flag holds, ParseFilter
// returns a filter that Validate accepts, or FieldErrors wrapping
// ErrBadFilter, and never panics.
func FuzzParseFilter(f *testing.F) {
	for _, s := range [][3]string{
		{"code", "http_5*,timeout", ""}, {"reason", "exhausted", "tired"}, {"class", "not-ready", ""}, {"origins", "solve.*", "a b"},
		{"since", "2h", ""}, {"until", "2024-05-01T10:00:00Z", ""}, {"key", "base64:AAH/", ""}, {"header", "a=b", "A=c"},
		{"header.x", "", ""}, {"--code", ",", ""}, {"headers.", "x", ""}, {"colour", "red", ""},
	} {
		f.Add(s[0], s[1], s[2], "since", "1d")
	}
	now := t0
	f.Fuzz(func(t *testing.T, k1, v1, v2, k2, v3 string) {
		kv := map[string][]string{k1: {v1, v2}}
		kv[k2] = append(kv[k2], v3)
		flt, err := ParseFilter(kv, now)
		if err != nil {
			fes := FieldErrors(err)
			if len(fes) == 0 || !errors.Is(err, ErrBadFilter) {
				t.Fatalf("error %v: %d FieldErrors, ErrBadFilter %v", err, len(fes), errors.Is(err, ErrBadFilter))
			}
			for _, fe := range fes {
				if fe.Msg == "" || !strings.HasPrefix(fe.Error(), fe.Key+": ") {
					t.Fatalf("FieldError %+v", fe)
				}
			}
			return
		}
		if verr := flt.Validate(); verr != nil {
			t.Fatalf("ParseFilter(%q) accepted %+v, which Validate refuses: %v", kv, flt, verr)
		}
		_ = flt.Match(&DeadLetter{Code: v1, OriginTopic: v2})
	})
}
