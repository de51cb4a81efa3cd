package clitest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
)

// Solver is a scripted HTTP solver (Answer) that counts calls per
// Idempotency-Key. The zero Solver is ready.
type Solver struct {
	mu    sync.Mutex
	calls map[string]int // by Idempotency-Key
}

func (s *Solver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[id]++
	n := s.calls[id]
	s.mu.Unlock()
	Answer(w, string(body), n)
}

// Answer is the scripted solver's answer to the call-th call of a request
// whose body is v: "slow…" solved after 20 ms, "flaky" a 503 the first
// time, "wrong-key" a permanent 400, anything else solved at once.
func Answer(w http.ResponseWriter, v string, call int) {
	switch {
	case strings.HasPrefix(v, "slow"):
		time.Sleep(20 * time.Millisecond)
		fmt.Fprintf(w, "solved %s", v)
	case v == "flaky" && call == 1:
		w.Header().Set("Redrive-Error-Code", "ERROR_NO_SLOT_AVAILABLE")
		w.WriteHeader(503)
	case v == "wrong-key":
		w.Header().Set("Redrive-Error-Code", "ERROR_WRONG_USER_KEY")
		w.WriteHeader(400)
	default:
		fmt.Fprintf(w, "solved %s", v)
	}
}

// Count is how many calls the request with Idempotency-Key id made.
func (s *Solver) Count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

// Distinct is how many distinct requests called.
func (s *Solver) Distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// Header is r's header k, "" without one.
func Header(r *kgo.Record, k string) string {
	v, _ := kafkatest.Header(r, k)
	return v
}
