package callbacks

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/fakeapi"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// captchaCrashConfig writes a config with one pipeline shaped as the
// captchaai preset: submit to fake's in.php with a pingback to the intake
// that `redrive process` serves on cbAddr, wait for the callback, poll
// res.php when none came. The last tier (5m) covers the wait, as in the
// preset.
func captchaCrashConfig(t *testing.T, brokers []string, topic, fake, httpAddr, cbAddr string, wait time.Duration) string {
	t.Helper()
	const token = "crash-cb-t0ken-0123456789"
	key := fakeapi.DefaultCaptchaKey
	pingback := "http://" + cbAddr + "/cb/captcha?token=" + token
	y := fmt.Sprintf(`brokers: [%q]
http_addr: %q
callback_addr: %q
session_timeout: 6s
shutdown_grace: 10s
instance: test
pipelines:
  - name: %s
    topic: %s
    results: %s.results
    partitions: 3
    concurrency: 32
    retry: {tiers: [1s, 2s, 5s, 5m], max_attempts: 5, jitter: 0.1}
    not_ready_deadline: 5m
    handler:
      http:
        url: %q
        timeout: 10s
        query: {key: %q, json: "1", pingback: %q}
        json: {ok_field: status, ok_value: 1, code_field: request}
        poll:
          url: %q
          method: GET
          state_field: request
          result_field: request
          first_after: 1s
          every: 1s
      callback:
        path: /cb/captcha
        token: %q
        id_field: id
        result_field: code
        wait: %s
      codes:
        transient: [ERROR_NO_SLOT_AVAILABLE]
        not_ready: [CAPCHA_NOT_READY]
        permanent: [ERROR_WRONG_USER_KEY, ERROR_KEY_DOES_NOT_EXIST, ERROR_CAPTCHA_UNSOLVABLE, ERROR_WRONG_CAPTCHA_ID, ERROR_BAD_PARAMETERS]
        pause: {ERROR_ZERO_BALANCE: 5s}
`, brokers[0], httpAddr, cbAddr, topic, topic, topic,
		fake+"/in.php", key, pingback, fake+"/res.php?key="+key+"&action=get&json=1&id={state}", token, wait)
	p := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCallbacksSurviveSIGKILL: `redrive process` (processor and callback
// intake in one process) is killed with SIGKILL twice while hundreds of
// submitted tasks wait for their pingback, and restarted each time. Every
// task still ends in results with its token, and nothing is dead-lettered:
// callbacks acknowledged before a kill are in <topic>.callbacks and are
// read again by the next process; pingbacks refused while it is down are
// tried again by the service and taken by the next process's intake. No
// task is polled unless the service gave its pingback up.
//
// At least once, by design: a task whose submit was answered but whose
// record was not yet written to its tier when the process died is
// submitted again by the next one (a second task at the service), and a
// result written but not committed is written again; such duplicates are
// counted and logged, not failed.
func TestCallbacksSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "cbcrash")

	// Solved 2–5 s after the submit (not 1–3 s as elsewhere): a batch is
	// submitted within a second or two, so most of it is still waiting for
	// its pingback when the test sees the processor holding half of it.
	fake := fakeapi.NewCaptchaAI(fakeapi.CaptchaOptions{SolveMin: 2 * time.Second, SolveMax: 5 * time.Second}, 1404)
	fakeSrv := httptest.NewServer(fake)
	t.Cleanup(fakeSrv.Close)
	t.Cleanup(fake.Close)

	// The wait only bounds how slow a restart may be: a callback
	// acknowledged before a kill, or taken by the next process's intake
	// when the service tries again, is read long before it. A task is
	// polled only when its service gave up its pingback.
	const wait = 30 * time.Second
	httpAddr, cbAddr := clitest.FreeAddr(t), clitest.FreeAddr(t)
	cfg := captchaCrashConfig(t, c.Brokers, topic, fakeSrv.URL, httpAddr, cbAddr, wait)
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: exit %d:\n%s", code, out)
	}

	const batch, kills = 200, 2
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{} // record key → its token
	produce := func(b int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range batch {
			key := fmt.Sprintf("task-%d-%03d", b, i)
			f := url.Values{"method": {"userrecaptcha"}, "googlekey": {"6Le-crash"}, "pageurl": {"https://shop.example/" + key}}
			want[key] = fakeapi.CaptchaToken(f)
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(f.Encode()),
				Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/x-www-form-urlencoded")}}})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	status := func() *processor.PipelineStatus {
		var st processor.Status
		if !clitest.GetJSON("http://"+httpAddr+"/api/pipelines", &st) {
			return nil
		}
		return clitest.StatusOf(st, topic)
	}

	var waitingAtKill []int
	p := clitest.StartProcess(t, bin, cfg)
	for k := range kills {
		produce(k)
		// Kill once this batch's pingbacks are coming in (some callbacks
		// acknowledged, so in Kafka) while at least a quarter of a batch
		// still waits in the processor.
		var waiting, called int
		if !kafkatest.Eventually(90*time.Second, func() bool {
			if st := status(); st != nil {
				waiting = st.Waiting
			}
			called = 0
			for _, tk := range fake.Tasks() {
				if tk.PingbacksOK > 0 && strings.HasPrefix(tk.Fields.Get("pageurl"), fmt.Sprintf("https://shop.example/task-%d-", k)) {
					called++
				}
			}
			return waiting >= batch/4 && called >= batch/5
		}) {
			t.Fatalf("run %d: never %d records waiting while %d of the batch were called back, within 90s (last %d, %d); fake %+v:\n%s",
				k+1, batch/4, batch/5, waiting, called, fake.Stats(), p.Log.String())
		}
		retried := fake.Stats().PingbackRetries
		if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = p.Cmd.Process.Wait()
		waitingAtKill = append(waitingAtKill, waiting)
		// Down until a pingback was refused (the intake died with the
		// processor): the service tries it again later.
		if !kafkatest.Eventually(30*time.Second, func() bool { return fake.Stats().PingbackRetries > retried }) {
			t.Fatalf("run %d: no pingback refused within 30s of the kill; fake %+v", k+1, fake.Stats())
		}
		p = clitest.StartProcess(t, bin, cfg)
	}

	last := p
	collectKeys(t, c, topic+".results", want, 120*time.Second)
	// Then until the last process has nothing left: no record waiting or
	// in flight, every offset committed. A record redelivered after a kill
	// (its result already written, its offset not committed) is finished
	// here too, by its callback read again from the topic.
	topics := []string{topic, topic + ".retry.1s", topic + ".retry.2s", topic + ".retry.5s", topic + ".retry.5m"}
	var lag string
	if !kafkatest.Eventually(2*wait+30*time.Second, func() bool {
		st := status()
		if st == nil || st.Waiting != 0 || st.Inflight != 0 {
			lag = fmt.Sprintf("status %+v", st)
			return false
		}
		lag = c.LagProblem(t, "redrive."+topic, topics, 3)
		return lag == ""
	}) {
		t.Fatalf("the last process never finished everything: %s; fake %+v:\n%s", lag, fake.Stats(), last.Log.String())
	}
	results := collectKeys(t, c, topic+".results", want, 60*time.Second)
	missing, wrong, dups := 0, 0, 0
	for key, tok := range want {
		vals := results[key]
		if len(vals) == 0 {
			missing++
			continue
		}
		dups += len(vals) - 1
		for _, v := range vals {
			if v != tok {
				wrong++
				t.Errorf("%s: result %q, want its token %q", key, v, tok)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("after SIGKILLs with %v records waiting: %d of %d tasks never reached results (lost); fake %+v:\n%s",
			waitingAtKill, missing, len(want), fake.Stats(), last.Log.String())
	}
	if dl := c.Collect(t, topic+".dlq", 1, 2*time.Second); len(dl) > 0 {
		t.Errorf("%d dead letters, e.g. %s: %s", len(dl), dl[0].Key, clitest.Header(dl[0], "redrive-error"))
	}
	resubmitted := 0
	for _, tk := range fake.Tasks() {
		if tk.Submits > 1 {
			resubmitted++
		}
		// An acknowledged callback is never lost: a task whose pingback
		// was not given up is finished by it, never polled.
		if tk.Polls > 0 && !tk.PingbackFailed {
			t.Errorf("task %s (%s) polled %d times though its pingback was not given up (%d answered 200): its callback was lost",
				tk.ID, tk.Fields.Get("pageurl"), tk.Polls, tk.PingbacksOK)
		}
	}
	st := fake.Stats()
	var cb processor.CallbackStatus
	if ps := status(); ps != nil && ps.Callbacks != nil {
		cb = *ps.Callbacks
	}
	t.Logf("SIGKILLed with %v records waiting for callbacks; all %d tasks in results, %d duplicate results (at least once); "+
		"fake: %d tasks (%d task fields submitted more than once), %d polls, %d pingbacks refused and retried, %d given up; last process: %+v",
		waitingAtKill, len(want), dups, st.Accepted, resubmitted, st.Polls, st.PingbackRetries, st.PingbacksFailed, cb)
	// The last process finished records that waited at the kill by the
	// callbacks it read from the topic or took at its intake.
	if cb.ViaCallback == 0 {
		t.Errorf("the restarted process finished no job by its callback: %+v", cb)
	}
	last.Sigterm(t, 25*time.Second)
}

// collectKeys reads topic from its start until every key of want is there
// (or timeout), then 2s more for duplicates, and returns each key's values
// in order.
func collectKeys(t *testing.T, c *kafkatest.Cluster, topic string, want map[string]string, timeout time.Duration) map[string][]string {
	t.Helper()
	seen := map[string]bool{}
	read := 0
	got := c.CollectUntil(t, []string{topic}, func(got kafkatest.Got) bool {
		for _, r := range got[topic][read:] {
			seen[string(r.Key)] = true
		}
		read = len(got[topic])
		for k := range want {
			if !seen[k] {
				return false
			}
		}
		return true
	}, timeout, 2*time.Second)
	out := map[string][]string{}
	for _, r := range got[topic] {
		out[string(r.Key)] = append(out[string(r.Key)], string(r.Value))
	}
	return out
}
