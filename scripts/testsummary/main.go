// Command testsummary reads `go test -json` (stdout and stderr together)
// and prints what `go test` would: each package's ok/FAIL line as it
// finishes, the output of every failed test and of every failed package
// (a timeout's panic and goroutine dump included), build errors and any
// line that is not a test event, unchanged. At the end it lists the tests
// that skipped and why — a suite that prints ok while its tool-dependent
// tests skipped says so — and a total with the wall time. `make test` and
// `make test-fast` pipe into it.
//
// It exits 1 when a test, a package or a build failed, or when the
// stream ended with a package unfinished; it never fails on a line it
// cannot read (that line is passed through).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

func main() {
	start := flag.String("start", "", "Unix time (seconds, fractions allowed) the run started, for the wall time; default: when testsummary started")
	timeout := flag.Duration("timeout", 0, "the package timeout passed to go test: packages over half of it are named at the end (0: none)")
	flag.Parse()
	began := time.Now()
	if *start != "" {
		if f, err := strconv.ParseFloat(*start, 64); err == nil {
			began = time.Unix(0, int64(f*float64(time.Second)))
		}
	}
	s := newSummary(os.Stdout, *timeout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stdout, "testsummary: reading the test output:", err)
		s.broken = true
	}
	if !s.finish(time.Since(began)) {
		os.Exit(1)
	}
}

// read feeds every line of r to the summary. Lines may be as long as a
// test's output is (a goroutine dump in one event): bufio.Reader, not
// Scanner, so that no line is too long.
func (s *summary) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
