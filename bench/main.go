// Command bench runs redrive's broker benchmarks (processor and analyzer),
// each in a process of its own so that peak RSS is the scenario's own, and
// prints one Markdown table of the run, every figure beside the raw
// franz-go ceiling measured in the same run. `make bench` runs it against
// the real broker of scripts/kafka.sh:
//
//	REDRIVE_TEST_BROKERS=127.0.0.1:9092 go run ./bench
//
// -only runs some scenarios instead of all (comma-separated: ceiling,
// happy, happy-eos, failure, failure-eos, paced, slow, analyzer, scaling,
// outage, flow, share); ratios to the ceiling need "ceiling" among them.
// happy-eos and failure-eos are the happy and failure paths with delivery
// exactly-once (-bench.delivery exactly-once), printed below their
// at-least-once rows with the ratio to them too. For example the outage
// scenario alone:
//
//	REDRIVE_TEST_BROKERS=127.0.0.1:9092 go run ./bench -only outage
//
// flow (BenchmarkFlow, processor/flowbench_test.go) is what the flow
// control defaults, the circuit breaker and the guard, do: the real
// processor and HTTP handler against a local service scripted to fail in
// one way per scenario (an outage, 10 % of requests always failing, every
// request failing once, a few failing requests ahead of healthy ones, a
// mix of failures, a slowdown past the handler's timeout, a rate limit
// answering 429, a rotated API key), each run with the line off and at the
// defaults; it prints a table of its own, one row per scenario. It takes
// about 11 minutes on 2 cores (two runs wait out their cap of the offered
// time + 120 s); -flow-scale 0.25 is a quicker trial (the counts scale,
// the offered rates do not, and the scenarios' times scale with the
// offered duration).
//
// share (BenchmarkShareScaling, cmd/redrive/e2e/share) is consume: share
// against consume: group where the work is latency-bound: 2 partitions, a
// service taking 200 ms per call, Concurrency 8 per replica; records/s
// with 2 replicas, then 6, in each mode, over -share-steady of steady
// state per phase. It prints a table of its own: 6 share replicas should
// handle at least 2.5 times what 2 do, 6 group replicas no more than 2
// (one per partition). It takes about 2 minutes.
//
// The benchmarks themselves are ordinary Go benchmarks
// (processor/bench_test.go, analyzer/bench_test.go,
// cmd/redrive/e2e/share/scaling_test.go); this command only
// builds their test binaries, runs them with -test.benchtime 1x and reads
// the metrics they report.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/internal/hostinfo"
	"github.com/redrive/redrive/processor"
)

var (
	records     = flag.Int("records", 500000, "records per ceiling, happy-path and failure-path run")
	scaleRecs   = flag.Int("scale-records", 300000, "records per scaling run")
	slowRecs    = flag.Int("slow-records", 30000, "records of the slow-handler run")
	deadLetters = flag.Int("deadletters", 1000000, "dead letters the analyzer rebuilds from")
	inflight    = flag.Int("maxinflight", 16384, "MaxInflight of the tuned happy/failure/scaling runs")
	conc        = flag.Int("concurrency", 256, "handler concurrency of the happy/failure/scaling runs")
	logPath     = flag.String("log", filepath.Join(os.TempDir(), "redrive-bench.log"), "where the benchmarks' full output goes")
	allowFake   = flag.Bool("allow-fake", false, "run without REDRIVE_TEST_BROKERS (embedded kfake: the figures mean little)")
	only        = flag.String("only", "", "run only these scenarios, comma-separated: "+strings.Join(scenarios, ", ")+" (default: all)")
	outageRun   = flag.Duration("outage-run", 100*time.Second, "how long the outage scenario offers records")
	outageLen   = flag.Duration("outage-length", 60*time.Second, "the outage in the middle of the outage scenario")
	outageRate  = flag.Int("outage-rate", 2000, "records/s offered by the outage scenario")
	outageOpen  = flag.Duration("outage-open-for", 2*time.Second, "Breaker.OpenFor of the outage scenario's breaker=on run")
	outageMax   = flag.Duration("outage-max-open", 4*time.Second, "Breaker.MaxOpen of the outage scenario's breaker=on run")
	slowFail    = flag.Int("slowfail-records", 100000, "records of the failure path with a 5 ms handler at default settings")
	maxBatch    = flag.Int("maxbatch", 0, "MaxBatch of the exactly-once runs (happy-eos, failure-eos; 0: the default)")
	flowScale   = flag.Float64("flow-scale", 1, "multiplies the requests offered by the flow scenarios (-bench.flowscale): 0.25 for a quick trial")
	shareSteady = flag.Duration("share-steady", 15*time.Second, "steady state measured per phase of the share scenario (-share.steady)")
)

var scenarios = []string{"ceiling", "happy", "happy-eos", "failure", "failure-eos", "paced", "slow", "analyzer", "scaling", "outage", "flow", "share"}

// ownTable are the scenarios printed in a table of their own.
var ownTable = []string{"outage", "flow", "share"}

// defaults are the flags of a run at the processor's default settings
// (concurrency 64, max_inflight the larger of 4096 and 4 × concurrency).
var defaults = []string{"-bench.concurrency", "0", "-bench.maxinflight", "0"}

type result map[string]float64 // unit → value

var lineRE = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func main() {
	flag.Parse()
	want := map[string]bool{}
	for _, name := range strings.Split(*only, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(scenarios, name) {
			fatal(fmt.Sprintf("-only: unknown scenario %q (known: %s)", name, strings.Join(scenarios, ", ")))
		}
		want[name] = true
	}
	selected := func(name string) bool { return len(want) == 0 || want[name] }
	if os.Getenv("REDRIVE_TEST_BROKERS") == "" {
		if b := os.Getenv("KAFKA_BROKERS"); b != "" {
			os.Setenv("REDRIVE_TEST_BROKERS", b)
		} else if !*allowFake {
			fatal("set REDRIVE_TEST_BROKERS (or KAFKA_BROKERS) to the real broker: eval \"$(bash scripts/kafka.sh up | tail -1)\"")
		}
	}
	logf, err := os.Create(*logPath)
	if err != nil {
		fatal(err.Error())
	}
	defer logf.Close()
	dir, err := os.MkdirTemp("", "redrive-bench-")
	if err != nil {
		fatal(err.Error())
	}
	defer os.RemoveAll(dir)
	began := time.Now()
	procBin, anBin := filepath.Join(dir, "processor.test"), filepath.Join(dir, "analyzer.test")
	shareBin := filepath.Join(dir, "share.test")
	bins := map[string]string{"./processor": procBin}
	if selected("analyzer") {
		bins["./analyzer"] = anBin
	}
	if selected("share") {
		bins["./cmd/redrive/e2e/share"] = shareBin
	}
	for pkg, out := range bins {
		step("building %s", pkg)
		cmd := exec.Command("go", "test", "-c", "-o", out, pkg)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Run(); err != nil {
			fatal(fmt.Sprintf("go test -c %s: %v (see %s)", pkg, err, *logPath))
		}
	}
	run := func(scenario, bin, bench string, args ...string) map[string]result {
		if !selected(scenario) {
			return map[string]result{}
		}
		step("%s %s", bench, strings.Join(args, " "))
		a := append([]string{"-test.run", "^$", "-test.bench", bench, "-test.benchtime", "1x", "-test.timeout", "14m"}, args...)
		cmd := exec.Command(bin, a...)
		cmd.Dir = filepath.Dir(bin)
		var out bytes.Buffer
		cmd.Stdout = io.MultiWriter(&out, logf)
		cmd.Stderr = logf
		fmt.Fprintf(logf, "\n=== %s %s\n", bin, strings.Join(a, " "))
		err := cmd.Run()
		rs := parse(out.String())
		if err != nil || len(rs) == 0 {
			fmt.Fprintf(os.Stderr, "bench: %s failed (%v); see %s\n", bench, err, *logPath)
		}
		return rs
	}
	n := strconv.Itoa(*records)
	tuned := []string{"-bench.concurrency", strconv.Itoa(*conc), "-bench.maxinflight", strconv.Itoa(*inflight)}
	ceil1 := one(run("ceiling", procBin, "^BenchmarkCeiling$", "-bench.records", n))
	happyDefault := one(run("happy", procBin, "^BenchmarkHappyPath$", append([]string{"-bench.records", n}, defaults...)...))
	happy := one(run("happy", procBin, "^BenchmarkHappyPath$", append([]string{"-bench.records", n}, tuned...)...))
	eos := []string{"-bench.delivery", "exactly-once", "-bench.maxbatch", strconv.Itoa(*maxBatch)}
	// Exactly-once beside at-least-once: the same records and settings.
	happyEOSDefault := one(run("happy-eos", procBin, "^BenchmarkHappyPath$", append(append([]string{"-bench.records", n}, defaults...), eos...)...))
	happyEOS := one(run("happy-eos", procBin, "^BenchmarkHappyPath$", append(append([]string{"-bench.records", n}, tuned...), eos...)...))
	failureDefault := one(run("failure", procBin, "^BenchmarkFailurePath$", append([]string{"-bench.records", n}, defaults...)...))
	failureSlow := one(run("failure", procBin, "^BenchmarkFailurePath$", append([]string{"-bench.records", strconv.Itoa(*slowFail), "-bench.handlerdelay", "5ms"}, defaults...)...))
	failure := one(run("failure", procBin, "^BenchmarkFailurePath$", append([]string{"-bench.records", n}, tuned...)...))
	failureEOSDefault := one(run("failure-eos", procBin, "^BenchmarkFailurePath$", append(append([]string{"-bench.records", n}, defaults...), eos...)...))
	failureEOS := one(run("failure-eos", procBin, "^BenchmarkFailurePath$", append(append([]string{"-bench.records", n}, tuned...), eos...)...))
	paced := one(run("paced", procBin, "^BenchmarkFailurePaced$", defaults...))
	slow := one(run("slow", procBin, "^BenchmarkSlowHandler$", "-bench.slowrecords", strconv.Itoa(*slowRecs)))
	an := one(run("analyzer", anBin, "^BenchmarkRebuild$", "-bench.deadletters", strconv.Itoa(*deadLetters)))
	scaling := run("scaling", procBin, "^BenchmarkScaling$", append([]string{"-bench.records", strconv.Itoa(*scaleRecs)}, tuned...)...)
	outage := run("outage", procBin, "^BenchmarkOutage$", "-bench.concurrency", strconv.Itoa(*conc), "-bench.outagerun", outageRun.String(), "-bench.outage", outageLen.String(),
		"-bench.outagerate", strconv.Itoa(*outageRate), "-bench.openfor", outageOpen.String(), "-bench.maxopen", outageMax.String())
	// Sixteen runs of up to offered + 120 s each: past the default timeout.
	flow := run("flow", procBin, "^BenchmarkFlow$", "-bench.flowscale", strconv.FormatFloat(*flowScale, 'g', -1, 64), "-test.timeout", "90m")
	share := run("share", shareBin, "^BenchmarkShareScaling$", "-share.steady", shareSteady.String())
	ceil2 := one(run("ceiling", procBin, "^BenchmarkCeiling$", "-bench.records", n))

	ceiling := (ceil1["records/s"] + ceil2["records/s"]) / 2
	if ceil1["records/s"] == 0 || ceil2["records/s"] == 0 {
		ceiling = max(ceil1["records/s"], ceil2["records/s"])
	}
	ratio := func(r result) string {
		if ceiling == 0 || r["records/s"] == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", r["records/s"]/ceiling)
	}
	// eosRatio is an exactly-once row's ratio to the ceiling and to its
	// at-least-once row (alo).
	eosRatio := func(r, alo result) string {
		if alo["records/s"] == 0 || r["records/s"] == 0 {
			return ratio(r)
		}
		return fmt.Sprintf("%s (%.2f of at-least-once)", ratio(r), r["records/s"]/alo["records/s"])
	}
	batch := "default"
	if *maxBatch > 0 {
		batch = strconv.Itoa(*maxBatch)
	}

	fmt.Printf("\nredrive benchmarks, %s, %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), hostinfo.Describe())
	mainTable := false
	for _, name := range scenarios {
		mainTable = mainTable || (!slices.Contains(ownTable, name) && selected(name))
	}
	fmt.Printf("broker %s", os.Getenv("REDRIVE_TEST_BROKERS"))
	if mainTable {
		fmt.Printf("; %d records of 200 B per run (scaling %d, slow handler %d, analyzer %d dead letters); handler concurrency %d, MaxInflight %d unless said",
			*records, *scaleRecs, *slowRecs, *deadLetters, *conc, *inflight)
	}
	fmt.Print("\n\n")
	row := func(scenario, num, name string, r result, ratioCell, other string) {
		if selected(scenario) {
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", num, name, f0(r["records/s"]), ratioCell, f2(r["cpu-s/M"]), f0(r["peak-rss-MB"]), other)
		}
	}
	if mainTable {
		fmt.Println("| # | scenario | records/s | ratio to ceiling | CPU s / M records | peak RSS MB | other |")
		fmt.Println("|---|---|---:|---:|---:|---:|---|")
	}
	row("ceiling", "1", "ceiling: raw franz-go consume→produce, 6 partitions (first run)", ceil1, "1.00", fmt.Sprintf("wall %s rec/s", f0(ceil1["wall-records/s"])))
	row("ceiling", "1", "ceiling (last run)", ceil2, fmt.Sprintf("mean %s rec/s", f0(ceiling)), fmt.Sprintf("wall %s rec/s", f0(ceil2["wall-records/s"])))
	row("happy", "2", "happy path: no-op handler + results, default settings (concurrency 64, MaxInflight 4096)", happyDefault, ratio(happyDefault), fmt.Sprintf("wall %s rec/s", f0(happyDefault["wall-records/s"])))
	row("happy", "2", fmt.Sprintf("happy path, MaxInflight %d", *inflight), happy, ratio(happy), fmt.Sprintf("wall %s rec/s", f0(happy["wall-records/s"])))
	row("happy-eos", "2", fmt.Sprintf("happy path, exactly-once, default settings, MaxBatch %s", batch), happyEOSDefault, eosRatio(happyEOSDefault, happyDefault),
		fmt.Sprintf("wall %s rec/s; %s", f0(happyEOSDefault["wall-records/s"]), txns(happyEOSDefault)))
	row("happy-eos", "2", fmt.Sprintf("happy path, exactly-once, MaxInflight %d, MaxBatch %s", *inflight, batch), happyEOS, eosRatio(happyEOS, happy),
		fmt.Sprintf("wall %s rec/s; %s", f0(happyEOS["wall-records/s"]), txns(happyEOS)))
	row("failure", "3", "failure path: every record fails once into a 1 s tier, default settings", failureDefault, ratio(failureDefault), lateness(failureDefault))
	row("failure", "3", fmt.Sprintf("failure path, a 5 ms handler (saturated: the handler is the bottleneck), default settings, %d records", *slowFail), failureSlow, "–", lateness(failureSlow))
	row("failure", "3", fmt.Sprintf("failure path, concurrency %d, MaxInflight %d", *conc, *inflight), failure, ratio(failure), lateness(failure))
	row("failure-eos", "3", fmt.Sprintf("failure path, exactly-once, default settings, MaxBatch %s", batch), failureEOSDefault, eosRatio(failureEOSDefault, failureDefault),
		strings.Join(slices.DeleteFunc([]string{lateness(failureEOSDefault), txns(failureEOSDefault)}, func(s string) bool { return s == "" }), "; "))
	row("failure-eos", "3", fmt.Sprintf("failure path, exactly-once, concurrency %d, MaxInflight %d, MaxBatch %s", *conc, *inflight, batch), failureEOS, eosRatio(failureEOS, failure),
		strings.Join(slices.DeleteFunc([]string{lateness(failureEOS), txns(failureEOS)}, func(s string) bool { return s == "" }), "; "))
	row("paced", "3", fmt.Sprintf("failure path, offered at %s rec/s (below capacity), default settings: the scheduler's lateness", f0(paced["offered-records/s"])), paced, "–", lateness(paced))
	bound := slow["bound-records/s"]
	slowRatio := "–"
	if bound > 0 && slow["records/s"] > 0 {
		slowRatio = fmt.Sprintf("%.2f of Little's bound", slow["records/s"]/bound)
	}
	row("slow", "4", fmt.Sprintf("slow handler: HTTP handler, 200 ms server, concurrency 1000 (bound %s rec/s)", f0(bound)), slow, slowRatio, "")
	if selected("analyzer") {
		fmt.Printf("| 5 | analyzer: rebuild statistics from %s dead letters until /api/stats is ready | %s | – | – | – | DLQ filled at %s rec/s |\n",
			f0(an["dead-letters"]), f0(an["records/s"]), f0(an["fill-records/s"]))
	}
	for _, path := range []string{"happy", "failure"} {
		for _, k := range []int{1, 2, 4} {
			r := scaling[fmt.Sprintf("BenchmarkScaling/%s/instances=%d", path, k)]
			other := ""
			if path == "failure" {
				other = lateness(r)
			}
			if d := r["duplicates"]; d > 0 {
				other += fmt.Sprintf(" %s duplicates", f0(d))
			}
			row("scaling", "6", fmt.Sprintf("scaling: %s path, %d instance(s), 12 partitions", path, k), r, ratio(r), other)
		}
	}
	if mainTable {
		fmt.Println("\nrecords/s: first record fetched → last outcome acknowledged (exactly-once: → the commit of its transaction, and a read_committed consumer then found every result once); CPU: the benchmark process (clients + redrive + test server), not the broker; peak RSS: per test process (VmHWM reset after the preload).")
		fmt.Println()
	}
	if selected("outage") {
		outageTable(outage, happyDefault)
	}
	if selected("flow") {
		flowTable(flow)
	}
	if selected("share") {
		shareTable(share)
	}
	fmt.Printf("\nTook %s; full output in %s.\n", time.Since(began).Round(time.Second), *logPath)
}

// outageTable prints scenario 7: BenchmarkOutage's two runs.
func outageTable(rs map[string]result, happy result) {
	from := (*outageRun - *outageLen) / 2
	fmt.Printf("7 outage: %s offered at %d rec/s (a batch every 100 ms, 6 partitions), handler concurrency %d, default MaxInflight; the in-process handler answers Retry(\"http_503\") from %s to %s and succeeds otherwise; "+
		"tiers 1s, 5s, 3 attempts, no jitter (a record's attempts span 6 s, less than the outage); breaker on: OpenFor %s, MaxOpen %s, the rest default (%s)\n\n",
		*outageRun, *outageRate, *conc, from, from+*outageLen, *outageOpen, *outageMax, breakerTrips())
	fmt.Println("| # | breaker | offered | results | dead letters | lost | wasted calls | first success after recovery | full rate after recovery | backlog cleared after recovery | backlog drained at (records/s; ratio to the happy path) | reopened after recovery | longest wait | CPU s / M records | peak RSS MB | other |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, on := range []string{"off", "on"} {
		r, ok := rs["BenchmarkOutage/breaker="+on]
		if !ok {
			fmt.Printf("| 7 | %s | failed: see the log |||||||||||||||\n", on)
			continue
		}
		var other []string
		if v, ok := r["breaker-opens"]; ok {
			other = append(other, fmt.Sprintf("opened %s after the outage began, %s times (probes failing); line stopped %s; running again %s after recovery",
				secs(r, "breaker-open-after-s"), n0(v), secs(r, "stopped-s"), secs(r, "closed-after-s")))
		}
		if d := r["duplicates"]; d > 0 {
			other = append(other, fmt.Sprintf("%s duplicates", n0(d)))
		}
		drain := "–"
		if d := r["drain-records/s"]; d > 0 {
			drain = f0(d)
			if h := happy["records/s"]; h > 0 {
				drain += fmt.Sprintf(" (%.2f)", d/h)
			}
		}
		reopened := "–"
		if v, ok := r["reopens-after"]; ok {
			reopened = n0(v)
		}
		fmt.Printf("| 7 | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", on,
			n0(r["offered"]), n0(r["results"]), n0(r["dead-letters"]), n0(r["lost"]), n0(r["wasted-calls"]),
			secs(r, "first-success-s"), secs(r, "full-rate-s"), secs(r, "backlog-s"), drain, reopened, secs(r, "max-wait-s"),
			f2(r["cpu-s/M"]), f0(r["peak-rss-MB"]), strings.Join(other, "; "))
	}
	fmt.Println("\nlost = offered − (results + dead letters), must be 0; wasted calls: handler calls during the outage; first success: the first handler call after the outage that succeeded; " +
		"full rate: the first 100 ms interval after the outage with results acknowledged at ≥ 90 % of the offered rate; backlog cleared: every record offered before the outage ended has its result or dead letter acknowledged; " +
		"backlog drained at: the records offered before the outage ended whose outcome came after it, over the time from the first success to the backlog cleared, and its ratio to the happy path's default row of the same run (the steady-state rate of the same handler); reopened: breaker openings after the line ran again past the outage; " +
		"longest wait: offered → final outcome acknowledged. Times in seconds, from kgo acknowledgements and handler call times.")
}

// shareTable prints scenario 9: BenchmarkShareScaling, one row per mode.
func shareTable(rs map[string]result) {
	fmt.Printf("\n9 share: consume: share against consume: group, latency-bound: a backlog on 2 partitions, a handler taking 200 ms per call, Concurrency 8 per replica (at most 40 calls/s each), MaxInflight default, in one process; "+
		"records/s over %s of steady state per phase (share: once every replica is calling; group: once the group is stable), first with 2 replicas, then with 4 more\n\n", *shareSteady)
	fmt.Println("| # | consume | 2 replicas (records/s) | 6 replicas (records/s) | ratio 6/2 | replicas calling with 6 | promised |")
	fmt.Println("|---|---|---:|---:|---:|---:|---|")
	for _, mode := range []string{"share", "group"} {
		r, ok := rs["BenchmarkShareScaling/consume="+mode]
		if !ok {
			fmt.Printf("| 9 | %s | failed: see the log ||||||\n", mode)
			continue
		}
		two, six := r["rec/s-2r"], r["rec/s-6r"]
		ratio, promise := "–", ""
		if two > 0 {
			ratio = fmt.Sprintf("%.2f", six/two)
		}
		switch mode {
		case "share":
			promise = "6 handle ≥ 2.5 × what 2 do: " + met(two > 0 && six/two >= 2.5)
		case "group":
			// Nothing added: within the noise of two equal rates.
			promise = "replicas 3-6 add nothing: " + met(two > 0 && six/two < 1.1)
		}
		fmt.Printf("| 9 | %s | %s | %s | %s | %s | %s |\n", mode, f1(two), f1(six), ratio, n0(r["calling-6r"]), promise)
	}
	fmt.Println("\nrecords/s: handler calls finished per second in the window (every call succeeds, so one per record); replicas calling: those that finished a call in the window.")
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// breakerTrips is when the default breaker opens, and its probes.
func breakerTrips() string {
	return fmt.Sprintf("%d counted failures in a row, or %.0f%% of ≥ %d counted calls in %s; %d probes",
		processor.DefaultBreakerConsecutive, 100*processor.DefaultBreakerFailureRatio, processor.DefaultBreakerMinCalls,
		processor.DefaultBreakerWindow, processor.DefaultBreakerProbes)
}

// flowRows are BenchmarkFlow's scenarios in table order, and what the
// service does in each; d is the offered duration (the times in
// BenchmarkFlow scale with it), lead the failing requests produced ahead
// of the healthy ones.
var flowRows = []struct {
	name string
	what func(d time.Duration, lead, healthy int) string
}{
	{"outage", func(d time.Duration, _, _ int) string {
		return fmt.Sprintf("503 ERROR_NO_SLOT_AVAILABLE to every call from %s to %s, 200 otherwise", d/4, d*3/4)
	}},
	{"ten-percent", func(time.Duration, int, int) string {
		return "10 % of the requests (the same ones every run) always get 500, the rest 200"
	}},
	{"fail-once", func(time.Duration, int, int) string { return "every request's first call gets 503, later calls 200" }},
	{"fail-twice-then-healthy", func(_ time.Duration, lead, healthy int) string {
		return fmt.Sprintf("%d requests whose first two calls get 503, produced at once; 1 s later %d healthy ones, at once", lead, healthy)
	}},
	{"burst-then-healthy", func(_ time.Duration, lead, healthy int) string {
		return fmt.Sprintf("as above with %d requests failing twice, more than the concurrency; 1 s later %d healthy ones, at once", lead, healthy)
	}},
	{"mix-40", func(time.Duration, int, int) string {
		return "10 % each get 503, 500, 429 (Retry-After: 1) or 400 ERROR_BAD_PARAMETERS on the first call; a transient failure fails the second call too one time in four; a 400 stays a 400; the rest 200"
	}},
	{"slowdown", func(d time.Duration, _, _ int) string {
		return fmt.Sprintf("every call from %s to %s takes 3 s, past the handler's 2 s timeout (code timeout)", d/4, d*3/4)
	}},
	{"rate-limit-429", func(time.Duration, int, int) string {
		return "the service takes 100 calls/s (a token bucket, burst 10) and answers 429 with Retry-After: 1 beyond"
	}},
	{"rotated-key", func(d time.Duration, _, _ int) string {
		return fmt.Sprintf("from %s on every call gets 401 ERROR_WRONG_USER_KEY (permanent)", d/2)
	}},
}

// flowTable prints scenario 8: BenchmarkFlow, one row per scenario with
// its line=off and line=defaults runs side by side.
func flowTable(rs map[string]result) {
	g := processor.Guard{}.WithDefaults()
	fmt.Printf("\n8 flow: the real processor and HTTP handler against a service scripted per row (httptest on 127.0.0.1); requests offered in batches every 100 ms; "+
		"tiers 1s, 2s, 5s (short so that runs are quick; they are not flow control), max_attempts 4, jitter 10 %%, 6 partitions, handler concurrency 64 and timeout 10 s (slowdown: 2 s), the rest default. "+
		"Each cell: line=off (breaker and guard disabled) / line=defaults (the zero Breaker and Guard as shipped: breaker %s, open %s doubling up to %s; guard: %.0f%% permanent of ≥ %d calls in %s). Flow scale %g.\n\n",
		breakerTrips(), processor.DefaultBreakerOpenFor, processor.DefaultBreakerMaxOpen, 100*g.PermanentRatio, g.MinCalls, g.Window, *flowScale)
	fmt.Println("| # | scenario | offered | results | dead letters (exhausted + permanent) | calls | finish (s) | healthy (s) | breaker opens | guard | early retries | CPU s / M offered | peak RSS MB |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range flowRows {
		off, okOff := rs["BenchmarkFlow/"+row.name+"/line=off"]
		def, okDef := rs["BenchmarkFlow/"+row.name+"/line=defaults"]
		// both is a cell: the off run's value / the defaults run's.
		both := func(cell func(r result, off bool) string) string {
			c := func(r result, ok, off bool) string {
				if !ok {
					return "failed"
				}
				return cell(r, off)
			}
			return c(off, okOff, true) + " / " + c(def, okDef, false)
		}
		count := func(unit string) func(result, bool) string {
			return func(r result, _ bool) string { return n0(r[unit]) }
		}
		ref := def
		if !okDef {
			ref = off
		}
		offered, rate, lead := ref["offered"], ref["offered-records/s"], int(ref["lead"])
		desc := row.name
		switch {
		case !okOff && !okDef:
		case rate > 0:
			d := time.Duration((offered - float64(lead)) / rate * float64(time.Second)).Round(100 * time.Millisecond)
			desc = fmt.Sprintf("%s: %s/s for %s; %s", row.name, n0(rate), d, row.what(d, lead, int(offered)-lead))
		default:
			desc = fmt.Sprintf("%s: %s", row.name, row.what(0, lead, int(offered)-lead))
		}
		fmt.Printf("| 8 | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", desc, n0(offered),
			both(count("results")),
			both(func(r result, _ bool) string {
				if r["dead-letters"] == 0 {
					return "0"
				}
				return fmt.Sprintf("%s (%s + %s)", n0(r["dead-letters"]), n0(r["dead-letters-exhausted"]), n0(r["dead-letters-permanent"]))
			}),
			both(flowCalls),
			both(func(r result, _ bool) string { return flowFinish(r) }),
			both(func(r result, _ bool) string { return secs1(r, "healthy-s") }),
			both(func(r result, off bool) string {
				if off {
					return "–"
				}
				return n0(r["breaker-opens"])
			}),
			both(func(r result, off bool) string {
				switch {
				case off:
					return "–"
				case r["guard-stopped"] > 0:
					return "stopped"
				}
				return "no"
			}),
			both(count("early-retries")),
			both(func(r result, _ bool) string { return f0(r["cpu-s/M"]) }),
			both(func(r result, _ bool) string { return f0(r["peak-rss-MB"]) }))
	}
	fmt.Println("\nresults and dead letters: requests whose result or dead letter the processor's client had acknowledged (exhausted: max_attempts transient failures; permanent: the service said never); " +
		"calls: HTTP requests the service got (429: of them refused with 429; learned: the calls/s the processor learned from the 429s, at the end); finish: from the first batch to the last request's result or dead letter acknowledged (\"cap\": not all after the offered time + 120 s, how many not; " +
		"\"held\": the guard stopped the line, these wait for an operator's resume; \"lost\": no outcome, yet the group's lag is 0, must never happen); " +
		"healthy: until every request the service lets succeed at some point had its result (ten-percent: all but the 10 %; mix-40: all but the 400s; fail-twice-then-healthy: the healthy ones, from their produce); " +
		"breaker opens: transitions into open in 100 ms samples of the line's status (– : disabled); guard: whether a sample showed the line stopped by the guard; " +
		"early retries: calls of attempt n+1 that reached the service less than tier n's delay after attempt n's failing call returned, must be 0; CPU: the benchmark process (processor, clients, the service) per million requests offered. " +
		"A run that failed (an early retry, a lost request, an unknown id) prints \"failed\": see the log.")
}

// flowCalls is a flow run's calls cell: with the 429s among them and the
// rate learned from them, when the service answered any.
func flowCalls(r result, _ bool) string {
	s := n0(r["calls"])
	if v, ok := r["refused"]; ok {
		s += " (" + n0(v) + " 429"
		if l, ok := r["learned-calls/s"]; ok {
			s += ", learned " + f0(l) + "/s"
		}
		s += ")"
	}
	return s
}

// flowFinish is a flow run's finish cell: seconds, or why it has none.
func flowFinish(r result) string {
	switch {
	case r["lost"] > 0:
		return n0(r["lost"]) + " lost"
	case r["held"] > 0:
		return n0(r["held"]) + " held"
	case r["unfinished"] > 0:
		return "cap, " + n0(r["unfinished"]) + " unfinished"
	}
	return secs1(r, "finish-s")
}

// secs1 is seconds with one decimal (two below 1 s) and no unit, "–"
// when not reported.
func secs1(r result, unit string) string {
	v, ok := r[unit]
	switch {
	case !ok:
		return "–"
	case v < 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// n0 is a count, 0 included.
func n0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// secs is a time in seconds with one decimal, "–" when not reported.
func secs(r result, unit string) string {
	v, ok := r[unit]
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " s"
}

// txns describes an exactly-once run's transactions.
func txns(r result) string {
	if _, ok := r["txns"]; !ok {
		return ""
	}
	s := fmt.Sprintf("%s transactions, %s ms mean, %s outcome records each; last call → committed %s ms", n0(r["txns"]), f1(r["txn-ms"]), f0(r["outcomes/txn"]), f0(r["tail-ms"]))
	if a := r["aborted-txns"]; a > 0 {
		s += fmt.Sprintf(", %s aborted", n0(a))
	}
	return s
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func lateness(r result) string {
	if _, ok := r["late-p50-ms"]; !ok {
		return ""
	}
	return fmt.Sprintf("lateness p50 %s / p99 %s / max %s ms", f0(r["late-p50-ms"]), f0(r["late-p99-ms"]), f0(r["late-max-ms"]))
}

func parse(out string) map[string]result {
	rs := map[string]result{}
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		m := lineRE.FindStringSubmatch(s.Text())
		if m == nil {
			continue
		}
		r := result{}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				r[f[i+1]] = v
			}
		}
		rs[m[1]] = r
	}
	return rs
}

func one(rs map[string]result) result {
	for _, r := range rs {
		return r
	}
	return result{}
}

func f0(v float64) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func f2(v float64) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "bench: "+msg)
	os.Exit(1)
}
