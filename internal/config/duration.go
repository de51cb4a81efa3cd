package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "5s", "1h30m", "0". In YAML and
// text it is read with time.ParseDuration (negative durations refused) and
// written in its shortest form (String).
type Duration time.Duration

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ParseDuration reads a duration as the file does: what time.ParseDuration
// accepts, not negative.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	v, err := time.ParseDuration(s)
	if err != nil {
		var hint string
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && s != "0" {
			hint = " (missing unit)"
		}
		return 0, fmt.Errorf("bad duration %q%s: want e.g. 30s, 5m, 1h30m or 0", s, hint)
	}
	if v < 0 {
		return 0, fmt.Errorf("bad duration %q: negative", s)
	}
	return Duration(v), nil
}

// String is the shortest form that parses back to d: "5s", "30s", "5m",
// "1h", "1h30m", "1h0m5s" as "1h5s", "0s"; sub-second parts are kept
// ("1.5s", "500ms", "1h0.25s").
func (d Duration) String() string {
	v := time.Duration(d)
	if v == 0 {
		return "0s"
	}
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
		if v == time.Duration(-1<<63) { // cannot be negated
			return time.Duration(v).String()
		}
		v = -v
	}
	if v < time.Second {
		b.WriteString(v.String()) // "500ms", "1.5µs", "7ns"
		return b.String()
	}
	h := v / time.Hour
	v -= h * time.Hour
	m := v / time.Minute
	v -= m * time.Minute
	if h > 0 {
		b.WriteString(strconv.FormatInt(int64(h), 10) + "h")
	}
	if m > 0 {
		b.WriteString(strconv.FormatInt(int64(m), 10) + "m")
	}
	if v > 0 {
		s, ns := v/time.Second, v%time.Second
		b.WriteString(strconv.FormatInt(int64(s), 10))
		if ns > 0 {
			b.WriteString(strings.TrimRight(fmt.Sprintf(".%09d", ns), "0"))
		}
		b.WriteByte('s')
	}
	return b.String()
}

// MarshalText writes String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads with ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes String.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a scalar with ParseDuration; null leaves d alone.
// (The loader does not use it: it decodes durations itself, after ${NAME}
// expansion. It is here for other users of yaml.v3.)
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("bad duration: want a scalar such as 30s")
	}
	if n.ShortTag() == "!!null" {
		return nil
	}
	return d.UnmarshalText([]byte(n.Value))
}
