package clitest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/kafkatest"
)

// SyncBuf is a bytes.Buffer safe for a process's output and a test
// reading it at once.
type SyncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is a running redrive command.
type Proc struct {
	Cmd *exec.Cmd
	Log *SyncBuf // stdout and stderr
}

// StartProcess starts `redrive process -c cfg`; env adds KEY=value pairs
// to the test's environment.
func StartProcess(t testing.TB, bin, cfg string, env ...string) *Proc {
	t.Helper()
	return Start(t, bin, env, "process", "-c", cfg)
}

// Start starts bin with args (env added to the test's environment); the
// test's cleanup kills it if it still runs.
func Start(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Log: &SyncBuf{}}
	p.Cmd = exec.Command(bin, args...)
	if len(env) > 0 {
		p.Cmd.Env = append(os.Environ(), env...)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Cmd.Process.Kill(); _, _ = p.Cmd.Process.Wait() })
	return p
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.Cmd.Wait()
}

// Sigterm sends SIGTERM and fails t unless the process exits 0 within d.
func (p *Proc) Sigterm(t testing.TB, d time.Duration) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.Cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("SIGTERM: %v (want exit 0):\n%s", err, p.Log.String())
		}
	case <-time.After(d):
		t.Fatalf("no exit within %v of SIGTERM:\n%s", d, p.Log.String())
	}
}

// WaitLog waits until the process log contains every one of parts on one
// line and returns that line.
func (p *Proc) WaitLog(t testing.TB, timeout time.Duration, parts ...string) string {
	t.Helper()
	var found string
	kafkatest.Eventually(timeout, func() bool {
		found = LineWith(p.Log.String(), parts...)
		return found != ""
	})
	if found == "" {
		t.Fatalf("no log line with %q within %v:\n%s", parts, timeout, p.Log.String())
	}
	return found
}

// LineWith is the first line of log containing every one of parts, "" if none.
func LineWith(log string, parts ...string) string {
	for l := range strings.SplitSeq(log, "\n") {
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			return l
		}
	}
	return ""
}

// RunOut runs the package's binary (Binary) with args to its exit and
// returns the exit code and what it printed, stdout and stderr together.
func RunOut(t testing.TB, ctx context.Context, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(t, ctx, args, &out, &out)
	return code, out.String()
}

// RunSplit is RunOut with stdout and stderr apart.
func RunSplit(t testing.TB, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(t, ctx, args, &o, &e)
	return code, o.String(), e.String()
}

func run(t testing.TB, ctx context.Context, args []string, stdout, stderr *bytes.Buffer) int {
	t.Helper()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	// A cancelled context stops the command as it stops the in-process
	// run: with SIGTERM, then a grace before the kill.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	}
	t.Fatalf("redrive %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
	return -1
}
