package flowcheck

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// TimeScale divides every time constant of the shipped defaults that a
// scenario meets (the breaker's window, open_for and max_open, the
// guard's window, the HTTP handler's timeout, the status interval), so
// that one scenario runs in tens of seconds; counts and ratios stay as
// shipped. Tiers are drawn in whole seconds (1 s is the least a tier can
// be), so they stand where the scaled defaults put them.
const TimeScale = 10

// Scaled is a shipped default time constant at the checker's scale.
func Scaled(d time.Duration) time.Duration { return d / TimeScale }

// Kind is how the service answers one call.
type Kind uint8

// Answers of the scripted service.
const (
	OK        Kind = iota // 200
	Transient             // 503
	Permanent             // 400 ERROR_BAD_REQUEST
	Throttle              // 429, Retry-After when Step.RetryAfter > 0
	NotReady              // 202 with a new Redrive-State (a job still running)
	Slow                  // held past the handler's timeout, then 200 to no one
	Hangup                // the caller hung up before the answer (a kill, a timeout)
	Crash                 // the call kills the replica that made it (a crash loop)
)

var kindNames = [...]string{"ok", "503", "permanent", "429", "not-ready", "slow", "hangup", "crash"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Failed: the answer is not a success (a hangup included).
func (k Kind) Failed() bool { return k != OK }

// Step is the script's answer to one call.
type Step struct {
	Kind       Kind
	RetryAfter int // seconds; 0: no Retry-After
	// Clock steps every replica's wall clock by this much as the service
	// answers (before the answer is sent); 0: no step.
	Clock time.Duration
}

// Request is one request a scenario produces and how the service treats
// it: Steps[k] answers the script's (k+1)-th call, the last step repeats.
type Request struct {
	ID    string
	Class string // what the script is, for reports ("ok", "transient:2", ...)
	Steps []Step
}

// Step is the script's answer to its n-th call (1-based).
func (r *Request) Step(n int) Step {
	return r.Steps[min(n, len(r.Steps))-1]
}

// Burst is Requests[From:To], produced at once At after the run starts.
type Burst struct {
	At       time.Duration
	From, To int
	Profile  string // healthy, bad (the same transient failures), mixed
}

// Kill stops replica Replica abruptly At after the start and starts a new
// replica in its place RestartAfter later.
type Kill struct {
	At           time.Duration
	Replica      int
	RestartAfter time.Duration
}

// ClockStep steps every replica's wall clock (the one due times are
// compared with) By, At after the start, as NTP or a resumed virtual
// machine steps a machine's: back when By is negative. Timers do not move.
type ClockStep struct {
	At time.Duration
	By time.Duration
}

// Window is a span of the run, from its start; zero: none.
type Window struct{ From, To time.Duration }

// Contains reports whether at falls in w.
func (w Window) Contains(at time.Duration) bool { return w.To > w.From && at >= w.From && at < w.To }

// Scenario is one drawn run: the pipeline's settings, the load, the
// service's failures, the replicas and their kills.
type Scenario struct {
	Seed        uint64
	Concurrency int
	Partitions  int32
	Tiers       []time.Duration
	MaxAttempts int
	Consume     string // group or share
	Delivery    string // at-least-once or exactly-once
	Replicas    int
	Kills       []Kill
	Bursts      []Burst
	Requests    []Request
	// Outage: every call arriving in it is answered 503
	// ERROR_NO_SLOT_AVAILABLE. It ends before the last burst, so that the
	// baseline's last result comes after it.
	Outage Window
	// RateLimit: the service takes this many calls/s (a tenth of a
	// second's worth at once) and answers 429 Retry-After: 1 beyond; 0:
	// no limit.
	RateLimit int
	// Timeout is the HTTP handler's.
	Timeout time.Duration
	// ClockSteps step every replica's wall clock at their times; with
	// them, or a script's Step.Clock, the replicas read an injected clock
	// that the run steps.
	ClockSteps []ClockStep
	// SlowSuspectPoll: a replica's poll that returns a record delivered
	// again is held open 500 ms (once per replica), so that a share fetch
	// lands while the suspects run. Drawn only with a crash loop.
	SlowSuspectPoll bool
}

// Most requests one scenario produces: a run must stay within seconds.
const maxRequests = 900

// Generate draws the scenario of seed: the same seed, the same scenario.
func Generate(seed uint64) *Scenario {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &Scenario{Seed: seed, Timeout: Scaled(30 * time.Second)}
	// 1 to 256, about as often small as large.
	s.Concurrency = min(256, max(1, int(math.Round(math.Exp(r.Float64()*math.Log(256))))))
	s.Partitions = int32(1 + r.IntN(12))
	secs := r.Perm(4)[:1+r.IntN(3)]
	for i := range 4 {
		for _, x := range secs {
			if x == i {
				s.Tiers = append(s.Tiers, time.Duration(i+1)*time.Second)
			}
		}
	}
	s.MaxAttempts = 2 + r.IntN(3)
	s.Consume = "group"
	if r.IntN(10) < 3 {
		s.Consume = "share"
	}
	s.Delivery = "at-least-once"
	if r.IntN(10) < 3 && s.Consume == "group" { // share groups have no transactions
		s.Delivery = "exactly-once"
	}
	switch x := r.IntN(20); {
	case x < 11:
		s.Replicas = 1
	case x < 17:
		s.Replicas = 2
	default:
		s.Replicas = 3
	}
	if r.IntN(4) == 0 {
		s.Kills = append(s.Kills, Kill{
			At:           time.Duration(1000+r.IntN(4000)) * time.Millisecond,
			Replica:      r.IntN(s.Replicas),
			RestartAfter: time.Duration(200+r.IntN(1300)) * time.Millisecond,
		})
	}
	if r.IntN(8) == 0 {
		s.RateLimit = 30 + r.IntN(120)
	}

	// The bursts: sizes around the concurrency, larger and smaller. One
	// scenario in three leads with a burst of the same transient failures
	// larger than the concurrency and follows it with healthy traffic.
	sizeOf := func() int {
		f := []float64{0.25, 0.5, 1.5, 3, 6}[r.IntN(5)]
		return min(400, max(3, int(f*float64(s.Concurrency))))
	}
	var at time.Duration
	if r.IntN(3) == 0 {
		s.addBurst(r, at, max(25, min(300, s.Concurrency+1+r.IntN(2*s.Concurrency+20))), "bad")
		at += 2 * time.Second
		s.addBurst(r, at, 100+r.IntN(400), "healthy")
	}
	for n := 1 + r.IntN(3); n > 0 && len(s.Requests) < maxRequests; n-- {
		if len(s.Bursts) > 0 {
			at += time.Duration(200+r.IntN(2800)) * time.Millisecond
		}
		profile := []string{"healthy", "mixed", "mixed", "bad"}[r.IntN(4)]
		s.addBurst(r, at, min(sizeOf(), maxRequests-len(s.Requests)), profile)
	}
	if r.IntN(4) == 0 {
		// Starting within the bursts.
		last := s.Bursts[len(s.Bursts)-1].At
		from := time.Duration(r.Int64N(int64(last) + 1))
		s.Outage = Window{From: from, To: from + time.Duration(2000+r.IntN(4000))*time.Millisecond}
		if s.Outage.To > last {
			// A last healthy burst after it, so that the baseline ends
			// after the outage.
			s.addBurst(r, s.Outage.To+500*time.Millisecond, 100, "healthy")
		}
	}
	s.longRetryAfter(seed)
	if s.Consume == "share" && r.IntN(3) == 0 {
		// A crash loop: a request that kills the replica calling it, every
		// time. Share mode only: there the share group counts its
		// deliveries, and it is dead-lettered "crashed"; a consumer group
		// has no such count and would crash for ever.
		b := s.Bursts[r.IntN(len(s.Bursts))]
		i := b.From + r.IntN(b.To-b.From)
		s.Requests[i].Class, s.Requests[i].Steps = "crash", []Step{{Kind: Crash}}
	}
	s.clockSteps(seed)
	s.slowSuspects(seed)
	return s
}

// clockSteps, in one scenario in four, steps the replicas' wall clock
// back and forth by 1–3 s at two to four drawn times, and has one to four
// requests that succeed fail once and then be answered 429 Retry-After: 1
// with the clock stepped back 1–3 s meanwhile: a retry, due, refused, and
// waited out while the clock says it is no longer due. It draws from a
// stream of its own, so the rest of a seed's scenario stays as it was
// before this was drawn; the stream's constant is one with which the
// seeds that found defects before (1, 4, 5, 15, 33, 42, 47, 56, 217,
// 1018) draw no step, so that they still draw what found them.
func (s *Scenario) clockSteps(seed uint64) {
	r := rand.New(rand.NewPCG(seed*0x9e3779b97f4a7c15^21, seed))
	if r.IntN(4) != 0 {
		return
	}
	step := func() time.Duration { return time.Duration(1000+r.IntN(2001)) * time.Millisecond }
	last := s.Bursts[len(s.Bursts)-1].At + 5*time.Second
	for n := 2 + r.IntN(3); n > 0; n-- {
		by := step()
		if r.IntN(2) == 0 {
			by = -by
		}
		s.ClockSteps = append(s.ClockSteps, ClockStep{At: time.Duration(r.Int64N(int64(last))), By: by})
	}
	slices.SortFunc(s.ClockSteps, func(a, b ClockStep) int { return cmp.Compare(a.At, b.At) })
	var ok []int
	for i, q := range s.Requests {
		if q.Class == "ok" {
			ok = append(ok, i)
		}
	}
	for n := min(len(ok), 1+r.IntN(4)); n > 0; n-- {
		j := r.IntN(len(ok))
		q := &s.Requests[ok[j]]
		ok = slices.Delete(ok, j, j+1)
		q.Class = "transient:1+429-clock-back"
		q.Steps = []Step{{Kind: Transient}, {Kind: Throttle, RetryAfter: 1, Clock: -step()}, {Kind: OK}}
	}
}

// SteppedClock: the scenario steps the replicas' wall clock.
func (s *Scenario) SteppedClock() bool {
	if len(s.ClockSteps) > 0 {
		return true
	}
	for _, q := range s.Requests {
		for _, st := range q.Steps {
			if st.Clock != 0 {
				return true
			}
		}
	}
	return false
}

// slowSuspects holds a suspect's poll open in two crash loops in three
// (a stream of its own, as clockSteps; seed 56's crash loop has none).
func (s *Scenario) slowSuspects(seed uint64) {
	r := rand.New(rand.NewPCG(seed*0xbf58476d1ce4e5b9^4, seed))
	s.SlowSuspectPoll = s.Crashes() && r.IntN(3) != 0
}

// longRetryAfter makes one 429 request in five that asks for 2 s ask for
// 6 s: longer than any tier and than the 5 s a worker waits out, so the
// record hops to a tier with a due time from the Retry-After. It draws from
// a stream of its own, so the rest of a seed's scenario stays as it was
// before this was drawn.
func (s *Scenario) longRetryAfter(seed uint64) {
	r := rand.New(rand.NewPCG(seed^0x5deece66d, seed))
	for i := range s.Requests {
		q := &s.Requests[i]
		if !strings.HasSuffix(q.Class, ":ra2") || r.IntN(5) != 0 {
			continue
		}
		for j := range q.Steps {
			if q.Steps[j].Kind == Throttle {
				q.Steps[j].RetryAfter = 6
			}
		}
		q.Class = strings.TrimSuffix(q.Class, "2") + "6"
	}
}

// addBurst appends n requests of profile, produced at at.
func (s *Scenario) addBurst(r *rand.Rand, at time.Duration, n int, profile string) {
	b := Burst{At: at, From: len(s.Requests), Profile: profile}
	for range n {
		req := s.draw(r, profile)
		req.ID = fmt.Sprintf("r%d", len(s.Requests))
		s.Requests = append(s.Requests, req)
	}
	b.To = len(s.Requests)
	s.Bursts = append(s.Bursts, b)
}

// transient is k 503s, then 200.
func transient(k int) Request {
	steps := make([]Step, 0, k+1)
	for range k {
		steps = append(steps, Step{Kind: Transient})
	}
	return Request{Class: fmt.Sprintf("transient:%d", k), Steps: append(steps, Step{Kind: OK})}
}

// draw is one request's script for a burst of profile.
func (s *Scenario) draw(r *rand.Rand, profile string) Request {
	switch profile {
	case "healthy":
		if r.IntN(10) != 0 {
			return Request{Class: "ok", Steps: []Step{{Kind: OK}}}
		}
	case "bad":
		// Fails twice, then succeeds, where the attempts allow it.
		return transient(min(2, s.MaxAttempts-1))
	}
	// Permanent answers stay far below the guard's 90 %: a stopped line
	// waits for an operator, which no scenario has.
	switch x := r.IntN(100); {
	case x < 40:
		return Request{Class: "ok", Steps: []Step{{Kind: OK}}}
	case x < 50:
		return transient(1)
	case x < 60:
		return transient(1 + r.IntN(s.MaxAttempts)) // at max_attempts: exhausted
	case x < 65:
		return Request{Class: "permanent", Steps: []Step{{Kind: Permanent}}}
	case x < 68:
		return Request{Class: "always", Steps: []Step{{Kind: Transient}}}
	case x < 80:
		ra, n := r.IntN(3), 1+r.IntN(2)
		steps := make([]Step, 0, n+1)
		for range n {
			steps = append(steps, Step{Kind: Throttle, RetryAfter: ra})
		}
		return Request{Class: fmt.Sprintf("429x%d:ra%d", n, ra), Steps: append(steps, Step{Kind: OK})}
	case x < 90:
		k := 1 + r.IntN(3)
		steps := make([]Step, 0, k+1)
		for range k {
			steps = append(steps, Step{Kind: NotReady})
		}
		return Request{Class: fmt.Sprintf("notready:%d", k), Steps: append(steps, Step{Kind: OK})}
	default:
		return Request{Class: "slow-once", Steps: []Step{{Kind: Slow}, {Kind: OK}}}
	}
}

// RepeatsAllowed: the scenario has kills or several replicas, so a
// rebalance may hand a record in flight to another replica, which calls
// it again (the handler's call is at least once).
func (s *Scenario) RepeatsAllowed() bool { return len(s.Kills) > 0 || s.Replicas > 1 || s.Crashes() }

// Crashes: a request of the scenario kills the replica that calls it.
func (s *Scenario) Crashes() bool {
	for _, q := range s.Requests {
		if q.Class == "crash" {
			return true
		}
	}
	return false
}

// TwiceAllowed: an outcome may be written twice (at-least-once, across a
// rebalance). Exactly-once never writes one twice.
func (s *Scenario) TwiceAllowed() bool { return s.Delivery != "exactly-once" && s.RepeatsAllowed() }

// Tier is the delay before attempt n+1 after attempt n failed.
func (s *Scenario) Tier(n int) time.Duration {
	return s.Tiers[min(max(n-1, 0), len(s.Tiers)-1)]
}

// String is the scenario on one line.
func (s *Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "concurrency %d, partitions %d, tiers %v, max_attempts %d, consume %s, delivery %s, replicas %d",
		s.Concurrency, s.Partitions, s.Tiers, s.MaxAttempts, s.Consume, s.Delivery, s.Replicas)
	for _, k := range s.Kills {
		fmt.Fprintf(&b, ", kill replica %d at %v (new one %v later)", k.Replica, k.At, k.RestartAfter)
	}
	if s.Outage.To > 0 {
		fmt.Fprintf(&b, ", outage %v–%v", s.Outage.From, s.Outage.To)
	}
	if s.RateLimit > 0 {
		fmt.Fprintf(&b, ", service limit %d calls/s", s.RateLimit)
	}
	for _, c := range s.ClockSteps {
		fmt.Fprintf(&b, ", wall clock stepped %+v at %v", c.By, c.At)
	}
	if s.SlowSuspectPoll {
		b.WriteString(", a suspect's poll held open 500 ms")
	}
	b.WriteString("; bursts:")
	for _, bt := range s.Bursts {
		fmt.Fprintf(&b, " %v %d %s", bt.At, bt.To-bt.From, bt.Profile)
		classes := map[string]int{}
		for _, q := range s.Requests[bt.From:bt.To] {
			classes[q.Class]++
		}
		if len(classes) > 1 {
			b.WriteString(" (")
			first := true
			for _, c := range sortedKeys(classes) {
				if !first {
					b.WriteString(" ")
				}
				first = false
				fmt.Fprintf(&b, "%s×%d", c, classes[c])
			}
			b.WriteString(")")
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}
