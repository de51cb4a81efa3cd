package analyzer

import (
	"time"

	"github.com/redrive/redrive/dlq"
)

// futureSkew is how far ahead of the analyzer's clock a record's
// timestamp may be before it is reported (a producer's clock a little
// ahead is normal).
const futureSkew = time.Minute

// clampFuture takes a dead letter dated after now as dead-lettered now:
// record times drive the rules' waiting (after), ages and the per-minute
// counts, and a timestamp a year ahead would hold a dead letter (and the
// rule worker's commit point behind it) for a year, and make ages
// negative. It reports whether the timestamp was further ahead than
// futureSkew.
func clampFuture(d *dlq.DeadLetter, now time.Time) (future bool) {
	if d == nil || !d.Timestamp.After(now) {
		return false
	}
	future = d.Timestamp.Sub(now) > futureSkew
	d.Timestamp = now
	return future
}

// age is how long ago t was, never negative.
func age(now, t time.Time) float64 {
	if t.IsZero() || !now.After(t) {
		return 0
	}
	return now.Sub(t).Seconds()
}
