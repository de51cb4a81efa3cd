package crash

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// The fault suite: `redrive process` against a real broker
// while something breaks. Each test asserts that nothing is lost (every
// request reaches the terminal topic the solver's answers dictate), the
// log line an operator sees, and, where the fault blocks writes, /readyz
// and the committed offsets. docs/operations.md ("Faults and what redrive
// does") lists what each test shows. The broker SIGKILL is in
// restart_test.go (TestBrokerRestartLosesNothing), on the broker of its
// own that its clean restart already needs.

// faultSolver answers by the request's value: "perm…" 400 with a wrong-key
// code (permanent: the DLQ), anything else 200 "ok" (a short result, also
// for a large request). While hung, it accepts a request and never
// answers it (until the request is cancelled, or the test releases it).
type faultSolver struct {
	url string

	mu       sync.Mutex
	calls    map[string]int // by Idempotency-Key
	inflight int
	peak     int // most requests in flight at once while hung
	hung     bool
	release  chan struct{}
}

func newFaultSolver(t *testing.T) *faultSolver {
	s := &faultSolver{calls: map[string]int{}, release: make(chan struct{})}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.hang(false); srv.Close() })
	s.url = srv.URL + "/solve"
	return s
}

// hang makes the solver accept and never answer (on), or answer again.
func (s *faultSolver) hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung && !on {
		close(s.release)
		s.release = make(chan struct{})
	}
	s.hung = on
}

func (s *faultSolver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var head [4]byte
	n, _ := r.Body.Read(head[:])
	id := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.calls[id]++
	hung, release := s.hung, s.release
	if hung {
		s.inflight++
		s.peak = max(s.peak, s.inflight)
	}
	s.mu.Unlock()
	if hung {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
		if r.Context().Err() != nil {
			return
		}
	}
	if string(head[:n]) == "perm" {
		w.Header().Set("Redrive-Error-Code", "ERROR_WRONG_USER_KEY")
		w.WriteHeader(400)
		return
	}
	fmt.Fprint(w, "ok")
}

func (s *faultSolver) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

// distinctFrom is how many requests req-N with N >= from were called.
func (s *faultSolver) distinctFrom(from int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id := range s.calls {
		var i int
		if _, err := fmt.Sscanf(id, "req-%d", &i); err == nil && i >= from {
			n++
		}
	}
	return n
}

func (s *faultSolver) peakHung() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// faultConfig is writeConfig with the solver's URL and handler timeout,
// /readyz on a port of its own (base is its URL) and extra pipeline keys.
// retryLine, when set, replaces the retry schedule.
func faultConfig(t *testing.T, brokers []string, topic, url string, timeout time.Duration, retryLine, extra string) (cfg, base string) {
	t.Helper()
	handler := fmt.Sprintf("    handler:\n      http: {url: %q, timeout: %s}\n", url, timeout)
	cfg = clitest.WriteConfig(t, brokers, topic, "", handler+extra)
	addr := clitest.FreeAddr(t)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), `http_addr: "127.0.0.1:0"`, fmt.Sprintf("http_addr: %q", addr), 1)
	if retryLine != "" {
		y = strings.Replace(y, "    retry: {tiers: [1s, 2s], max_attempts: 3, jitter: 0}\n", "    retry: "+retryLine+"\n", 1)
	}
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	return cfg, "http://" + addr
}

// faultRequests builds requests from..to-1 for topic, every permEvery-th
// one "perm" (the DLQ; 0: none), and notes each one's terminal topic in want.
func faultRequests(topic string, from, to, permEvery int, want map[string]string) []*kgo.Record {
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		id := fmt.Sprintf("req-%d", i)
		v, dest := "ok", topic+".results"
		if permEvery > 0 && i%permEvery == 0 {
			v, dest = "perm", topic+".dlq"
		}
		want[id] = dest
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	return recs
}

func produceRecs(t *testing.T, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// arrived reads the results and DLQ topics from their start until every
// request of want is in its terminal topic (or timeout) and returns those
// missing from it, those found in the other terminal topic as well, and
// the records read per id (duplicates: at least once).
func arrived(t *testing.T, c *kafkatest.Cluster, topic string, want map[string]string, timeout time.Duration) (missing, wrong []string, seen map[string]map[string]int) {
	t.Helper()
	return arrivedAs(t, c, false, topic, want, timeout)
}

// arrivedAs is arrived, read_committed when committed (an exactly-once
// pipeline's aborted writes are not outcomes).
func arrivedAs(t *testing.T, c *kafkatest.Cluster, committed bool, topic string, want map[string]string, timeout time.Duration) (missing, wrong []string, seen map[string]map[string]int) {
	t.Helper()
	results, dead := topic+".results", topic+".dlq"
	seen = map[string]map[string]int{results: {}, dead: {}}
	read := map[string]int{}
	count := func(got kafkatest.Got) {
		for _, tp := range []string{results, dead} {
			for _, r := range got[tp][read[tp]:] {
				seen[tp][clitest.Header(r, retry.HeaderID)]++
			}
			read[tp] = len(got[tp])
		}
	}
	all := func() bool {
		for id, to := range want {
			if seen[to][id] == 0 {
				return false
			}
		}
		return true
	}
	collect := c.CollectUntil
	if committed {
		collect = c.CollectCommittedUntil
	}
	got := collect(t, []string{results, dead}, func(got kafkatest.Got) bool { count(got); return all() }, timeout, time.Second)
	count(got)
	for id, to := range want {
		other := results
		if to == results {
			other = dead
		}
		if seen[to][id] == 0 {
			missing = append(missing, id)
		}
		if seen[other][id] > 0 {
			wrong = append(wrong, id)
		}
	}
	return missing, wrong, seen
}

// mustArrive fails t unless every request of want reached its terminal
// topic, and none the other one.
func mustArrive(t *testing.T, c *kafkatest.Cluster, p *clitest.Proc, topic string, want map[string]string, timeout time.Duration) {
	t.Helper()
	mustArriveAs(t, c, false, p, topic, want, timeout)
}

func mustArriveAs(t *testing.T, c *kafkatest.Cluster, committed bool, p *clitest.Proc, topic string, want map[string]string, timeout time.Duration) {
	t.Helper()
	missing, wrong, _ := arrivedAs(t, c, committed, topic, want, timeout)
	if len(missing) > 0 || len(wrong) > 0 {
		t.Fatalf("%d of %d requests reached no terminal topic (lost: %.10v), %d the wrong one (%.10v):\n%s",
			len(missing), len(want), missing, len(wrong), wrong, p.Log.String())
	}
}

// partitionsOf waits until the metadata shows topic with n partitions.
func partitionsOf(t *testing.T, adm *kadm.Client, topic string, n int) {
	t.Helper()
	ok := kafkatest.Eventually(30*time.Second, func() bool {
		td, err := adm.ListTopics(context.Background(), topic)
		if err != nil {
			return false
		}
		d, ok := td[topic]
		return ok && d.Err == nil && len(d.Partitions) == n
	})
	if !ok {
		t.Fatalf("%s does not show %d partitions within 30s", topic, n)
	}
}

// TestFaultPartitionsAdded: partitions are added to the main topic while
// `redrive process` runs; records produced to the new partitions are
// handled, `topics check` then reports the tiers and DLQ as narrower than
// the main topic with the fix, and `topics ensure --grow` applies it.
func TestFaultPartitionsAdded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "grow")
	s := newFaultSolver(t)
	cfg, _ := faultConfig(t, c.Brokers, topic, s.url, 5*time.Second, "", "    concurrency: 8\n")
	p := clitest.StartProcess(t, bin, cfg)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{}
	produceRecs(t, cl, faultRequests(topic, 0, 150, 10, want))
	mustArrive(t, c, p, topic, want, 60*time.Second)

	adm := c.Admin(t)
	resp, err := adm.CreatePartitions(context.Background(), 3, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	added := time.Now()
	partitionsOf(t, adm, topic, 6)
	// Records on the new partitions only (3, 4, 5).
	manual := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	late := map[string]string{}
	recs := faultRequests(topic, 150, 300, 10, late)
	for i, r := range recs {
		r.Partition = int32(3 + i%3)
	}
	produceRecs(t, manual, recs)
	line := p.WaitLog(t, 60*time.Second, "partitions assigned", topic+":[", " 5]") // [3 4 5], or all six with an eager balancer
	mustArrive(t, c, p, topic, late, 90*time.Second)
	t.Logf("partitions 3-5 added to %s; %d records produced to them all handled %v after the addition; log: %s",
		topic, len(late), time.Since(added).Round(100*time.Millisecond), line)

	code, out := clitest.RunOut(t, context.Background(), "topics", "check", "-c", cfg)
	if code != 1 {
		t.Fatalf("topics check with a main topic wider than its tiers and DLQ: exit %d, want 1:\n%s", code, out)
	}
	for _, n := range []string{topic + ".retry.1s", topic + ".retry.2s", topic + ".dlq"} {
		problem := fmt.Sprintf("PROBLEM %s has 3 partitions, fewer than its main topic %s (6); fix: redrive topics ensure --grow, or kafka-topics.sh", n, topic)
		if !strings.Contains(out, problem) || !strings.Contains(out, "--alter --topic "+n+" --partitions 6") {
			t.Errorf("topics check does not report %s as narrower than the main topic with the fix:\n%s", n, out)
		}
	}
	t.Logf("topics check exit %d:\n%s", code, out)
	if code, out = clitest.RunOut(t, context.Background(), "topics", "ensure", "--grow", "-c", cfg); code != 0 || strings.Count(out, "grown from 3") != 3 {
		t.Fatalf("topics ensure --grow: exit %d, want 0 and three topics grown from 3:\n%s", code, out)
	}
	if code, out = clitest.RunOut(t, context.Background(), "topics", "check", "-c", cfg); code != 0 {
		t.Fatalf("topics check after ensure --grow: exit %d:\n%s", code, out)
	}

	p.Sigterm(t, 20*time.Second)
	if problem := c.LagProblem(t, "redrive."+topic, []string{topic}, 6); problem != "" {
		t.Errorf("after SIGTERM: %s", problem)
	}
}

// TestFaultDLQDeleted: the DLQ is deleted while `redrive process` runs and
// requests that must be dead-lettered keep arriving. Their writes block
// (retried with backoff, logged), /readyz turns 503 naming the DLQ, no
// offset is committed past the first unwritten dead letter of a
// partition, and the other requests are still handled. Once `topics
// ensure` recreates the DLQ the writes go through: every dead letter is
// in the new DLQ, none lost.
func TestFaultDLQDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	t.Run("at-least-once", func(t *testing.T) { dlqDeleted(t, c, bin, false) })
	t.Run("exactly-once", func(t *testing.T) { dlqDeleted(t, c, bin, true) })
}

// dlqDeleted is TestFaultDLQDeleted for one delivery. Exactly-once: each
// transaction holding a dead letter aborts (its records are handled
// again), so nothing at all is committed until the DLQ is back; the
// outcomes are read read_committed.
func dlqDeleted(t *testing.T, c *kafkatest.Cluster, bin string, eos bool) {
	topic := kafkatest.Topic(t, "dlqgone")
	dlqTopic, group := topic+".dlq", "redrive."+topic
	s := newFaultSolver(t)
	extra, failing, logged := "    concurrency: 4\n", "outcome writes failing", "outcome write failed; retrying, offset not committed"
	if eos {
		extra += "    delivery: exactly-once\n"
		failing, logged = "transaction ", "transaction aborted; handling its records again from the committed offsets"
	}
	cfg, base := faultConfig(t, c.Brokers, topic, s.url, 5*time.Second, "", extra)
	p := clitest.StartProcess(t, bin, cfg)
	if code, body := clitest.WaitProbe(base+"/readyz", 200, 30*time.Second); code != 200 {
		t.Fatalf("/readyz after start: %d %s", code, body)
	}
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	before := map[string]string{}
	produceRecs(t, cl, faultRequests(topic, 0, 40, 4, before))
	mustArriveAs(t, c, eos, p, topic, before, 60*time.Second)

	adm := c.Admin(t)
	if _, err := adm.DeleteTopics(context.Background(), dlqTopic); err != nil {
		t.Fatalf("delete %s: %v", dlqTopic, err)
	}
	if !kafkatest.Eventually(30*time.Second, func() bool {
		td, err := adm.ListTopics(context.Background(), dlqTopic)
		return err == nil && !td.Has(dlqTopic)
	}) {
		t.Fatalf("%s still listed 30s after its deletion", dlqTopic)
	}
	deleted := time.Now()

	// Every 4th request is permanent: a dead letter with nowhere to go.
	want := map[string]string{}
	recs := faultRequests(topic, 40, 120, 4, want)
	firstDead := map[int32]int64{} // per partition: the offset of the first request to be dead-lettered
	results := cl.ProduceSync(context.Background(), recs...)
	if err := results.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if string(r.Record.Value) != "perm" {
			continue
		}
		if o, ok := firstDead[r.Record.Partition]; !ok || r.Record.Offset < o {
			firstDead[r.Record.Partition] = r.Record.Offset
		}
	}

	code, body := clitest.WaitProbe(base+"/readyz", 503, 60*time.Second)
	if code != 503 || !strings.Contains(body, failing) || !strings.Contains(body, dlqTopic) {
		t.Fatalf("/readyz with the DLQ deleted: %d %s, want 503 naming %s", code, body, dlqTopic)
	}
	notReady := time.Since(deleted)
	line := p.WaitLog(t, 30*time.Second, logged, dlqTopic)
	// Requests behind the first dead letter of each partition are handled
	// meanwhile (until max_inflight records are in flight: 16 here, so
	// fetching stops once that many wait for the DLQ).
	if !kafkatest.Eventually(30*time.Second, func() bool { return s.distinctFrom(40) >= 16 }) {
		t.Fatalf("with the DLQ deleted, the solver saw %d of the later requests, want at least 16:\n%s", s.distinctFrom(40), p.Log.String())
	}
	handled := s.distinctFrom(40)
	time.Sleep(2 * time.Second) // several commit intervals
	committed := clitest.CommittedOffsets(t, adm, group, topic, 3)
	for part, first := range firstDead {
		if committed[part] > first {
			t.Errorf("partition %d committed at %d, past its first unwritten dead letter at offset %d", part, committed[part], first)
		}
	}
	if code, _ := clitest.Probe(base + "/readyz"); code != 503 {
		t.Errorf("/readyz is %d while the DLQ is still missing, want 503", code)
	}
	blocked := time.Since(deleted)

	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure to recreate %s: exit %d\n%s", dlqTopic, code, out)
	}
	recreated := time.Now()
	if code, body := clitest.WaitProbe(base+"/readyz", 200, 60*time.Second); code != 200 {
		t.Fatalf("/readyz after %s was recreated: %d %s, want 200:\n%s", dlqTopic, code, body, p.Log.String())
	}
	resumed := time.Since(recreated)
	// franz-go keeps the deleted topic's id; redrive purges it on UNKNOWN_TOPIC_ID.
	purged := p.WaitLog(t, 10*time.Second, "output topic was deleted and created again: writing to the new one", "topic="+dlqTopic)
	mustArriveAs(t, c, eos, p, topic, want, 60*time.Second)
	t.Logf("%s deleted: /readyz 503 after %v (%q); blocked %v, %d of %d later requests handled meanwhile, commits held at %v (first dead letters at %v); "+
		"recreated: ready again in %v, all %d requests (%d dead letters) in their terminal topic; %d failed-write log lines, e.g. %s; then %s",
		dlqTopic, notReady.Round(100*time.Millisecond), body, blocked.Round(100*time.Millisecond), handled, len(want), committed, firstDead,
		resumed.Round(100*time.Millisecond), len(want), countTo(want, dlqTopic), strings.Count(p.Log.String(), logged), line, purged)

	p.Sigterm(t, 20*time.Second)
	if problem := c.LagProblem(t, group, []string{topic}, 3); problem != "" {
		t.Errorf("after SIGTERM: %s", problem)
	}
}

// TestFaultSolverNeverAnswers: the service accepts every connection and
// never answers, with all `concurrency` calls stuck at once. Each call
// times out (handler timeout 1s) as a transient failure: the records go
// to the tiers, the breaker opens (logged) and stops calls without
// spending attempts, and probes the service as it half-opens. Once the
// service answers again every request reaches the results topic, none
// is dead-lettered for the outage, and a SIGTERM exits within the grace
// with everything committed.
func TestFaultSolverNeverAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "hung")
	s := newFaultSolver(t)
	s.hang(true)
	const conc = 8
	cfg, base := faultConfig(t, c.Brokers, topic, s.url, time.Second,
		"{tiers: [1s, 2s], max_attempts: 20, jitter: 0}",
		fmt.Sprintf("    concurrency: %d\n    breaker: {consecutive: 10, open_for: 1s, max_open: 2s, probes: 2}\n", conc))
	p := clitest.StartProcess(t, bin, cfg)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{}
	produceRecs(t, cl, faultRequests(topic, 0, 60, 0, want))

	if !kafkatest.Eventually(30*time.Second, func() bool { return s.peakHung() >= conc }) {
		t.Fatalf("the hung service saw at most %d calls at once, want %d (all workers stuck):\n%s", s.peakHung(), conc, p.Log.String())
	}
	opened := p.WaitLog(t, 30*time.Second, "breaker open: handler calls stopped")
	// The calls that timed out went to the first tier, as timeouts.
	tier := topic + ".retry.1s"
	timeouts := 0
	c.CollectUntil(t, []string{tier}, func(got kafkatest.Got) bool {
		timeouts = 0
		for _, r := range got[tier] {
			if clitest.Header(r, retry.HeaderErrorCode) == "timeout" {
				timeouts++
			}
		}
		return timeouts >= conc
	}, 30*time.Second, 0)
	if timeouts < conc {
		t.Fatalf("%d records in %s with error code timeout, want at least %d:\n%s", timeouts, tier, conc, p.Log.String())
	}
	if code, body := clitest.Probe(base + "/healthz"); code != 200 {
		t.Errorf("/healthz while every call hangs: %d %s, want 200 (the loops still beat)", code, body)
	}
	time.Sleep(3 * time.Second) // a half-open probe or two times out too
	s.hang(false)
	recovered := time.Now()
	missing, wrong, seen := arrived(t, c, topic, want, 90*time.Second)
	if len(missing) > 0 || len(wrong) > 0 {
		t.Fatalf("after the service answered again: %d of %d requests not in the results topic (%.10v), %d dead-lettered (%.10v):\n%s",
			len(missing), len(want), missing, len(wrong), wrong, p.Log.String())
	}
	if n := len(seen[topic+".dlq"]); n > 0 {
		t.Errorf("%d requests dead-lettered because of the outage, want 0", n)
	}
	t.Logf("%d calls hung at once (concurrency %d); %d timeouts in %s; log: %s; all %d requests in the results topic %v after the service answered, none dead-lettered",
		s.peakHung(), conc, timeouts, tier, opened, len(want), time.Since(recovered).Round(100*time.Millisecond))

	// A SIGTERM while every call hangs: the calls time out, their records
	// go to a tier, the process exits within shutdown_grace (10s); a new
	// process finishes them once the service answers.
	s.hang(true)
	more := map[string]string{}
	s.mu.Lock()
	s.peak = 0
	s.mu.Unlock()
	produceRecs(t, cl, faultRequests(topic, 60, 60+conc, 0, more))
	if !kafkatest.Eventually(30*time.Second, func() bool { return s.peakHung() >= conc }) {
		t.Fatalf("the hung service saw at most %d calls at once, want %d:\n%s", s.peakHung(), conc, p.Log.String())
	}
	stop := time.Now()
	p.Sigterm(t, 15*time.Second)
	exited := time.Since(stop)
	s.hang(false)
	p = clitest.StartProcess(t, bin, cfg)
	mustArrive(t, c, p, topic, more, 60*time.Second)
	t.Logf("SIGTERM with %d calls hanging: exit 0 in %v; the next process brought all %d to the results topic", conc, exited.Round(100*time.Millisecond), len(more))
	p.Sigterm(t, 15*time.Second)
	if problem := c.LagProblem(t, "redrive."+topic, clitest.GroupTopics(topic)[:2], 3); problem != "" {
		t.Errorf("after SIGTERM: %s", problem)
	}
}

// TestFaultSolverNeverAnswersNoBreaker: the same hung service with the
// breaker off. Every call times out, each record goes through the tier
// and, its attempts spent, to the DLQ as exhausted with error code
// timeout: nothing is stuck, nothing lost.
func TestFaultSolverNeverAnswersNoBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "hungnb")
	s := newFaultSolver(t)
	s.hang(true)
	const conc, n = 8, 16
	// Off, as a user who turned it off runs it: the tiers and the DLQ are
	// all that is left (TestFaultSolverNeverAnswers runs the defaults).
	cfg, _ := faultConfig(t, c.Brokers, topic, s.url, time.Second,
		"{tiers: [1s], max_attempts: 2, jitter: 0}",
		fmt.Sprintf("    concurrency: %d\n    breaker: {enabled: false}\n", conc))
	p := clitest.StartProcess(t, bin, cfg)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{}
	recs := faultRequests(topic, 0, n, 0, want)
	for id := range want {
		want[id] = topic + ".dlq"
	}
	start := time.Now()
	produceRecs(t, cl, recs)
	mustArrive(t, c, p, topic, want, 60*time.Second)
	took := time.Since(start)
	if s.peakHung() < conc {
		t.Errorf("the hung service saw at most %d calls at once, want %d", s.peakHung(), conc)
	}
	dead := c.Collect(t, topic+".dlq", n, 10*time.Second)
	for _, r := range dead {
		if clitest.Header(r, retry.HeaderReason) != "exhausted" || clitest.Header(r, retry.HeaderErrorCode) != "timeout" || clitest.Header(r, retry.HeaderAttempt) != "2" {
			t.Errorf("dead letter %s: reason %q, code %q, attempts %q; want exhausted, timeout, 2",
				clitest.Header(r, retry.HeaderID), clitest.Header(r, retry.HeaderReason), clitest.Header(r, retry.HeaderErrorCode), clitest.Header(r, retry.HeaderAttempt))
		}
	}
	t.Logf("breaker off: %d requests, %d calls hung at once; all dead-lettered (exhausted, timeout, 2 attempts) in %v; error %q",
		n, s.peakHung(), took.Round(100*time.Millisecond), clitest.Header(dead[0], retry.HeaderError))
	p.Sigterm(t, 15*time.Second)
	if problem := c.LagProblem(t, "redrive."+topic, []string{topic, topic + ".retry.1s"}, 3); problem != "" {
		t.Errorf("after SIGTERM: %s", problem)
	}
}

// TestFaultRecordOverMaxInflightBytes: a main-topic record larger than
// max_inflight_bytes among small ones is admitted (the bound is checked
// before a poll, never against a record already fetched), so nothing
// deadlocks; fetching stops until it is finished, and the processor says
// so in its log. Every request reaches its terminal topic.
func TestFaultRecordOverMaxInflightBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "big")
	s := newFaultSolver(t)
	const limit, bigSize = 64 << 10, 300 << 10
	cfg, _ := faultConfig(t, c.Brokers, topic, s.url, 5*time.Second, "",
		fmt.Sprintf("    concurrency: 4\n    max_inflight_bytes: %d\n", limit))
	p := clitest.StartProcess(t, bin, cfg)
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{}
	recs := faultRequests(topic, 0, 200, 10, want)
	big := recs[101] // "ok": a result
	big.Value = append([]byte("ok"), make([]byte, bigSize)...)
	for i := range big.Value[2:] {
		big.Value[2+i] = 'x'
	}
	produceRecs(t, cl, recs)
	mustArrive(t, c, p, topic, want, 60*time.Second)
	line := p.WaitLog(t, 10*time.Second, "record larger than max_inflight_bytes", fmt.Sprintf("max_inflight_bytes=%d", limit))
	if s.count(string(big.Key)) == 0 {
		t.Errorf("the large request %s was never handled", big.Key)
	}
	t.Logf("a %d-byte request among %d with max_inflight_bytes %d: all reached their terminal topic; log: %s", len(big.Value), len(recs), limit, line)
	p.Sigterm(t, 15*time.Second)
	if problem := c.LagProblem(t, "redrive."+topic, []string{topic}, 3); problem != "" {
		t.Errorf("after SIGTERM: %s", problem)
	}
}
