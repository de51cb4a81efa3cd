package analyzer

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/redrive/redrive/internal/bearer"
)

func TestHostAllowed(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:9091": true, "LocalHost.:1": true, "127.0.0.1:9091": true, "[::1]:9091": true, "::1": true,
		"dash.example.com": true, "DASH.example.com:443": true,
		"": false, "evil.example": false, "127.0.0.1.evil.example": false, "localhost.evil:9091": false, "[::2]:9091": false,
		"dash.example.com.evil": false, "0.0.0.0:9091": false,
	} {
		if got := hostAllowed(host, []string{"dash.example.com"}); got != want {
			t.Errorf("hostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	if !hostAllowed("anything.example:1", []string{"*"}) {
		t.Error(`"*" does not allow any host`)
	}
}

// FuzzHostAllowed: with no names configured, only the loopback names pass,
// whatever the Host header holds.
func FuzzHostAllowed(f *testing.F) {
	for _, s := range []string{"localhost", "127.0.0.1:80", "[::1]:1", "evil.example", "localhost.evil", "[localhost]", "::1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !hostAllowed(host, nil) {
			return
		}
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
		if h != "localhost" && h != "127.0.0.1" && h != "::1" {
			t.Fatalf("allowed Host %q", host)
		}
	})
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		host, origin, site string
		want               bool
	}{
		{"127.0.0.1:9091", "http://127.0.0.1:9091", "", true},
		{"127.0.0.1:9091", "http://127.0.0.1:9091", "same-origin", true},
		{"LOCALHOST:9091", "http://localhost:9091", "", true},
		{"dash.example.com", "https://dash.example.com", "", true},
		{"127.0.0.1:9091", "", "", false},
		{"127.0.0.1:9091", "null", "", false},
		{"127.0.0.1:9091", "http://127.0.0.1:9090", "", false},
		{"127.0.0.1:9091", "http://127.0.0.1", "", false},
		{"127.0.0.1:9091", "http://evil.example", "", false},
		{"127.0.0.1:9091", "file://127.0.0.1:9091", "", false},
		{"127.0.0.1:9091", "http://u:p@127.0.0.1:9091", "", false},
		{"127.0.0.1:9091", "http://127.0.0.1:9091/x", "", false},
		{"127.0.0.1:9091", "http://127.0.0.1:9091", "cross-site", false},
		{"127.0.0.1:9091", "http://127.0.0.1:9091", "same-site", false},
	} {
		r, _ := http.NewRequest("POST", "/", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		if got := sameOrigin(r); got != c.want {
			t.Errorf("sameOrigin(Host %q, Origin %q, Sec-Fetch-Site %q) = %v, want %v", c.host, c.origin, c.site, got, c.want)
		}
	}
}

// FuzzAccess: an Authorization header passes a guarded read only when it
// is "<bearer in any case> <spaces><token>" for Token or ReadToken, and
// replay's check (bearer.Valid with Token) only for Token; an empty token
// never matches.
func FuzzAccess(f *testing.F) {
	for _, s := range [][3]string{{"Bearer full", "full", "ro"}, {"bearer  ro", "full", "ro"}, {"Bearer ", "", "ro"}, {"Bearer", "", ""},
		{"Basic full", "full", ""}, {"Bearer full ", "full", "ro"}, {"BEARER \x00", "\x00", ""}, {"Bearer ro", "", "ro"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, auth, token, readToken string) {
		r, _ := http.NewRequest("GET", "http://127.0.0.1/api/stats", nil)
		r.Header["Authorization"] = []string{auth}
		scheme, rest, found := strings.Cut(auth, " ")
		sent := strings.TrimLeft(rest, " ")
		isBearer := found && strings.EqualFold(scheme, "bearer")
		ac := Access{Token: token, ReadToken: readToken}
		wantRead := isBearer && ((token != "" && sent == token) || (readToken != "" && sent == readToken))
		if got := ac.reads(r); got != wantRead {
			t.Errorf("reads(%q) with %+v = %t, want %t", auth, ac, got, wantRead)
		}
		if got, want := bearer.Valid(r.Header.Get("Authorization"), token), isBearer && token != "" && sent == token; got != want {
			t.Errorf("bearer.Valid(%q, %q) = %t, want %t", auth, token, got, want)
		}
		if ac.open() != (token == "" && readToken == "") {
			t.Errorf("open() = %t with %+v", ac.open(), ac)
		}
	})
}
