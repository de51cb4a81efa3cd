package eos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// Process-level exactly-once tests: `redrive process` with
// `delivery: exactly-once`, killed, joined, left and paused, read back
// read_committed.

// mixSolver answers each request by its value, counting calls per
// Idempotency-Key (a repeated call after a crash counts too):
//
//	ok        200
//	perm      400 ERROR_WRONG_USER_KEY: permanent, to the DLQ
//	twice     503 on the first two calls, then 200 (the 1s and 2s tiers)
//	notready  202 with Retry-After: 1 on the first call, then 200
//	later     429 with Retry-After: 1 on the first call, then 200
type mixSolver struct {
	mu      sync.Mutex
	calls   map[string]int
	delay   time.Duration
	waiters map[int]chan struct{} // closed once the service saw that many requests
}

func newMixSolver(t *testing.T, delay time.Duration) (*mixSolver, string) {
	s := &mixSolver{calls: map[string]int{}, delay: delay, waiters: map[int]chan struct{}{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL + "/solve"
}

func (s *mixSolver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body [16]byte
	n, _ := r.Body.Read(body[:])
	id := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.calls[id]++
	call := s.calls[id]
	for n, ch := range s.waiters {
		if len(s.calls) >= n {
			close(ch)
			delete(s.waiters, n)
		}
	}
	s.mu.Unlock()
	time.Sleep(s.delay)
	switch v := string(body[:n]); {
	case v == "perm":
		w.Header().Set("Redrive-Error-Code", "ERROR_WRONG_USER_KEY")
		w.WriteHeader(400)
	case v == "twice" && call <= 2:
		w.Header().Set("Redrive-Error-Code", "ERROR_NO_SLOT_AVAILABLE")
		w.WriteHeader(503)
	case v == "notready" && call == 1:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(202)
	case v == "later" && call == 1:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(429)
	default:
		fmt.Fprintf(w, "solved %s", id)
	}
}

func (s *mixSolver) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// waitDistinct waits until the solver saw n distinct requests, returning
// as soon as the call that made them n arrived; false after timeout.
func (s *mixSolver) waitDistinct(n int, timeout time.Duration) bool {
	s.mu.Lock()
	if len(s.calls) >= n {
		s.mu.Unlock()
		return true
	}
	ch, ok := s.waiters[n]
	if !ok {
		ch = make(chan struct{})
		s.waiters[n] = ch
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-time.After(timeout):
		return false
	}
}

// mixValue is request i's value in the mixed script: of every 20, one
// permanent, one transient twice, one not-ready, one Retry-After.
func mixValue(i int) string {
	switch i % 20 {
	case 1:
		return "perm"
	case 2:
		return "twice"
	case 3:
		return "notready"
	case 4:
		return "later"
	}
	return "ok"
}

// mixRequests builds requests from..to-1 of the mixed script for topic
// and records in want the terminal topic of each.
func mixRequests(topic string, from, to int, want map[string]string) []*kgo.Record {
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		id := fmt.Sprintf("req-%d", i)
		v := mixValue(i)
		want[id] = topic + ".results"
		if v == "perm" {
			want[id] = topic + ".dlq"
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	return recs
}

// eosConfig is writeConfig for a pipeline at 16 concurrent calls with
// delivery exactly-once (eos) or at-least-once.
func eosConfig(t *testing.T, c *kafkatest.Cluster, topic, url string, eos bool) string {
	t.Helper()
	extra := "    concurrency: 16\n"
	if eos {
		extra += "    delivery: exactly-once\n"
	}
	cfg := clitest.WriteConfig(t, c.Brokers, topic, url, extra)
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	return cfg
}

// outcome is what a read_committed reader found of a run.
type outcome struct {
	missing, wrong, dups int // requests in no terminal topic, in the wrong one; extra terminal records
	hopDups              int // tier records of a request with an attempt number written twice
	hops                 int // tier records
}

func (o outcome) String() string {
	return fmt.Sprintf("%d requests lost (in no terminal topic), %d in the wrong topic, %d duplicates; %d retry hops, %d written twice",
		o.missing, o.wrong, o.dups, o.hops, o.hopDups)
}

// exact: nothing lost or misplaced, nothing written twice.
func (o outcome) exact() bool {
	return o.missing == 0 && o.wrong == 0 && o.dups == 0 && o.hopDups == 0
}

// readOutcome reads the results, DLQ and tier topics read_committed until
// every request of want is in a terminal topic (or timeout), then settle
// more for late duplicates.
func readOutcome(t *testing.T, c *kafkatest.Cluster, topic string, want map[string]string, timeout time.Duration) outcome {
	t.Helper()
	results, dead := topic+".results", topic+".dlq"
	tiers := clitest.GroupTopics(topic)[1:]
	seen := map[string]bool{}
	counted := map[string]int{}
	enough := func(got kafkatest.Got) bool {
		for _, tp := range []string{results, dead} {
			for _, r := range got[tp][counted[tp]:] {
				seen[clitest.Header(r, retry.HeaderID)] = true
			}
			counted[tp] = len(got[tp])
		}
		return len(seen) >= len(want)
	}
	got := c.CollectCommittedUntil(t, append([]string{results, dead}, tiers...), enough, timeout, 2*time.Second)
	var o outcome
	in := map[string]map[string]int{results: {}, dead: {}}
	for _, tp := range []string{results, dead} {
		for _, r := range got[tp] {
			in[tp][clitest.Header(r, retry.HeaderID)]++
		}
	}
	for id, to := range want {
		n := in[to][id]
		if n == 0 {
			o.missing++
		}
		if n > 1 {
			o.dups += n - 1
		}
		for tp, ids := range in {
			if tp != to && ids[id] > 0 {
				o.wrong++
			}
		}
	}
	attempts := map[string]int{}
	for _, tp := range tiers {
		for _, r := range got[tp] {
			m, _, _ := retry.Decode(r.Headers)
			attempts[fmt.Sprintf("%s/%d", m.ID, m.Attempt)]++
			o.hops++
		}
	}
	for _, n := range attempts {
		o.hopDups += n - 1
	}
	return o
}

// TestExactlyOnceSurvivesSIGKILL: `redrive process` handles 10,000
// requests of the mixed script (permanent, transient twice, not-ready,
// Retry-After) and is killed with SIGKILL 30 times, each time as soon as
// it has called the service for a new share of the requests (so with
// outcomes handled and not yet committed), and restarted. With
// `delivery: exactly-once` a read_committed reader finds every request in
// its terminal topic exactly once, nothing lost, and no retry hop written
// twice. The same kills at least once leave duplicates, which shows that
// the kills land where it matters.
func TestExactlyOnceSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	for _, eos := range []bool{true, false} {
		name := map[bool]string{true: "exactly-once", false: "at-least-once"}[eos]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			killedProcess(t, c, bin, eos)
		})
	}
}

func killedProcess(t *testing.T, c *kafkatest.Cluster, bin string, eos bool) {
	const n, kills = 10000, 30
	topic := kafkatest.Topic(t, "keos")
	s, url := newMixSolver(t, 5*time.Millisecond)
	cfg := eosConfig(t, c, topic, url, eos)
	want := map[string]string{}
	pcl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	if err := pcl.ProduceSync(context.Background(), mixRequests(topic, 0, n, want)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	step := n / (kills + 5)
	var killedAt []int
	start := time.Now()
	for k := range kills {
		p := clitest.StartProcess(t, bin, cfg)
		if !s.waitDistinct(s.distinct()+step, 60*time.Second) {
			t.Fatalf("run %d: the service saw %d of %d requests and no new %d in 60s:\n%s", k+1, s.distinct(), n, step, p.Log.String())
		}
		p.Kill(t)
		killedAt = append(killedAt, s.distinct())
	}
	if killedAt[kills-1] >= n {
		t.Fatalf("all %d requests reached the service before the last kill; the test proves nothing", n)
	}
	t.Logf("%d SIGKILLs in %v, the last with %d of %d requests seen by the service", kills, time.Since(start).Round(time.Second), killedAt[kills-1], n)

	last := clitest.StartProcess(t, bin, cfg)
	o := readOutcome(t, c, topic, want, 180*time.Second)
	mode := map[bool]string{true: "exactly once", false: "at least once"}[eos]
	t.Logf("%s, %d requests: read_committed: %v", mode, n, o)
	if o.missing > 0 || o.wrong > 0 {
		t.Errorf("%s: %d requests lost (in no terminal topic), %d in the wrong one:\n%s", mode, o.missing, o.wrong, last.Log.String())
	}
	if eos && (o.dups > 0 || o.hopDups > 0) {
		t.Errorf("exactly once: %d duplicate results or dead letters and %d retry hops written twice (read_committed)", o.dups, o.hopDups)
	}
	if !eos && o.dups == 0 {
		t.Errorf("at least once: no duplicate after %d kills; the kills did not land between handling and commit", kills)
	}
	last.Sigterm(t, 25*time.Second)
	group := "redrive." + topic
	if p := c.LagProblem(t, group, clitest.GroupTopics(topic), 3); p != "" {
		t.Errorf("after SIGTERM the group has not committed everything: %s", p)
	}
}

// paced produces requests from..to-1 of the mixed script, 50 every 100
// ms, in the background; the returned func waits for the last.
func paced(t *testing.T, c *kafkatest.Cluster, topic string, from, to int, want map[string]string) func() {
	t.Helper()
	var recs [][]*kgo.Record
	for i := from; i < to; i += 50 {
		recs = append(recs, mixRequests(topic, i, min(i+50, to), want))
	}
	pcl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, rs := range recs {
			if err := pcl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() { <-done }
}

// waitAssigned waits until p's log says it was assigned partitions of
// pipeline (not only an empty assignment); it fails t after timeout.
func waitAssigned(t *testing.T, p *clitest.Proc, pipeline string, timeout time.Duration) {
	t.Helper()
	want := `partitions assigned" pipeline=` + pipeline + ` partitions="map[`
	if !kafkatest.Eventually(timeout, func() bool { return strings.Contains(p.Log.String(), want) }) {
		t.Fatalf("no partition assigned within %v:\n%s", timeout, p.Log.String())
	}
}

// settledStatus waits until the processor at addr shows its one pipeline
// with nothing in flight, held, waiting or paused and the line running;
// it returns the last status read.
func settledStatus(addr string, timeout time.Duration) (processor.PipelineStatus, bool) {
	var last processor.PipelineStatus
	ok := kafkatest.Eventually(timeout, func() bool {
		var st processor.Status
		if !clitest.GetJSON("http://"+addr+"/api/pipelines", &st) || len(st.Pipelines) != 1 {
			return false
		}
		last = st.Pipelines[0]
		return last.Joined && last.Inflight == 0 && last.Held == 0 && last.Waiting == 0 &&
			last.PausedPartitions == 0 && last.Line.State == "running" && last.TransactionError == ""
	})
	return last, ok
}

// TestExactlyOnceMembersJoinAndLeave: one exactly-once processor runs
// while requests stream in; a second joins and leaves with SIGTERM, a
// third joins and is killed with SIGKILL (its open work and transaction
// are taken over after the session and transaction timeouts). Read
// read_committed: every request once, none lost; the first processor ends
// with nothing held or paused, and after its SIGTERM the group's lag is 0.
func TestExactlyOnceMembersJoinAndLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	const n = 6000 // 12 s at 500/s
	topic := kafkatest.Topic(t, "jeos")
	s, url := newMixSolver(t, 10*time.Millisecond)
	cfg := eosConfig(t, c, topic, url, true)
	want := map[string]string{}
	produced := paced(t, c, topic, 0, n, want)

	addr := clitest.FreeAddr(t)
	a := clitest.StartProcess(t, bin, cfg, "REDRIVE_INSTANCE=a", "REDRIVE_HTTP_ADDR="+addr)
	step := func(at int, what string) {
		t.Helper()
		if !s.waitDistinct(at, 90*time.Second) {
			t.Fatalf("the service saw %d requests, not %d, before %s:\n%s", s.distinct(), at, what, a.Log.String())
		}
	}
	step(n/6, "b joins")
	b := clitest.StartProcess(t, bin, cfg, "REDRIVE_INSTANCE=b")
	waitAssigned(t, b, topic, 60*time.Second)
	step(n/3, "b leaves with SIGTERM")
	b.Sigterm(t, 25*time.Second)
	step(n/2, "c joins")
	cp := clitest.StartProcess(t, bin, cfg, "REDRIVE_INSTANCE=c")
	waitAssigned(t, cp, topic, 60*time.Second)
	step(2*n/3, "c is killed")
	cp.Kill(t)
	produced()

	// c's partitions go to a after the session timeout, its open
	// transaction (if any) is aborted after the transaction timeout (30s).
	o := readOutcome(t, c, topic, want, 120*time.Second)
	t.Logf("%d requests: read_committed: %v", n, o)
	if !o.exact() {
		t.Errorf("members joining and leaving: %v\nb:\n%s\nc:\n%s\na:\n%s", o, b.Log.String(), cp.Log.String(), a.Log.String())
	}
	if st, ok := settledStatus(addr, 30*time.Second); !ok {
		t.Errorf("the remaining processor did not settle (stuck held, waiting or paused): %+v", st)
	}
	a.Sigterm(t, 25*time.Second)
	if p := c.LagProblem(t, "redrive."+topic, clitest.GroupTopics(topic), 3); p != "" {
		t.Errorf("after SIGTERM the group has not committed everything: %s", p)
	}
}

// TestExactlyOnceZombieIsFenced: of two exactly-once processors, one is
// paused with SIGSTOP past the session timeout while requests stream in,
// so the group gives its partitions to the other, and then continued with
// SIGCONT holding outcomes of partitions it no longer owns. Its
// transaction cannot commit (the group generation moved on): read
// read_committed, every request is there once and none is lost.
func TestExactlyOnceZombieIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	const n = 6000
	topic := kafkatest.Topic(t, "zeos")
	s, url := newMixSolver(t, 10*time.Millisecond)
	cfg := eosConfig(t, c, topic, url, true)
	want := map[string]string{}
	addr := clitest.FreeAddr(t)
	z := clitest.StartProcess(t, bin, cfg, "REDRIVE_INSTANCE=zombie")
	b := clitest.StartProcess(t, bin, cfg, "REDRIVE_INSTANCE=b", "REDRIVE_HTTP_ADDR="+addr)
	produced := paced(t, c, topic, 0, n, want)
	if !s.waitDistinct(n/4, 90*time.Second) {
		t.Fatalf("the service saw %d requests, not %d:\n%s\n%s", s.distinct(), n/4, z.Log.String(), b.Log.String())
	}
	waitAssigned(t, z, topic, 60*time.Second)
	waitAssigned(t, b, topic, 60*time.Second)
	if err := z.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := s.distinct()
	time.Sleep(10 * time.Second) // session_timeout 6s, and 4s for the rebalance
	if err := z.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("zombie stopped for 10s with %d requests seen; %d seen when it was continued", stoppedAt, s.distinct())
	produced()

	o := readOutcome(t, c, topic, want, 120*time.Second)
	t.Logf("%d requests: read_committed: %v", n, o)
	if !o.exact() {
		t.Errorf("after a zombie: %v\nzombie:\n%s\nother:\n%s", o, z.Log.String(), b.Log.String())
	}
	zl := z.Log.String()
	if !strings.Contains(zl, "partitions dropped") && !strings.Contains(zl, "fenced") {
		t.Errorf("the zombie's log says nothing of losing its partitions or being fenced:\n%s", zl)
	}
	t.Logf("zombie's log:\n%s", zl)
	if st, ok := settledStatus(addr, 30*time.Second); !ok {
		t.Errorf("the other processor did not settle (stuck held, waiting or paused): %+v", st)
	}
}
