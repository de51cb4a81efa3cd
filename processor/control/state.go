package control

import (
	"cmp"
	"slices"
	"time"
)

// State is the control topic read so far: the latest record of every key.
type State struct {
	latest map[string]Record
	// seq is the order records were applied in (the topic's order), and
	// resumed each pipeline's latest resume's place in it: a stop written
	// before a resume was cleared by it.
	seq     map[string]int64
	resumed map[string]int64
	n       int64
}

// NewState is an empty State.
func NewState() *State {
	return &State{latest: map[string]Record{}, seq: map[string]int64{}, resumed: map[string]int64{}}
}

// Apply takes r as its key's latest (records are applied in the topic's
// order); a tombstone removes a replica.
func (s *State) Apply(r Record) {
	s.n++
	if r.Tombstone {
		delete(s.latest, r.Key())
		delete(s.seq, r.Key())
		return
	}
	s.latest[r.Key()], s.seq[r.Key()] = r, s.n
	if r.Kind == KindPause && r.Pause != nil && !r.Pause.Paused {
		s.resumed[r.Pipeline] = s.n
	}
}

// InForce is pipeline's stop of kind (KindBreaker, KindPauseCode,
// KindGuard) that holds at now, if any: a breaker open or half-open, a
// pause code's or the guard's stop on, until its Until (the guard's
// without one: until resumed), and not written before the pipeline's
// latest resume, which clears every stop. This is the one rule the
// processes, `redrive status` and the analyzer go by.
func (s *State) InForce(kind Kind, pipeline string, now time.Time) (Record, bool) {
	r, ok := s.Get(kind, pipeline)
	if !ok || r.Line == nil || s.seq[r.Key()] < s.resumed[pipeline] {
		return Record{}, false
	}
	l := r.Line
	switch {
	case kind == KindBreaker && (l.State == StateOpen || l.State == StateHalfOpen):
	case (kind == KindPauseCode || kind == KindGuard) && l.State == StateOn:
	default:
		return Record{}, false
	}
	if l.Until.IsZero() {
		return r, kind == KindGuard
	}
	return r, now.Before(l.Until)
}

// Get is the latest record of kind for pipeline (not a status's).
func (s *State) Get(kind Kind, pipeline string) (Record, bool) {
	r, ok := s.latest[Key(kind, pipeline, "")]
	return r, ok
}

// Paused is the operator's pause of pipeline in force, if any.
func (s *State) Paused(pipeline string) (Record, bool) {
	r, ok := s.Get(KindPause, pipeline)
	return r, ok && r.Pause != nil && r.Pause.Paused
}

// Replica is one replica's latest status of a pipeline.
type Replica struct {
	Pipeline string    `json:"pipeline"`
	Instance string    `json:"instance"`
	Seen     time.Time `json:"last_seen"`
	// Stale: not heard of for three of its status intervals (killed, or
	// cut off from the control topic).
	Stale bool `json:"stale"`
	Status
}

// Replicas are the replicas known at now, by pipeline, then instance.
func (s *State) Replicas(now time.Time) []Replica {
	var out []Replica
	for _, r := range s.latest {
		if r.Kind != KindStatus || r.Status == nil {
			continue
		}
		every, err := time.ParseDuration(r.Status.Every)
		if err != nil || every <= 0 {
			every = DefaultStatusInterval
		}
		out = append(out, Replica{Pipeline: r.Pipeline, Instance: r.Instance, Seen: r.At,
			Stale: now.Sub(r.At) > 3*every, Status: *r.Status})
	}
	slices.SortFunc(out, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(a.Pipeline, b.Pipeline), cmp.Compare(a.Instance, b.Instance))
	})
	return out
}

// Pipelines are the pipelines the topic names, sorted.
func (s *State) Pipelines() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range s.latest {
		if !seen[r.Pipeline] {
			seen[r.Pipeline] = true
			out = append(out, r.Pipeline)
		}
	}
	slices.Sort(out)
	return out
}

// Alone are pipeline's alone records: the share group's records that
// were about to run alone and have no outcome known.
func (s *State) Alone(pipeline string) []Record {
	var out []Record
	for _, r := range s.latest {
		if r.Kind == KindAlone && r.Pipeline == pipeline && r.Alone != nil {
			out = append(out, r)
		}
	}
	return out
}
