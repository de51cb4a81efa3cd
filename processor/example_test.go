package processor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/retry"
)

// Errors of the service the examples' handler calls.
var (
	errBadRequest = errors.New("the service cannot read the request")
	errNotReady   = errors.New("accepted, not solved yet")
)

// solve stands for the service a handler calls: it answers, fails, or has
// accepted the task and wants to be asked again.
func solve(ctx context.Context, request []byte, id string) ([]byte, error) {
	return []byte("answer to " + id), ctx.Err()
}

// Embedding: one pipeline, a handler that answers with the Outcome
// constructors, and Run until SIGTERM. README.md shows this function's body.
func Example() {
	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		answer, err := solve(ctx, req.Record.Value, req.ID) // req.ID is stable across retries: an idempotency key
		switch {
		case err == nil:
			return processor.Succeed(answer) // to the results topic
		case errors.Is(err, errNotReady):
			return processor.Poll(req.State, 10*time.Second) // ask again in 10s, no attempt spent
		case errors.Is(err, errBadRequest):
			return processor.Fail("bad_request", err) // to the DLQ at once
		default:
			return processor.Retry("provider_down", err) // next tier; the DLQ after MaxAttempts
		}
	})
	pr, err := processor.New(processor.Config{
		Brokers: []string{"127.0.0.1:9092"},
		Pipelines: []processor.Pipeline{{Name: "solve", Topic: "solve.requests", Results: "solve.results",
			Schedule: retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 4, Jitter: 0.1}}},
	}, h)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pr.Run(ctx); err != nil { // until ctx is cancelled; then drains, commits, leaves the group
		log.Fatal(err)
	}
}

// Each constructor's record ends where its Kind says, shown against an
// in-process broker (kfake): a success goes to the results topic at once, a
// Retry after its first tier, a Poll after one poll, a Fail to the DLQ.
func Example_outcomes() {
	p := processor.Pipeline{Name: "solve", Topic: "solve.requests", Results: "solve.results", DLQ: "solve.requests.dlq",
		Schedule: retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 3}}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, append([]string{p.Topic, p.Results, p.DLQ}, p.TierTopics()...)...))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	h := processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		switch v := string(req.Record.Value); {
		case v == "flaky" && req.Attempt == 1:
			return processor.Retry("http_503", errors.New("503: no slot"))
		case v == "slow" && req.State == nil:
			return processor.Poll([]byte("task-7"), 0)
		case v == "slow":
			return processor.Succeed([]byte("solved " + string(req.State)))
		case v == "bad":
			return processor.Fail("ERROR_WRONG_USER_KEY", errors.New("wrong key"))
		default:
			return processor.Succeed([]byte("solved " + v))
		}
	})
	pr, err := processor.New(processor.Config{
		Brokers:   c.ListenAddrs(),
		Pipelines: []processor.Pipeline{p},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, h)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := pr.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(p.Results, p.DLQ))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, v := range []string{"ok", "flaky", "slow", "bad"} {
		recs = append(recs, &kgo.Record{Topic: p.Topic, Key: []byte(v), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		log.Fatal(err)
	}
	var lines []string
	deadline, stopWaiting := context.WithTimeout(ctx, time.Minute)
	defer stopWaiting()
	for len(lines) < len(recs) && deadline.Err() == nil {
		cl.PollFetches(deadline).EachRecord(func(r *kgo.Record) {
			m, _, _ := retry.Decode(r.Headers)
			if r.Topic == p.DLQ {
				lines = append(lines, fmt.Sprintf("dlq     %-5s reason=%s code=%s attempts=%d", r.Key, m.Reason, m.ErrorCode, m.Attempt))
				return
			}
			lines = append(lines, fmt.Sprintf("results %-5s %q attempts=%d polls=%d", r.Key, r.Value, m.Attempt, m.Polls))
		})
	}
	cancel()
	wg.Wait()
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// dlq     bad   reason=permanent code=ERROR_WRONG_USER_KEY attempts=1
	// results flaky "solved flaky" attempts=2 polls=0
	// results ok    "solved ok" attempts=1 polls=0
	// results slow  "solved task-7" attempts=1 polls=1
}
