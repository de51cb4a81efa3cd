package config

import (
	"strings"
	"testing"
)

// No error quotes a URL's password, a secret-looking
// query value (also one from ${ENV}) or a value that is a secret.
func TestErrorsShowNoSecrets(t *testing.T) {
	secrets := []string{"s3cret", "K3Y", "T0KEN"}
	for _, c := range []struct {
		name string
		doc  string
		want string // in the error: it still says what is wrong
	}{
		{"valid url, invalid neighbour", pipe("handler:", "  http:", "    url: https://user:s3cret@host/x?api_key=K3Y", "    timeout: abc", "    max_body_bytes: -1"), "handler.http.timeout"},
		{"url with a bad scheme", pipe("handler:", "  http:", "    url: ftp://user:s3cret@host/x?api_key=K3Y", "    timeout: -1s"), `"ftp://user:xxxxx@host/x?api_key=xxxxx": want an absolute`},
		{"url that does not parse", pipe("handler:", "  http:", "    url: 'https://user:s3cret@ho st/x?api_key=K3Y'", "    timeout: abc"), `"https://user:xxxxx@ho st/x?api_key=xxxxx": invalid character`},
		{"url from ${ENV}", pipe("handler:", "  http:", "    url: 'gopher://host/x?Access_Token=${TOK}&page=2'"), "Access_Token=xxxxx&page=2"},
		{"broker with user info", "brokers: ['sasl://user:s3cret@h:9092']\npipelines: [{topic: t}]\n", "sasl://user:xxxxx@h:9092"},
		{"headers as a string", pipe("handler:", "  http:", "    url: http://h/", "    headers: 'Authorization: Bearer s3cret'"), "want a mapping (key: value), got a string (not shown: a secret)"},
		{"bad ${} in a password", "brokers: [h:1]\npipelines: [{topic: t}]\nsasl: {mechanism: PLAIN, user: u, password: 'x${s3cret-K3Y}'}\n", "sasl.password: bad variable name in ${...} (not shown"},
		{"bad ${} in a header", pipe("handler:", "  http:", "    url: http://h/", "    headers: {X-Key: 'Bearer ${T0KEN.s3cret}'}"), "handler.http.headers.X-Key: bad variable name in ${...} (not shown"},
		{"token as a value of the wrong type", pipe("ttl: 'token=T0KEN'"), "token=xxxxx"},
		{"webhook", "brokers: [h:1]\npipelines: [{topic: t}]\nanalyzer: {alerts: [{kind: depth, threshold: 1, webhook: 'ftp://u:s3cret@h/T0KEN?key=K3Y'}]}\n", "analyzer.alerts[0].webhook"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := parseErr(t, c.doc, env("TOK", "T0KEN"))
			msg := err.Error()
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("the error shows %q:\n%s", s, msg)
				}
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("the error does not say %q:\n%s", c.want, msg)
			}
		})
	}
}

func TestRedactedMasksQuerySecrets(t *testing.T) {
	c := mustParse(t, pipe("handler: {http: {url: 'https://user:s3cret@host/x?api_key=${K}&page=2'}}"), env("K", "K3Y"))
	r := c.Redacted()
	if got, want := r.Pipelines[0].Handler.HTTP.URL, "https://user:xxxxx@host/x?api_key=xxxxx&page=2"; got != want {
		t.Errorf("redacted url = %q, want %q", got, want)
	}
}

func TestOrigin(t *testing.T) {
	doc := pipe("handler: {http: {url: 'http://h/', headers: {Authorization: 'Bearer ${A}'}}}") + "analyzer:\n  token: '${T}'\n"
	c := mustParse(t, doc, env("T", "tok-0123456789abcdef", "A", "a", "REDRIVE_SASL_PASSWORD", "p", "REDRIVE_SASL_USER", "u", "REDRIVE_SASL_MECHANISM", "PLAIN"))
	for path, want := range map[string]string{
		"analyzer.token":     "${T} on line 6 of the file",
		"sasl.password":      "the environment (REDRIVE_SASL_PASSWORD)",
		"pipelines[0].topic": "line 3 of the file",
		"http_addr":          "",
	} {
		if got := c.Origin(path); got != want {
			t.Errorf("Origin(%q) = %q, want %q", path, got, want)
		}
	}
}
