package retry

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// ParseDelay parses a tier delay such as "5s", "30s", "5m", "1h30m". It
// accepts what time.ParseDuration accepts, but only whole seconds of at
// least one second, so that a tier's name is stable.
func ParseDelay(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad delay %q: %w", s, err)
	}
	if d < time.Second {
		return 0, fmt.Errorf("bad delay %q: below 1s", s)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("bad delay %q: not a whole number of seconds", s)
	}
	return d, nil
}

// FormatDelay gives a delay in its shortest form: 5s, 30s, 5m, 1h, 1h30m,
// 1h0m5s becomes 1h5s. It names a tier that has no name of its own (see
// Schedule.Names).
func FormatDelay(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	s := d / time.Second
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

// NameAsWritten is the name of a tier whose delay a configuration wrote as
// s: s, trimmed, when it is made only of digits and letters ("64s", "90s",
// "1h30m"), so that the topic is the one the user wrote; "" otherwise
// ("1.5m", "+5s"), which names the tier by its delay's shortest form.
func NameAsWritten(s string) string {
	s = strings.TrimSpace(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return ""
		}
	}
	return s
}

// Schedule is a pipeline's retry plan.
type Schedule struct {
	// Tiers are the fixed delays of the retry topics, strictly increasing.
	Tiers []time.Duration
	// Names are the tiers' names, in tier order: the suffix of each tier's
	// topic (<topic>.retry.<name>), its redrive-tier header and its
	// metrics label. A name reads as its tier's delay (ParseDelay: "64s"
	// and "1m4s" both name a 64s tier) and uses only the characters of a
	// topic name. Empty (all of it, or one name): FormatDelay of the
	// delay.
	Names []string
	// MaxAttempts counts handler attempts in all, the first one included.
	MaxAttempts int
	// Jitter adds up to this fraction of a tier's delay on top of it (0.1: +10%).
	Jitter float64
	// MaxDue bounds how far ahead of now a retry record's redrive-due may
	// lie: a record due later is invalid. 0: the processor's default,
	// derived from the tiers, ttl and not_ready_deadline (see
	// processor.Pipeline). When set, at least LongestWait.
	MaxDue time.Duration
}

// LongestWait is the largest tier's delay with its largest jitter: the
// longest a retry record waits when no minimum delay asks for more.
func (s Schedule) LongestWait() time.Duration {
	if len(s.Tiers) == 0 {
		return 0
	}
	d := s.Tiers[len(s.Tiers)-1]
	return d + time.Duration(float64(d)*max(s.Jitter, 0))
}

// Defaults of a pipeline's schedule (the configuration file's defaults).
const (
	DefaultMaxAttempts = 4
	DefaultJitter      = 0.1
)

// MaxMaxDue is the largest MaxDue, and the largest due limit the processor
// uses whatever ttl says: ten years keep every due time redrive writes far
// inside redrive-due's range (MaxMillis) and every delay far from
// time.Duration's.
const MaxMaxDue = 10 * 365 * 24 * time.Hour

// MaxMaxAttempts is the largest MaxAttempts, well inside redrive-attempt's
// range (MaxAttempt), so that a count redrive writes is always one it reads.
const MaxMaxAttempts = 1000

// MaxTiers bounds the tiers of a schedule: each tier is a topic that every
// processor of the pipeline consumes and topics.Ensure creates, so a long
// list costs partitions, fetches and memory on every instance.
const MaxTiers = 16

// DefaultTiers are the tiers of a pipeline that lists none: 5s, 30s, 5m.
func DefaultTiers() []time.Duration {
	return []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
}

// ErrBadSchedule is wrapped by Validate's errors.
var ErrBadSchedule = errors.New("bad retry schedule")

// ScheduleError is one problem Validate found.
type ScheduleError struct {
	// Field is the configuration key at fault, relative to the schedule:
	// "tiers", "tiers[1]", "max_attempts" or "jitter".
	Field string
	// Msg says what is wrong with it.
	Msg string
}

func (e *ScheduleError) Error() string {
	return ErrBadSchedule.Error() + ": " + e.Field + ": " + e.Msg
}

// Unwrap gives ErrBadSchedule.
func (e *ScheduleError) Unwrap() error { return ErrBadSchedule }

// Validate checks the schedule is usable. It reports every problem, each a
// *ScheduleError, joined with errors.Join.
func (s Schedule) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ScheduleError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	tiers := s.Tiers
	if len(tiers) == 0 {
		bad("tiers", "at least one tier is required")
	} else if len(tiers) > MaxTiers {
		bad("tiers", "%d tiers: at most %d (each tier is a topic)", len(tiers), MaxTiers)
		tiers = nil // one problem, not one per tier
	}
	for i, t := range tiers {
		field := "tiers[" + strconv.Itoa(i) + "]"
		switch {
		case t <= 0:
			bad(field, "%s: a tier delay must be more than 0", t)
		case t < time.Second || t%time.Second != 0:
			bad(field, "%s: a tier delay is a whole number of seconds, at least 1s (it names the topic)", t)
		case i > 0 && t <= s.Tiers[i-1]:
			bad(field, "%s after %s: tiers must strictly increase", FormatDelay(t), FormatDelay(s.Tiers[i-1]))
		}
	}
	if len(s.Names) > 0 && len(s.Names) != len(s.Tiers) {
		bad("tiers", "%d names for %d tiers", len(s.Names), len(s.Tiers))
	} else if len(s.Names) > 0 {
		// A name that reads as its own delay is also one no other tier
		// has, since the delays strictly increase.
		for i, t := range tiers {
			n := s.Names[i]
			if n == "" || t < time.Second || t%time.Second != 0 {
				continue // the default name, or a delay reported above
			}
			if d, err := ParseDelay(n); err != nil || d != t || !nameChars(n) {
				bad("tiers["+strconv.Itoa(i)+"]", "name %q: a tier's name must read as its delay, %s, in digits, unit letters and '.' (it names the topic and the redrive-tier header)", n, FormatDelay(t))
			}
		}
	}
	if s.MaxAttempts < 1 {
		bad("max_attempts", "%d: must be at least 1 (1: no retries)", s.MaxAttempts)
	} else if s.MaxAttempts > MaxMaxAttempts {
		bad("max_attempts", "%d: must be at most %d", s.MaxAttempts, MaxMaxAttempts)
	}
	jitterOK := s.Jitter >= 0 && s.Jitter <= 1 // false for NaN too
	if !jitterOK {
		bad("jitter", "%v: must be between 0 and 1", s.Jitter)
	}
	if s.MaxDue < 0 {
		bad("max_due", "%s: must not be negative (0: the default)", s.MaxDue)
	} else if s.MaxDue > MaxMaxDue {
		bad("max_due", "%s: must be at most %s (10 years)", s.MaxDue, MaxMaxDue)
	} else if w := s.LongestWait(); s.MaxDue > 0 && jitterOK && s.MaxDue < w {
		bad("max_due", "%s: must be at least the largest tier plus its jitter, %s", s.MaxDue, w)
	}
	return errors.Join(errs...)
}

// Exhausted reports whether no attempt is left after `attempts` attempts.
func (s Schedule) Exhausted(attempts int) bool { return attempts >= s.MaxAttempts }

// TierForAttempt is the index of the tier that carries attempt n (n >= 2):
// attempt n goes to tier n-1, and the last tier is reused when attempts
// outnumber tiers.
func (s Schedule) TierForAttempt(n int) int {
	i := n - 2
	if i < 0 {
		i = 0
	}
	if i >= len(s.Tiers) {
		i = len(s.Tiers) - 1
	}
	return i
}

// TierForDelay is the index of the smallest tier whose delay covers min, and
// whether one does. When none does, the largest tier is returned with
// covers=false: the record hops through it and is looked at again.
func (s Schedule) TierForDelay(min time.Duration) (idx int, covers bool) {
	for i, t := range s.Tiers {
		if t >= min {
			return i, true
		}
	}
	return len(s.Tiers) - 1, false
}

// Next picks the tier for the next handling of a record: the tier for
// attempt `nextAttempt` (or tier 0 for a poll, when nextAttempt is 0), moved
// up to the smallest tier that covers minDelay. It returns the tier index
// and the due time, jittered, counted from now.
func (s Schedule) Next(now time.Time, nextAttempt int, minDelay time.Duration, rnd *rand.Rand) (int, time.Time) {
	idx := 0
	if nextAttempt >= 2 {
		idx = s.TierForAttempt(nextAttempt)
	}
	if minDelay > s.Tiers[idx] {
		idx, _ = s.TierForDelay(minDelay)
	}
	d := s.Tiers[idx]
	if minDelay > d {
		d = minDelay // hop: the due time still honours the minimum
	}
	return idx, ceilMilli(now.Add(d + s.jitter(d, rnd)))
}

// NextPoll picks the tier and due time of a not-ready poll asked for
// after minDelay: the smallest tier that covers it, due minDelay (jittered)
// from now rather than the tier's whole delay, because a poll interval is
// the service's own timing (a job API's first_after, a callback's wait),
// not a backoff. Without a minDelay it is tier 0 and its delay, as Next.
func (s Schedule) NextPoll(now time.Time, minDelay time.Duration, rnd *rand.Rand) (int, time.Time) {
	if minDelay <= 0 {
		return s.Next(now, 0, 0, rnd)
	}
	idx, _ := s.TierForDelay(minDelay)
	return idx, ceilMilli(now.Add(minDelay + s.jitter(minDelay, rnd)))
}

// ceilMilli rounds t up to a whole millisecond, the precision of
// redrive-due, so that the written due time is never earlier than meant.
func ceilMilli(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

func (s Schedule) jitter(d time.Duration, rnd *rand.Rand) time.Duration {
	if s.Jitter <= 0 {
		return 0
	}
	var f float64
	if rnd != nil {
		f = rnd.Float64()
	} else {
		f = rand.Float64()
	}
	return time.Duration(f * s.Jitter * float64(d))
}

// nameChars: letters, digits and '.', the characters of a delay that a
// topic name allows.
func nameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// TierName is tier i's name: Names[i], else FormatDelay of its delay.
func (s Schedule) TierName(i int) string {
	if i < len(s.Names) && s.Names[i] != "" {
		return s.Names[i]
	}
	return FormatDelay(s.Tiers[i])
}

// TierTopic names the retry topic of tier i: "<topic>.retry.<name>"
// (TierName).
func (s Schedule) TierTopic(topic string, i int) string {
	return topic + ".retry." + s.TierName(i)
}

// TierTopic names the retry topic of a tier named by its delay's shortest
// form: "<topic>.retry.<delay>" (FormatDelay). It is also the topic a tier
// had before tiers kept the name the configuration wrote.
func TierTopic(topic string, d time.Duration) string {
	return topic + ".retry." + FormatDelay(d)
}
