package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A stream as `go test -json ./...` writes it (shortened): a build
// failure, a package without tests, a skip, a failed subtest, a skipped
// subtest with a two-line reason, a pass, a test running when its
// package timed out, and lines that are not events.
const stream = `{"ImportPath":"m/b [m/b.test]","Action":"build-output","Output":"# m/b [m/b.test]\n"}
{"ImportPath":"m/b [m/b.test]","Action":"build-output","Output":"b/b_test.go:3:27: undefined: undefined\n"}
{"ImportPath":"m/b [m/b.test]","Action":"build-fail"}
{"Action":"start","Package":"m/a"}
{"Action":"start","Package":"m/b"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b [build failed]\n"}
{"Action":"fail","Package":"m/b","Elapsed":0,"FailedBuild":"m/b [m/b.test]"}
{"Action":"start","Package":"m/c"}
{"Action":"output","Package":"m/c","Output":"?   \tm/c\t[no test files]\n"}
{"Action":"skip","Package":"m/c","Elapsed":0}
go: downloading example.com/x v1.0.0
{"Action":"run","Package":"m/a","Test":"TestSkip"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"    a_test.go:3: before\n"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"    kafkatest.go:80: kcat not found: install it\n"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestSkip","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestFail"}
{"Action":"output","Package":"m/a","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"output","Package":"m/a","Test":"TestFail","Output":"    a_test.go:4: some log\n"}
{"Action":"run","Package":"m/a","Test":"TestFail/sub"}
{"Action":"output","Package":"m/a","Test":"TestFail/sub","Output":"=== RUN   TestFail/sub\n"}
{"Action":"output","Package":"m/a","Test":"TestFail/sub","Output":"    a_test.go:4: sub skip\n"}
{"Action":"output","Package":"m/a","Test":"TestFail/sub","Output":"        second line\n"}
{"Action":"output","Package":"m/a","Test":"TestFail/sub","Output":"--- SKIP: TestFail/sub (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestFail/sub","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestFail/bad"}
{"Action":"output","Package":"m/a","Test":"TestFail/bad","Output":"=== RUN   TestFail/bad\n"}
{"Action":"output","Package":"m/a","Test":"TestFail/bad","Output":"    a_test.go:4: boom\n"}
{"Action":"output","Package":"m/a","Test":"TestFail/bad","Output":"--- FAIL: TestFail/bad (0.00s)\n"}
{"Action":"fail","Package":"m/a","Test":"TestFail/bad","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"m/a","Test":"TestFail","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestPass"}
{"Action":"output","Package":"m/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"m/a","Test":"TestPass","Output":"    a_test.go:5: passing tests' logs are not shown\n"}
{"Action":"output","Package":"m/a","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestSlow"}
{"Action":"output","Package":"m/a","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"m/a","Test":"TestSlow","Output":"panic: test timed out after 2s\n"}
{"Action":"output","Package":"m/a","Test":"TestSlow","Output":"\trunning tests:\n"}
{"Action":"output","Package":"m/a","Test":"TestSlow","Output":"\t\tTestSlow (2s)\n"}
not json at all
{"Action":"output","Package":"m/a","Test
{"Action":"","Package":"m/a"}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t2.015s\n"}
{"Action":"fail","Package":"m/a","Elapsed":2.018}
`

func run(t *testing.T, in string, timeout time.Duration) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	s := newSummary(&out, timeout)
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	ok := s.finish(90 * time.Second)
	return out.String(), ok
}

func TestSummary(t *testing.T) {
	out, ok := run(t, stream, 4*time.Second)
	if ok {
		t.Error("a stream with failures summarised as ok")
	}
	for _, want := range []string{
		"b/b_test.go:3:27: undefined: undefined\n", // build errors, as go prints them
		"FAIL\tm/b [build failed]\n",
		"?   \tm/c\t[no test files]\n",
		"go: downloading example.com/x v1.0.0\n", // not an event: passed through
		"not json at all\n",
		`{"Action":"output","Package":"m/a","Test` + "\n",
		`{"Action":"","Package":"m/a"}` + "\n",
		"=== FAIL m/a TestFail/bad (0.00s)\n    a_test.go:4: boom\n--- FAIL: TestFail/bad (0.00s)\n",
		"=== FAIL m/a TestFail (0.00s)\n    a_test.go:4: some log\n--- FAIL: TestFail (0.00s)\n",
		"=== UNFINISHED m/a TestSlow (running when the package failed)\npanic: test timed out after 2s\n\trunning tests:\n\t\tTestSlow (2s)\n",
		"FAIL\tm/a\t2.015s\n",
		"skipped: 2\n  m/a  TestSkip      kcat not found: install it\n  m/a  TestFail/sub  sub skip second line\n",
		"failed: 3 tests, 2 packages\n",
		"  m/a  TestSlow      unfinished: running when the package failed\n",
		"  m/b  (package)\n",
		"slowest: m/a 2s\n",
		"total: 1 passed, 3 failed, 2 skipped (subtests included); 3 packages, 2 failed; wall 1m30s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"=== RUN", "passing tests' logs", "--- SKIP"} {
		if strings.Contains(out, not) {
			t.Errorf("the summary shows %q:\n%s", not, out)
		}
	}
	// The package's ok/FAIL line comes after the output of its failures.
	if strings.Index(out, "FAIL\tm/a\t2.015s") < strings.Index(out, "TestSlow (2s)") {
		t.Errorf("m/a's FAIL line before its failed tests' output:\n%s", out)
	}
}

func TestSummaryAllPassed(t *testing.T) {
	out, ok := run(t, `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"stopping the secure broker\n"}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t500.100s\n"}
{"Action":"pass","Package":"m/a","Elapsed":500.1}
`, 14*time.Minute)
	if !ok {
		t.Errorf("all passed, summarised as failed:\n%s", out)
	}
	want := "stopping the secure broker\nok  \tm/a\t500.100s\n\nskipped: none\nslowest: m/a 8m20s\n" +
		"over half the 14m0s package timeout (split them): m/a 8m20s\n" +
		"total: 1 passed, 0 failed, 0 skipped (subtests included); 1 packages, 0 failed; wall 1m30s\n"
	if out != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out, want)
	}
}

// A stream cut off inside a package (go test killed) is a failure, and
// what the package printed so far is shown.
func TestSummaryUnfinished(t *testing.T) {
	out, ok := run(t, `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"    a_test.go:9: half way\n"}
`, 0)
	if ok || !strings.Contains(out, "=== UNFINISHED m/a TestA\n    a_test.go:9: half way\n") || !strings.Contains(out, "unfinished (the stream ended while they ran): m/a\n") {
		t.Errorf("ok %v:\n%s", ok, out)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":0.5}`, true},
		{`{"ImportPath":"m/b [m/b.test]","Action":"build-fail"}`, true},
		{"  " + `{"Action":"start","Package":"m/a"}` + "\r\n", true},
		{``, false},
		{`ok  	m/a	0.1s`, false},
		{`{"Action":"pass"}`, false},            // no package
		{`{"Package":"m/a"}`, false},            // no action
		{`{"Action":1,"Package":"m/a"}`, false}, // not an event's types
		{`{"Action":"pass","Package":"m/a"`, false},
		{`[1,2]`, false},
	} {
		e, ok := decode([]byte(tc.in))
		if ok != tc.ok {
			t.Errorf("decode(%q) = %+v, %v; want ok %v", tc.in, e, ok, tc.ok)
		}
	}
}

func TestSkipReason(t *testing.T) {
	for in, want := range map[string]string{
		"=== RUN   TestX\n    x_test.go:9: needs Chromium\n--- SKIP: TestX (0.00s)\n":              "needs Chromium",
		"    x_test.go:1: a log\n    x_test.go:2: the reason\n        and more\n--- SKIP: TestX\n": "the reason and more",
		"        x_test.go:2: a subtest's reason\n":                                                "a subtest's reason",
		"--- SKIP: TestX (0.00s)\n":                                                                "(no reason given)",
		"    odd: not a file\n":                                                                    "(no reason given)",
	} {
		if got := skipReason(in); got != want {
			t.Errorf("skipReason(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDecode: any line decodes or is refused without panicking; an event
// always has an action and a package or import path.
func FuzzDecode(f *testing.F) {
	for _, l := range strings.Split(stream, "\n") {
		f.Add([]byte(l))
	}
	f.Add([]byte(`{"Action":"output","Package":"p","Test":"T","Output":"\u0000\ud800"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, ok := decode(line)
		if ok && (e.Action == "" || (e.Package == "" && e.ImportPath == "")) {
			t.Errorf("decode(%q) = %+v: an event without action or package", line, e)
		}
	})
}

// FuzzSummary: any stream is summarised without panicking, and every
// line that is not an event is in the output as it came.
func FuzzSummary(f *testing.F) {
	f.Add(stream)
	f.Add("{\"Action\":\"fail\",\"Package\":\"p\",\"Test\":\"T\"}\n{\"Action\":\"skip\",\"Package\":\"p\"}")
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		s := newSummary(&out, time.Minute)
		if err := s.read(strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		s.finish(time.Second)
		for _, l := range strings.SplitAfter(in, "\n") {
			if l == "" {
				continue
			}
			if _, ok := decode([]byte(l)); !ok && !strings.Contains(out.String(), strings.TrimSuffix(l, "\n")) {
				t.Errorf("the line %q that is not an event is not in the output:\n%s", l, out.String())
			}
		}
	})
}
