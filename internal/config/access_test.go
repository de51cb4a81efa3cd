package config

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// The analyzer's listen rule: without a token, only loopback, unless
// analyzer.insecure_public; its error names the key, its line, both
// tokens' variables and insecure_public.
func TestCheckAnalyzerListen(t *testing.T) {
	doc := func(analyzer string) string {
		return "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: t\nanalyzer:\n" + analyzer
	}
	for _, tt := range []struct {
		name, analyzer string
		getenv         func(string) string
		ok             bool
	}{
		{"default address", "  max_requests: 4\n", nil, true},
		{"127.0.0.1", "  http_addr: \"127.0.0.1:9091\"\n", nil, true},
		{"127.1.2.3", "  http_addr: \"127.1.2.3:9091\"\n", nil, true},
		{"::1", "  http_addr: \"[::1]:9091\"\n", nil, true},
		{"localhost", "  http_addr: \"localhost:9091\"\n", nil, true},
		{"LOCALHOST.", "  http_addr: \"LOCALHOST.:9091\"\n", nil, true},
		{"0.0.0.0", "  http_addr: \"0.0.0.0:9091\"\n", nil, false},
		{"all interfaces", "  http_addr: \":9091\"\n", nil, false},
		{"::", "  http_addr: \"[::]:9091\"\n", nil, false},
		{"a LAN address", "  http_addr: \"10.1.2.3:9091\"\n", nil, false},
		{"a host name", "  http_addr: \"analyzer.internal:9091\"\n", nil, false},
		{"a name ending in localhost", "  http_addr: \"evil-localhost:9091\"\n", nil, false},
		{"0.0.0.0 with a token", "  http_addr: \"0.0.0.0:9091\"\n  token: t-0123456789abcdef\n", nil, true},
		{"0.0.0.0 with a read token", "  http_addr: \"0.0.0.0:9091\"\n  read_token: r-0123456789abcdef\n", nil, true},
		{"0.0.0.0 with the token from the environment", "  http_addr: \"0.0.0.0:9091\"\n", env(EnvAnalyzerToken, "t-0123456789abcdef"), true},
		{"0.0.0.0 with the read token from the environment", "  http_addr: \"0.0.0.0:9091\"\n", env(EnvAnalyzerReadToken, "r-0123456789abcdef"), true},
		{"0.0.0.0 with an unset ${TOKEN}", "  http_addr: \"0.0.0.0:9091\"\n  token: \"${NOT_SET}\"\n", nil, false},
		{"0.0.0.0, insecure_public", "  http_addr: \"0.0.0.0:9091\"\n  insecure_public: true\n", nil, true},
		{"0.0.0.0, insecure_public false", "  http_addr: \"0.0.0.0:9091\"\n  insecure_public: false\n", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			getenv := tt.getenv
			if getenv == nil {
				getenv = env()
			}
			c := mustParse(t, doc(tt.analyzer), getenv)
			err := c.CheckAnalyzerListen()
			if tt.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s accepted without a token", c.Analyzer.HTTPAddr)
			}
			var ce *Error
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalid) || ce.Path != "analyzer.http_addr" {
				t.Errorf("error %v (%T): want an *Error at analyzer.http_addr wrapping ErrInvalid", err, err)
			}
			for _, s := range []string{"analyzer.http_addr", "analyzer.token", EnvAnalyzerToken, "analyzer.read_token", EnvAnalyzerReadToken, "analyzer.insecure_public: true", "loopback"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not name %q: %v", s, err)
				}
			}
			if strings.Contains(tt.analyzer, "http_addr") && !strings.HasPrefix(err.Error(), "line 5: ") {
				t.Errorf("error has no line: %v", err)
			}
			// Validate itself accepts it: the processors read this file too.
			if verr := c.Validate(); verr != nil {
				t.Errorf("Validate: %v", verr)
			}
		})
	}
}

// The new analyzer keys decode; read_token comes from its variable, says
// so in Origin, and is redacted like token.
func TestAnalyzerAccessKeys(t *testing.T) {
	c := mustParse(t, "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: t\nanalyzer:\n  token: full-0123456789abcdef\n  read_token: ro-0123456789abcdef\n  insecure_public: true\n  hide_values: true\n", env())
	a := c.Analyzer
	if a.Token != "full-0123456789abcdef" || a.ReadToken != "ro-0123456789abcdef" || !a.InsecurePublic || !a.HideValues {
		t.Errorf("decoded %+v", a)
	}
	if ac := a.Access(); ac.Token != "full-0123456789abcdef" || ac.ReadToken != "ro-0123456789abcdef" {
		t.Errorf("Access() = %+v", ac)
	}
	r := c.Redacted()
	if r.Analyzer.Token != RedactedValue || r.Analyzer.ReadToken != RedactedValue || c.Analyzer.ReadToken != "ro-0123456789abcdef" {
		t.Errorf("Redacted: token %q read_token %q (original %q)", r.Analyzer.Token, r.Analyzer.ReadToken, c.Analyzer.ReadToken)
	}
	c = mustParse(t, "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: t\nanalyzer:\n  read_token: file-0123456789abcdef\n", env(EnvAnalyzerReadToken, "from-env-0123456789abcdef"))
	if c.Analyzer.ReadToken != "from-env-0123456789abcdef" || c.Origin("analyzer.read_token") != "the environment (REDRIVE_ANALYZER_READ_TOKEN)" {
		t.Errorf("read_token %q from %q", c.Analyzer.ReadToken, c.Origin("analyzer.read_token"))
	}
	d := mustParse(t, "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: t\n", env())
	if d.Analyzer.ReadToken != "" || d.Analyzer.InsecurePublic || d.Analyzer.HideValues {
		t.Errorf("defaults: %+v", d.Analyzer)
	}
	if err := parseErr(t, "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: t\nanalyzer: {hide_values: yes please}\n", env()); !errors.Is(err, ErrType) {
		t.Errorf("hide_values: yes please: %v, want a type error", err)
	}
}

// FuzzLoopbackAddr: an address passes only when its host is "localhost"
// or a loopback IP; 0.0.0.0, :: and an empty host never do.
func FuzzLoopbackAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9091", "[::1]:1", "localhost:1", "0.0.0.0:1", ":1", "[::]:1", "10.0.0.1:1", "localhost.evil:1", "127.0.0.1", "[::ffff:127.0.0.1]:1", "LOCALHOST.:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		if !LoopbackAddr(addr) {
			return
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("LoopbackAddr(%q) with no host:port: %v", addr, err)
		}
		ip := net.ParseIP(host)
		if !strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") && (ip == nil || !ip.IsLoopback() || ip.IsUnspecified()) {
			t.Errorf("LoopbackAddr(%q) = true for host %q", addr, host)
		}
	})
}
