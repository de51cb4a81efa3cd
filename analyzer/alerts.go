package analyzer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"time"

	"github.com/redrive/redrive/dlq"
)

// Alert kinds.
const (
	AlertRate   = "rate"   // more than Threshold dead letters within Window
	AlertDepth  = "depth"  // more than Threshold dead letters not yet handled
	AlertOldest = "oldest" // the oldest dead letter not yet handled is older than Age
)

// Alert is one alert rule. With Pipeline empty it applies to every
// pipeline, each firing and resolving on its own.
type Alert struct {
	Name      string
	Pipeline  string
	Kind      string
	Threshold int
	Window    time.Duration
	Age       time.Duration
	Webhook   string
	Repeat    time.Duration // default 1h
	Match     dlq.Filter    // rate only
}

// Message is the JSON posted to an alert's webhook; Text is what Slack shows.
type Message struct {
	Text      string  `json:"text"`
	Alert     string  `json:"alert"`
	Status    string  `json:"status"` // firing or resolved
	Pipeline  string  `json:"pipeline"`
	Kind      string  `json:"kind"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	At        string  `json:"at"`
}

type alertState struct {
	firing   bool
	lastSent time.Time
	pending  *Message // a post that failed, retried on the next evaluation
}

func (a *Analyzer) alertLoop(ctx context.Context) {
	if len(a.o.Alerts) == 0 {
		return
	}
	states := map[string]*alertState{}
	client := &http.Client{Timeout: 10 * time.Second}
	t := time.NewTicker(a.o.AlertEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.evaluate(ctx, client, states)
	}
}

// evaluate checks every alert once, posting what changed or is due again.
func (a *Analyzer) evaluate(ctx context.Context, client *http.Client, states map[string]*alertState) {
	now := a.o.Now()
	for _, al := range a.o.Alerts {
		for _, p := range a.pipes {
			if al.Pipeline != "" && al.Pipeline != p.cfg.Name {
				continue
			}
			if !p.isReady() {
				continue // statistics still rebuilding: no verdict yet
			}
			key := al.Name + "\x00" + p.cfg.Name
			st := states[key]
			if st == nil {
				st = &alertState{}
				states[key] = st
			}
			value, threshold, desc := a.measure(al, p, now)
			cond := value > threshold
			repeat := al.Repeat
			if repeat <= 0 {
				repeat = time.Hour
			}
			var msg *Message
			switch {
			case cond && !st.firing:
				st.firing = true
				msg = a.message(al, p, "firing", value, threshold, desc, now)
			case cond && now.Sub(st.lastSent) >= repeat:
				msg = a.message(al, p, "firing", value, threshold, desc, now)
			case !cond && st.firing:
				st.firing = false
				msg = a.message(al, p, "resolved", value, threshold, desc, now)
			}
			f := 0.0
			if st.firing {
				f = 1
			}
			a.m.alertsFiring.WithLabelValues(al.Name, p.cfg.Name).Set(f)
			if msg != nil {
				st.pending = msg // a newer message replaces an unsent one
			}
			if st.pending != nil {
				if err := post(ctx, client, al.Webhook, st.pending); err != nil {
					a.m.alertPosts.WithLabelValues(al.Name, "failed").Inc()
					a.log.Error("alert webhook failed; retrying at the next evaluation", "alert", al.Name, "pipeline", p.cfg.Name, "err", err)
					continue
				}
				a.m.alertPosts.WithLabelValues(al.Name, "ok").Inc()
				a.log.Info("alert posted", "alert", al.Name, "pipeline", p.cfg.Name, "status", st.pending.Status, "value", value)
				st.pending = nil
				st.lastSent = now
			}
		}
	}
}

// measure returns the alert's current value, its threshold and a
// description of the condition.
func (a *Analyzer) measure(al Alert, p *pipe, now time.Time) (value, threshold float64, desc string) {
	switch al.Kind {
	case AlertRate:
		f := al.Match
		f.Since = now.Add(-al.Window)
		n := len(p.find(f, len(p.recent)))
		return float64(n), float64(al.Threshold), fmt.Sprintf("%d dead letters in the last %s (threshold %d)", n, al.Window, al.Threshold)
	case AlertDepth:
		p.mu.Lock()
		d := p.depth
		p.mu.Unlock()
		return float64(d), float64(al.Threshold), fmt.Sprintf("DLQ depth %d (threshold %d)", d, al.Threshold)
	case AlertOldest:
		p.mu.Lock()
		o := p.oldestUnseen
		p.mu.Unlock()
		age := time.Duration(0)
		if !o.IsZero() {
			age = now.Sub(o)
		}
		return age.Seconds(), al.Age.Seconds(), fmt.Sprintf("oldest unhandled dead letter is %s old (limit %s)", age.Round(time.Second), al.Age)
	}
	return 0, 0, "unknown alert kind " + al.Kind
}

func (a *Analyzer) message(al Alert, p *pipe, status string, value, threshold float64, desc string, now time.Time) *Message {
	word := "FIRING"
	if status == "resolved" {
		word = "RESOLVED"
	}
	return &Message{
		Text:  fmt.Sprintf("[%s] redrive alert %s, pipeline %s (DLQ %s): %s", word, al.Name, p.cfg.Name, p.cfg.DLQ, desc),
		Alert: al.Name, Status: status, Pipeline: p.cfg.Name, Kind: al.Kind,
		Value: value, Threshold: threshold, At: now.UTC().Format(time.RFC3339),
	}
}

func post(ctx context.Context, client *http.Client, url string, m *Message) error {
	body, _ := json.Marshal(m)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			ue.URL = "(webhook)" // the URL is a credential; keep it out of logs
		}
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			ue.URL = "(webhook)" // the URL is a credential; keep it out of logs
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

func (p *pipe) isReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}
