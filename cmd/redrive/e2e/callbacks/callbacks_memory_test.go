package callbacks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// Anyone who reaches a callback path can write the callbacks topic, and
// every replica holds what it reads there. A flood of the largest
// callbacks the intake takes, and of larger ones it must refuse, grows a
// processor by at most its byte bound (handler.callback.max_bytes, the
// default) and 50 MB, while it takes them and again after a SIGKILL, when
// the restarted process re-reads them all.
func TestCallbackFloodStaysWithinTheByteBound(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := kafkatest.New(t)
	bin := clitest.Binary(t)
	topic := kafkatest.Topic(t, "cbflood")
	cbAddr := clitest.FreeAddr(t)
	// Loopback without a token: the processor says so and starts; a flood
	// by whoever reaches it is what the bound is for.
	y := fmt.Sprintf(`brokers: [%q]
http_addr: "127.0.0.1:0"
callback_addr: %q
instance: flood
pipelines:
  - topic: %s
    handler:
      http:
        url: "http://127.0.0.1:1/in"
        poll: {url: "http://127.0.0.1:1/res?id={state}", state_field: request}
      callback: {path: /cb, error_field: error}
`, c.Brokers[0], cbAddr, topic)
	cfg := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("ensure: %s", out)
	}

	p := clitest.StartProcess(t, bin, cfg)
	clitest.CallUntilOK(t, "http://"+cbAddr+"/cb")
	p.WaitLog(t, 60*time.Second, "callbacks read")
	if !strings.Contains(p.Log.String(), "callback intake without a token") {
		t.Errorf("a tokenless path on loopback started without a warning:\n%s", p.Log.String())
	}
	time.Sleep(time.Second)
	base := rss(t, p)
	const bound = processor.DefaultCallbackBytes
	limit := base + bound + 50<<20

	// The shape: a 4,000-byte id and a 60,000-byte code in the
	// query, a 60,000-byte error in the body (each under max_body_bytes):
	// refused, over max_result_bytes. Then the largest taken: a 4,000-byte
	// id, a 32 KiB result and a 4 KiB error.
	const n = 2500
	peak := sampleRSS(t, p)
	statuses := flood(t, cbAddr, n, func(i int) (string, string) {
		q := url.Values{"id": {fmt.Sprintf("%06d", i) + strings.Repeat("i", 3994)}, "code": {strings.Repeat("c", 60_000)}}
		return q.Encode(), url.Values{"error": {strings.Repeat("e", 60_000)}}.Encode()
	})
	if statuses[http.StatusRequestEntityTooLarge] != n {
		t.Errorf("callbacks with a 60,000-byte result: answers %v, want %d × 413", statuses, n)
	}
	statuses = flood(t, cbAddr, n, func(i int) (string, string) {
		q := url.Values{"id": {fmt.Sprintf("%06d", i) + strings.Repeat("j", 3994)}, "code": {strings.Repeat("c", 32<<10)}}
		return q.Encode(), url.Values{"error": {strings.Repeat("e", 4<<10)}}.Encode()
	})
	if statuses[http.StatusOK] != n {
		t.Fatalf("callbacks at the field limits: answers %v, want %d × 200", statuses, n)
	}
	time.Sleep(3 * time.Second) // the reader takes the last ones in
	held := heldBytes(t, p)
	max1 := peak()
	t.Logf("base RSS %d MB; peak while flooded %d MB; held %d bytes (bound %d)", base>>20, max1>>20, held, bound)
	if held <= 0 || held > bound {
		t.Errorf("redrive_callbacks_held_bytes = %d, want within (0, %d]", held, bound)
	}
	if max1 > limit {
		t.Errorf("RSS peaked at %d MB while flooded, more than %d MB (base %d + bound %d + 50)", max1>>20, limit>>20, base>>20, bound>>20)
	}

	// A restart re-reads the topic (every callback of the last wait+5m).
	p.Kill(t)
	p = clitest.StartProcess(t, bin, cfg)
	peak = sampleRSS(t, p)
	p.WaitLog(t, 60*time.Second, "callbacks read")
	time.Sleep(5 * time.Second)
	held = heldBytes(t, p)
	max2 := peak()
	t.Logf("after the restart: peak RSS %d MB; held %d bytes", max2>>20, held)
	if held <= 0 || held > bound {
		t.Errorf("after the restart redrive_callbacks_held_bytes = %d, want within (0, %d]", held, bound)
	}
	if max2 > limit {
		t.Errorf("RSS peaked at %d MB re-reading the callbacks, more than %d MB (base %d + bound %d + 50)", max2>>20, limit>>20, base>>20, bound>>20)
	}
}

// flood sends n callbacks (query and form body of each from req), eight
// at a time, and counts the answers by status.
func flood(t *testing.T, addr string, n int, req func(i int) (query, body string)) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				q, b := req(i)
				status := -1
				resp, err := http.Post("http://"+addr+"/cb?"+q, "application/x-www-form-urlencoded", strings.NewReader(b))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return statuses
}

// rss is the process's resident set, in bytes (Linux).
func rss(t *testing.T, p *clitest.Proc) int64 {
	t.Helper()
	r := rssOf(p.Cmd.Process.Pid)
	if r <= 0 {
		t.Fatalf("no resident set for pid %d in /proc", p.Cmd.Process.Pid)
	}
	return r
}

// sampleRSS samples the process's resident set every 50 ms until the
// returned func is called, which returns the largest seen.
func sampleRSS(t *testing.T, p *clitest.Proc) func() int64 {
	t.Helper()
	var mu sync.Mutex
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rssOf(p.Cmd.Process.Pid); r > 0 {
				mu.Lock()
				peak = max(peak, r)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// rssOf is rss without a test to fail: 0 when it cannot be read.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heldBytes reads redrive_callbacks_held_bytes from the process's
// /metrics (its address from the log line that serves them).
func heldBytes(t *testing.T, p *clitest.Proc) int64 {
	t.Helper()
	log := p.Log.String()
	i := strings.Index(log, `msg="serving /metrics, /healthz, /readyz" addr=`)
	if i < 0 {
		t.Fatalf("no metrics address in the log:\n%s", log)
	}
	addr := strings.Fields(log[i+len(`msg="serving /metrics, /healthz, /readyz" addr=`):])[0]
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "redrive_callbacks_held_bytes{") {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			return int64(v)
		}
	}
	t.Fatalf("no redrive_callbacks_held_bytes in /metrics")
	return 0
}
