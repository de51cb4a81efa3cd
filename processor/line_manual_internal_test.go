package processor

import (
	"testing"
	"time"
)

// An operator's pause: since is the first pause's, detail the last's; a
// pause after resume starts anew.
func TestManualPause(t *testing.T) {
	type step struct {
		at     time.Duration // from the start
		detail string        // "": resume
	}
	for _, c := range []struct {
		name   string
		steps  []step
		on     bool
		since  time.Duration
		detail string
	}{
		{name: "running"},
		{name: "paused", steps: []step{{time.Second, "deploy"}}, on: true, since: time.Second, detail: "deploy"},
		{name: "paused again: since stays, detail changes", steps: []step{{time.Second, "deploy"}, {time.Minute, "still deploying"}},
			on: true, since: time.Second, detail: "still deploying"},
		{name: "resumed", steps: []step{{time.Second, "deploy"}, {time.Minute, ""}}, since: time.Second, detail: "deploy"},
		{name: "paused after resume: since anew", steps: []step{{time.Second, "deploy"}, {time.Minute, ""}, {time.Hour, "again"}},
			on: true, since: time.Hour, detail: "again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			var m manualPause
			for _, s := range c.steps {
				if s.detail == "" {
					m.clear()
				} else {
					m.pause(s.detail, t0.Add(s.at))
				}
			}
			var since time.Time // never paused: zero
			if len(c.steps) > 0 {
				since = t0.Add(c.since)
			}
			if m.on != c.on || !m.since.Equal(since) || m.detail != c.detail {
				t.Fatalf("on %v since %v detail %q; want %v, %v, %q", m.on, m.since.Sub(t0), m.detail, c.on, c.since, c.detail)
			}
			if sr := m.stopReason(); sr.Reason != stopManual || !sr.Since.Equal(m.since) || sr.Detail != m.detail || !sr.Until.IsZero() {
				t.Errorf("stop reason %+v", sr)
			}
		})
	}
}
