package httphandler

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/demosolver"
	"github.com/redrive/redrive/processor"
)

// TestDemoSolver drives the demo solver through the Handler the way the
// processor does: a not-ready outcome is polled with its state under the
// same attempt, a transient one is retried as the next attempt.
func TestDemoSolver(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"headers", Options{Codes: Codes{Permanent: []string{demosolver.CodeWrongUserKey}}}},
		{"json", Options{JSON: &JSONRule{OKField: "status", OKValue: 1, CodeField: "request"}}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			solver := demosolver.New(demosolver.Config{FailRate: 0.3, NotReadyRate: 0.3, PermanentRate: 0.05, Seed: 1, PollsToReady: 2})
			srv := httptest.NewServer(solver)
			defer srv.Close()
			o := mode.opts
			o.URL = srv.URL + "/solve"
			o.Timeout = 5 * time.Second
			h, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			const records, maxAttempts = 200, 6
			var solved, permanent, exhausted, polls int
			answers := map[string]string{}
			for i := range records {
				value := "captcha-" + strconv.Itoa(i%50) // values repeat; ids do not
				if i%40 == 7 {
					value = "with bad-key"
				}
				req := &processor.Request{Record: &kgo.Record{Key: []byte("k"), Value: []byte(value)}, ID: "solve/0/" + strconv.Itoa(i), Attempt: 1}
			loop:
				for {
					out := h.Handle(context.Background(), req)
					switch out.Kind {
					case processor.Success:
						var b struct {
							Status  int    `json:"status"`
							Request string `json:"request"`
						}
						if err := json.Unmarshal(out.Result, &b); err != nil || b.Status != 1 || len(b.Request) != 6 {
							t.Fatalf("result %q: %v", out.Result, err)
						}
						if prev, ok := answers[value]; ok && prev != b.Request {
							t.Fatalf("value %q solved as %q and %q", value, prev, b.Request)
						}
						answers[value] = b.Request
						solved++
						break loop
					case processor.NotReady:
						if out.Code != demosolver.CodeNotReady || len(out.State) == 0 || out.MinDelay != time.Second {
							t.Fatalf("not ready: %+v", out)
						}
						req.State, req.Polls = out.State, req.Polls+1
						polls++
					case processor.Transient:
						if out.Code != demosolver.CodeNoSlot || out.MinDelay != time.Second {
							t.Fatalf("transient: %+v", out)
						}
						if req.Attempt == maxAttempts {
							exhausted++
							break loop
						}
						req.Attempt, req.State = req.Attempt+1, nil
					case processor.Permanent:
						if out.Code != demosolver.CodeWrongUserKey {
							t.Fatalf("permanent: %+v", out)
						}
						permanent++
						break loop
					default:
						t.Fatalf("outcome %+v", out)
					}
				}
				if value == "with bad-key" && answers[value] != "" {
					t.Fatal("a bad-key value was solved")
				}
			}
			t.Run("every request ends solved permanent or exhausted and most are solved", func(t *testing.T) {
				if solved+permanent+exhausted != records || solved < records/2 || permanent < 5 || polls == 0 {
					t.Fatalf("solved %d, permanent %d, exhausted %d, polls %d", solved, permanent, exhausted, polls)
				}
			})
			st := solver.Stats()
			t.Run("the solver counts what the handler saw", func(t *testing.T) {
				if st.Solved != int64(solved) || st.Permanent != int64(permanent) || st.Polls != int64(polls) || st.Duplicates != 0 || st.Pending != 0 {
					t.Fatalf("solver stats %+v; handler saw solved %d, permanent %d, polls %d", st, solved, permanent, polls)
				}
			})
			t.Run("a redelivered request is answered from memory and not solved again", func(t *testing.T) {
				req := &processor.Request{Record: &kgo.Record{Value: []byte("captcha-0")}, ID: "solve/0/0", Attempt: 1}
				if out := h.Handle(context.Background(), req); out.Kind == processor.Success {
					if after := solver.Stats(); after.Solved != st.Solved || after.Duplicates != 1 {
						t.Fatalf("redelivery charged again: %+v", after)
					}
				}
			})
		})
	}
}
