package analyzer_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

var (
	probeN     = flag.Int("memprobe.n", 2000, "dead letters of TestDeadLettersMemoryBoundedByBytes")
	probeValue = flag.Int("memprobe.value", 64<<10, "their value size in bytes (the issue's probe: -memprobe.n 200 -memprobe.value 900000)")
)

// heapBytes is the Go heap's object bytes (live and not yet collected),
// read without stopping the world.
func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// fillBig produces n dead letters with valueSize-byte text values to e's
// DLQ, asynchronously, and waits for all of them.
func (e *env) fillBig(n, valueSize int) {
	e.t.Helper()
	value := bytes.Repeat([]byte("0123456789abcdef"), valueSize/16+1)[:valueSize]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var failed atomic.Value
	now := time.Now()
	for i := range n {
		src := &kgo.Record{Topic: e.main, Partition: int32(i % 2), Offset: int64(i), Key: []byte(fmt.Sprintf("key-%d", i)), Value: value}
		m := retry.Meta{ID: fmt.Sprintf("big-%d", i), Attempt: 3, HasOrigin: true, OriginTopic: e.main, OriginOffset: int64(i), OriginTimestamp: now,
			ErrorClass: retry.ClassTransient, ErrorCode: "http_503", Error: "failed: http_503", Reason: "exhausted"}
		r := dlq.Build(src, m, nil, dlq.BuildOptions{Topic: e.dlqName, Group: "redrive.x", Instance: "i"})
		e.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := e.cl.Flush(ctx); err != nil {
		e.t.Fatalf("flush: %v", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

// TestDeadLettersMemoryBoundedByBytes is a probe of many large dead letters, scaled
// down for CI: 2,000 dead letters with 64 KiB values (128 MiB of values),
// then four parallel GET /api/deadletters?limit=10000. The analyzer's heap
// (over what the test and an in-process broker held before it started)
// must stay bounded by bytes: what it retains after reading the DLQ, and
// its peak while the four requests are answered. Before the fix the recent
// list held every full value (≈ 128 MiB retained) and each response
// carried all of them (peak ≈ 1 GiB).
func TestDeadLettersMemoryBoundedByBytes(t *testing.T) {
	n, valueSize := *probeN, *probeValue
	const (
		// The stated bounds: the recent list keeps ~1 KiB per dead letter
		// (a few MiB here) and each response is bounded by bytes.
		maxRetained = 24 << 20
		maxPeak     = 64 << 20
	)
	defer debug.SetGCPercent(debug.SetGCPercent(25)) // less garbage slack: the peak is closer to what is live
	e := newEnv(t)
	e.fillBig(n, valueSize)
	runtime.GC()
	base0 := heapBytes()

	base, _ := e.start(nil, nil, "")
	waitStats(t, base, int64(n))
	// "After reading" means both readers: the rule worker reads the DLQ
	// too, and while it lags it legitimately holds its polled and buffered
	// fetches (up to 2 × 32 MiB), which a loaded machine caught here.
	group := topics.AnalyzerGroupID(e.main)
	if !kafkatest.Eventually(60*time.Second, func() bool { return e.c.LagProblem(t, group, []string{e.dlqName}, 2) == "" }) {
		t.Fatalf("the rule worker did not read the DLQ: %s", e.c.LagProblem(t, group, []string{e.dlqName}, 2))
	}
	runtime.GC()
	retained := heapBytes() - base0

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if h := heapBytes(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var wg sync.WaitGroup
	sizes := make([]int64, 4)
	codes := make([]int, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(base + "/api/deadletters?limit=10000")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			codes[i] = resp.StatusCode
			sizes[i], _ = io.Copy(io.Discard, resp.Body)
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	peakDelta := peak.Load() - base0
	var rss string
	if b, err := readStatus(); err == nil {
		rss = b
	}
	t.Logf("%d dead letters × %d-byte values: heap before the analyzer %.1f MiB; retained by it after reading %.1f MiB; peak over the 4 parallel requests %.1f MiB; responses %v bytes, statuses %v; %s",
		n, valueSize, mib(base0), mib(retained), mib(peakDelta), sizes, codes, rss)
	if retained > maxRetained {
		t.Errorf("the analyzer retains %.1f MiB after reading %d dead letters, want under %.0f MiB (the recent list must keep bounded prefixes)", mib(retained), n, mib(maxRetained))
	}
	if peakDelta > maxPeak {
		t.Errorf("the heap peaked %.1f MiB over its start during four parallel limit=10000 requests, want under %.0f MiB", mib(peakDelta), mib(maxPeak))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// readStatus is the process's VmRSS and VmHWM (Linux), for the log only:
// the test binary holds the in-process broker too.
func readStatus() (string, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("VmRSS:")) || bytes.HasPrefix(l, []byte("VmHWM:")) {
			out = append(out, string(bytes.Join(bytes.Fields(l), []byte(" "))))
		}
	}
	return fmt.Sprint(out), nil
}
