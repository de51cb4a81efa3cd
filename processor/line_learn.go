package processor

import (
	"math"
	"time"
)

// A 429 is the service telling the pipeline its rate. The line learns that
// rate (AIMD on calls per second) and the rate limiter (line_rate.go) keeps
// the calls to it, bounded by rate_limit where one is set:
//
//   - No limit is learned until a 429.
//   - The calls are looked at in epochs of at least learnEpoch and
//     learnEpochCalls answered calls (or learnEpochMax). An epoch with
//     learnMinThrottled 429s or more, whose share of them is above the
//     bar (learnShareMin over the share that stays when the rate falls,
//     persist, and its noise; while decreases are held, at least the
//     share a decrease was last undone at plus learnHoldMargin),
//     decreases the limit to learnBeta of the rate the calls went at in
//     it (at most the limit in force), or to the rate of those the
//     service accepted when that is lower; with fewer than
//     learnEpochCalls accepted not below learnMinFactor of it (a burst
//     refused whole halves the rate, it does not stop the calls): at most
//     one decrease an epoch, whatever the number of 429s.
//   - An epoch at or below that bar without the hold in which callers
//     waited for a token (the calls went at the limit) raises it by a step a second: the limit the last
//     decrease set over learnRamp, at least learnMinStep; so a limit cut
//     to learnBeta is back where it was after about 4 s, and it keeps
//     probing beyond. From learnCalm after the last decrease that stood
//     on, by learnGrowth of the limit a second: a decrease far too deep,
//     or a service whose limit grew, is caught up with in seconds.
//   - The epoch after a decrease (from learnSettle after it: calls that
//     started at the rate before are not looked at) checks that the 429s
//     followed the rate: a service that refuses calls over its rate
//     accepts about as many calls as before, so the share of 429s falls
//     to what that predicts; 429s of single requests (a request throttled
//     once, an account's own limit) come in the same share at any rate.
//     When the share is nearer what it was than what the rate predicts,
//     however few the 429s, the decrease is undone (at once with
//     learnEarlyThrottled of them: undoEarly), and no decrease is made
//     for learnHold unless the share grows by learnHoldMargin: slowing down would only delay the other calls. A
//     few 429s are not taken for "it worked": that would let 429s of
//     single requests ratchet the limit down, a decrease an epoch.
//
// The limit is this process's: each replica learns from the 429s its own
// calls get, and replicas sharing one provider settle on shares of it as
// AIMD flows do. learner is pure (no clock, no lock): rateLimit calls it
// under its lock.
const (
	learnEpoch      = 500 * time.Millisecond
	learnEpochCalls = 50
	// learnEarlyCalls: the calls after a decrease that may undo it before
	// its epoch is over (undoEarly), with learnEarlyThrottled 429s.
	learnEarlyCalls = 20
	// learnShareMin: an epoch with this share of 429s or less is taken
	// for one without: the calls keep their rate and probe beyond.
	learnShareMin = 0.05
	// learnMinThrottled: the fewest 429s that decrease the limit (one or
	// two in a short epoch at a low rate say nothing of a share).
	learnMinThrottled = 3
	// learnPersistMax: the most of a share that stays when the rate falls
	// (learner.persist) that an epoch's share is measured from.
	learnPersistMax = 0.1
	// learnCalm after the last decrease that stood, the increase becomes
	// learnGrowth of the limit a second: a limit far below the service's
	// (a decrease that overshot, 429s of single requests taken for the
	// service's rate) is not climbed back a step at a time.
	learnCalm   = 3 * time.Second
	learnGrowth = 0.5
	// learnEpochMax: an epoch ends by then with fewer calls (a limit far
	// too low is raised within seconds, not after 50 calls).
	learnEpochMax  = 3 * time.Second
	learnBeta      = 0.9
	learnMinFactor = 0.5
	learnGap       = 250 * time.Millisecond // the idle gap counted in an epoch's busy time, at most
	learnRamp      = 40.0                   // seconds: step = the limit the last decrease set / learnRamp
	learnMinStep   = 1.0                    // calls/s per second
	learnFloor     = 1.0                    // calls/s: the lowest limit learned
	learnHold      = 10 * time.Second
	// learnHoldMargin: a share of 429s this far above the one a decrease
	// was undone at is the service's limit after all (a wrong undo must
	// not leave the calls unpaced for learnHold).
	learnHoldMargin = 0.1
	learnSettle     = 250 * time.Millisecond
	learnCheckMax   = 3 * time.Second
	// learnEarlyThrottled: the 429s after a decrease it takes to undo it
	// (before its epoch is over too: undoEarly); fewer say it worked.
	learnEarlyThrottled = 5
)

// epochCalls is what an epoch saw: answered calls, of them 429s, from its
// first call's start of the epoch to its end.
type epochCalls struct {
	calls, throttled int64
	dur              time.Duration
	// busy is dur without the idle gaps between calls (each counted up
	// to learnGap): the rate the calls went at is calls over busy, so
	// that a burst after a pause is not taken for a slow trickle.
	busy time.Duration
	// bound: a caller waited for a token in it (the calls went at the
	// limit).
	bound bool
}

func (e epochCalls) rate() float64 {
	d := e.busy
	if d <= 0 {
		d = e.dur
	}
	return float64(e.calls) / max(d.Seconds(), 1e-3)
}

func (e epochCalls) share() float64 {
	if e.calls == 0 {
		return 0
	}
	return float64(e.throttled) / float64(e.calls)
}

// learner is the learned limit and what it needs to change it.
type learner struct {
	limit float64 // calls/s; 0: none learned
	// step is the increase a second: the limit the last decrease set
	// over learnRamp (not the rate it was made from: a burst's rate says
	// nothing of the service's).
	step float64
	// cutAt: the last decrease that stood (its check did not undo it).
	cutAt time.Time
	// staid and staidCalls: the 429s and calls of the epochs that checked
	// a decrease, each sum halved by the next: the share of 429s that
	// stays when the rate falls (persist).
	staid, staidCalls float64
	// checking: the epoch before decreased the limit from undo; before is
	// that epoch.
	checking bool
	undo     float64
	before   epochCalls
	// holdUntil: after an undone decrease, none before then unless the
	// share of 429s rises learnHoldMargin above held, the share then.
	holdUntil time.Time
	held      float64
	// settleUntil: after a decrease, the calls answered until then are
	// not looked at (they started at the rate before).
	settleUntil time.Time
}

// epochDone says whether an epoch of calls calls, throttled of them 429s,
// whose first call was dur ago, is over. The epoch after a decrease
// (checking) waits for learnEarlyThrottled 429s, or learnCheckMax without
// them: a few 429s say little of whether they follow the rate.
func epochDone(calls, throttled int64, dur time.Duration, checking bool) bool {
	if dur >= learnEpochMax {
		return true
	}
	if dur < learnEpoch || calls < learnEpochCalls {
		return false
	}
	return !checking || throttled >= learnEarlyThrottled || dur >= learnCheckMax
}

// end takes an epoch that ended at now and returns the limit (0: none);
// ceiling is the rate_limit this process has (0: none). undone: the
// decrease before was undone.
func (l *learner) end(e epochCalls, now time.Time, ceiling float64) (limit float64, undone bool) {
	if l.checking {
		l.checking = false
		if !l.followsRate(e) {
			return l.undoAt(e, now), true
		}
		l.stayed(e)
		l.cutAt = now
	}
	// Over the share that stays by learnShareMin and by the share's
	// noise in an epoch of e.calls: a share that high by chance is no
	// reason to slow down.
	p := l.persist()
	stays := learnShareMin + p + math.Sqrt(p*(1-p)/float64(max(e.calls, 1)))
	bar := stays
	if now.Before(l.holdUntil) {
		bar = max(bar, l.held+learnHoldMargin)
	}
	switch {
	case e.throttled >= learnMinThrottled && e.share() > bar:
		l.checking, l.undo, l.before = true, l.limit, e
		l.settleUntil = now.Add(learnSettle)
		// The rate the calls went at; a limit in force bounds it (a
		// short epoch's rate can show a burst above it).
		r := e.rate()
		if l.limit > 0 {
			r = min(r, l.limit)
		}
		// The calls the service accepted, when fewer and enough of them
		// to go by: far over its rate the limit comes down to it at once.
		// Too few say little of its rate: at most halved then.
		least := learnMinFactor * r
		if e.calls-e.throttled >= learnEpochCalls {
			least = 0
		}
		l.limit = max(learnFloor, least, min(learnBeta*r, r*(1-e.share())))
		l.step = max(learnMinStep, l.limit/learnRamp)
	case l.limit > 0 && e.bound && e.share() <= stays:
		// Raised only at a share the calls' rate does not explain: a
		// decrease held (429s over the share that stays) keeps the limit.
		secs := min(e.dur.Seconds(), learnEpochMax.Seconds())
		up := l.step * secs
		// Calm: the part of the epoch from learnCalm after the last
		// decrease that stood on.
		if calm := now.Sub(l.cutAt.Add(learnCalm)).Seconds(); calm > 0 {
			up = max(up, learnGrowth*l.limit*min(secs, calm))
		}
		l.limit += up
	}
	if ceiling > 0 && l.limit > ceiling {
		l.limit = ceiling
	}
	return l.limit, false
}

// stayed counts e, an epoch that checked a decrease, in persist.
func (l *learner) stayed(e epochCalls) {
	l.staid = l.staid/2 + float64(e.throttled)
	l.staidCalls = l.staidCalls/2 + float64(e.calls)
}

// persist is the share of 429s seen when the rate fell (the epochs that
// checked a decrease): a share that does not follow the rate, which an
// epoch must exceed by learnShareMin to decrease the limit; at most
// learnPersistMax (a service refusing most calls at any rate is slowed
// down all the same).
func (l *learner) persist() float64 {
	if l.staidCalls < 1 {
		return 0
	}
	return min(learnPersistMax, l.staid/l.staidCalls)
}

// followsRate says whether the 429s of e, the epoch after a decrease,
// followed the rate: their share is nearer what the calls the service
// accepted before predict at e's rate than the share before.
func (l *learner) followsRate(e epochCalls) bool {
	accepted := l.before.rate() * (1 - l.before.share())
	predicted := 0.0
	if r := e.rate(); r > 0 {
		predicted = max(0, 1-accepted/r)
	}
	f := e.share()
	return math.Abs(f-l.before.share()) >= math.Abs(f-predicted)
}

// undoAt undoes the last decrease: the 429s of e were not the service's
// limit.
func (l *learner) undoAt(e epochCalls, now time.Time) float64 {
	l.checking = false
	l.stayed(e)
	// The share that stayed when the rate fell: the lower of the two.
	l.limit, l.holdUntil, l.held = l.undo, now.Add(learnHold), min(e.share(), l.before.share())
	return l.limit
}

// undoEarly undoes the last decrease before the epoch after it is over,
// when its 429s so far (e, at a 429) already show they do not follow the
// rate: the test of the decrease delays the other calls for as short a
// time as it can.
func (l *learner) undoEarly(e epochCalls, now time.Time) bool {
	if !l.checking || e.calls < learnEarlyCalls || e.throttled < learnEarlyThrottled || l.followsRate(e) {
		return false
	}
	l.undoAt(e, now)
	return true
}
