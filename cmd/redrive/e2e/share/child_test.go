package share

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// childEnv carries a childSpec (JSON) to a re-executed test binary: set,
// TestMain runs a processor instead of the tests.
const childEnv = "REDRIVE_SHARE_TEST_CHILD"

// childSpec is what a child process runs: one pipeline, at the
// processor's defaults but for the session timeout.
type childSpec struct {
	Brokers  []string
	Pipeline processor.Pipeline
	Instance string
	// SessionTimeout of the consumer group (the tiers, and the main topic
	// in group mode): kgo's default of 45 s would leave a killed
	// replica's partitions unread that long.
	SessionTimeout time.Duration
	// Handler is "work" (workHandler) or "poison" (poisonHandler).
	Handler string
}

// Lines a child writes to stdout, each one write (atomic on a pipe).
const (
	lineInflight = "inflight " // every 100 ms: Status().Pipelines[0].Inflight
	lineJoined   = "joined"    // once: in the consumer group
	linePoison   = "poison"    // the poison record reached the handler
	lineCalled   = "called"    // once: the handler was called
)

// runChild runs the processor of spec (JSON) until SIGTERM or SIGKILL and
// returns the exit code.
func runChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		return 2
	}
	var h processor.Handler
	switch s.Handler {
	case "work":
		h = workHandler()
	case "poison":
		h = poisonHandler()
	default:
		fmt.Fprintf(os.Stderr, "child spec: handler %q\n", s.Handler)
		return 2
	}
	cfg := processor.Config{
		Brokers:        s.Brokers,
		Pipelines:      []processor.Pipeline{s.Pipeline},
		Instance:       s.Instance,
		SessionTimeout: s.SessionTimeout,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	pr, err := processor.New(cfg, h)
	if err != nil {
		fmt.Fprintln(os.Stderr, "processor.New:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go report(ctx, pr)
	if err := pr.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// report writes what the child holds every 100 ms, for the parent to read
// at a kill, and once that it joined the consumer group.
func report(ctx context.Context, pr *processor.Processor) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	joined := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := pr.Status().Pipelines[0]
		fmt.Fprintf(os.Stdout, "%s%d\n", lineInflight, st.Inflight)
		if st.Joined && !joined {
			joined = true
			fmt.Fprintln(os.Stdout, lineJoined)
		}
	}
}

// workHandler takes 5-20 ms per call and writes the request (the record's
// key) as the result; a request whose number is a multiple of 10 fails
// once (its first attempt), so that the tier is read too.
func workHandler() processor.Handler {
	var called sync.Once
	return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		called.Do(func() { fmt.Fprintln(os.Stdout, lineCalled) })
		id := string(req.Record.Key)
		select {
		case <-time.After(5*time.Millisecond + rand.N(15*time.Millisecond)):
		case <-ctx.Done():
			return processor.Retry("stopped", ctx.Err())
		}
		if failsOnce(id) && req.Attempt == 1 {
			return processor.Retry("busy", fmt.Errorf("%s: busy", id))
		}
		return processor.Succeed([]byte(id))
	})
}

// failsOnce says whether request id ("req-N") fails its first attempt.
func failsOnce(id string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "req-"))
	return err == nil && n%10 == 0
}

// poisonHandler ends the process at once on the record keyed "poison" (as
// a handler that crashes the process on some input would) and succeeds
// with the key as the result on every other record, after 1-5 ms.
func poisonHandler() processor.Handler {
	return processor.HandlerFunc(func(ctx context.Context, req *processor.Request) processor.Outcome {
		if string(req.Record.Key) == "poison" {
			fmt.Fprintln(os.Stdout, linePoison)
			os.Exit(3)
		}
		select {
		case <-time.After(time.Millisecond + rand.N(4*time.Millisecond)):
		case <-ctx.Done():
			return processor.Retry("stopped", ctx.Err())
		}
		return processor.Succeed(req.Record.Key)
	})
}

// replica is a child process running a processor.
type replica struct {
	name string
	cmd  *exec.Cmd
	out  *childOut
	done chan struct{} // closed once the process has exited
	err  error         // its Wait's error, once done
}

// startReplica starts a child running spec; the test's cleanup kills it
// if it still runs.
func startReplica(t testing.TB, spec childSpec) *replica {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: spec.Instance, out: &childOut{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin)
	r.cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	// One writer for both: one pipe, lines never cut by each other.
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// kill SIGKILLs the replica and waits until it is gone.
func (r *replica) kill(t testing.TB) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		select {
		case <-r.done: // exited already
		default:
			t.Fatalf("kill %s: %v", r.name, err)
		}
	}
	<-r.done
}

// exited says whether the process is gone.
func (r *replica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// tail is the end of the replica's output, for a failure's message.
func (r *replica) tail() string {
	s := r.out.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return fmt.Sprintf("--- %s:\n%s", r.name, s)
}

// childOut keeps a child's output and what its report lines say.
type childOut struct {
	mu       sync.Mutex
	log      bytes.Buffer
	partial  []byte
	inflight atomic.Int64
	joined   atomic.Bool
	called   atomic.Bool
	poisoned atomic.Bool
}

func (c *childOut) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		line := string(c.partial[:i])
		c.partial = c.partial[i+1:]
		switch {
		case strings.HasPrefix(line, lineInflight):
			if n, err := strconv.ParseInt(line[len(lineInflight):], 10, 64); err == nil {
				c.inflight.Store(n)
			}
			continue // 10 a second: not kept
		case line == lineJoined:
			c.joined.Store(true)
		case line == linePoison:
			c.poisoned.Store(true)
		case line == lineCalled:
			c.called.Store(true)
		}
		c.log.WriteString(line)
		c.log.WriteByte('\n')
	}
	return len(p), nil
}

func (c *childOut) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String() + string(c.partial)
}
