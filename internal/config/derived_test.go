package config

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// A problem is reported once, at the key the user
// wrote; a default derived from a bad value is not a second problem.
func TestErrorsOnlyForKeysTheUserWrote(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  string
		want []string // exactly these errors, in order
	}{
		{"concurrency -5", pipe("concurrency: -5"), []string{"line 4: pipelines[0].concurrency: -5: must be at least 1"}},
		{"concurrency and max_inflight both written", pipe("concurrency: -5", "max_inflight: -1"),
			[]string{"line 4: pipelines[0].concurrency: -5: must be at least 1", "line 5: pipelines[0].max_inflight: -1: must be at least 1"}},
		{"max_inflight derived out of range", pipe("concurrency: 4611686018427387904"),
			[]string{"line 4: pipelines[0].concurrency: max_inflight (not in the file; default the larger of 4096 and 4 × concurrency): 0: must be at least 1; set max_inflight"}},
		{"illegal topic: not also name and dlq.topic", "brokers: [h:1]\npipelines:\n  - topic: a/b\n",
			[]string{`line 3: pipelines[0].topic: "a/b": a topic name uses only letters, digits, '.', '_' and '-'`}},
		{"default name taken", "brokers: [h:1]\npipelines:\n  - {name: x, topic: y}\n  - topic: x\n",
			[]string{`line 4: pipelines[1].topic: name (not in the file; default the topic): "x" is also the name of pipelines[0]; pipeline names must be unique; set name`}},
		{"default dlq is the results topic", pipe("results: solve.requests.dlq"),
			[]string{`line 4: pipelines[0].results: dlq.topic (not in the file; default "<topic>.dlq"): "solve.requests.dlq" is the results topic too; set dlq.topic`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := unjoin(parseErr(t, c.doc, nil))
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// The number of tiers is bounded (each is a topic).
func TestTiersBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := 1; i <= 10000; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		b.WriteString(Duration(int64(i) * 1e9).String())
	}
	b.WriteString("]")
	errs := unjoin(parseErr(t, pipe("retry:", "  tiers: "+b.String()), nil))
	if len(errs) != 1 || errs[0].Error() != "line 5: pipelines[0].retry.tiers: 10000 tiers: at most 16 (each tier is a topic)" {
		t.Errorf("10000 tiers: %v", errs)
	}
	mustParse(t, pipe("retry: {tiers: [1s, 2s, 3s, 4s, 5s, 6s, 7s, 8s, 9s, 10s, 11s, 12s, 13s, 14s, 15s, 16s]}"), nil)
}

// A character YAML refuses is reported with its line
// and column.
func TestBadCharacterHasLineAndColumn(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"brokers: [h:1]\npipelines:\n  - topic: a\x00b\n", "line 3, column 13: a NUL byte"},
		{"brokers: [h:1]\r\npipelines:\r\n  - topic: a\xffb\r\n", "line 3, column 13: byte 0xff is not UTF-8"},
		{"brokers: [h:1]\n# é \x01\n", "line 2, column 5: control character U+0001"},
		{"\xef\xbb\xbfa: \x7f", "line 1, column 4: control character U+007F"},
		{"a: b\n---\nc: \x00", "line 3, column 4: a NUL byte"},
	} {
		err := parseErr(t, c.doc, nil)
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrSyntax) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %q, want it to start with %q", c.doc, err, c.want)
		}
	}
}

// Every character yaml.v3 refuses is found with a line.
func FuzzBadCharacterHasLine(f *testing.F) {
	f.Add([]byte("brokers: [h:1]\npipelines:\n  - topic: a\x00b\n"))
	f.Add([]byte("a: \xc3"))
	f.Add([]byte("a: |\n  x\x01\n"))
	f.Add([]byte("\xff\xfea\x00:\x00 \x00b\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse(data, nil)
		if err == nil || utf8.Valid(data) && !strings.ContainsFunc(string(data), func(r rune) bool { return !printable(r) }) {
			return
		}
		if data[0] == 0xff || data[0] == 0xfe {
			return // UTF-16
		}
		var e *Error
		if errors.As(err, &e) && errors.Is(err, ErrSyntax) && e.Line == 0 {
			t.Fatalf("%q: %v: no line", data, err)
		}
	})
}
