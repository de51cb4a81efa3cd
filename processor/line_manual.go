package processor

import "time"

// manualPause is an operator's pause (POST /api/pipelines/{name}/pause):
// it stops the line until resume, whatever the service answers.
type manualPause struct {
	on bool
	// since is when the line was first paused: pausing a paused line again
	// only replaces detail (who and why).
	since  time.Time
	detail string
}

func (m *manualPause) pause(detail string, now time.Time) {
	if !m.on {
		m.on, m.since = true, now
	}
	m.detail = detail
}

func (m *manualPause) clear() { m.on = false }

func (m *manualPause) stopReason() StopReason {
	return StopReason{Reason: stopManual, Since: m.since, Detail: m.detail}
}

// pauseByHand stops the line until resume (line.go, which clears every
// stop at once).
func (l *line) pauseByHand(detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.manual.pause(detail, time.Now())
	l.log.Warn("line paused by hand", "detail", detail)
	l.kickLocked()
}
