package crash

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// TestAnalyzerKilledRepublishesOnce: `redrive analyze` republishes
// dead letters by a rule while they stream into the DLQ, and is killed
// with SIGKILL again and again, each time as soon as its new run has
// written a republished record (so, mostly, inside its first
// transaction, between republish and commit), and restarted. With
// `delivery: exactly-once` a read_committed reader of the republish
// target sees every rule-matched dead letter exactly once and nothing
// else. The same kills at least once (delivery unset) leave duplicates,
// which shows that the kills land where it matters.
func TestAnalyzerKilledRepublishesOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	for _, eos := range []bool{true, false} {
		name := "at-least-once"
		if eos {
			name = "exactly-once"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			killedRepublish(t, c, bin, eos)
		})
	}
}

func killedRepublish(t *testing.T, c *kafkatest.Cluster, bin string, eos bool) {
	topic := kafkatest.Topic(t, "aeos")
	target := topic + ".redriven"
	delivery := ""
	if eos {
		delivery = "    delivery: exactly-once\n"
	}
	y := fmt.Sprintf(`brokers: [%q]
http_addr: "127.0.0.1:0"
session_timeout: 6s
instance: test
pipelines:
  - name: %s
    topic: %s
    partitions: 3
    retry: {tiers: [1s], max_attempts: 2}
%sanalyzer:
  http_addr: "127.0.0.1:0"
  rules:
    - name: again
      match: {codes: [ERROR_NO_SLOT_AVAILABLE]}
      action: republish
      to: %s
`, c.Brokers[0], topic, topic, delivery, target)
	cfg := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	c.CreateTopic(t, target, 3, nil)

	// 1000 dead letters of 8 KB, 25 every 400 ms (16 s): every 5th is
	// kept, the rest match the rule. At 8 KB a transaction of a few
	// hundred takes long enough for a kill to land inside it.
	const n = 1000
	value := bytes.Repeat([]byte("x"), 8<<10)
	want := map[string]bool{}
	for i := range n {
		if i%5 != 4 {
			want[fmt.Sprintf("dl-%d", i)] = true
		}
	}
	pcl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i += 25 {
			var rs []*kgo.Record
			for j := i; j < i+25; j++ {
				code := "ERROR_NO_SLOT_AVAILABLE"
				if j%5 == 4 {
					code = "ERROR_WRONG_USER_KEY"
				}
				id := fmt.Sprintf("dl-%d", j)
				src := &kgo.Record{Topic: topic, Key: []byte(id), Value: value}
				m := retry.Meta{ID: id, Attempt: 2, ErrorClass: retry.ClassTransient, ErrorCode: code, Reason: "exhausted"}
				rs = append(rs, dlq.Build(src, m, nil, dlq.BuildOptions{Topic: topic + ".dlq", Group: "redrive." + topic, Instance: "test"}))
			}
			if err := pcl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(400 * time.Millisecond)
		}
	}()
	defer wg.Wait()

	// written counts what the analyzer wrote to target, committed or not.
	written := newTargetCounter(t, c, target, false)
	const kills = 3
	var killedAt []int
	for k := range kills {
		p := startAnalyze(t, bin, cfg)
		from := written.total()
		if k == 0 {
			from = 200 // the first run republishes 200 before its kill
		}
		if !written.waitPast(from, 60*time.Second) {
			t.Fatalf("run %d wrote nothing past %d republished records in 60s:\n%s", k+1, from, p.Log.String())
		}
		p.Kill(t)
		killedAt = append(killedAt, written.total())
	}
	last := startAnalyze(t, bin, cfg)
	ids := []string{}
	for id := range want {
		ids = append(ids, id)
	}
	committed := newTargetCounter(t, c, target, true)
	if !kafkatest.Eventually(60*time.Second, func() bool { return committed.has(ids) }) {
		t.Errorf("after the kills not every rule-matched dead letter was republished (read_committed) within 60s")
	}
	wg.Wait()
	last.Sigterm(t, 25*time.Second)
	// Every transaction has ended now; a second without a new record
	// for late duplicates.
	committed.settle(time.Second, 15*time.Second)

	got := committed.counts()
	missing, dups, foreign := 0, 0, 0
	for id := range want {
		switch c := got[id]; {
		case c == 0:
			missing++
		case c > 1:
			dups += c - 1
		}
	}
	for id := range got {
		if !want[id] {
			foreign++
		}
	}
	aborted := written.total() - committed.total()
	t.Logf("%s: killed when the target held %v records (committed or not); read_committed: %d distinct of %d, %d duplicates; %d written records were aborted",
		map[bool]string{true: "exactly once", false: "at least once"}[eos], killedAt, len(got), len(want), dups, aborted)
	if missing > 0 || foreign > 0 {
		t.Errorf("%d rule-matched dead letters never republished, %d republished that no rule matched", missing, foreign)
	}
	if eos && dups > 0 {
		t.Errorf("exactly once: %d duplicates in the republish target (read_committed)", dups)
	}
	if !eos && dups == 0 {
		t.Errorf("at least once: no duplicate after %d kills between republish and commit; the kills did not land where the exactly-once run needs them", kills)
	}
}

func startAnalyze(t *testing.T, bin, cfg string) *clitest.Proc {
	t.Helper()
	return clitest.Start(t, bin, nil, "analyze", "-c", cfg)
}

// targetCounter reads a topic from its start in the background and counts
// its records by redrive-id; committed: read_committed.
type targetCounter struct {
	mu      sync.Mutex
	ids     map[string]int
	n       int
	changed chan struct{} // a send after each poll that counted records
}

func newTargetCounter(t *testing.T, c *kafkatest.Cluster, topic string, committed bool) *targetCounter {
	t.Helper()
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl := c.Client(t, opts...)
	tc := &targetCounter{ids: map[string]int{}, changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			tc.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				m, _, _ := retry.Decode(r.Headers)
				tc.ids[m.ID]++
				tc.n++
			})
			tc.mu.Unlock()
			if fs.NumRecords() > 0 {
				select {
				case tc.changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return tc
}

// waitPast waits until more than n records were counted (false: not
// within timeout), and returns as soon as the poll that counted them did.
func (tc *targetCounter) waitPast(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for tc.total() <= n {
		select {
		case <-tc.changed:
		case <-deadline:
			return false
		}
	}
	return true
}

// settle waits until no record came for quiet (at most max).
func (tc *targetCounter) settle(quiet, max time.Duration) {
	n, since := tc.total(), time.Now()
	for end := time.Now().Add(max); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if m := tc.total(); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
	}
}

func (tc *targetCounter) total() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.n
}

func (tc *targetCounter) has(ids []string) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, id := range ids {
		if tc.ids[id] == 0 {
			return false
		}
	}
	return true
}

func (tc *targetCounter) counts() map[string]int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	out := make(map[string]int, len(tc.ids))
	for id, n := range tc.ids {
		out[id] = n
	}
	return out
}
