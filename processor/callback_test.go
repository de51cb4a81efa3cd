package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// jobAPI is a submit/poll service as a Go handler: a call without State
// submits the record's job (its value is the job id) and answers
// Poll(job id); a call with State polls that job: pollAnswer's outcome
// (default: Succeed("polled:"+id)).
type jobAPI struct {
	mu         sync.Mutex
	submits    map[string]int
	submitAt   map[string]time.Time
	polls      map[string]int
	firstPoll  map[string]time.Time
	pollStates map[string][]string
	pollAnswer func(job string, n int) processor.Outcome
}

func newJobAPI() *jobAPI {
	return &jobAPI{submits: map[string]int{}, submitAt: map[string]time.Time{}, polls: map[string]int{},
		firstPoll: map[string]time.Time{}, pollStates: map[string][]string{}}
}

func (a *jobAPI) Handle(_ context.Context, req *processor.Request) processor.Outcome {
	job := string(req.Record.Value)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(req.State) == 0 {
		a.submits[job]++
		a.submitAt[job] = time.Now()
		return processor.Poll([]byte(job), 0)
	}
	a.polls[job]++
	if a.polls[job] == 1 {
		a.firstPoll[job] = time.Now()
	}
	a.pollStates[job] = append(a.pollStates[job], string(req.State))
	if a.pollAnswer != nil {
		return a.pollAnswer(string(req.State), a.polls[job])
	}
	return processor.Succeed([]byte("polled:" + string(req.State)))
}

func (a *jobAPI) submitted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.submits)
}

func (a *jobAPI) totalPolls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.polls {
		n += p
	}
	return n
}

// cbJobAPI is a jobAPI that reads callbacks itself (CallbackHandler).
type cbJobAPI struct{ *jobAPI }

func (cbJobAPI) CallbackOutcome(cb processor.Callback) processor.Outcome {
	return processor.Succeed(append([]byte("cb:"), cb.Result...))
}

func jobs(n int) []string {
	js := make([]string, n)
	for i := range js {
		js[i] = fmt.Sprintf("job-%03d", i)
	}
	return js
}

func (a *jobAPI) produceJobs(e *pipetest.Env, js []string) {
	var rs []*kgo.Record
	for _, j := range js {
		rs = append(rs, &kgo.Record{Topic: e.P.Topic, Key: []byte(j), Value: []byte(j)})
	}
	e.Produce(rs...)
}

func produceCallbacks(e *pipetest.Env, topic string, js []string) {
	var rs []*kgo.Record
	for _, j := range js {
		rs = append(rs, processor.CallbackRecord(topic, processor.Callback{JobID: j, Result: []byte("token-" + j)}))
	}
	e.Produce(rs...)
}

// resultsByJob collects one result per job (key) and fails on a second.
func resultsByJob(t *testing.T, e *pipetest.Env, n int, settle time.Duration) map[string]string {
	t.Helper()
	recs := e.CollectN(e.P.Results, n, 90*time.Second, settle)
	got := map[string]string{}
	for _, r := range recs {
		k := string(r.Key)
		if old, dup := got[k]; dup {
			t.Errorf("job %s in results twice: %q and %q", k, old, r.Value)
		}
		got[k] = string(r.Value)
	}
	if len(got) != n {
		t.Fatalf("%d jobs in results, want %d", len(got), n)
	}
	return got
}

func cbStatus(t *testing.T, pr *processor.Processor) processor.CallbackStatus {
	t.Helper()
	st := pr.Status().Pipelines[0].Callbacks
	if st == nil {
		t.Fatal("status: no callbacks for a pipeline with callbacks")
	}
	return *st
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !kafkatest.Eventually(60*time.Second, cond) {
		t.Fatalf("not within 60s: %s", what)
	}
}

// A callback that arrives while its record waits in the scheduler
// finishes the record at once with the callback's answer (the handler's
// CallbackOutcome): one result each, no poll.
func TestCallbackWhileWaiting(t *testing.T) {
	// The wait only bounds how slow the test machine may be: the records
	// finish as soon as their callbacks are read.
	e := newEnv(t, []time.Duration{time.Second, 10 * time.Second, 30 * time.Second}, 2)
	cbTopic := e.WithCallbacks(2, 10*time.Second)
	api := newJobAPI()
	cfg := e.Config()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	pr, _ := pipetest.RunProcessor(t, cfg, cbJobAPI{api})
	js := jobs(20)
	api.produceJobs(e, js)
	waitFor(t, "every job submitted and waiting", func() bool {
		return api.submitted() == len(js) && pr.Status().Pipelines[0].Waiting == len(js)
	})
	produceCallbacks(e, cbTopic, js)
	got := resultsByJob(t, e, len(js), time.Second)
	for _, j := range js {
		if got[j] != "cb:token-"+j {
			t.Errorf("result of %s = %q, want the callback's (cb:token-%s)", j, got[j], j)
		}
	}
	if n := api.totalPolls(); n != 0 {
		t.Errorf("%d polls, want none: every callback came within the wait", n)
	}
	// Counted once each outcome is acknowledged.
	waitFor(t, "every match counted", func() bool { return cbStatus(t, pr).Matched == uint64(len(js)) })
	st := cbStatus(t, pr)
	if st.Matched != uint64(len(js)) || st.Received != uint64(len(js)) || st.ViaCallback != uint64(len(js)) || st.Polls != 0 || st.Topic != cbTopic || st.Wait != "10s" {
		t.Errorf("status %+v: want %d received, matched and via_callback, no polls", st, len(js))
	}
	for name, want := range map[string]float64{
		`redrive_callbacks_total{event="received"}`: 20, `redrive_callbacks_total{event="matched"}`: 20,
		`redrive_callbacks_total{event="duplicate"}`: 0, `redrive_callbacks_held`: 20, `redrive_polls_total`: 0,
		`redrive_job_seconds_count{via="callback"}`: 20, `redrive_job_seconds_count{via="poll"}`: 0,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The results record is not a poll: redrive-polls stays unset.
	for _, r := range e.CollectN(e.P.Results, len(js), 30*time.Second, 0) {
		if v, ok := kafkatest.Header(r, retry.HeaderPolls); ok {
			t.Fatalf("result of %s has redrive-polls %s", r.Key, v)
		}
	}
}

// A callback that is read before its record (here: before the job is even
// submitted) is matched when the record is admitted.
func TestCallbackBeforeRecord(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 10 * time.Second}, 2)
	cbTopic := e.WithCallbacks(2, 10*time.Second)
	api := newJobAPI()
	pr, _ := pipetest.RunProcessor(t, e.Config(), api)
	js := jobs(20)
	produceCallbacks(e, cbTopic, js)
	waitFor(t, "every callback read", func() bool { return cbStatus(t, pr).Received == uint64(len(js)) })
	api.produceJobs(e, js)
	got := resultsByJob(t, e, len(js), time.Second)
	for _, j := range js {
		if got[j] != "token-"+j { // DefaultCallbackOutcome: Succeed(result)
			t.Errorf("result of %s = %q, want token-%s", j, got[j], j)
		}
	}
	if n := api.totalPolls(); n != 0 {
		t.Errorf("%d polls, want none", n)
	}
	waitFor(t, "every match counted", func() bool { return cbStatus(t, pr).Matched == uint64(len(js)) })
	if st := cbStatus(t, pr); st.Held != len(js) {
		t.Errorf("status %+v: want %d matched and held (kept for duplicates)", st, len(js))
	}
}

// Without a callback the job is polled, first not before the wait after
// its submit, and finishes by the poll.
func TestCallbackFallbackPoll(t *testing.T) {
	const wait = 2 * time.Second
	e := newEnv(t, []time.Duration{time.Second, wait, 5 * time.Second}, 2)
	e.WithCallbacks(2, wait)
	api := newJobAPI()
	pr, _ := pipetest.RunProcessor(t, e.Config(), api)
	js := jobs(10)
	api.produceJobs(e, js)
	got := resultsByJob(t, e, len(js), time.Second)
	waitFor(t, "every job counted", func() bool { return cbStatus(t, pr).ViaPoll == uint64(len(js)) })
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, j := range js {
		if got[j] != "polled:"+j {
			t.Errorf("result of %s = %q, want polled:%s", j, got[j], j)
		}
		if api.submits[j] != 1 || api.polls[j] != 1 {
			t.Errorf("%s: %d submits, %d polls, want 1 and 1", j, api.submits[j], api.polls[j])
		}
		if d := api.firstPoll[j].Sub(api.submitAt[j]); d < wait {
			t.Errorf("%s polled %s after its submit, before the callback wait %s", j, d, wait)
		}
	}
	if st := cbStatus(t, pr); st.Polls != uint64(len(js)) || st.ViaPoll != uint64(len(js)) || st.Matched != 0 {
		t.Errorf("status %+v: want %d polls and via_poll, nothing matched", st, len(js))
	}
}

// Every callback sent twice (and again after the job finished): one
// result per job, the copies counted as duplicates.
func TestCallbackDuplicates(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 10 * time.Second, 30 * time.Second}, 2)
	cbTopic := e.WithCallbacks(2, 10*time.Second)
	api := newJobAPI()
	pr, _ := pipetest.RunProcessor(t, e.Config(), api)
	js := jobs(20)
	api.produceJobs(e, js)
	waitFor(t, "every job submitted", func() bool { return api.submitted() == len(js) })
	produceCallbacks(e, cbTopic, js)
	produceCallbacks(e, cbTopic, js)
	resultsByJob(t, e, len(js), 0)
	produceCallbacks(e, cbTopic, js[:5]) // after the jobs finished
	waitFor(t, "every copy counted", func() bool { return cbStatus(t, pr).Duplicate == uint64(len(js)+5) })
	resultsByJob(t, e, len(js), 2*time.Second) // and still one each
	if n := api.totalPolls(); n != 0 {
		t.Errorf("%d polls, want none", n)
	}
	if st := cbStatus(t, pr); st.Matched != uint64(len(js)) || st.Received != uint64(2*len(js)+5) {
		t.Errorf("status %+v: want %d matched, %d received", st, len(js), 2*len(js)+5)
	}
}

// A poll that fails transiently keeps its job id: the next attempt polls
// the same job again, it never submits a second one.
func TestTransientPollKeepsJob(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 2 * time.Second}, 1)
	api := newJobAPI()
	api.pollAnswer = func(job string, n int) processor.Outcome {
		if n == 1 {
			return processor.Outcome{Kind: processor.Transient, Code: "http_503", Err: fmt.Errorf("503"), State: []byte(job)}
		}
		return processor.Succeed([]byte("polled:" + job))
	}
	e.Start(api)
	js := jobs(5)
	api.produceJobs(e, js)
	got := resultsByJob(t, e, len(js), time.Second)
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, j := range js {
		if got[j] != "polled:"+j || api.submits[j] != 1 || api.polls[j] != 2 {
			t.Errorf("%s: result %q, %d submits, %d polls; want polled:%s, 1, 2", j, got[j], api.submits[j], api.polls[j], j)
		}
		for _, s := range api.pollStates[j] {
			if s != j {
				t.Errorf("%s polled with state %q", j, s)
			}
		}
	}
}

// The processor stops while its records wait for their callbacks; the
// callbacks come while it is down. The next processor reads them from the
// topic and finishes every record with its callback: nothing lost, each
// job once in results.
func TestCallbackRestart(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 3 * time.Second, 20 * time.Second}, 2)
	cbTopic := e.WithCallbacks(2, 3*time.Second)
	api := newJobAPI()
	pr, stop := pipetest.RunProcessor(t, e.Config(), api)
	js := jobs(30)
	api.produceJobs(e, js)
	waitFor(t, "every job submitted and waiting", func() bool {
		return api.submitted() == len(js) && pr.Status().Pipelines[0].Waiting == len(js)
	})
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	produceCallbacks(e, cbTopic, js)
	api2 := newJobAPI()
	pr2, _ := pipetest.RunProcessor(t, e.Config(), api2)
	got := resultsByJob(t, e, len(js), 2*time.Second)
	for _, j := range js {
		if got[j] != "token-"+j {
			t.Errorf("result of %s = %q, want its callback's token-%s", j, got[j], j)
		}
	}
	if n := api.totalPolls() + api2.totalPolls(); n != 0 {
		t.Errorf("%d polls, want none: the new processor read the callbacks before it handled the records", n)
	}
	if n := api2.submitted(); n != 0 {
		t.Errorf("%d jobs submitted again after the restart", n)
	}
	waitFor(t, "every match counted", func() bool { return cbStatus(t, pr2).Matched == uint64(len(js)) })
	if p := e.LagProblem(append([]string{e.P.Topic}, e.P.TierTopics()...), 2); p != "" {
		t.Logf("lag: %s", p) // informative: the commit loop may not have run yet
	}
}

// gathered is the value of one series of reg, named as name{label="v"}
// (labels other than pipeline; a histogram's _count); 0 when absent.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	base, sel, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
	family, count := base, false
	if f, ok := strings.CutSuffix(base, "_count"); ok {
		family, count = f, true
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if sel != "" && !hasLabel(m, sel) {
				continue
			}
			switch {
			case count:
				return float64(m.GetHistogram().GetSampleCount())
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			default:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, sel string) bool {
	k, v, _ := strings.Cut(sel, "=")
	v = strings.Trim(v, `"`)
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}
