package main

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// summary is the state of one `go test -json` stream: the packages
// running, each running test's output (kept until the test ends: printed
// if it failed, its reason taken if it skipped, dropped if it passed),
// and the totals.
type summary struct {
	w       io.Writer
	timeout time.Duration

	pkgs  map[string]*pkgRun
	order []string // packages in the order they started

	passed, failed int // tests, subtests included
	skipped        []skipped
	failures       []skipped // the failed tests (reason: "" or "unfinished")
	failedPkgs     []string
	broken         bool // a build failed, or the stream could not be read
}

type pkgRun struct {
	out     strings.Builder // output outside any test
	tests   map[string]*strings.Builder
	started []string // tests in the order they ran
	done    bool
	elapsed float64
}

type skipped struct{ pkg, test, reason string }

func newSummary(w io.Writer, timeout time.Duration) *summary {
	return &summary{w: w, timeout: timeout, pkgs: map[string]*pkgRun{}}
}

// line takes one line of the stream.
func (s *summary) line(b []byte) {
	e, ok := decode(b)
	if !ok {
		s.w.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			io.WriteString(s.w, "\n")
		}
		return
	}
	switch {
	case e.Action == "build-output":
		io.WriteString(s.w, e.Output)
	case e.Action == "build-fail":
		s.broken = true
	case e.Package == "":
		// A build event without a package, or an action this version
		// does not know: nothing to keep.
	case e.Test == "":
		s.pkgEvent(e)
	default:
		s.testEvent(e)
	}
}

func (s *summary) pkg(name string) *pkgRun {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgRun{tests: map[string]*strings.Builder{}}
		s.pkgs[name] = p
		s.order = append(s.order, name)
	}
	return p
}

func (s *summary) testEvent(e event) {
	p := s.pkg(e.Package)
	out := p.tests[e.Test]
	if out == nil {
		out = &strings.Builder{}
		p.tests[e.Test] = out
		p.started = append(p.started, e.Test)
	}
	switch e.Action {
	case "output":
		out.WriteString(e.Output)
		return
	case "pass":
		s.passed++
	case "skip":
		s.skipped = append(s.skipped, skipped{e.Package, e.Test, skipReason(out.String())})
	case "fail":
		s.failed++
		s.failures = append(s.failures, skipped{e.Package, e.Test, ""})
		fmt.Fprintf(s.w, "=== FAIL %s %s (%.2fs)\n%s", e.Package, e.Test, e.Elapsed, testOutput(out.String()))
	default: // run, pause, cont, bench, ...
		return
	}
	delete(p.tests, e.Test)
}

func (s *summary) pkgEvent(e event) {
	p := s.pkg(e.Package)
	switch e.Action {
	case "output":
		p.out.WriteString(e.Output)
		return
	case "pass", "fail", "skip":
	default: // start, ...
		return
	}
	p.done, p.elapsed = true, e.Elapsed
	failed := e.Action == "fail"
	own, last := splitPkgOutput(p.out.String())
	if failed {
		s.failedPkgs = append(s.failedPkgs, e.Package)
		// A test still running when its package failed is what the
		// package died in (a timeout's panic and goroutine dump are in
		// its output): shown, and counted as failed.
		for _, name := range p.started {
			if out, running := p.tests[name]; running {
				s.failed++
				s.failures = append(s.failures, skipped{e.Package, name, "unfinished: running when the package failed"})
				fmt.Fprintf(s.w, "=== UNFINISHED %s %s (running when the package failed)\n%s", e.Package, name, testOutput(out.String()))
			}
		}
	}
	io.WriteString(s.w, own)
	if last == "" {
		last = syntheticLine(e)
	}
	io.WriteString(s.w, last)
	p.tests, p.started = map[string]*strings.Builder{}, nil
	p.out.Reset()
}

// splitPkgOutput separates a package's own output into what to show (any
// line its tests' framework did not print) and its last ok/FAIL/? line.
func splitPkgOutput(out string) (own, last string) {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		t := strings.TrimRight(l, "\n")
		switch {
		case t == "":
			if l != "" {
				b.WriteString(l)
			}
		case strings.HasPrefix(t, "ok  \t"), strings.HasPrefix(t, "FAIL\t"), strings.HasPrefix(t, "?   \t"):
			last = t + "\n"
		case t == "PASS", t == "FAIL", strings.HasPrefix(t, "testing: warning: no tests to run"):
		default:
			b.WriteString(l)
			if !strings.HasSuffix(l, "\n") {
				b.WriteString("\n")
			}
		}
	}
	return b.String(), last
}

func syntheticLine(e event) string {
	switch e.Action {
	case "pass":
		return fmt.Sprintf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
	case "skip":
		return fmt.Sprintf("?   \t%s\t[no test files]\n", e.Package)
	}
	return fmt.Sprintf("FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
}

// testOutput is a failed test's output without the framing lines (=== RUN,
// PAUSE, CONT, NAME) that go test prints only with -v.
func testOutput(out string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, "=== ") || l == "" {
			continue
		}
		b.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// A t.Log or t.Skip line: four spaces a level, file:line, the message.
var logLine = regexp.MustCompile(`^(\s+)[^\s:]+\.go:\d+: (.*)$`)

// skipReason is the last message a skipped test logged (t.Skip's), its
// continuation lines joined to it.
func skipReason(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		m := logLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		reason := []string{m[2]}
		for _, c := range lines[i+1:] {
			if !strings.HasPrefix(c, m[1]+" ") || strings.HasPrefix(strings.TrimSpace(c), "--- ") {
				break
			}
			reason = append(reason, strings.TrimSpace(c))
		}
		r := strings.Join(reason, " ")
		if len(r) > 400 {
			r = r[:400] + "…"
		}
		return r
	}
	return "(no reason given)"
}

// finish prints what is left (packages the stream ended inside), the
// skipped tests, the failures and the totals; ok is false when anything
// failed or did not finish.
func (s *summary) finish(wall time.Duration) (ok bool) {
	var unfinished []string
	for _, name := range s.order {
		p := s.pkgs[name]
		if p.done {
			continue
		}
		unfinished = append(unfinished, name)
		fmt.Fprintf(s.w, "=== UNFINISHED %s (the stream ended while it ran)\n%s", name, p.out.String())
		for _, t := range p.started {
			if out, running := p.tests[t]; running {
				fmt.Fprintf(s.w, "=== UNFINISHED %s %s\n%s", name, t, testOutput(out.String()))
			}
		}
	}

	fmt.Fprintln(s.w)
	if len(s.skipped) == 0 {
		fmt.Fprintln(s.w, "skipped: none")
	} else {
		fmt.Fprintf(s.w, "skipped: %d\n", len(s.skipped))
		s.table(s.skipped)
	}
	if len(s.failures) > 0 || len(s.failedPkgs) > 0 {
		fmt.Fprintf(s.w, "failed: %d tests, %d packages\n", len(s.failures), len(s.failedPkgs))
		rows := s.failures
		for _, p := range s.failedPkgs {
			rows = append(rows, skipped{p, "(package)", ""})
		}
		s.table(rows)
	}
	if len(unfinished) > 0 {
		fmt.Fprintf(s.w, "unfinished (the stream ended while they ran): %s\n", strings.Join(unfinished, ", "))
	}
	s.slowest()
	fmt.Fprintf(s.w, "total: %d passed, %d failed, %d skipped (subtests included); %d packages, %d failed; wall %v\n",
		s.passed, s.failed, len(s.skipped), len(s.order), len(s.failedPkgs), wall.Round(time.Second))
	return !s.broken && s.failed == 0 && len(s.failedPkgs) == 0 && len(unfinished) == 0
}

// table prints rows of package, test and reason in aligned columns.
func (s *summary) table(rows []skipped) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.pkg, r.test, r.reason)
	}
	tw.Flush()
	for l := range strings.Lines(b.String()) {
		fmt.Fprintln(s.w, strings.TrimRight(l, " \n"))
	}
}

// slowest names the three slowest packages and, given the timeout, those
// past half of it: the ones to split before they time out.
func (s *summary) slowest() {
	names := make([]string, 0, len(s.order))
	for _, n := range s.order {
		if s.pkgs[n].done && s.pkgs[n].elapsed > 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.SliceStable(names, func(i, j int) bool { return s.pkgs[names[i]].elapsed > s.pkgs[names[j]].elapsed })
	var top, over []string
	for i, n := range names {
		d := time.Duration(s.pkgs[n].elapsed * float64(time.Second)).Round(time.Second)
		if i < 3 {
			top = append(top, fmt.Sprintf("%s %v", n, d))
		}
		if s.timeout > 0 && d > s.timeout/2 {
			over = append(over, fmt.Sprintf("%s %v", n, d))
		}
	}
	fmt.Fprintf(s.w, "slowest: %s\n", strings.Join(top, ", "))
	if len(over) > 0 {
		fmt.Fprintf(s.w, "over half the %v package timeout (split them): %s\n", s.timeout, strings.Join(over, ", "))
	}
}
