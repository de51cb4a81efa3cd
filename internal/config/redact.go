package config

import (
	"strconv"
	"strings"

	"github.com/redrive/redrive/internal/redact"
)

// RedactedValue is what replaces a secret in Config.Redacted.
const RedactedValue = "[redacted]"

// Redacted is a copy of c fit for printing: the SASL password, the
// analyzer (full and read-only), processor and handler.callback tokens and every handler.http
// header value are replaced by
// "[redacted]" (empty values stay empty, so that a missing secret still
// shows), a password in a handler URL and the values of its
// secret-looking query parameters by "xxxxx" (redact.URL), the same in
// its poll's url and body, the values of its query and form fields with
// a secret-looking name by "[redacted]" (the secrets in the others by
// "xxxxx"), and
// everything after the host of an alert webhook URL by "[redacted]"
// (RedactedURL). c itself is not changed.
func (c Config) Redacted() Config {
	r := c
	if c.SASL != nil {
		s := *c.SASL
		s.Password = secretValue(s.Password)
		r.SASL = &s
	}
	r.Analyzer.Token = secretValue(c.Analyzer.Token)
	r.Analyzer.ReadToken = secretValue(c.Analyzer.ReadToken)
	r.Processor.Token = secretValue(c.Processor.Token)
	if c.Analyzer.Alerts != nil {
		r.Analyzer.Alerts = make([]AlertRule, len(c.Analyzer.Alerts))
		copy(r.Analyzer.Alerts, c.Analyzer.Alerts)
		for i := range r.Analyzer.Alerts {
			r.Analyzer.Alerts[i].Webhook = RedactedURL(c.Analyzer.Alerts[i].Webhook)
		}
	}
	if c.Pipelines != nil {
		r.Pipelines = make([]Pipeline, len(c.Pipelines))
		copy(r.Pipelines, c.Pipelines)
	}
	for i := range r.Pipelines {
		if cb := r.Pipelines[i].Handler.Callback; cb != nil {
			cc := *cb
			cc.Token = secretValue(cb.Token)
			r.Pipelines[i].Handler.Callback = &cc
		}
		h := r.Pipelines[i].Handler.HTTP
		if h == nil {
			continue
		}
		hc := *h
		if h.Headers != nil {
			hc.Headers = make(map[string]string, len(h.Headers))
			for k, v := range h.Headers {
				hc.Headers[k] = secretValue(v)
			}
		}
		hc.URL = redact.URL(h.URL)
		hc.Query, hc.Form = redactFields(h.Query), redactFields(h.Form)
		if h.Poll != nil {
			pc := *h.Poll
			pc.URL, pc.Body = redact.URL(pc.URL), redact.Text(pc.Body)
			hc.Poll = &pc
		}
		r.Pipelines[i].Handler.HTTP = &hc
	}
	return r
}

// redactFields is query or form fields fit for printing: the value of a
// secret-looking name (api_key, key, token) replaced by "[redacted]", the
// secrets inside any other (a pingback URL's token) by redact.Text.
func redactFields(fields map[string]string) map[string]string {
	if fields == nil {
		return nil
	}
	out := make(map[string]string, len(fields))
	for k, v := range fields {
		if redact.SecretName(k) {
			out[k] = secretValue(v)
		} else {
			out[k] = redact.Text(v)
		}
	}
	return out
}

func secretValue(s string) string {
	if s == "" {
		return ""
	}
	return RedactedValue
}

// secretPath reports whether the value at a key's path is a secret that no
// message may quote: sasl.password, analyzer.token, processor.token, every
// handler.http header, an alert's webhook, and any key whose own name
// looks secret (redact.SecretName: a map key such as min_delay.api_key
// too).
func secretPath(path string) bool {
	if strings.Contains(path, ".handler.http.headers") || strings.HasSuffix(path, ".webhook") {
		return true
	}
	return redact.SecretName(lastKey(path))
}

// lastKey is the last element of a path: b of a.b, "X.Y" of a["X.Y"], ""
// of a[2].
func lastKey(path string) string {
	if strings.HasSuffix(path, "\"]") {
		if i := strings.LastIndex(path, "[\""); i >= 0 {
			if k, err := strconv.Unquote(path[i+1 : len(path)-1]); err == nil {
				return k
			}
		}
		return ""
	}
	if strings.HasSuffix(path, "]") {
		return ""
	}
	return path[strings.LastIndexByte(path, '.')+1:]
}
