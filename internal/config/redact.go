package config

import "net/url"

// RedactedValue is what replaces a secret in Config.Redacted.
const RedactedValue = "[redacted]"

// Redacted is a copy of c fit for printing: the SASL password, the
// analyzer token and every handler.http header value are replaced by
// "[redacted]" (empty values stay empty, so that a missing secret still
// shows), a password in a handler URL by "xxxxx" (url.URL.Redacted), and
// everything after the host of an alert webhook URL by "[redacted]"
// (RedactedURL). c itself is not changed.
func (c Config) Redacted() Config {
	r := c
	if c.SASL != nil {
		s := *c.SASL
		s.Password = redact(s.Password)
		r.SASL = &s
	}
	r.Analyzer.Token = redact(c.Analyzer.Token)
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
		h := r.Pipelines[i].Handler.HTTP
		if h == nil {
			continue
		}
		hc := *h
		if h.Headers != nil {
			hc.Headers = make(map[string]string, len(h.Headers))
			for k, v := range h.Headers {
				hc.Headers[k] = redact(v)
			}
		}
		if u, err := url.Parse(h.URL); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				hc.URL = u.Redacted()
			}
		}
		r.Pipelines[i].Handler.HTTP = &hc
	}
	return r
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return RedactedValue
}
