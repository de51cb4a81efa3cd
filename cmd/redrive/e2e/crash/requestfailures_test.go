package crash

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
)

// ownFailSolver fails about 40% of first calls for the requests' own reasons,
// chosen by the request id: 10% each 503, 500, 429 (Retry-After: 1) and
// 400. A request that failed transiently fails its second call again one
// time in four, with the same answer, then succeeds; a 400 stays a 400.
// Everything else is answered at once.
type ownFailSolver struct {
	mu    sync.Mutex
	calls map[string]int
}

// ownFate is what the solver answers id's first calls: "" (success),
// "503", "500", "429" or "400".
func ownFate(id string) (fate string, twice bool) {
	h := fnv.New32a()
	h.Write([]byte(id))
	v := h.Sum32()
	twice = v/100%4 == 0
	switch v % 100 / 10 {
	case 0:
		return "503", twice
	case 1:
		return "500", twice
	case 2:
		return "429", twice
	case 3:
		return "400", false
	}
	return "", false
}

func (s *ownFailSolver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.calls[id]++
	n := s.calls[id]
	s.mu.Unlock()
	fate, twice := ownFate(id)
	if fate == "" || fate != "400" && (n > 2 || n == 2 && !twice) {
		fmt.Fprintf(w, "solved %s", id)
		return
	}
	switch fate {
	case "429":
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	case "400":
		w.Header().Set("Redrive-Error-Code", "ERROR_BAD_PARAMETERS")
		w.WriteHeader(http.StatusBadRequest)
	case "500":
		w.WriteHeader(http.StatusInternalServerError)
	default:
		w.Header().Set("Redrive-Error-Code", "ERROR_NO_SLOT_AVAILABLE")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

func (s *ownFailSolver) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// TestRequestFailuresWithKillsAtDefaults: the `redrive process` binary at
// the shipped flow-control defaults against a service that fails about 40%
// of first calls for the requests' own reasons, SIGKILLed three times and
// restarted: every request reaches its terminal topic (the 400s the DLQ,
// all others results), and no process's breaker opens — the failures are
// the requests', not the service's.
func TestRequestFailuresWithKillsAtDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "mix40")
	s := &ownFailSolver{calls: map[string]int{}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cfg := clitest.WriteConfig(t, c.Brokers, topic, srv.URL+"/solve", "    concurrency: 16\n")
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}
	const n, kills = 3000, 3
	want := map[string]string{}
	var recs []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("mix-%d", i)
		want[id] = topic + ".results"
		if f, _ := ownFate(id); f == "400" {
			want[id] = topic + ".dlq"
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(`{"task":"` + id + `"}`),
			Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	cl := c.Client(t, kgo.ProducerLinger(time.Millisecond))
	// Produced over 6 s, so the kills land while first calls and retries
	// interleave.
	go func() {
		for i := 0; i < n; i += n / 30 {
			if err := cl.ProduceSync(context.Background(), recs[i:min(i+n/30, n)]...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	killedAt, logs := killRuns(t, bin, cfg, n, kills, s.distinct)
	last := clitest.StartProcess(t, bin, cfg)
	logs = append(logs, last.Log)
	missing, wrong, dups := terminal(t, c, topic, want)
	if missing > 0 || wrong > 0 {
		t.Fatalf("after SIGKILLs at %v handled: %d of %d requests reached no terminal topic (lost), %d reached both:\n%s",
			killedAt, missing, n, wrong, last.Log.String())
	}
	t.Logf("SIGKILLed at %v of %d distinct requests handled; all %d reached their terminal topic (%d dead letters); %d duplicates (at least once)",
		killedAt, n, n, countTo(want, topic+".dlq"), dups)
	last.Sigterm(t, 25*time.Second)
	for i, l := range logs {
		if out := l.String(); strings.Contains(out, "breaker open") {
			t.Errorf("process %d of %d opened its breaker on requests failing for their own reasons:\n%s", i+1, len(logs), out)
		}
	}
}
