// Command soak runs the real `redrive process` binary for a long time at a
// steady request rate against a real broker and a local HTTP service that
// answers 1 % permanent, 10 % transient and 5 % not-ready, and reports
// whether memory, goroutines and open files stay flat, how late tier records
// are, and whether any request was lost or duplicated. `make soak` runs it
// (30 minutes at 500 requests/s) against a broker of its own:
//
//	REDRIVE_TEST_BROKERS=127.0.0.1:9092 go run ./bench/soak -duration 30m -rate 500
//
// What it does:
//
//   - builds ./cmd/redrive (or takes -bin), writes a config with one
//     pipeline (6 partitions, tiers 5s and 30s, 4 attempts, jitter 0.1, the
//     other keys at their defaults: breaker and guard on), runs
//     `redrive topics ensure`, then `redrive process` as a subprocess;
//   - serves the pipeline's HTTP service on 127.0.0.1: request n (id
//     soak-<run>-<n>) is answered by a hash of n mod 100: 0 permanent (400
//     ERROR_WRONG_USER_KEY, to the DLQ); 1 to 10 transient (503
//     ERROR_NO_SLOT_AVAILABLE on attempt 1, and for 1 also on attempt 2: the
//     5s then the 30s tier), then 200; 11 to 15 not-ready (202 with a
//     Redrive-State on the first call, 200 on the poll that sends it back);
//     the rest 200. The answer depends only on the request's id, attempt and
//     state, never on how often the service was called;
//   - produces n = 0, 1, 2, … at -rate per second (acks=all) for -duration;
//   - reads the results topic and the DLQ from their start all along;
//   - every -every prints the processor's RSS (VmRSS of /proc/<pid>/status),
//     goroutines (go_goroutines) and open files (process_open_fds) from its
//     /metrics, with the counts so far; every -window the p99 of
//     redrive_delay_lateness_seconds over that window (the histogram's
//     bucket deltas, interpolated inside the bucket as Prometheus'
//     histogram_quantile does);
//   - after -duration stops producing and waits up to -drain for every
//     acknowledged request to reach the results topic or the DLQ; then lost
//     = acknowledged requests found in neither, duplicates = outcome records
//     beyond the first per request, misrouted = a request in the wrong one;
//   - prints the slope of RSS, goroutines and open files (least squares,
//     per minute) over the samples after -warmup, and a Markdown table for
//     BENCHMARKS.md. It exits 1 when a request was lost, duplicated or
//     misrouted.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/hostinfo"
)

var (
	duration   = flag.Duration("duration", 30*time.Minute, "how long requests are produced")
	rate       = flag.Int("rate", 500, "requests produced per second")
	every      = flag.Duration("every", time.Minute, "how often RSS, goroutines and open files are sampled and printed")
	window     = flag.Duration("window", 5*time.Minute, "the window of each lateness p99")
	warmup     = flag.Duration("warmup", 5*time.Minute, "samples before this are left out of the slopes (all are used when fewer than 3 remain)")
	drain      = flag.Duration("drain", 3*time.Minute, "after the last request, how long to wait for every outcome")
	binPath    = flag.String("bin", "", "the redrive binary (default: go build ./cmd/redrive into a temporary directory)")
	partitions = flag.Int("partitions", 6, "partitions of the pipeline's topics")
	logPath    = flag.String("log", filepath.Join(os.TempDir(), "redrive-soak-processor.log"), "where the processor's output goes")
)

// bucket spreads requests over 0..99 by a hash of n, so that the answer
// classes are mixed evenly in time and across partitions (n mod 100 would
// send ten consecutive requests to the transient class, and ten transient
// failures in a row open the breaker).
func bucket(n int) int {
	x := uint64(n) + 0x9e3779b97f4a7c15 // splitmix64's finalizer
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return int((x ^ (x >> 31)) % 100)
}

// class is what the service answers request n.
func class(n int) string {
	switch r := bucket(n); {
	case r == 0:
		return "permanent"
	case r >= 1 && r <= 10:
		return "transient"
	case r >= 11 && r <= 15:
		return "not-ready"
	}
	return "ok"
}

type sample struct {
	at         time.Duration // since production began
	rssMB      float64
	goroutines float64
	fds        float64
	buckets    map[float64]float64 // redrive_delay_lateness_seconds, le → cumulative count (all tiers)
	produced   int64
	results    int64
	dlq        int64
	calls      int64
	opens      float64 // redrive_breaker_transitions_total{state="open"}
}

func main() {
	flag.Parse()
	brokers := os.Getenv("REDRIVE_TEST_BROKERS")
	if brokers == "" {
		brokers = os.Getenv("KAFKA_BROKERS")
	}
	if brokers == "" {
		fatal("set REDRIVE_TEST_BROKERS (or KAFKA_BROKERS) to a real broker: eval \"$(bash scripts/kafka.sh up | tail -1)\"")
	}
	if *rate <= 0 || *duration <= 0 || *every <= 0 || *window <= 0 {
		fatal("-rate, -duration, -every and -window must be positive")
	}
	dir, err := os.MkdirTemp("", "redrive-soak-")
	if err != nil {
		fatal(err.Error())
	}
	defer os.RemoveAll(dir)
	bin := *binPath
	if bin != "" {
		// A copy: a `make build` during the soak must not replace the
		// running binary.
		b, err := os.ReadFile(bin)
		if err != nil {
			fatal(err.Error())
		}
		bin = filepath.Join(dir, "redrive")
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			fatal(err.Error())
		}
	} else {
		bin = filepath.Join(dir, "redrive")
		step("building ./cmd/redrive")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/redrive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fatal("go build: " + err.Error())
		}
	}

	// The service.
	var calls atomic.Int64
	var callsBy [4]atomic.Int64 // ok, transient, not-ready, permanent answers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err.Error())
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		id := r.Header.Get("Idempotency-Key")
		i := strings.LastIndexByte(id, '-')
		n, err := strconv.Atoi(id[i+1:])
		if err != nil {
			http.Error(w, "bad id", http.StatusBadRequest)
			callsBy[3].Add(1)
			return
		}
		attempt, _ := strconv.Atoi(r.Header.Get("Redrive-Attempt"))
		switch class(n) {
		case "permanent":
			callsBy[3].Add(1)
			w.Header().Set("Redrive-Error-Code", "ERROR_WRONG_USER_KEY")
			w.WriteHeader(http.StatusBadRequest)
			return
		case "transient":
			if attempt == 1 || (bucket(n) == 1 && attempt == 2) {
				callsBy[1].Add(1)
				w.Header().Set("Redrive-Error-Code", "ERROR_NO_SLOT_AVAILABLE")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		case "not-ready":
			if r.Header.Get("Redrive-State") == "" {
				callsBy[2].Add(1)
				w.Header().Set("Redrive-State", "job-"+strconv.Itoa(n))
				w.WriteHeader(http.StatusAccepted)
				return
			}
		}
		callsBy[0].Add(1)
		fmt.Fprintf(w, "solved %d", n)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	// The processor's config.
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err.Error())
	}
	metricsAddr := mln.Addr().String()
	mln.Close()
	run := strconv.FormatInt(time.Now().Unix(), 36)
	topic := "soak-" + run
	results, dlqTopic := topic+".results", topic+".dlq"
	cfg := filepath.Join(dir, "redrive.yaml")
	y := fmt.Sprintf(`brokers: [%q]
http_addr: %q
instance: soak
pipelines:
  - name: soak
    topic: %s
    results: %s
    partitions: %d
    retry: {tiers: [5s, 30s], max_attempts: 4, jitter: 0.1}
    handler:
      http: {url: "http://%s/solve", timeout: 5s}
      codes:
        transient: [ERROR_NO_SLOT_AVAILABLE]
        permanent: [ERROR_WRONG_USER_KEY]
`, strings.Split(brokers, ",")[0], metricsAddr, topic, results, *partitions, ln.Addr())
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		fatal(err.Error())
	}
	logf, err := os.Create(*logPath)
	if err != nil {
		fatal(err.Error())
	}
	defer logf.Close()
	step("redrive topics ensure (topic %s)", topic)
	ens := exec.Command(bin, "topics", "ensure", "-c", cfg)
	ens.Stdout, ens.Stderr = logf, logf
	if err := ens.Run(); err != nil {
		fatal(fmt.Sprintf("redrive topics ensure: %v (see %s)", err, *logPath))
	}
	proc := exec.Command(bin, "process", "-c", cfg)
	proc.Stdout, proc.Stderr = logf, logf
	if err := proc.Start(); err != nil {
		fatal(err.Error())
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	stopProc := func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = proc.Process.Kill()
			<-exited
		}
	}
	defer stopProc()
	cleanup = stopProc
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() { fatal(fmt.Sprintf("%v: stopping", <-sigs)) }()
	step("redrive process, pid %d, metrics on http://%s, log in %s", proc.Process.Pid, metricsAddr, *logPath)
	if err := waitReady(metricsAddr, exited, 2*time.Minute); err != nil {
		fatal(err.Error())
	}

	// The reader of outcomes.
	var mu sync.Mutex
	seen := map[int]uint16{} // n → outcome records
	var misrouted, dupes, foreign int
	var resultsN, dlqN atomic.Int64
	reader, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumeTopics(results, dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		fatal(err.Error())
	}
	defer reader.Close()
	rctx, rcancel := context.WithCancel(context.Background())
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			fs := reader.PollFetches(rctx)
			if rctx.Err() != nil {
				return
			}
			fs.EachError(func(t string, p int32, err error) { step("reading %s/%d: %v", t, p, err) })
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Topic == results {
					resultsN.Add(1)
				} else {
					dlqN.Add(1)
				}
				id := string(r.Key)
				for _, h := range r.Headers {
					if h.Key == "redrive-id" {
						id = string(h.Value)
					}
				}
				i := strings.LastIndexByte(id, '-')
				n, err := strconv.Atoi(id[i+1:])
				if err != nil || !strings.HasPrefix(id, topic+"-") {
					foreign++
					return
				}
				seen[n]++
				if seen[n] > 1 {
					dupes++
				}
				if (class(n) == "permanent") != (r.Topic == dlqTopic) {
					misrouted++
				}
			})
			mu.Unlock()
		}
	}()

	// The producer.
	prod, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		fatal(err.Error())
	}
	defer prod.Close()
	var acked, produceErrs atomic.Int64
	var ackedMu sync.Mutex
	failed := map[int]bool{}
	value := []byte(strings.Repeat("x", 100))

	sampleNow := func(since time.Time) sample {
		s := sample{at: time.Since(since), produced: acked.Load(), results: resultsN.Load(), dlq: dlqN.Load(), calls: calls.Load()}
		s.rssMB = rss(proc.Process.Pid)
		m, err := scrape(metricsAddr)
		if err != nil {
			step("scraping /metrics: %v", err)
			return s
		}
		s.goroutines = m.value("go_goroutines")
		s.fds = m.value("process_open_fds")
		s.buckets = m.buckets("redrive_delay_lateness_seconds")
		s.opens = m.value(`redrive_breaker_transitions_total{pipeline="soak",state="open"}`)
		if math.IsNaN(s.opens) {
			s.opens = 0 // the series appears with the first transition
		}
		return s
	}

	step("producing %d requests/s for %s; samples every %s", *rate, *duration, *every)
	fmt.Printf("redrive soak, %s, %s\nbroker %s; %d requests/s for %s; tiers 5s, 30s, 4 attempts, jitter 0.1; answers: 1%% permanent, 10%% transient (1%% twice), 5%% not-ready, 84%% ok\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), hostinfo.Describe(), brokers, *rate, *duration)
	began := time.Now()
	samples := []sample{sampleNow(began)}
	printSample(samples[0], nil)
	lateRows := []string{}
	lastWindow := samples[0]
	tick := time.NewTicker(10 * time.Millisecond)
	next := 0
	nextSample := *every
	nextWindow := *window
	for {
		now := <-tick.C
		el := now.Sub(began)
		if el >= *duration {
			el = *duration
		}
		target := int(el.Seconds() * float64(*rate))
		for ; next < target; next++ {
			n := next
			r := &kgo.Record{Key: []byte(topic + "-" + strconv.Itoa(n)), Value: value,
				Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(topic + "-" + strconv.Itoa(n))}}}
			prod.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErrs.Add(1)
					ackedMu.Lock()
					failed[n] = true
					ackedMu.Unlock()
					return
				}
				acked.Add(1)
			})
		}
		if el >= nextSample {
			s := sampleNow(began)
			printSample(s, &samples[len(samples)-1])
			samples = append(samples, s)
			nextSample += *every
		}
		if el >= nextWindow {
			s := samples[len(samples)-1]
			row := fmt.Sprintf("| %s–%s | %s |", mins(lastWindow.at), mins(s.at), p99(lastWindow.buckets, s.buckets))
			lateRows = append(lateRows, row)
			fmt.Printf("lateness %s–%s: p99 %s\n", mins(lastWindow.at), mins(s.at), p99(lastWindow.buckets, s.buckets))
			lastWindow = s
			nextWindow += *window
		}
		if el >= *duration {
			break
		}
		select {
		case err := <-exited:
			fatal(fmt.Sprintf("redrive process exited during the run: %v (see %s)", err, *logPath))
		default:
		}
	}
	tick.Stop()
	if err := prod.Flush(context.Background()); err != nil {
		step("flush: %v", err)
	}
	step("produced %d (%d acknowledged, %d failed); draining up to %s", next, acked.Load(), produceErrs.Load(), *drain)
	drainStart := time.Now()
	pending := func() int {
		mu.Lock()
		defer mu.Unlock()
		ackedMu.Lock()
		defer ackedMu.Unlock()
		p := 0
		for n := 0; n < next; n++ {
			if seen[n] == 0 && !failed[n] {
				p++
			}
		}
		return p
	}
	for time.Since(drainStart) < *drain && pending() > 0 {
		time.Sleep(time.Second)
	}
	drained := time.Since(drainStart)
	time.Sleep(5 * time.Second) // late duplicates still have a chance to show
	end := sampleNow(began)
	rcancel()
	<-readerDone

	lost := pending()
	var lostIDs []int
	for n := 0; n < next && len(lostIDs) < 10; n++ {
		if seen[n] == 0 && !failed[n] {
			lostIDs = append(lostIDs, n)
		}
	}

	// Slopes over the samples after the warm-up.
	use := slices.DeleteFunc(slices.Clone(samples), func(s sample) bool { return s.at < *warmup })
	from := *warmup
	if len(use) < 3 {
		use, from = samples, 0
	}
	slope := func(f func(sample) float64) (k, lo, hi float64) {
		var xs, ys []float64
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, s := range use {
			xs = append(xs, s.at.Minutes())
			ys = append(ys, f(s))
			lo, hi = min(lo, f(s)), max(hi, f(s))
		}
		return leastSquares(xs, ys), lo, hi
	}
	total := end.buckets
	fmt.Printf("\nproduced %d requests in %s (%d acknowledged, %d produce failures); the last outcome %s after the last request\n",
		next, *duration, acked.Load(), produceErrs.Load(), drained.Round(time.Second))
	fmt.Printf("results %d, dead letters %d, service calls %d (ok %d, transient %d, not-ready %d, permanent %d)\n",
		end.results, end.dlq, end.calls, callsBy[0].Load(), callsBy[1].Load(), callsBy[2].Load(), callsBy[3].Load())
	fmt.Printf("breaker opened %s times\n", g(end.opens))
	fmt.Printf("lost %d, duplicates %d, misrouted %d, foreign %d", lost, dupes, misrouted, foreign)
	if len(lostIDs) > 0 {
		fmt.Printf(" (first lost: %v)", lostIDs)
	}
	fmt.Printf("\nlateness p99 over the whole run: %s\n\n", p99(samples[0].buckets, total))

	fmt.Printf("Slopes: least squares per minute over the %d samples from minute %s on.\n\n", len(use), mins(from))
	fmt.Printf("| measure | min | max | slope per minute | over %s at that slope |\n", mins(*duration))
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, m := range []struct {
		name, unit string
		f          func(sample) float64
	}{
		{"RSS", "MB", func(s sample) float64 { return s.rssMB }},
		{"goroutines", "", func(s sample) float64 { return s.goroutines }},
		{"open files", "", func(s sample) float64 { return s.fds }},
	} {
		k, lo, hi := slope(m.f)
		u := ""
		if m.unit != "" {
			u = " " + m.unit
		}
		fmt.Printf("| %s | %.1f%s | %.1f%s | %+.3f%s | %+.1f%s |\n", m.name, lo, u, hi, u, k, u, k*duration.Minutes(), u)
	}
	fmt.Println()
	fmt.Println("| minute | RSS MB | goroutines | open files | requests acknowledged | results | dead letters | service calls |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range samples {
		fmt.Printf("| %s | %.1f | %s | %s | %d | %d | %d | %d |\n", mins(s.at), s.rssMB, g(s.goroutines), g(s.fds), s.produced, s.results, s.dlq, s.calls)
	}
	fmt.Printf("| end (+%s drain) | %.1f | %s | %s | %d | %d | %d | %d |\n", (end.at - *duration).Round(time.Second), end.rssMB, g(end.goroutines), g(end.fds), end.produced, end.results, end.dlq, end.calls)
	fmt.Println()
	fmt.Println("| minutes | lateness p99 (redrive_delay_lateness_seconds, all tiers) |")
	fmt.Println("|---|---:|")
	for _, r := range lateRows {
		fmt.Println(r)
	}
	fmt.Println()
	fmt.Printf("| requests | results | dead letters | lost | duplicates | misrouted |\n|---:|---:|---:|---:|---:|---:|\n| %d | %d | %d | %d | %d | %d |\n",
		acked.Load(), end.results, end.dlq, lost, dupes, misrouted)
	if lost > 0 || dupes > 0 || misrouted > 0 {
		os.Exit(1)
	}
}

func printSample(s sample, prev *sample) {
	line := fmt.Sprintf("%6s  RSS %6.1f MB  goroutines %4s  open files %3s  acknowledged %8d  results %8d  dead letters %6d  calls %8d  breaker opens %s",
		mins(s.at), s.rssMB, g(s.goroutines), g(s.fds), s.produced, s.results, s.dlq, s.calls, g(s.opens))
	if prev != nil {
		line += "  lateness p99 " + p99(prev.buckets, s.buckets)
	}
	fmt.Println(line)
}

func mins(d time.Duration) string {
	if d%time.Minute == 0 || d > 10*time.Minute {
		return strconv.FormatFloat(d.Minutes(), 'f', 0, 64) + "m"
	}
	return strconv.FormatFloat(d.Minutes(), 'f', 2, 64) + "m"
}

func g(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func leastSquares(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// p99 is the 99th percentile of the observations between two cumulative
// bucket snapshots, interpolated linearly inside its bucket.
func p99(a, b map[float64]float64) string {
	var les []float64
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return "– (no tier record)"
	}
	total := b[math.Inf(1)] - a[math.Inf(1)]
	if total <= 0 {
		return "– (no tier record)"
	}
	rank := 0.99 * total
	prevLe, prevC := 0.0, 0.0
	for _, le := range les {
		c := b[le] - a[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return fmt.Sprintf("> %s s (%d records)", g(prevLe), int(total))
			}
			v := prevLe + (le-prevLe)*(rank-prevC)/(c-prevC)
			return fmt.Sprintf("%.0f ms (bucket ≤ %s s; %d tier records)", v*1000, g(le), int(total))
		}
		prevLe, prevC = le, c
	}
	return "–"
}

type metrics map[string]float64 // "name{labels}" → value

func scrape(addr string) (metrics, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	m := metrics{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		l := s.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		m[l[:i]] = v
	}
	return m, s.Err()
}

// value is the sum of a metric's series.
func (m metrics) value(name string) float64 {
	v := math.NaN()
	for k, x := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			if math.IsNaN(v) {
				v = 0
			}
			v += x
		}
	}
	return v
}

// buckets sums a histogram's cumulative buckets over its series, by le.
func (m metrics) buckets(name string) map[float64]float64 {
	out := map[float64]float64{}
	for k, x := range m {
		if !strings.HasPrefix(k, name+"_bucket{") {
			continue
		}
		i := strings.Index(k, `le="`)
		if i < 0 {
			continue
		}
		rest := k[i+4:]
		le, err := strconv.ParseFloat(rest[:strings.IndexByte(rest, '"')], 64)
		if err != nil {
			continue
		}
		out[le] += x
	}
	return out
}

func rss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return math.NaN()
}

func waitReady(addr string, exited <-chan error, timeout time.Duration) error {
	c := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("redrive process exited before it was ready: %v (see %s)", err, *logPath)
		default:
		}
		if resp, err := c.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("redrive process not ready (/readyz) within " + timeout.String())
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
}

// cleanup stops the processor when fatal exits after it started.
var cleanup = func() {}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "soak: "+msg)
	cleanup()
	os.Exit(1)
}
