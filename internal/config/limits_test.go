package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrive/redrive/analyzer"
)

// The analyzer's memory bounds: byte sizes in either form, handed to
// analyzer.Limits; what analyzer.Limits refuses is reported at its key and
// line.
func TestAnalyzerLimits(t *testing.T) {
	c := mustParse(t, analyzerDoc("recent_value_bytes: 2KiB", "recent_bytes: 16777216", "response_bytes: 1MiB", "max_requests: 2"), nil)
	want := analyzer.Limits{RecentValueBytes: 2 << 10, RecentBytes: 16 << 20, ResponseBytes: 1 << 20, MaxRequests: 2}
	if got := c.Analyzer.Limits(); got != want {
		t.Errorf("Limits() = %+v, want %+v", got, want)
	}
	if got := mustParse(t, analyzerDoc("token: x-0123456789abcdef"), nil).Analyzer.Limits(); got != (analyzer.Limits{}) {
		t.Errorf("unset: %+v, want zero (the analyzer's defaults)", got)
	}
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{[]string{"recent_value_bytes: -1"}, "line 6: analyzer.recent_value_bytes: -1: must not be negative"},
		{[]string{"max_requests: -3"}, "line 6: analyzer.max_requests: -3: must not be negative"},
		{[]string{"response_bytes: 1KiB"}, "line 6: analyzer.response_bytes: 1024: want 4096 (4 KiB) to 268435456 (256 MiB)"},
		{[]string{"recent_bytes: 1MiB", "recent_value_bytes: 2MiB"}, "line 7: analyzer.recent_value_bytes: 2097152: more than the whole recent list may hold (1048576)"},
		{[]string{"recent_bytes: lots"}, "analyzer.recent_bytes"},
	} {
		err := parseErr(t, analyzerDoc(c.lines...), nil)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.lines, err, c.want)
		}
		var le *analyzer.LimitError
		if strings.Contains(c.want, "line") && (!errors.Is(err, ErrInvalid) || !errors.As(err, &le)) {
			t.Errorf("%v: not ErrInvalid with the analyzer's LimitError: %#v", c.lines, err)
		}
	}
}
