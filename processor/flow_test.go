package processor_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// script is a handler that answers by the request's value: "ok",
// "transient:K" (K transient failures then success), "notready:K" (K
// not-ready answers then success), "permanent", "always" (always transient).
type script struct {
	mu    sync.Mutex
	calls map[string][]call
}

type call struct {
	at      time.Time
	attempt int
	polls   int
	state   string
	due     time.Time
	headers string // the record's headers as the handler saw them
}

func newScript() *script { return &script{calls: map[string][]call{}} }

func (s *script) Handle(_ context.Context, req *processor.Request) processor.Outcome {
	s.mu.Lock()
	s.calls[req.ID] = append(s.calls[req.ID], call{at: time.Now(), attempt: req.Attempt, polls: req.Polls, state: string(req.State), due: req.Meta.Due, headers: headerList(req.Record.Headers)})
	n := len(s.calls[req.ID])
	s.mu.Unlock()
	kind, arg, _ := strings.Cut(string(req.Record.Value), ":")
	k, _ := strconv.Atoi(arg)
	switch kind {
	case "ok":
		return processor.Outcome{Kind: processor.Success, Result: []byte("done:" + req.ID)}
	case "transient":
		if n <= k {
			return processor.Outcome{Kind: processor.Transient, Code: "http_503", Err: fmt.Errorf("503 number %d", n)}
		}
		return processor.Outcome{Kind: processor.Success, Result: []byte("done:" + req.ID)}
	case "notready":
		if n <= k {
			return processor.Outcome{Kind: processor.NotReady, Code: "CAPCHA_NOT_READY", State: []byte("task-" + req.ID)}
		}
		return processor.Outcome{Kind: processor.Success, Result: []byte("done:" + req.ID)}
	case "permanent":
		return processor.Outcome{Kind: processor.Permanent, Code: "ERROR_WRONG_USER_KEY", Err: fmt.Errorf("bad key")}
	case "always":
		return processor.Outcome{Kind: processor.Transient, Code: "ERROR_NO_SLOT_AVAILABLE"}
	}
	return processor.Outcome{Kind: processor.Invalid, Code: "unknown_script"}
}

// headerList is hs as "key=value" pairs in order.
func headerList(hs []kgo.RecordHeader) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%s=%s;", h.Key, h.Value)
	}
	return b.String()
}

// flowCase is one kind of request of the flow test and where it must end.
type flowCase struct {
	script   string
	topic    string // results or dlq
	reason   string
	attempts int
	polls    int
	calls    int
}

// TestFlowOutcomesHeadersAndSchedule runs ten requests of each outcome
// through one processor, then checks each promise about them in its own
// case.
func TestFlowOutcomesHeadersAndSchedule(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 2 * time.Second}, 3)
	s := newScript()
	e.Start(s)

	cases := []flowCase{
		{"ok", e.P.Results, "", 1, 0, 1},
		{"transient:1", e.P.Results, "", 2, 0, 2},
		{"transient:2", e.P.Results, "", 3, 0, 3},
		{"notready:2", e.P.Results, "", 1, 2, 3},
		{"permanent", e.P.DLQ, "permanent", 1, 0, 1},
		{"always", e.P.DLQ, "exhausted", 3, 0, 3},
	}
	const per = 10
	var recs []*kgo.Record
	wants := map[string]flowCase{}
	for i := 0; i < per; i++ {
		for j, c := range cases {
			id := fmt.Sprintf("req-%d-%d", i, j)
			wants[id] = c
			recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(id), Value: []byte(c.script), Headers: []kgo.RecordHeader{
				{Key: "idempotency-key", Value: []byte(id)},
				{Key: "trace", Value: []byte("t1")},
				{Key: "trace", Value: []byte("t2")},
			}})
		}
	}
	e.Produce(recs...)
	nRes, nDLQ := 0, 0
	for _, c := range wants {
		if c.topic == e.P.Results {
			nRes++
		} else {
			nDLQ++
		}
	}
	terminal := kafkatest.Got{
		e.P.Results: e.CollectN(e.P.Results, nRes, 60*time.Second, 2*time.Second),
		e.P.DLQ:     e.CollectN(e.P.DLQ, nDLQ, 30*time.Second, time.Second),
	}
	// each calls f for every terminal record of a known request in the
	// topic it must end in (the first case reports the others).
	each := func(f func(id string, w flowCase, r *kgo.Record)) {
		for _, topic := range []string{e.P.Results, e.P.DLQ} {
			for _, r := range terminal[topic] {
				id, _ := kafkatest.Header(r, retry.HeaderID)
				if w, ok := wants[id]; ok && w.topic == topic {
					f(id, w, r)
				}
			}
		}
	}

	t.Run("every request reaches its terminal topic exactly once", func(t *testing.T) {
		seen := map[string]int{}
		for _, topic := range []string{e.P.Results, e.P.DLQ} {
			for _, r := range terminal[topic] {
				id, _ := kafkatest.Header(r, retry.HeaderID)
				seen[id]++
				w, ok := wants[id]
				if !ok {
					t.Errorf("%s: record with unknown id %q", topic, id)
				} else if w.topic != topic {
					t.Errorf("%s (%s) ended in %s, want %s", id, w.script, topic, w.topic)
				}
			}
		}
		for id := range wants {
			if seen[id] != 1 {
				t.Errorf("%s (%s): reached a terminal topic %d times, want 1", id, wants[id].script, seen[id])
			}
		}
	})

	t.Run("terminal records keep the key and count the attempts", func(t *testing.T) {
		each(func(id string, w flowCase, r *kgo.Record) {
			if string(r.Key) != id {
				t.Errorf("%s: key %q changed", id, r.Key)
			}
			if a, _ := kafkatest.Header(r, retry.HeaderAttempt); a != strconv.Itoa(w.attempts) {
				t.Errorf("%s (%s): redrive-attempt %s, want %d", id, w.script, a, w.attempts)
			}
		})
	})

	t.Run("dead letters keep the value and carry reason and error headers", func(t *testing.T) {
		each(func(id string, w flowCase, r *kgo.Record) {
			if w.topic != e.P.DLQ {
				return
			}
			if string(r.Value) != w.script {
				t.Errorf("%s: dead letter value %q, want %q", id, r.Value, w.script)
			}
			if reason, _ := kafkatest.Header(r, retry.HeaderReason); reason != w.reason {
				t.Errorf("%s: reason %q, want %q", id, reason, w.reason)
			}
			for _, h := range []string{retry.HeaderError, retry.HeaderErrorCode, retry.HeaderErrorClass, retry.HeaderGroup, retry.HeaderInstance, retry.HeaderFirstErrorAt, retry.HeaderLastErrorAt} {
				if _, ok := kafkatest.Header(r, h); !ok {
					t.Errorf("%s: dead letter lacks %s", id, h)
				}
			}
		})
	})

	t.Run("terminal records name the origin topic", func(t *testing.T) {
		each(func(id string, _ flowCase, r *kgo.Record) {
			if ot, _ := kafkatest.Header(r, retry.HeaderOriginTopic); ot != e.P.Topic {
				t.Errorf("%s: origin topic %q", id, ot)
			}
		})
	})

	t.Run("the handler sees the user's headers only, at every attempt and poll", func(t *testing.T) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for id, c := range wants {
			want := "idempotency-key=" + id + ";trace=t1;trace=t2;"
			for i, call := range s.calls[id] {
				if call.headers != want {
					t.Errorf("%s (%s) call %d: headers %q, want %q", id, c.script, i+1, call.headers, want)
				}
			}
		}
	})

	t.Run("user headers arrive in order and redrive headers once", func(t *testing.T) {
		each(func(id string, _ flowCase, r *kgo.Record) {
			var traces []string
			for _, h := range r.Headers {
				if h.Key == "trace" {
					traces = append(traces, string(h.Value))
				}
				if strings.HasPrefix(h.Key, retry.HeaderPrefix) && kafkatest.CountHeader(r, h.Key) != 1 {
					t.Errorf("%s: header %s appears %d times", id, h.Key, kafkatest.CountHeader(r, h.Key))
				}
			}
			if strings.Join(traces, ",") != "t1,t2" {
				t.Errorf("%s: user headers %v, want t1,t2 in order", id, traces)
			}
		})
	})

	// Handler calls follow the schedule, never before due.
	s.mu.Lock()
	calls := s.calls
	s.mu.Unlock()

	t.Run("the handler is called as often as the schedule says", func(t *testing.T) {
		for id, w := range wants {
			if len(calls[id]) != w.calls {
				t.Errorf("%s (%s): %d handler calls, want %d", id, w.script, len(calls[id]), w.calls)
			}
		}
	})

	t.Run("no retry is handled before its due time or its tier delay", func(t *testing.T) {
		for id := range wants {
			cs := calls[id]
			for i, c := range cs {
				if !c.due.IsZero() && c.at.Before(c.due) {
					t.Errorf("%s: call %d at %v, before its due time %v", id, i+1, c.at, c.due)
				}
				if i > 0 {
					gap := c.at.Sub(cs[i-1].at)
					if gap < 900*time.Millisecond {
						t.Errorf("%s: call %d only %v after the previous one (tier is 1s)", id, i+1, gap)
					}
				}
			}
		}
	})

	t.Run("a not-ready poll gets the state of the previous answer", func(t *testing.T) {
		for id, w := range wants {
			for i, c := range calls[id] {
				if strings.HasPrefix(w.script, "notready") && i > 0 && c.state != "task-"+id {
					t.Errorf("%s: poll %d got state %q", id, i, c.state)
				}
			}
		}
	})
}

// TestFlowOutcomeRecordsKeepTheirOwnHeaders runs thousands of requests
// through at once, half of them polled once through a tier (not ready,
// then done), so that outcome records are built while others are still
// being written: each result must carry its own request's id, user
// header, value and poll count, none of another's. Both deliveries: their
// outcome records are written and put back at different points.
func TestFlowOutcomeRecordsKeepTheirOwnHeaders(t *testing.T) {
	for _, d := range []processor.Delivery{processor.AtLeastOnce, processor.ExactlyOnce} {
		t.Run(string(d), func(t *testing.T) {
			e := newEnv(t, []time.Duration{time.Second}, 3)
			e.P.Delivery = d
			e.Start(newScript())

			const n = 4000
			recs := make([]*kgo.Record, 0, n)
			polls := map[string]int{}
			for i := range n {
				id := fmt.Sprintf("load-%d", i)
				script := "ok"
				if i%2 == 1 {
					script = "notready:1"
				}
				polls[id] = i % 2
				recs = append(recs, &kgo.Record{Topic: e.P.Topic, Key: []byte(id), Value: []byte(script), Headers: []kgo.RecordHeader{
					{Key: "idempotency-key", Value: []byte(id)},
					{Key: "req", Value: []byte("user-" + id)},
				}})
			}
			e.Produce(recs...)
			// read_committed: what an exactly-once pipeline promises.
			got := collectCommitted(t, e, []string{e.P.Results}, func(g kafkatest.Got) bool {
				return len(g[e.P.Results]) >= n
			}, 60*time.Second, 2*time.Second)[e.P.Results]

			seen := map[string]bool{}
			for _, r := range got {
				id, _ := kafkatest.Header(r, retry.HeaderID)
				want, ok := polls[id]
				switch {
				case !ok:
					t.Errorf("result with unknown id %q (key %q)", id, r.Key)
					continue
				case seen[id]:
					t.Errorf("%s: more than one result", id)
				}
				seen[id] = true
				if string(r.Key) != id {
					t.Errorf("%s: key %q", id, r.Key)
				}
				if string(r.Value) != "done:"+id {
					t.Errorf("%s: value %q", id, r.Value)
				}
				if u, _ := kafkatest.Header(r, "req"); u != "user-"+id {
					t.Errorf("%s: user header req=%q", id, u)
				}
				if p, _ := kafkatest.Header(r, retry.HeaderPolls); p != strconv.Itoa(want) && (want != 0 || p != "") {
					t.Errorf("%s: redrive-polls %q, want %d", id, p, want)
				}
			}
			if len(seen) != n {
				t.Errorf("%d of %d requests have a result", len(seen), n)
			}
		})
	}
}
