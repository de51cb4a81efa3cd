package crash

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor/control"
)

// TestReplicasRateAfterAKill: three `redrive process` with a pipeline-wide
// rate_limit of 100/s and a backlog; one is SIGKILLed (it leaves the
// group only at the session timeout, its share with it). Once the group
// has rebalanced, the two left make 100/s again; a fourth joining keeps
// it there. At no time more than 105/s over 5s.
func TestReplicasRateAfterAKill(t *testing.T) {
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "killrate")
	var mu sync.Mutex
	var calls []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		fmt.Fprint(w, "solved")
	}))
	defer srv.Close()
	cfg := clitest.WriteConfig(t, c.Brokers, topic, srv.URL+"/solve", "    rate_limit: 100/s\ncontrol: {status_interval: 1s}\n")
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	cl := c.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	recs := make([]*kgo.Record, 20000)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
	}
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*clitest.Proc{}
	start := func(name string) {
		procs[name] = clitest.StartProcess(t, bin, cfg, "REDRIVE_INSTANCE="+name)
	}
	// settled: want replicas report, each owning partitions, shares adding up.
	settled := func(want int) bool {
		return kafkatest.Eventually(40*time.Second, func() bool {
			st, _, err := control.Read(ctx, cl, control.DefaultTopic)
			if err != nil {
				return false
			}
			n, sum := 0, 0.0
			for _, r := range st.Replicas(time.Now()) {
				if r.Pipeline != topic || time.Since(r.Seen) > 1500*time.Millisecond {
					continue
				}
				if r.Partitions == 0 {
					return false
				}
				n++
				sum += r.Share
			}
			return n == want && math.Abs(sum-1) < 0.01
		})
	}
	measure := func(what string, d time.Duration) {
		t.Helper()
		from := time.Now()
		time.Sleep(d)
		to := time.Now()
		mu.Lock()
		var at []time.Time
		for _, c := range calls {
			if !c.Before(from) && c.Before(to) {
				at = append(at, c)
			}
		}
		mu.Unlock()
		most := mostIn5s(at)
		avg := float64(len(at)) / to.Sub(from).Seconds()
		t.Logf("%s: %.1f calls/s on average over %v, at most %.1f/s over 5s", what, avg, d, float64(most)/5)
		if float64(most)/5 > 105 {
			t.Errorf("%s: %.1f calls/s over 5s, want at most 105", what, float64(most)/5)
		}
		if avg < 90 || avg > 110 {
			t.Errorf("%s: %.1f calls/s on average, want 100 ±10%%", what, avg)
		}
	}
	for _, n := range []string{"a", "b", "c"} {
		start(n)
	}
	if !settled(3) {
		t.Fatal("three replicas did not settle")
	}
	measure("three replicas", 8*time.Second)
	killed := time.Now()
	procs["c"].Kill(t)
	if !settled(2) {
		t.Fatal("the two replicas left did not settle after the kill")
	}
	t.Logf("the group rebalanced %v after the kill (session timeout 6s)", time.Since(killed).Round(100*time.Millisecond))
	measure("after a SIGKILL", 8*time.Second)
	start("d")
	if !settled(3) {
		t.Fatal("a replica joining did not settle")
	}
	measure("a third joined", 8*time.Second)
	start("e")
	if !settled(4) {
		t.Fatal("a fourth replica did not settle")
	}
	measure("a fourth joined", 8*time.Second)
	// `redrive status` lists every replica with its share; the killed one
	// as stale, the others' shares making the whole.
	code, out := clitest.RunOut(t, ctx, "status", "-c", cfg, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, out)
	}
	var st struct {
		Pipelines []struct {
			Name     string            `json:"name"`
			Replicas []control.Replica `json:"replicas"`
		} `json:"pipelines"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil || len(st.Pipelines) != 1 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	live, stale, sum := 0, map[string]bool{}, 0.0
	for _, r := range st.Pipelines[0].Replicas {
		if r.Stale {
			stale[r.Instance] = true
			continue
		}
		live++
		sum += r.Share
	}
	t.Logf("redrive status: %d live replicas, shares adding up to %.3f, stale %v", live, sum, stale)
	if live != 4 || math.Abs(sum-1) > 0.01 || !stale["c"] {
		t.Errorf("redrive status: %d live replicas with shares adding up to %.3f, stale %v; want 4, 1, and c stale:\n%s", live, sum, stale, out)
	}
	// Any 5s since the start: never over 105/s, the kill and joins included.
	mu.Lock()
	all := slices.Clone(calls)
	mu.Unlock()
	if most := mostIn5s(all); float64(most)/5 > 105 {
		t.Errorf("%.1f calls/s over some 5s of the run, want at most 105", float64(most)/5)
	}
}

// mostIn5s is the most calls started in any 5s among at (sorted here).
func mostIn5s(at []time.Time) int {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= 5*time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
