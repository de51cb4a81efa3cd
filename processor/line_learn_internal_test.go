package processor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// epoch is a second of calls at perSecond, throttled of them 429s.
func epoch(perSecond, throttled int64, bound bool) epochCalls {
	return epochCalls{calls: perSecond, throttled: throttled, dur: time.Second, bound: bound}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// No 429, no limit: however fast the calls go and however long.
func TestLearnerNoLimitWithout429(t *testing.T) {
	var l learner
	now := time.Now()
	for i := range 100 {
		if got, _ := l.end(epoch(1000, 0, false), now.Add(time.Duration(i)*time.Second), 0); got != 0 {
			t.Fatalf("a limit of %v without a 429", got)
		}
	}
}

// A service that accepts 100 calls/s: offered 200/s, half are refused;
// the limit comes down to what it accepted at once, is kept (the 429s
// stop), climbs back while the calls go at it, and is cut by learnBeta
// once they come back.
func TestLearnerFollowsARateLimit(t *testing.T) {
	var l learner
	now := time.Now()
	got, _ := l.end(epoch(200, 100, false), now, 0)
	if !near(got, 100) {
		t.Fatalf("after half refused at 200/s: %v, want 100 (the calls accepted)", got)
	}
	// The epoch after: no 429 at the limit. Kept, and probed up.
	now = now.Add(time.Second)
	got, undone := l.end(epoch(100, 0, true), now, 0)
	if undone || got <= 100 {
		t.Fatalf("no 429 at the limit: %v (undone %v), want it kept and raised", got, undone)
	}
	step := got - 100
	if !near(step, max(learnMinStep, 100/learnRamp)) {
		t.Errorf("raised by %v a second, want the limit the decrease set over learnRamp", step)
	}
	// Not at the limit (nobody waited for a token): not raised.
	now = now.Add(time.Second)
	if again, _ := l.end(epoch(50, 0, false), now, 0); again != got {
		t.Errorf("raised to %v with calls below the limit", again)
	}
	// 429s over the limit, above learnShareMin: cut by learnBeta, once.
	now = now.Add(time.Second)
	cut, _ := l.end(epoch(104, 8, true), now, 0)
	if !near(cut, learnBeta*got) {
		t.Errorf("a 429 at 104/s, over the limit of %v: %v, want %v", got, cut, learnBeta*got)
	}
	// The 429s stopped: kept.
	now = now.Add(time.Second)
	if kept, undone := l.end(epoch(93, 0, true), now, 0); undone || kept < cut {
		t.Errorf("no 429 after the cut: %v (undone %v), want it kept", kept, undone)
	}
}

// 429s of single requests (10 % of them, whatever the rate): the decrease
// they cause is tested and undone, and none follows for learnHold.
func TestLearnerUndoesWhen429sDoNotFollowTheRate(t *testing.T) {
	var l learner
	now := time.Now()
	got, _ := l.end(epoch(100, 10, false), now, 0)
	if !near(got, 90) {
		t.Fatalf("10 %% refused at 100/s: %v, want 90", got)
	}
	// At 90/s still 10 % refused: not about the rate.
	now = now.Add(time.Second)
	e := epoch(90, 9, true)
	if l.undoEarly(epochCalls{calls: 30, throttled: 3, dur: 300 * time.Millisecond}, now) {
		t.Fatal("3 of 30 refused after the decrease: undone on so few")
	}
	if !l.undoEarly(epochCalls{calls: 50, throttled: 5, dur: 500 * time.Millisecond}, now) {
		t.Fatal("5 of 50 refused after the decrease: not undone early")
	}
	if l.limit != 0 {
		t.Fatalf("undone to %v, want no limit (none before)", l.limit)
	}
	for i := range int(learnHold / time.Second) {
		if got, _ := l.end(e, now.Add(time.Duration(i)*time.Second), 0); got != 0 {
			t.Fatalf("%ds after the undo: a limit of %v, want none within learnHold", i, got)
		}
	}
	// After learnHold, the same share (the share that stays when the
	// rate falls) still decreases nothing; a far larger one does.
	if got, _ := l.end(e, now.Add(learnHold), 0); got != 0 {
		t.Errorf("after learnHold, the same 10 %%: a limit of %v", got)
	}
	if got, _ := l.end(epoch(90, 30, false), now.Add(learnHold+time.Second), 0); got == 0 {
		t.Error("after learnHold, a third refused: no decrease")
	}
}

// Within learnHold, a share of 429s well above the one the decrease was
// undone at is a rate limit after all: decreased at once.
func TestLearnerHoldEndsWhen429sGrow(t *testing.T) {
	var l learner
	now := time.Now()
	l.end(epoch(100, 10, false), now, 0)
	if !l.undoEarly(epochCalls{calls: 50, throttled: 5, dur: 500 * time.Millisecond}, now) {
		t.Fatal("not undone")
	}
	now = now.Add(time.Second)
	if got, _ := l.end(epoch(200, 100, false), now, 0); got == 0 {
		t.Error("half refused within learnHold of an undo at 10 %: no decrease")
	}
}

// The rate limit set bounds the limit learned.
func TestLearnerBoundedByRateLimit(t *testing.T) {
	var l learner
	now := time.Now()
	if got, _ := l.end(epoch(200, 20, false), now, 50); got != 50 {
		t.Errorf("a limit of %v under a rate limit of 50", got)
	}
	for i := range 100 {
		now = now.Add(time.Second)
		if got, _ := l.end(epoch(50, 0, true), now, 50); got > 50 {
			t.Fatalf("raised to %v past the rate limit of 50 (%d s)", got, i)
		}
	}
}

// Every call refused: at most halved per epoch, never below learnFloor.
func TestLearnerFloor(t *testing.T) {
	var l learner
	now := time.Now()
	l.end(epoch(400, 400, false), now, 0)
	if l.limit != 200 {
		t.Fatalf("400 calls/s all refused: %v, want halved", l.limit)
	}
	for range 20 {
		now = now.Add(time.Second)
		// The calls go at the limit, in epochs of learnEpochMax at a low
		// rate.
		calls := int64(math.Ceil(l.limit * learnEpochMax.Seconds()))
		l.end(epochCalls{calls: calls, throttled: calls, dur: learnEpochMax, bound: true}, now, 0)
	}
	if l.limit != learnFloor {
		t.Errorf("every call refused: %v, want the floor %v", l.limit, learnFloor)
	}
}

// The rate of an epoch is over its busy time: a burst after a pause.
func TestEpochRateIsOverBusyTime(t *testing.T) {
	e := epochCalls{calls: 41, dur: 5 * time.Second, busy: 250 * time.Millisecond}
	if r := e.rate(); r != 164 {
		t.Errorf("41 calls in 250ms busy of 5s: %v/s, want 164", r)
	}
}

func TestEpochDone(t *testing.T) {
	for _, c := range []struct {
		calls, throttled int64
		dur              time.Duration
		checking, want   bool
	}{
		{calls: 1000, dur: learnEpoch - time.Millisecond, want: false},
		{calls: learnEpochCalls - 1, dur: learnEpochMax - time.Millisecond, want: false},
		{calls: learnEpochCalls, dur: learnEpoch, want: true},
		{calls: 1, dur: learnEpochMax, want: true},
		{calls: 100, dur: learnEpoch, checking: true, want: false},
		{calls: 100, throttled: learnEarlyThrottled, dur: learnEpoch, checking: true, want: true},
		{calls: 300, dur: learnCheckMax, checking: true, want: true},
	} {
		if got := epochDone(c.calls, c.throttled, c.dur, c.checking); got != c.want {
			t.Errorf("%+v: %v, want %v", c, got, c.want)
		}
	}
}

// The rate limiter takes the limit learned from the calls heard: none
// before a 429, then the rate of those accepted, in bursts of a tenth of
// a second; the limiter is replaced on a decrease (its waiters kicked)
// and shown in the gauge.
func TestRateLimitLearnsFromCalls(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "learned"})
	kicks := 0
	r := newRateLimit(0, DefaultRateBurst, prometheus.NewCounter(prometheus.CounterOpts{Name: "waited"}), gauge, func() { kicks++ })
	t0 := time.Now()
	// 200 calls/s for a second, none refused: no limit.
	for i := range 201 {
		r.heard(false, t0.Add(time.Duration(i)*5*time.Millisecond))
	}
	if r.lim.Load() != nil || r.learnedRate() != 0 {
		t.Fatalf("a limit of %v without a 429", r.learnedRate())
	}
	// The next second, every other call refused.
	t1 := t0.Add(1010 * time.Millisecond)
	for i := range 201 {
		r.heard(i%2 == 1, t1.Add(time.Duration(i)*5*time.Millisecond))
	}
	lim := r.lim.Load()
	if lim == nil || math.Abs(float64(lim.Limit())-100) > 2 || lim.Burst() < 10 || lim.Burst() > 11 {
		t.Fatalf("half refused at 200/s: limiter %v, want 100/s in bursts of 10", lim)
	}
	if g := testutil.ToFloat64(gauge); math.Abs(g-100) > 2 {
		t.Errorf("redrive_learned_rate %v, want 100", g)
	}
	if kicks != 0 {
		t.Errorf("%d kicks for a first limit (no one waited on a limiter)", kicks)
	}
}

// simulateLearner drives r with secs of calls from start, offered at
// offered a second or at the limit learned when lower (callers then wait
// for tokens): each call is answered 429 with probability share (a
// request's own throttle, whatever the rate), and beyond capacity a
// second (a token bucket of a tenth of a second; 0: no limit). It
// returns the calls made and those the capacity refused.
func simulateLearner(r *rateLimit, rng *rand.Rand, start time.Time, secs, offered, share, capacity float64) (calls, overCapacity int) {
	tokens := capacity / 10
	end := start.Add(time.Duration(secs * float64(time.Second)))
	for t := start; t.Before(end); {
		perSecond := offered
		if l := r.learnedRate(); l > 0 && l < offered {
			perSecond = l
			r.bound.Store(true)
		}
		dt := 1 / perSecond
		t = t.Add(time.Duration(dt * float64(time.Second)))
		throttled := rng.Float64() < share
		if capacity > 0 {
			if tokens = min(capacity/10, tokens+capacity*dt); tokens >= 1 {
				tokens--
			} else {
				throttled = true
				overCapacity++
			}
		}
		r.heard(throttled, t)
		calls++
	}
	return calls, overCapacity
}

// The learner against 429s of single requests at a steady share (the
// share the same at any rate), from no limit and from a limit far too low
// (left by an earlier rate limit): the calls are not held below the rate
// offered (at least 90 % of it over the minute; from the low limit, 75 %
// of it over the minute after 15 s: climbing back takes 10-25 s). And against a rate limit, with and without such 429s:
// at most 10 % of the calls refused over it, at least 80 % of its rate
// used.
func TestLearnerSingleRequest429s(t *testing.T) {
	for _, c := range []struct {
		name                     string
		offered, share, capacity float64
		from                     float64 // a limit learned before (0: none)
		// least: the share of the offer the calls must reach over the
		// minute (0: 90 %); from a limit far too low, the first 10-25 s
		// go to climbing back.
		least float64
	}{
		{name: "10% at 60/s", offered: 60, share: 0.1},
		{name: "8% at 20/s", offered: 20, share: 0.08},
		{name: "8% at 12/s", offered: 12, share: 0.08},
		{name: "3% at 100/s", offered: 100, share: 0.03},
		{name: "20% at 200/s", offered: 200, share: 0.2},
		{name: "10% at 60/s from 5/s", offered: 60, share: 0.1, from: 5, least: 0.75},
		{name: "10% at 20/s from 2/s", offered: 20, share: 0.1, from: 2, least: 0.75},
		{name: "a limit of 100/s offered 200/s", offered: 200, capacity: 100},
		{name: "a limit of 60/s offered 120/s, 10% besides", offered: 120, share: 0.1, capacity: 60},
	} {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%s/seed=%d", c.name, seed), func(t *testing.T) {
				r := newRateLimit(0, DefaultRateBurst, prometheus.NewCounter(prometheus.CounterOpts{Name: "waited"}), prometheus.NewGauge(prometheus.GaugeOpts{Name: "learned"}), nil)
				rng := rand.New(rand.NewPCG(seed, 47))
				start := time.Now()
				if c.from > 0 {
					r.armed.Store(true)
					r.learn.limit, r.learn.step, r.learn.cutAt = c.from, learnMinStep, start
					simulateLearner(r, rng, start, 15, c.offered, c.share, c.capacity)
					start = start.Add(15 * time.Second)
				}
				const secs = 60.0
				calls, over := simulateLearner(r, rng, start, secs, c.offered, c.share, c.capacity)
				if c.capacity == 0 {
					least := c.least
					if least == 0 {
						least = 0.9
					}
					if want := least * c.offered * secs; float64(calls) < want {
						t.Errorf("%d calls in %vs, want at least %.0f (%.0f %% of the offer); the limit learned at the end %.1f/s", calls, secs, want, 100*least, r.learnedRate())
					}
					return
				}
				if float64(over) > 0.1*float64(calls) {
					t.Errorf("%d of %d calls over the service's limit, want at most 10 %%", over, calls)
				}
				if used := float64(calls - over); used < 0.8*c.capacity*secs {
					t.Errorf("%.0f calls within the service's limit in %vs, want at least %.0f (80 %% of it)", used, secs, 0.8*c.capacity*secs)
				}
			})
		}
	}
}
