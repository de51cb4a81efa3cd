package analyzer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// devDeadLetter is one kind of dead letter `redrive dev` writes: its code,
// class and reason, and per request how often it happens.
type devDeadLetter struct {
	code   string
	class  retry.Class
	reason dlq.Reason
	origin string // the topic it was dead-lettered from
	share  float64
}

// devRun is an analyzer of dev's two pipelines (solve and captcha, with
// dev's rule) whose clock is moved by hand, filled with what minutes of
// dev's sample traffic dead-letter: 20 requests/s to solve, 5/s to
// captcha, a dead letter now and then with the demo's error codes, and a
// 30 s outage of the demo solver in the third minute. It answers the
// analyzer, its handler and the clock's now.
func devRun(t *testing.T, minutes int) (*Analyzer, *httptest.Server, time.Time) {
	t.Helper()
	start := time.Date(2025, 3, 1, 12, 0, 30, 0, time.UTC)
	now := start
	noSlotLater := dlq.Rule{Name: "no-slot-later", Match: dlq.Filter{Codes: []string{"ERROR_NO_SLOT_AVAILABLE"}},
		Action: dlq.ActionRepublish, After: 10 * time.Second, MaxRedrives: 1}
	a, err := New(Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")},
		Pipelines: []Pipeline{
			{Name: "solve", Topic: "solve.requests", DLQ: "solve.requests.dlq", Rules: []dlq.Rule{noSlotLater}},
			{Name: "captcha", Topic: "captcha.requests", DLQ: "captcha.requests.dlq", Rules: []dlq.Rule{noSlotLater}},
		},
		Registerer: prometheus.NewRegistry(),
		Now:        func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.admin.Close)

	kinds := map[string]struct {
		rate float64 // requests per second
		dls  []devDeadLetter
	}{
		"solve": {20, []devDeadLetter{
			{"ERROR_WRONG_USER_KEY", retry.ClassPermanent, dlq.ReasonPermanent, "solve.requests", 0.05},
			{"ERROR_NO_SLOT_AVAILABLE", retry.ClassTransient, dlq.ReasonExhausted, "solve.requests.retry.15s", 0.004},
			{"CAPCHA_NOT_READY", retry.ClassNotReady, dlq.ReasonExpired, "solve.requests.retry.5s", 0.002},
		}},
		"captcha": {5, []devDeadLetter{
			{"ERROR_WRONG_CAPTCHA_ID", retry.ClassPermanent, dlq.ReasonPermanent, "captcha.requests", 0.02},
			{"ERROR_KEY_DOES_NOT_EXIST", retry.ClassPermanent, dlq.ReasonPermanent, "captcha.requests", 0.01},
			{"ERROR_CAPTCHA_UNSOLVABLE", retry.ClassInvalid, dlq.ReasonInvalid, "captcha.requests.retry.1s", 0.02},
			{"ERROR_NO_SLOT_AVAILABLE", retry.ClassTransient, dlq.ReasonExhausted, "captcha.requests.retry.15s", 0.01},
		}},
	}
	outage := devDeadLetter{"ERROR_SERVICE_OUTAGE", retry.ClassTransient, dlq.ReasonExhausted, "solve.requests.retry.15s", 1}
	sites := []string{"shop.example", "forum.example", "bank.example", "mail.example"}
	rng := rand.New(rand.NewPCG(1, 7))
	off := map[string]int64{}
	for s := range minutes * 60 {
		now = start.Add(time.Duration(s) * time.Second)
		for _, p := range a.pipes {
			k := kinds[p.cfg.Name]
			for range int(k.rate) {
				var dl *devDeadLetter
				if p.cfg.Name == "solve" && s >= 150 && s < 180 {
					dl = &outage
				} else {
					x := rng.Float64()
					for i := range k.dls {
						if x < k.dls[i].share {
							dl = &k.dls[i]
							break
						}
						x -= k.dls[i].share
					}
				}
				if dl == nil {
					continue
				}
				o := off[p.cfg.Name]
				off[p.cfg.Name]++
				src := &kgo.Record{Topic: dl.origin, Offset: o, Key: []byte(sites[rng.IntN(len(sites))]),
					Value: fmt.Appendf(nil, `{"type":"recaptcha","site":"shop.example","api_key":"demo-key","n":%d}`, o)}
				m := retry.Meta{ID: fmt.Sprintf("%s-%d", p.cfg.Name, o), Attempt: 4, HasOrigin: true, OriginTopic: p.cfg.Topic, OriginOffset: o,
					OriginTimestamp: now.Add(-20 * time.Second), ErrorClass: dl.class, ErrorCode: dl.code, Error: "demo failure", Reason: string(dl.reason)}
				r := dlq.Build(src, m, nil, dlq.BuildOptions{Topic: p.cfg.DLQ, Group: "redrive." + p.cfg.Name, Instance: "dev"})
				r.Offset, r.Timestamp = o, now.Add(-time.Duration(rng.IntN(1000))*time.Millisecond)
				a.add(p, r)
			}
		}
	}
	for _, p := range a.pipes {
		if off[p.cfg.Name] == 0 {
			t.Fatalf("pipeline %s got no dead letter", p.cfg.Name)
		}
	}
	srv := httptest.NewServer(a.Handler(""))
	t.Cleanup(srv.Close)
	return a, srv, now
}

// TestStatsOfTenDevMinutesIsSmall: the dashboard asks for /api/stats every
// 5 s; after 10 minutes of dev's traffic the default answer stays under
// 30 KB, and its per-minute counts cover every dead letter (they are all
// within the default window).
func TestStatsOfTenDevMinutesIsSmall(t *testing.T) {
	_, srv, _ := devRun(t, 10)
	var resp StatsResponse
	code, body := getJSON(t, srv.URL+"/api/stats", &resp)
	if code != 200 {
		t.Fatalf("/api/stats: %d %s", code, body)
	}
	t.Logf("/api/stats after 10 dev minutes: %d bytes", len(body))
	if len(body) >= 30_000 {
		t.Errorf("/api/stats is %d bytes, want under 30,000", len(body))
	}
	if len(resp.Pipelines) != 2 {
		t.Fatalf("%d pipelines, want 2", len(resp.Pipelines))
	}
	for _, ps := range resp.Pipelines {
		var sum int64
		for _, m := range ps.Stats.PerMinute {
			sum += m.Count
		}
		if ps.Stats.Total == 0 || sum != ps.Stats.Total {
			t.Errorf("%s: per_minute sums to %d, total %d", ps.Name, sum, ps.Stats.Total)
		}
	}
}

// TestStatsMinutesBoundsTheBuckets: ?minutes=N answers the N minutes up
// to now, oldest first, zeros included, with the counts of the full
// snapshot; 0 answers none (an empty list, not null); anything else than
// 0 to 1440 is a 400. pretty=1 indents the same answer.
func TestStatsMinutesBoundsTheBuckets(t *testing.T) {
	a, srv, now := devRun(t, 10)
	full := a.pipes[0].stats.Snapshot(now, 0).PerMinute
	if len(full) != 1440 {
		t.Fatalf("the snapshot has %d minutes, want 1440", len(full))
	}
	last := now.Truncate(time.Minute)
	for _, n := range []int{0, 1, 5, 60, 1440} {
		var resp StatsResponse
		code, body := getJSON(t, fmt.Sprintf("%s/api/stats?pipeline=solve&minutes=%d", srv.URL, n), &resp)
		if code != 200 {
			t.Fatalf("minutes=%d: %d %s", n, code, body)
		}
		if !strings.Contains(string(body), `"per_minute":[]`) && n == 0 {
			t.Errorf("minutes=0: per_minute is not an empty list: %.300s", body)
		}
		got := resp.Pipelines[0].Stats.PerMinute
		if len(got) != n {
			t.Fatalf("minutes=%d: %d buckets", n, len(got))
		}
		for i, m := range got {
			want := full[len(full)-n+i]
			if !m.Minute.Equal(want.Minute) || m.Count != want.Count {
				t.Errorf("minutes=%d: bucket %d is %v %d, the snapshot's %v %d", n, i, m.Minute, m.Count, want.Minute, want.Count)
			}
		}
		if n > 0 && !got[n-1].Minute.Equal(last) {
			t.Errorf("minutes=%d: the last bucket is %v, want the current minute %v", n, got[n-1].Minute, last)
		}
	}
	for _, bad := range []string{"-1", "1441", "x", "1.5"} {
		if code, body := getJSON(t, srv.URL+"/api/stats?minutes="+bad, nil); code != 400 || !strings.Contains(string(body), "minutes") {
			t.Errorf("minutes=%q: %d %s, want a 400 naming minutes", bad, code, body)
		}
	}

	_, compact := getJSON(t, srv.URL+"/api/stats?minutes=5", nil)
	_, pretty := getJSON(t, srv.URL+"/api/stats?minutes=5&pretty=1", nil)
	if strings.Contains(string(compact), "\n  ") || !strings.Contains(string(pretty), "\n  ") {
		t.Errorf("the default answer is indented, or pretty=1's is not:\n%.200s\n%.200s", compact, pretty)
	}
	var c, p any
	if json.Unmarshal(compact, &c) != nil || json.Unmarshal(pretty, &p) != nil || fmt.Sprint(c) != fmt.Sprint(p) {
		t.Errorf("pretty=1 answers something else than the compact answer")
	}
}
