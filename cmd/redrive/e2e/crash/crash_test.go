package crash

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// TestKilledProcessLosesNothing: a processor killed with SIGKILL again and
// again during a run of thousands of requests with failures, restarted each
// time, brings every request to a terminal topic (results or DLQ; at least
// once: duplicates counted, none lost), and a SIGTERM at the end exits 0
// with every offset committed.
func TestKilledProcessLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "crash")
	s := &clitest.Solver{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cfg := clitest.WriteConfig(t, c.Brokers, topic, srv.URL+"/solve", "    concurrency: 16\n")
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	const n, kills = 2000, 3
	want := produceMix(t, c, topic, n)
	killedAt, _ := killRuns(t, bin, cfg, n, kills, s.Distinct)
	if killedAt[len(killedAt)-1] >= n {
		t.Fatalf("all %d handled before the last kill; the test proves nothing", n)
	}

	last := clitest.StartProcess(t, bin, cfg)
	missing, wrong, dups := terminal(t, c, topic, want)
	if missing > 0 || wrong > 0 {
		t.Fatalf("after SIGKILLs at %v handled: %d of %d requests reached no terminal topic (lost), %d reached both:\n%s",
			killedAt, missing, n, wrong, last.Log.String())
	}
	t.Logf("SIGKILLed at %v of %d distinct requests handled; all %d reached their terminal topic; %d duplicates (at least once)", killedAt, n, n, dups)

	last.Sigterm(t, 25*time.Second)
	for _, tp := range []string{topic, topic + ".retry.1s", topic + ".retry.2s"} {
		if lag := c.Lag(t, "redrive."+topic, tp); lag != 0 {
			t.Errorf("after SIGTERM the group's lag on %s is %d, want 0 (everything committed)", tp, lag)
		}
	}
}

// killRuns starts `redrive process -c cfg` kills times and SIGKILLs each
// run once handled() (the distinct requests the service saw) has grown by
// n/(kills+2); it returns handled() at each kill and each run's log.
func killRuns(t *testing.T, bin, cfg string, n, kills int, handled func() int) (killedAt []int, logs []*clitest.SyncBuf) {
	t.Helper()
	for k := range kills {
		p := clitest.StartProcess(t, bin, cfg)
		logs = append(logs, p.Log)
		target := handled() + n/(kills+2)
		deadline := time.Now().Add(60 * time.Second)
		for handled() < target {
			if time.Now().After(deadline) {
				t.Fatalf("run %d handled %d of %d in 60s:\n%s", k+1, handled(), n, p.Log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.Kill(t)
		killedAt = append(killedAt, handled())
	}
	return killedAt, logs
}

func countTo(want map[string]string, topic string) int {
	n := 0
	for _, to := range want {
		if to == topic {
			n++
		}
	}
	return n
}

// produceMix produces n requests to topic: mostly "slow" (a result), every
// 10th "flaky" (one 503, then a result from the 1s tier), every 25th+1
// "wrong-key" (the DLQ). It returns id → the terminal topic expected.
func produceMix(t *testing.T, c *kafkatest.Cluster, topic string, n int) map[string]string {
	t.Helper()
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	want := map[string]string{}
	var recs []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		v, to := "slow", topic+".results"
		switch {
		case i%10 == 0:
			v = "flaky"
		case i%25 == 1:
			v, to = "wrong-key", topic+".dlq"
		}
		want[id] = to
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return want
}

// terminal reads the results and DLQ topics until every request of want
// arrived (or timeout) and counts the requests missing from their terminal
// topic, those in both, and the duplicates.
func terminal(t *testing.T, c *kafkatest.Cluster, topic string, want map[string]string) (missing, both, dups int) {
	t.Helper()
	results := collectIDs(t, c, topic+".results", countTo(want, topic+".results"), 120*time.Second)
	dead := collectIDs(t, c, topic+".dlq", countTo(want, topic+".dlq"), 60*time.Second)
	for id, to := range want {
		got := results
		if to == topic+".dlq" {
			got = dead
		}
		if got[id] == 0 {
			missing++
		}
		if results[id] > 0 && dead[id] > 0 {
			both++
		}
	}
	for _, m := range []map[string]int{results, dead} {
		for _, k := range m {
			dups += k - 1
		}
	}
	return missing, both, dups
}

// collectIDs counts records per redrive-id on topic until n distinct ids,
// then a second more for late duplicates.
func collectIDs(t *testing.T, c *kafkatest.Cluster, topic string, n int, timeout time.Duration) map[string]int {
	t.Helper()
	ids := map[string]int{}
	seen := 0
	count := func(got kafkatest.Got) map[string]int {
		for _, r := range got[topic][seen:] {
			ids[clitest.Header(r, retry.HeaderID)]++
		}
		seen = len(got[topic])
		return ids
	}
	got := c.CollectUntil(t, []string{topic}, func(got kafkatest.Got) bool { return len(count(got)) >= n }, timeout, time.Second)
	return count(got)
}
