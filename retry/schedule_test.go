package retry_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

func TestFormatDelay(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1s"},
		{5 * time.Second, "5s"},
		{30 * time.Second, "30s"},
		{59 * time.Second, "59s"},
		{60 * time.Second, "1m"},
		{90 * time.Second, "1m30s"},
		{5 * time.Minute, "5m"},
		{59*time.Minute + 59*time.Second, "59m59s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 5*time.Second, "1h5s"}, // no "0m" in between
		{time.Hour + time.Minute + time.Second, "1h1m1s"},
		{24 * time.Hour, "24h"},               // hours are the largest unit: no "1d"
		{168 * time.Hour, "168h"},             // a week of DLQ retention
		{-5 * time.Second, "0s"},              // non-positive: "0s", never a negative name
		{0, "0s"},                             //
		{1500 * time.Millisecond, "1s"},       // sub-second part dropped: Validate rejects such tiers
		{500 * time.Millisecond, "0s"},        // below 1s: likewise
		{time.Minute + time.Nanosecond, "1m"}, //
	} {
		t.Run(tc.want+"/"+tc.d.String(), func(t *testing.T) {
			if got := retry.FormatDelay(tc.d); got != tc.want {
				t.Errorf("FormatDelay(%v) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}

func TestParseDelay(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"1s", time.Second},
		{"5s", 5 * time.Second},
		{"30s", 30 * time.Second},
		{"5m", 5 * time.Minute},
		{"1h", time.Hour},
		{"1h30m", 90 * time.Minute},
		{"1h5s", time.Hour + 5*time.Second},
		// Longer spellings of the same delay are accepted; the tier's name is
		// still FormatDelay's shortest form.
		{"90s", 90 * time.Second},
		{"60m", time.Hour},
		{"1h0m0s", time.Hour},
		{"1000ms", time.Second},
		{"1.0s", time.Second},
		{"0.5m", 30 * time.Second},
		{"+5s", 5 * time.Second},
		{"2562047h47m16s", 2562047*time.Hour + 47*time.Minute + 16*time.Second}, // the largest whole-second Duration
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := retry.ParseDelay(tc.in)
			if err != nil || got != tc.want {
				t.Errorf("ParseDelay(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseDelayRejects(t *testing.T) {
	for _, in := range []string{
		"", "5", "s", "abc", "5 s", " 5s", "5s ", "1d", "1w", "5S", "5sec",
		"-5s", "-1h", "0s", "0", "-0s",
		"500ms", "999ms", "1500ms", "1.5s", "1s1ns", "61.5s",
		"2562047h47m17s", "9999999999h", // overflow
		"NaN", "Inf", "1e3s",
	} {
		t.Run(strconv.Quote(in), func(t *testing.T) {
			if d, err := retry.ParseDelay(in); err == nil {
				t.Errorf("ParseDelay(%q) = %v, want an error", in, d)
			} else if !strings.Contains(err.Error(), strconv.Quote(in)) {
				t.Errorf("ParseDelay(%q): error %q does not quote the input", in, err)
			}
		})
	}
}

// shortest matches a delay with no zero component and minutes and seconds
// below 60: the shortest form of a whole-second delay.
var shortest = regexp.MustCompile(`^([1-9][0-9]*h)?([1-9]m|[1-5][0-9]m)?([1-9]s|[1-5][0-9]s)?$`)

func TestDelayRoundTrip(t *testing.T) {
	check := func(d time.Duration) {
		t.Helper()
		s := retry.FormatDelay(d)
		if s == "" || !shortest.MatchString(s) {
			t.Fatalf("FormatDelay(%v) = %q, not a shortest form", d, s)
		}
		back, err := retry.ParseDelay(s)
		if err != nil || back != d {
			t.Fatalf("ParseDelay(FormatDelay(%v) = %q) = %v, %v", d, s, back, err)
		}
		if again := retry.FormatDelay(back); again != s {
			t.Fatalf("FormatDelay not stable: %q then %q", s, again)
		}
	}
	for s := 1; s <= 3*3600+1; s++ { // every delay up to 3h
		check(time.Duration(s) * time.Second)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		check(time.Duration(1+rnd.Int64N(int64(math.MaxInt64/time.Second))) * time.Second)
	}
	check(time.Duration(math.MaxInt64 / time.Second * time.Second))
}

func TestValidate(t *testing.T) {
	ok := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 4, Jitter: 0.1}
	with := func(f func(*retry.Schedule)) retry.Schedule {
		s := ok
		s.Tiers = append([]time.Duration(nil), ok.Tiers...)
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name    string
		s       retry.Schedule
		wantErr string // "" for valid
	}{
		{"design example", ok, ""},
		{"one tier", retry.Schedule{Tiers: []time.Duration{time.Second}, MaxAttempts: 1}, ""},
		{"more attempts than tiers", with(func(s *retry.Schedule) { s.MaxAttempts = 100 }), ""},
		{"jitter 0", with(func(s *retry.Schedule) { s.Jitter = 0 }), ""},
		{"jitter 1", with(func(s *retry.Schedule) { s.Jitter = 1 }), ""},
		{"nil tiers", with(func(s *retry.Schedule) { s.Tiers = nil }), "tiers: at least one tier is required"},
		{"empty tiers", with(func(s *retry.Schedule) { s.Tiers = []time.Duration{} }), "tiers: at least one tier is required"},
		{"decreasing", with(func(s *retry.Schedule) { s.Tiers[1] = 4 * time.Second }), "tiers[1]: 4s after 5s: tiers must strictly increase"},
		{"duplicate delay (same topic name)", with(func(s *retry.Schedule) { s.Tiers[1] = 5 * time.Second }), "tiers[1]: 5s after 5s: tiers must strictly increase"},
		{"duplicate spelled differently", retry.Schedule{Tiers: []time.Duration{time.Hour, 60 * time.Minute}, MaxAttempts: 2}, "tiers[1]: 1h after 1h: tiers must strictly increase"},
		{"last equals first", with(func(s *retry.Schedule) { s.Tiers[2] = 30 * time.Second }), "must strictly increase"},
		{"zero tier", with(func(s *retry.Schedule) { s.Tiers[0] = 0 }), "tiers[0]: 0s: a tier delay must be more than 0"},
		{"negative tier", with(func(s *retry.Schedule) { s.Tiers[0] = -time.Second }), "must be more than 0"},
		{"sub-second tier", with(func(s *retry.Schedule) { s.Tiers[0] = 500 * time.Millisecond }), "whole number of seconds, at least 1s"},
		{"fractional tier", with(func(s *retry.Schedule) { s.Tiers[1] = 30*time.Second + time.Millisecond }), "tiers[1]"},
		{"max_attempts 0", with(func(s *retry.Schedule) { s.MaxAttempts = 0 }), "max_attempts"},
		{"max_attempts -1", with(func(s *retry.Schedule) { s.MaxAttempts = -1 }), "max_attempts"},
		{"jitter negative", with(func(s *retry.Schedule) { s.Jitter = -0.1 }), "jitter"},
		{"jitter above 1", with(func(s *retry.Schedule) { s.Jitter = 1.5 }), "jitter"},
		{"jitter +Inf", with(func(s *retry.Schedule) { s.Jitter = math.Inf(1) }), "jitter"},
		{"jitter NaN (YAML .nan)", with(func(s *retry.Schedule) { s.Jitter = math.NaN() }), "jitter"},
		{"max_attempts at its maximum", with(func(s *retry.Schedule) { s.MaxAttempts = retry.MaxMaxAttempts }), ""},
		{"max_attempts above its maximum", with(func(s *retry.Schedule) { s.MaxAttempts = retry.MaxMaxAttempts + 1 }), "max_attempts: 1001: must be at most 1000"},
		{"max_attempts int's maximum", with(func(s *retry.Schedule) { s.MaxAttempts = int(^uint(0) >> 1) }), "must be at most 1000"},
		{"max_due 0 is the default", with(func(s *retry.Schedule) { s.MaxDue = 0 }), ""},
		{"max_due the longest wait", with(func(s *retry.Schedule) { s.MaxDue = 5*time.Minute + 30*time.Second }), ""},
		{"max_due a day", with(func(s *retry.Schedule) { s.MaxDue = 24 * time.Hour }), ""},
		{"max_due below the longest wait", with(func(s *retry.Schedule) { s.MaxDue = 5 * time.Minute }), "max_due: 5m0s: must be at least the largest tier plus its jitter, 5m30s"},
		{"max_due negative", with(func(s *retry.Schedule) { s.MaxDue = -time.Second }), "max_due: -1s: must not be negative"},
		{"max_due 10 years", with(func(s *retry.Schedule) { s.MaxDue = retry.MaxMaxDue }), ""},
		{"max_due above 10 years", with(func(s *retry.Schedule) { s.MaxDue = retry.MaxMaxDue + time.Second }), "max_due: 87600h0m1s: must be at most 87600h0m0s (10 years)"},
		{"names as written", with(func(s *retry.Schedule) { s.Names = []string{"5s", "30s", "300s"} }), ""},
		{"names in other forms of the delay", with(func(s *retry.Schedule) { s.Names = []string{"5000ms", "0.5m", "5m0s"} }), ""},
		{"an empty name is the default", with(func(s *retry.Schedule) { s.Names = []string{"", "30s", ""} }), ""},
		{"fewer names than tiers", with(func(s *retry.Schedule) { s.Names = []string{"5s"} }), "tiers: 1 names for 3 tiers"},
		{"a name of another delay", with(func(s *retry.Schedule) { s.Names = []string{"5s", "31s", "5m"} }), `tiers[1]: name "31s": a tier's name must read as its delay, 30s`},
		{"a name of an earlier tier", with(func(s *retry.Schedule) { s.Names = []string{"5s", "5s", "5m"} }), `tiers[1]: name "5s"`},
		{"a name that is not a delay", with(func(s *retry.Schedule) { s.Names = []string{"fast", "30s", "5m"} }), `tiers[0]: name "fast"`},
		{"a name a topic cannot carry", with(func(s *retry.Schedule) { s.Names = []string{"5s", "30s", "+5m"} }), `tiers[2]: name "+5m"`},
		{"a name with a unit a topic cannot carry", with(func(s *retry.Schedule) { s.Tiers[0] = time.Second; s.Names = []string{"1000000µs", "30s", "5m"} }), `tiers[0]: name "1000000µs"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tc.s, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error containing %q", tc.s, tc.wantErr)
			}
			if !errors.Is(err, retry.ErrBadSchedule) {
				t.Errorf("error %v does not wrap ErrBadSchedule", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestExhausted(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second}, MaxAttempts: 3}
	for attempts, want := range []bool{false, false, false, true, true} {
		if got := s.Exhausted(attempts); got != want {
			t.Errorf("MaxAttempts 3: Exhausted(%d) = %v, want %v", attempts, got, want)
		}
	}
	one := retry.Schedule{Tiers: []time.Duration{5 * time.Second}, MaxAttempts: 1}
	if one.Exhausted(0) || !one.Exhausted(1) {
		t.Errorf("MaxAttempts 1: the first attempt is the only one")
	}
}

func TestTierForAttempt(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 10}
	for _, tc := range []struct{ attempt, want int }{
		{-1, 0}, {0, 0}, {1, 0}, // no tier carries these; clamped to the first
		{2, 0}, // attempt n goes to tier n-1 (1-based), index n-2
		{3, 1},
		{4, 2},
		{5, 2}, // attempts outnumber tiers: the last is reused
		{10, 2},
		{math.MaxInt, 2},
	} {
		if got := s.TierForAttempt(tc.attempt); got != tc.want {
			t.Errorf("TierForAttempt(%d) = %d, want %d", tc.attempt, got, tc.want)
		}
	}
	one := retry.Schedule{Tiers: []time.Duration{time.Minute}, MaxAttempts: 5}
	for n := 2; n <= 5; n++ {
		if got := one.TierForAttempt(n); got != 0 {
			t.Errorf("one tier: TierForAttempt(%d) = %d, want 0", n, got)
		}
	}
}

func TestTierForDelay(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 4}
	for _, tc := range []struct {
		min    time.Duration
		idx    int
		covers bool
	}{
		{-time.Second, 0, true},
		{0, 0, true},
		{time.Millisecond, 0, true},
		{5 * time.Second, 0, true}, // equal covers
		{5*time.Second + time.Nanosecond, 1, true},
		{29 * time.Second, 1, true},
		{30 * time.Second, 1, true},
		{31 * time.Second, 2, true},
		{5 * time.Minute, 2, true},
		{5*time.Minute + time.Nanosecond, 2, false}, // none covers: the largest, to hop through
		{time.Hour, 2, false},
		{math.MaxInt64, 2, false},
	} {
		idx, covers := s.TierForDelay(tc.min)
		if idx != tc.idx || covers != tc.covers {
			t.Errorf("TierForDelay(%v) = %d, %v; want %d, %v", tc.min, idx, covers, tc.idx, tc.covers)
		}
	}
}

func TestTierTopic(t *testing.T) {
	for _, tc := range []struct {
		topic string
		d     time.Duration
		want  string
	}{
		{"solve.requests", 5 * time.Second, "solve.requests.retry.5s"},
		{"solve.requests", 30 * time.Second, "solve.requests.retry.30s"},
		{"solve.requests", 5 * time.Minute, "solve.requests.retry.5m"},
		{"solve.requests", time.Hour, "solve.requests.retry.1h"},
		{"solve.requests", 90 * time.Minute, "solve.requests.retry.1h30m"},
		{"webhooks", 90 * time.Second, "webhooks.retry.1m30s"},
		{"orders_v2", 3601 * time.Second, "orders_v2.retry.1h1s"},
	} {
		if got := retry.TierTopic(tc.topic, tc.d); got != tc.want {
			t.Errorf("TierTopic(%q, %v) = %q, want %q", tc.topic, tc.d, got, tc.want)
		}
	}
}

func TestNameAsWritten(t *testing.T) {
	for in, want := range map[string]string{
		"64s": "64s", " 90s ": "90s", "1h30m": "1h30m", "1h0m5s": "1h0m5s", "2000ms": "2000ms", "5m": "5m",
		"1.5m": "", "0.5h": "", "+5s": "", "1m 4s": "", "": "",
	} {
		if got := retry.NameAsWritten(in); got != want {
			t.Errorf("NameAsWritten(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScheduleTierNames(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 64 * time.Second, 90 * time.Minute}}
	for i, want := range []string{"orders.retry.5s", "orders.retry.1m4s", "orders.retry.1h30m"} {
		if got := s.TierTopic("orders", i); got != want {
			t.Errorf("without names: TierTopic(orders, %d) = %q, want %q", i, got, want)
		}
		if got := retry.TierTopic("orders", s.Tiers[i]); got != want {
			t.Errorf("retry.TierTopic(orders, %v) = %q, want %q", s.Tiers[i], got, want)
		}
	}
	s.Names = []string{"", "64s", "5400s"}
	for i, want := range []string{"5s", "64s", "5400s"} {
		if got := s.TierName(i); got != want {
			t.Errorf("TierName(%d) = %q, want %q", i, got, want)
		}
		if got := s.TierTopic("orders", i); got != "orders.retry."+want {
			t.Errorf("TierTopic(orders, %d) = %q, want orders.retry.%s", i, got, want)
		}
	}
	s.MaxAttempts = 3
	if err := s.Validate(); err != nil {
		t.Errorf("Validate with names: %v", err)
	}
	// A name is what redrive-tier carries: it must read back.
	for i := range s.Tiers {
		m, _, err := retry.Decode(retry.Encode(retry.Meta{ID: "r1", Attempt: 2, Tier: s.TierName(i), Due: now}, nil))
		if err != nil || m.Tier != s.TierName(i) {
			t.Errorf("tier %d: redrive-tier %q reads back as %q, %v", i, s.TierName(i), m.Tier, err)
		}
	}
}

// now has a sub-millisecond part, so that rounding up to redrive-due's
// millisecond precision is exercised.
var now = time.Date(2025, 3, 1, 12, 0, 0, 123_456_789, time.UTC)

func TestNextWithoutJitter(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 6}
	ms := func(d time.Duration) time.Time { // now + d, rounded up to the millisecond
		return time.UnixMilli(now.Add(d).UnixMilli() + 1).UTC()
	}
	for _, tc := range []struct {
		name        string
		nextAttempt int
		minDelay    time.Duration
		idx         int
		due         time.Time
	}{
		{"poll goes to the first tier", 0, 0, 0, ms(5 * time.Second)},
		{"attempt 1 clamps to the first tier", 1, 0, 0, ms(5 * time.Second)},
		{"attempt 2 to tier 1", 2, 0, 0, ms(5 * time.Second)},
		{"attempt 3 to tier 2", 3, 0, 1, ms(30 * time.Second)},
		{"attempt 4 to tier 3", 4, 0, 2, ms(5 * time.Minute)},
		{"attempt 6 reuses the last tier", 6, 0, 2, ms(5 * time.Minute)},
		{"min delay below the tier: no change", 3, 10 * time.Second, 1, ms(30 * time.Second)},
		{"min delay never moves down", 4, time.Second, 2, ms(5 * time.Minute)},
		{"min delay moves up to the covering tier", 2, 6 * time.Second, 1, ms(30 * time.Second)},
		{"min delay equal to a tier", 2, 30 * time.Second, 1, ms(30 * time.Second)},
		{"poll with Retry-After", 0, 31 * time.Second, 2, ms(5 * time.Minute)},
		{"min delay above every tier: largest, due at the min delay", 2, time.Hour, 2, ms(time.Hour)},
		{"poll with a long Retry-After", 0, 24 * time.Hour, 2, ms(24 * time.Hour)},
		{"negative min delay is none", 2, -time.Hour, 0, ms(5 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx, due := s.Next(now, tc.nextAttempt, tc.minDelay, nil)
			if idx != tc.idx || !due.Equal(tc.due) {
				t.Errorf("Next(now, %d, %v) = %d, %s; want %d, %s", tc.nextAttempt, tc.minDelay, idx, due.Format(time.RFC3339Nano), tc.idx, tc.due.Format(time.RFC3339Nano))
			}
		})
	}
	// Already on a millisecond: nothing to round.
	exact := time.UnixMilli(1_700_000_000_000)
	if _, due := s.Next(exact, 2, 0, nil); !due.Equal(exact.Add(5 * time.Second)) {
		t.Errorf("due %v, want exactly now+5s", due)
	}
}

func TestNextJitterBounds(t *testing.T) {
	for _, jitter := range []float64{0.1, 0.5, 1} {
		s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 6, Jitter: jitter}
		rnd := rand.New(rand.NewPCG(7, uint64(jitter*10)))
		for _, tc := range []struct {
			nextAttempt int
			minDelay    time.Duration
			base        time.Duration // the delay the jitter is a fraction of
		}{
			{0, 0, 5 * time.Second},
			{2, 0, 5 * time.Second},
			{3, 0, 30 * time.Second},
			{9, 0, 5 * time.Minute},
			{2, 20 * time.Second, 30 * time.Second},
			{2, 2 * time.Hour, 2 * time.Hour}, // hop: jitter on top of the min delay
		} {
			var lo, hi time.Duration = math.MaxInt64, 0
			for range 2000 {
				_, due := s.Next(now, tc.nextAttempt, tc.minDelay, rnd)
				if due.UnixNano()%int64(time.Millisecond) != 0 {
					t.Fatalf("due %v is not a whole millisecond", due)
				}
				if due.Before(now.Add(tc.base)) || due.Before(now.Add(tc.minDelay)) {
					t.Fatalf("jitter %v, attempt %d, min %v: due %v before now+%v", jitter, tc.nextAttempt, tc.minDelay, due.Sub(now), tc.base)
				}
				maxJ := time.Duration(jitter * float64(tc.base))
				if limit := now.Add(tc.base + maxJ + time.Millisecond); due.After(limit) {
					t.Fatalf("jitter %v, attempt %d, min %v: due %v after now+%v+%v", jitter, tc.nextAttempt, tc.minDelay, due.Sub(now), tc.base, maxJ)
				}
				lo, hi = min(lo, due.Sub(now)), max(hi, due.Sub(now))
			}
			// The jitter is spread over its range, not stuck at one end.
			if spread := float64(hi-lo) / (jitter * float64(tc.base)); spread < 0.9 {
				t.Errorf("jitter %v, base %v: dues spread over %.0f%% of the jitter range", jitter, tc.base, spread*100)
			}
		}
	}
}

func TestNextNilRandUsesGlobalSource(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{time.Minute}, MaxAttempts: 2, Jitter: 0.5}
	seen := map[time.Time]bool{}
	for range 100 {
		_, due := s.Next(now, 2, 0, nil)
		if due.Before(now.Add(time.Minute)) || due.After(now.Add(90*time.Second+time.Millisecond)) {
			t.Fatalf("due %v outside [1m, 1m30s]", due.Sub(now))
		}
		seen[due] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct due times out of 100 with jitter", len(seen))
	}
}

// TestNextMinDelayNeverEarly: whatever the tier, the due time honours the
// minimum delay, to the millisecond, with and without jitter.
func TestNextMinDelayNeverEarly(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, jitter := range []float64{0, 0.1, 1} {
		s := retry.Schedule{Tiers: []time.Duration{time.Second, 5 * time.Second, time.Minute}, MaxAttempts: 5, Jitter: jitter}
		for range 20000 {
			min := time.Duration(rnd.Int64N(int64(48 * time.Hour)))
			at := now.Add(time.Duration(rnd.Int64N(int64(time.Second))))
			n := rnd.IntN(7)
			idx, due := s.Next(at, n, min, rnd)
			if due.Before(at.Add(min)) || due.Before(at.Add(s.Tiers[idx])) {
				t.Fatalf("Next(%v, %d, %v) = tier %d due +%v: early", at, n, min, idx, due.Sub(at))
			}
			if due.UnixNano()%int64(time.Millisecond) != 0 {
				t.Fatalf("due %v not rounded to the millisecond", due)
			}
			if wantIdx, _ := s.TierForDelay(min); idx < wantIdx {
				t.Fatalf("min %v: tier %d does not cover it, %d does", min, idx, wantIdx)
			}
		}
	}
}

// TestNextHopContract walks the design's rule for a minimum delay longer
// than every tier: the record goes to the largest tier, due when the minimum
// delay is over, and hops through that tier (TierForDelay reports
// covers=false) without the schedule counting an attempt, until the
// remaining delay is covered. Next takes the attempt number from its caller
// and never changes it, so a hop spends nothing.
func TestNextHopContract(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 3}
	const attempt = 2 // the next attempt, after one failure
	idx, due := s.Next(now, attempt, 17*time.Minute, nil)
	if idx != 2 {
		t.Fatalf("tier %d, want the largest (2)", idx)
	}
	if got := due.Sub(now); got < 17*time.Minute || got > 17*time.Minute+time.Millisecond {
		t.Fatalf("due in %v, want 17m", got)
	}
	// Looked at again after each pass through the 5m tier: still early,
	// so it hops, not counted as an attempt, to the tier covering what is left.
	at := now
	var hops []string
	for at.Before(due) {
		left := due.Sub(at)
		i, covers := s.TierForDelay(left)
		hops = append(hops, fmt.Sprintf("%s:%v", retry.FormatDelay(s.Tiers[i]), covers))
		at = at.Add(min(s.Tiers[i], left))
	}
	if got, want := strings.Join(hops, " "), "5m:false 5m:false 5m:false 5m:true"; got != want {
		t.Errorf("hops %q, want %q", got, want)
	}
	if s.Exhausted(attempt - 1) {
		t.Errorf("hops made the schedule exhausted")
	}
	// Once due, the attempt is made and the next retry goes by the attempt rule.
	if idx, _ := s.Next(due, attempt+1, 0, nil); idx != 1 {
		t.Errorf("after the hops, attempt %d goes to tier %d, want 1", attempt+1, idx)
	}
}

func ExampleSchedule_Next() {
	s := retry.Schedule{
		Tiers:       []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute},
		MaxAttempts: 4,
	}
	if err := s.Validate(); err != nil {
		panic(err)
	}
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for attempt := 2; attempt <= 5; attempt++ {
		if s.Exhausted(attempt - 1) {
			fmt.Printf("attempt %d: exhausted, dead-letter\n", attempt)
			break
		}
		idx, due := s.Next(now, attempt, 0, nil)
		fmt.Printf("attempt %d: %s due %s\n", attempt, retry.TierTopic("solve.requests", s.Tiers[idx]), due.Format(time.TimeOnly))
	}
	// A Retry-After of 20s moves the retry up to the 30s tier.
	idx, due := s.Next(now, 2, 20*time.Second, nil)
	fmt.Printf("retry-after 20s: %s due %s\n", retry.FormatDelay(s.Tiers[idx]), due.Format(time.TimeOnly))
	// Output:
	// attempt 2: solve.requests.retry.5s due 12:00:05
	// attempt 3: solve.requests.retry.30s due 12:00:30
	// attempt 4: solve.requests.retry.5m due 12:05:00
	// attempt 5: exhausted, dead-letter
	// retry-after 20s: 30s due 12:00:30
}

func FuzzParseDelay(f *testing.F) {
	for _, s := range []string{
		"5s", "30s", "5m", "1h", "1h30m", "1h5s", "90s", "60m", "1h0m0s", "1.5s", "1500ms", "0.5m",
		"-5s", "0s", "", "5", "1d", "+5s", "2562047h47m16s", "2562047h47m17s", "1e3s", ".5h", "1µs",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := retry.ParseDelay(s)
		if err != nil {
			return
		}
		if d < time.Second || d%time.Second != 0 {
			t.Fatalf("ParseDelay(%q) = %v: not whole seconds of at least 1s", s, d)
		}
		name := retry.FormatDelay(d)
		if !shortest.MatchString(name) {
			t.Fatalf("FormatDelay(%v) = %q: not a shortest form", d, name)
		}
		back, err := retry.ParseDelay(name)
		if err != nil || back != d {
			t.Fatalf("ParseDelay(%q) = %v; FormatDelay gives %q which parses as %v, %v", s, d, name, back, err)
		}
	})
}

// At most MaxTiers tiers, reported once (not once per
// tier).
func TestValidateBoundsTiers(t *testing.T) {
	tiers := func(n int) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = time.Duration(i+1) * time.Second
		}
		return ds
	}
	if err := (retry.Schedule{Tiers: tiers(retry.MaxTiers), MaxAttempts: 4}).Validate(); err != nil {
		t.Errorf("%d tiers: %v", retry.MaxTiers, err)
	}
	bad := tiers(10000)
	bad[5] = 0
	err := (retry.Schedule{Tiers: bad, MaxAttempts: 4}).Validate()
	if err == nil || !strings.Contains(err.Error(), "tiers: 10000 tiers: at most 16") {
		t.Fatalf("10000 tiers: %v", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 1 {
		t.Errorf("10000 tiers: %d problems, want 1: %v", n, err)
	}
}

// A poll interval is the service's timing: due after it, in the tier
// that covers it, not after the tier's whole delay.
func TestNextPoll(t *testing.T) {
	s := retry.Schedule{Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, MaxAttempts: 4}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		min  time.Duration
		idx  int
		want time.Duration
	}{{0, 0, 5 * time.Second}, {2 * time.Second, 0, 2 * time.Second}, {15 * time.Second, 1, 15 * time.Second},
		{2 * time.Minute, 2, 2 * time.Minute}, {7 * time.Minute, 2, 7 * time.Minute}} {
		idx, due := s.NextPoll(now, tt.min, nil)
		if idx != tt.idx || !due.Equal(now.Add(tt.want)) {
			t.Errorf("NextPoll(%s) = tier %d due +%s, want tier %d due +%s", tt.min, idx, due.Sub(now), tt.idx, tt.want)
		}
	}
}
