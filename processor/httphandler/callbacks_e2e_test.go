package httphandler_test

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/fakeapi"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/processor/intake"
	"github.com/redrive/redrive/retry"
)

// End to end: records → the processor with the real HTTP
// handler, configured as the captchaai preset → the fake CaptchaAI
// (in.php with a pingback, res.php) → its pingback to the real callback
// intake (processor/intake on 127.0.0.1) → <topic>.callbacks on the
// broker the tests run on → the processor's callbacks reader → results.
// Everything but the broker runs in the test process.

const (
	e2eCallbackPath  = "/cb/captcha"
	e2eCallbackToken = "e2e-callback-t0ken-7f3a"
)

// captchaE2E is one run of the whole chain.
type captchaE2E struct {
	t      *testing.T
	e      *pipetest.Env
	fake   *fakeapi.CaptchaAI
	pr     *processor.Processor
	reg    *prometheus.Registry // the processor's metrics
	intake *prometheus.Registry // the intake's
	wait   time.Duration
}

// newCaptchaE2E starts the chain: a pipeline on 4 partitions whose
// submits wait up to wait for their callback, the intake,
// the fake CaptchaAI (tasks solved 1–3 s after their submit, pingbacks as
// pb says) and the processor.
func newCaptchaE2E(t *testing.T, base string, wait time.Duration, pb fakeapi.PingbackOptions, seed uint64) *captchaE2E {
	t.Helper()
	// As in the preset (tiers 5s, 30s, 5m; wait 2m), the last tier covers
	// the wait: a waiting record stays in that tier until its callback
	// comes or its poll is due, it is not re-written (hopped) on the way —
	// a hop would hand it to the handler path, which takes its callback
	// too, and hide whether the callback was matched where it should be.
	e := pipetest.New(t, base, 4, retry.Schedule{Tiers: []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 5 * time.Minute}, MaxAttempts: 5, Jitter: 0.1})
	cbTopic := e.WithCallbacks(4, wait)
	r := &captchaE2E{t: t, e: e, reg: prometheus.NewRegistry(), intake: prometheus.NewRegistry(), wait: wait}

	// The intake, with a client of its own as redrive process gives it.
	in, err := intake.New(intake.Options{
		Pipeline: e.P.Name, Path: e2eCallbackPath, Token: e2eCallbackToken,
		Topic: cbTopic, DLQ: e.P.DLQ, Instance: "e2e",
		Client:     e.Cluster.Client(t, intake.ProducerOpts()...),
		Registerer: r.intake,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux, err := intake.NewMux(in)
	if err != nil {
		t.Fatal(err)
	}
	intakeSrv := httptest.NewServer(mux)
	t.Cleanup(intakeSrv.Close)

	r.fake = fakeapi.NewCaptchaAI(fakeapi.CaptchaOptions{SolveMin: time.Second, SolveMax: 3 * time.Second, Pingback: pb}, seed)
	fakeSrv := httptest.NewServer(r.fake)
	t.Cleanup(fakeSrv.Close)
	t.Cleanup(r.fake.Close) // first: no pingback after the intake is gone

	h, err := httphandler.New(captchaAIPreset(fakeSrv.URL, intakeSrv.URL+e2eCallbackPath+"?token="+e2eCallbackToken))
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.Config()
	cfg.Registerer = r.reg
	r.pr, _ = pipetest.RunProcessor(t, cfg, h)
	return r
}

// captchaAIPreset is the captchaai preset of redrive.example.yaml as the
// handler's Options, pointed at base (the fake) with pingback.
func captchaAIPreset(base, pingback string) httphandler.Options {
	key := fakeapi.DefaultCaptchaKey
	return httphandler.Options{
		URL:     base + "/in.php",
		Timeout: 30 * time.Second,
		Query:   map[string]string{"key": key, "json": "1", "pingback": pingback},
		JSON:    &httphandler.JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Poll: &httphandler.Poll{
			URL:        base + "/res.php?key=" + key + "&action=get&json=1&id={state}",
			Method:     "GET",
			StateField: "request", ResultField: "request",
			FirstAfter: time.Second, Every: time.Second,
		},
		Codes: httphandler.Codes{
			Transient: []string{"ERROR_NO_SLOT_AVAILABLE", "ERROR_TOO_MUCH_REQUESTS", "MAX_USER_TURN"},
			NotReady:  []string{fakeapi.CaptchaNotReady},
			Permanent: []string{"ERROR_WRONG_USER_KEY", "ERROR_KEY_DOES_NOT_EXIST", "ERROR_CAPTCHA_UNSOLVABLE", "ERROR_WRONG_CAPTCHA_ID",
				"ERROR_WRONG_ID_FORMAT", "ERROR_BAD_PARAMETERS", "ERROR_TOO_BIG_CAPTCHA_FILESIZE", "ERROR_EMPTY_ACTION"},
			MinDelay: map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": time.Second},
			Pause:    map[string]time.Duration{"ERROR_ZERO_BALANCE": 5 * time.Second},
		},
	}
}

// captchaTask is task i's fields: a reCAPTCHA on its own page.
func captchaTask(i int) url.Values {
	return url.Values{"method": {"userrecaptcha"}, "googlekey": {"6Le-e2e-sitekey"}, "pageurl": {"https://shop.example/login/" + strconv.Itoa(i)}}
}

// produceTasks writes n solve requests (key task-<i>, the task's fields as
// a form) and returns key → the token the fake answers for them.
func (r *captchaE2E) produceTasks(n int) map[string]string {
	r.t.Helper()
	want := make(map[string]string, n)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		key, f := fmt.Sprintf("task-%04d", i), captchaTask(i)
		want[key] = fakeapi.CaptchaToken(f)
		recs[i] = &kgo.Record{Topic: r.e.P.Topic, Key: []byte(key), Value: []byte(f.Encode()),
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/x-www-form-urlencoded")}}}
	}
	r.e.Produce(recs...)
	return want
}

// results reads results and the DLQ until every key of want is in results
// (or timeout), then 2s more for extras; it fails the test on a dead
// letter, a missing key, a wrong token or a key in results twice.
func (r *captchaE2E) results(want map[string]string, timeout time.Duration) {
	r.t.Helper()
	p := r.e.P
	seen := map[string]bool{}
	read := 0
	got := r.e.Collect([]string{p.Results, p.DLQ}, func(got kafkatest.Got) bool {
		for _, rec := range got[p.Results][read:] {
			seen[string(rec.Key)] = true
		}
		read = len(got[p.Results])
		return len(seen) >= len(want) || len(got[p.DLQ]) > 0
	}, timeout, 2*time.Second)
	if dl := got[p.DLQ]; len(dl) > 0 {
		code, _ := kafkatest.Header(dl[0], retry.HeaderErrorCode)
		msg, _ := kafkatest.Header(dl[0], retry.HeaderError)
		r.t.Errorf("%d dead letters, e.g. %s %s: %s", len(dl), dl[0].Key, code, msg)
	}
	count := map[string]int{}
	for _, rec := range got[p.Results] {
		k := string(rec.Key)
		count[k]++
		if tok, ok := want[k]; !ok {
			r.t.Errorf("result for an unknown key %q", k)
		} else if string(rec.Value) != tok {
			r.t.Errorf("%s: result %q, want its token %q", k, rec.Value, tok)
		}
	}
	missing, twice := 0, 0
	for k := range want {
		switch c := count[k]; {
		case c == 0:
			missing++
		case c > 1:
			twice++
			r.t.Errorf("%s: %d results, want 1", k, c)
		}
	}
	if missing > 0 {
		r.t.Fatalf("%d of %d tasks not in results within %s (%d twice); fake: %+v; processor: %+v",
			missing, len(want), timeout, twice, r.fake.Stats(), r.status())
	}
}

// tasks are the fake's tasks by their record key; it fails the test
// unless each record made exactly one task (submitted, and charged, once).
func (r *captchaE2E) tasks(want map[string]string) map[string]fakeapi.CaptchaTask {
	r.t.Helper()
	byPage := map[string]fakeapi.CaptchaTask{}
	for _, tk := range r.fake.Tasks() {
		byPage[tk.Fields.Get("pageurl")] = tk
	}
	out := map[string]fakeapi.CaptchaTask{}
	for i := range len(want) {
		key := fmt.Sprintf("task-%04d", i)
		tk, ok := byPage[captchaTask(i).Get("pageurl")]
		switch {
		case !ok:
			r.t.Errorf("%s: never submitted", key)
		case tk.Submits != 1:
			r.t.Errorf("%s: submitted %d times, want once", key, tk.Submits)
		case tk.Result != want[key]:
			r.t.Errorf("%s: the fake's token %q, want %q", key, tk.Result, want[key])
		}
		out[key] = tk
	}
	if n := len(r.fake.Tasks()); n != len(want) {
		r.t.Errorf("%d tasks at the fake, want %d", n, len(want))
	}
	return out
}

func (r *captchaE2E) status() processor.CallbackStatus {
	r.t.Helper()
	st := r.pr.Status().Pipelines[0].Callbacks
	if st == nil {
		r.t.Fatal("status: no callbacks for a pipeline with callbacks")
	}
	return *st
}

// waitStatus waits (60s at most) until cond holds of the processor's
// callback status; the counters are counted once outcomes are acknowledged.
func (r *captchaE2E) waitStatus(what string, cond func(processor.CallbackStatus) bool) {
	r.t.Helper()
	if !kafkatest.Eventually(60*time.Second, func() bool { return cond(r.status()) }) {
		r.t.Fatalf("not within 60s: %s; status %+v", what, r.status())
	}
}

// intakeCount is redrive_callback_requests_total{result} of the intake.
func (r *captchaE2E) intakeCount(result string) int {
	r.t.Helper()
	return int(metricValue(r.t, r.intake, "redrive_callback_requests_total", "result", result))
}

// TestCaptchaAICallbacksE2E: 1,000 tasks, every pingback delivered 1–3 s
// after its submit. Each task is in results exactly once with its token,
// and res.php is polled for none of them: the callbacks alone finish the
// jobs. The wait (2m, the default) only bounds how slow the machine may
// be; the test ends as soon as the results are in.
func TestCaptchaAICallbacksE2E(t *testing.T) {
	const n = 1000
	r := newCaptchaE2E(t, "cbe2e", processor.DefaultCallbackWait, fakeapi.PingbackOptions{}, 1401)
	start := time.Now()
	want := r.produceTasks(n)
	r.results(want, 90*time.Second)
	t.Logf("%d tasks in results %s after they were produced", n, time.Since(start).Round(time.Millisecond))

	for key, tk := range r.tasks(want) {
		if tk.Polls != 0 {
			t.Errorf("%s: res.php polled %d times, want never (its pingback came %s after the submit)", key, tk.Polls, tk.SolvedAt.Sub(tk.Submitted).Round(time.Millisecond))
		}
		if tk.PingbacksOK != 1 {
			t.Errorf("%s: %d pingbacks answered 200, want 1", key, tk.PingbacksOK)
		}
	}
	if st := r.fake.Stats(); st.Polls != 0 || st.Accepted != n || st.PingbacksOK != n {
		t.Errorf("fake: %+v; want no poll, %d tasks and pingbacks", st, n)
	}
	r.waitStatus("every job matched", func(st processor.CallbackStatus) bool { return st.Matched >= n && st.ViaCallback >= n })
	if st := r.status(); st.Matched != n || st.ViaCallback != n || st.Polls != 0 || st.ViaPoll != 0 || st.Received < n {
		t.Errorf("processor: %+v; want %d received, matched and via callback, no poll", st, n)
	}
	if a := r.intakeCount(intake.ResultAccepted); a < n {
		t.Errorf("intake: %d accepted, want %d", a, n)
	}
}

// TestCaptchaAIDroppedPingbacksE2E: 30 % of the pingbacks never come.
// Those tasks are polled — first not before the callback wait after their
// submit — and finish by the poll; the others are never polled. The wait
// is well above the solve time (1–3 s) so that on a slow machine a
// pingback that does come still beats it.
func TestCaptchaAIDroppedPingbacksE2E(t *testing.T) {
	const n, wait = 300, 10 * time.Second
	r := newCaptchaE2E(t, "cbdrop", wait, fakeapi.PingbackOptions{DropRatio: 0.3}, 1402)
	want := r.produceTasks(n)
	r.results(want, 90*time.Second)

	dropped := 0
	for key, tk := range r.tasks(want) {
		if !tk.Dropped {
			if tk.Polls != 0 {
				t.Errorf("%s: polled %d times though its pingback came (%d answered 200)", key, tk.Polls, tk.PingbacksOK)
			}
			continue
		}
		dropped++
		if tk.Polls == 0 {
			t.Errorf("%s: pingback dropped, never polled, yet in results", key)
			continue
		}
		if d := tk.FirstPoll.Sub(tk.Submitted); d < wait {
			t.Errorf("%s: first polled %s after its submit, before the callback wait %s", key, d.Round(time.Millisecond), wait)
		}
		// Solved (≤ 3 s) long before the wait ended: one poll finds it.
		if tk.Polls != 1 || tk.NotReady != 0 {
			t.Errorf("%s: %d polls (%d not ready), want 1", key, tk.Polls, tk.NotReady)
		}
	}
	if dropped == 0 || dropped == n {
		t.Fatalf("%d of %d pingbacks dropped: the test proves nothing", dropped, n)
	}
	t.Logf("%d of %d pingbacks dropped, those tasks polled after the %s wait", dropped, n, wait)
	r.waitStatus("every job counted", func(st processor.CallbackStatus) bool {
		return st.ViaCallback+st.ViaPoll >= n
	})
	if st := r.status(); st.ViaPoll != uint64(dropped) || st.ViaCallback != uint64(n-dropped) || st.Polls != uint64(dropped) || st.Matched != uint64(n-dropped) {
		t.Errorf("processor: %+v; want %d via poll (and polls), %d matched via callback", st, dropped, n-dropped)
	}
	if got := metricValue(t, r.reg, "redrive_polls_total"); got != float64(dropped) {
		t.Errorf("redrive_polls_total = %v, want %d", got, dropped)
	}
}

// TestCaptchaAIDuplicateEarlyPingbacksE2E: every pingback is delivered
// twice, and 30 % of them before in.php answers the submit (the callback
// is in Kafka before the processor knows the job id). One result per task,
// none polled; the second copies are counted as duplicates.
func TestCaptchaAIDuplicateEarlyPingbacksE2E(t *testing.T) {
	const n = 300
	r := newCaptchaE2E(t, "cbdup", processor.DefaultCallbackWait, fakeapi.PingbackOptions{DuplicateRatio: 1, EarlyRatio: 0.3}, 1403)
	want := r.produceTasks(n)
	r.results(want, 90*time.Second)

	early := 0
	for key, tk := range r.tasks(want) {
		if tk.Early {
			early++
		}
		if tk.Polls != 0 {
			t.Errorf("%s: polled %d times, want never", key, tk.Polls)
		}
		if !tk.Duplicated || tk.PingbacksOK != 2 {
			t.Errorf("%s: duplicated %v, %d pingbacks answered 200; want 2", key, tk.Duplicated, tk.PingbacksOK)
		}
	}
	if early == 0 || early == n {
		t.Fatalf("%d of %d pingbacks early: the test proves nothing", early, n)
	}
	// Every copy is read: one matches, the other is a duplicate (a write
	// the intake repeated would be one more, never fewer).
	r.waitStatus("every job matched and every copy counted", func(st processor.CallbackStatus) bool {
		return st.Matched >= n && st.Duplicate >= n
	})
	st := r.status()
	if st.Matched != n || st.ViaCallback != n || st.Polls != 0 || st.Received != st.Duplicate+n || st.Late != 0 {
		t.Errorf("processor: %+v; want %d matched via callback, the rest duplicates, no poll", st, n)
	}
	if got := metricValue(t, r.reg, "redrive_callbacks_total", "event", "duplicate"); got < n {
		t.Errorf(`redrive_callbacks_total{event="duplicate"} = %v, want at least %d`, got, n)
	}
	if a := r.intakeCount(intake.ResultAccepted); a != 2*n {
		t.Errorf("intake accepted %d callbacks, want %d", a, 2*n)
	}
	t.Logf("%d of %d pingbacks early; processor %+v", early, n, st)
}

// metricValue is the value of the one counter of family in reg whose
// labels include the pairs given (name, value, ...); 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, family string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
