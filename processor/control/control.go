// Package control is the control topic: what several processes running
// one pipeline tell each other, and what an operator tells all of them.
//
// The topic is compacted (one partition, so that every reader sees every
// record in one order); a record's key says what it is about, and the
// latest record of a key is its state:
//
//	pause/<pipeline>               an operator's pause or resume (durable)
//	breaker/<pipeline>             the shared circuit breaker: open until, half-open (one prober), closed
//	pausecode/<pipeline>           a pause code's stop (ERROR_ZERO_BALANCE): until when
//	guard/<pipeline>               the guard's stop and its end
//	failing/<pipeline>/<instance>  a replica's counted failures in a row, while it has some
//	status/<pipeline>/<instance>   a replica's status, every few seconds; a tombstone when it leaves
//	alone/<pipeline>/<part>.<off>  a share group's record about to run alone (a suspect), at which delivery; a tombstone once it has an outcome
//
// Values are JSON objects with a version ("v"); a record whose key and
// value disagree, of a newer version, or not JSON, is refused by Decode
// with an error saying why, and readers skip it.
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTopic is the control topic of the processors of a cluster.
const DefaultTopic = "redrive.control"

// DefaultStatusInterval is how often a replica publishes its status.
const DefaultStatusInterval = 5 * time.Second

// MaxValueBytes bounds a control record's value: Decode refuses larger
// ones (every record redrive writes is far smaller).
const MaxValueBytes = 64 << 10

// version is the value format Encode writes and the newest Decode reads.
const version = 1

// Kind is what a control record is about; the first part of its key.
type Kind string

const (
	KindPause     Kind = "pause"     // an operator's pause or resume
	KindBreaker   Kind = "breaker"   // the pipeline's shared breaker
	KindPauseCode Kind = "pausecode" // a pause code's stop
	KindGuard     Kind = "guard"     // the guard's stop
	KindStatus    Kind = "status"    // one replica's status
	KindFailing   Kind = "failing"   // one replica's counted failures in a row
	KindAlone     Kind = "alone"     // a share group's record run alone
)

var kinds = []Kind{KindPause, KindBreaker, KindPauseCode, KindGuard, KindStatus, KindFailing, KindAlone}

// perInstance reports a kind whose key names the replica.
func perInstance(k Kind) bool { return k == KindStatus || k == KindFailing }

// tombstoned reports a kind a tombstone may end: a replica's records,
// and a record run alone once it has an outcome.
func tombstoned(k Kind) bool { return perInstance(k) || k == KindAlone }

// Line states of breaker, pausecode and guard records.
const (
	StateOpen     = "open"      // breaker: no call until Until
	StateHalfOpen = "half-open" // breaker: the writer probes; the others wait
	StateClosed   = "closed"    // breaker: calls resume
	StateOn       = "on"        // pausecode, guard: stopped until Until (guard: zero Until, until resumed)
	StateOff      = "off"       // pausecode, guard: over
)

// Record is one control record, decoded.
type Record struct {
	Kind     Kind
	Pipeline string
	// Instance is the replica a status record is of, and the writer of
	// any other.
	Instance string
	// At is when it was written (the writer's clock).
	At time.Time
	// Tombstone: a record without value: a status or failing record of
	// a replica that left cleanly, an alone record of a record that has
	// its outcome.
	Tombstone bool

	Pause  *Pause  // KindPause
	Line   *Line   // KindBreaker, KindPauseCode, KindGuard, KindFailing
	Status *Status // KindStatus
	// Alone (KindAlone) names the record in its key: a tombstone has it
	// too, with no Delivery.
	Alone *Alone
}

// Alone says that a share group's main-topic record (partition, offset)
// was about to run alone at its Delivery: a record delivered again runs
// alone, and if its delivery ends without an outcome (the process died)
// the next one finds it here. It is the evidence that the record, not one
// merely acquired with it, was running when the process died, which
// max_deliveries counts.
type Alone struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	Delivery  int   `json:"delivery"`
}

// Pause is an operator's pause (Paused) or resume. A resume also clears
// every other stop of the pipeline's line: the operator says the cause is
// fixed.
type Pause struct {
	Paused bool   `json:"paused"`
	Reason string `json:"reason,omitempty"`
}

// Line is a stop of the line one replica saw and shares.
type Line struct {
	State string `json:"state"`
	// Until: open (breaker) or on (pause code, guard with auto-resume)
	// until then; a half-open breaker's writer probes until then at most.
	Until time.Time `json:"until,omitzero"`
	Why   string    `json:"why,omitempty"`
	Code  string    `json:"code,omitempty"` // pausecode: the code
	// Run (failing): the writer's counted failures in a row now; its
	// Until says how long the count holds without word.
	Run int `json:"run,omitempty"`
}

// Status is what a replica publishes of one pipeline.
type Status struct {
	// Line is running, probing or stopped; Why the reasons.
	Line    string `json:"line"`
	Why     string `json:"why,omitempty"`
	Breaker string `json:"breaker"`
	// Scope is pipeline (the line and the budgets are shared) or process.
	Scope string `json:"scope"`
	// Consume is how the replica reads the main topic: group or share.
	Consume string `json:"consume,omitempty"`
	// Members: for a share pipeline, the replicas this one counts
	// (itself included) to take its share of the budgets.
	Members int `json:"members,omitempty"`
	// Partitions owned of TotalPartitions (the main topic and the tiers);
	// Share is this replica's part of the pipeline's budgets.
	Partitions      int     `json:"partitions"`
	MainPartitions  int     `json:"main_partitions"`
	TotalPartitions int     `json:"total_partitions"`
	Share           float64 `json:"share"`
	// RateLimit and MaxCallsInFlight: this replica's share (0: none set).
	RateLimit        float64 `json:"rate_limit,omitempty"`
	MaxCallsInFlight int     `json:"max_calls_in_flight,omitempty"`
	// LearnedRate: the calls per second this replica learned from the
	// service's 429s and keeps to (0: none learned).
	LearnedRate float64 `json:"learned_rate,omitempty"`
	// Inflight: records polled and not finished; CallsInFlight: handler
	// calls running now; CallsPerSecond over the last interval.
	Inflight       int64   `json:"inflight"`
	CallsInFlight  int     `json:"calls_in_flight"`
	CallsPerSecond float64 `json:"calls_per_second"`
	// Control is what is wrong with the control topic as this replica
	// sees it ("" when nothing).
	Control string `json:"control,omitempty"`
	// Every is how often it publishes: a status older than three of them
	// is stale.
	Every string `json:"every"`
}

// wire is a value as written.
type wire struct {
	V        int       `json:"v"`
	Kind     Kind      `json:"kind"`
	Pipeline string    `json:"pipeline"`
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
	Pause    *Pause    `json:"pause,omitempty"`
	Line     *Line     `json:"line,omitempty"`
	Status   *Status   `json:"status,omitempty"`
	Alone    *Alone    `json:"alone,omitempty"`
}

// Key is the record key of kind for pipeline (instance: a status's
// replica; ignored for the other kinds; see AloneKey for KindAlone).
func Key(kind Kind, pipeline, instance string) string {
	if perInstance(kind) {
		return string(kind) + "/" + pipeline + "/" + instance
	}
	return string(kind) + "/" + pipeline
}

// AloneKey is the key of the alone record of pipeline's main-topic record
// at partition, offset.
func AloneKey(pipeline string, partition int32, offset int64) string {
	return string(KindAlone) + "/" + pipeline + "/" + strconv.FormatInt(int64(partition), 10) + "." + strconv.FormatInt(offset, 10)
}

// Key is r's record key.
func (r Record) Key() string {
	if r.Kind == KindAlone && r.Alone != nil {
		return AloneKey(r.Pipeline, r.Alone.Partition, r.Alone.Offset)
	}
	return Key(r.Kind, r.Pipeline, r.Instance)
}

// Encode is r's record key and value (nil value: a tombstone).
func (r Record) Encode() (key, value []byte, err error) {
	if err := checkNames(r.Kind, r.Pipeline, r.Instance); err != nil {
		return nil, nil, err
	}
	if r.Kind == KindAlone && (r.Alone == nil || r.Alone.Partition < 0 || r.Alone.Offset < 0) {
		return nil, nil, fmt.Errorf("an alone record needs a partition and an offset, not %+v", r.Alone)
	}
	key = []byte(r.Key())
	if r.Tombstone {
		return key, nil, nil
	}
	value, err = json.Marshal(wire{V: version, Kind: r.Kind, Pipeline: r.Pipeline, Instance: r.Instance,
		At: r.At.UTC(), Pause: r.Pause, Line: r.Line, Status: r.Status, Alone: r.Alone})
	return key, value, err
}

// ErrMalformed is wrapped by every error of Decode.
var ErrMalformed = errors.New("malformed control record")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// Decode reads a control record. A nil value is a tombstone, taken only
// for a replica's key (status, failing) and an alone record's. The value's
// kind, pipeline and instance (alone: partition and offset) must be the
// key's, and its body the kind's.
func Decode(key, value []byte) (Record, error) {
	kind, pipeline, instance, err := parseKey(string(key))
	if err != nil {
		return Record{}, err
	}
	r := Record{Kind: kind, Pipeline: pipeline, Instance: instance}
	if kind == KindAlone {
		// The key's third part names the record, not a replica.
		r.Instance = ""
		if r.Alone, err = parseAlone(instance); err != nil {
			return Record{}, malformed("key %q: %v", key, err)
		}
	}
	if value == nil {
		if !tombstoned(kind) {
			return Record{}, malformed("key %q: only a status, failing or alone record may be a tombstone", key)
		}
		r.Tombstone = true
		return r, nil
	}
	if len(value) > MaxValueBytes {
		return Record{}, malformed("key %q: value of %d bytes, more than %d", key, len(value), MaxValueBytes)
	}
	var w wire
	if err := json.Unmarshal(value, &w); err != nil {
		return Record{}, malformed("key %q: value is not a control record: %v", key, err)
	}
	switch {
	case w.V < 1:
		return Record{}, malformed("key %q: no version", key)
	case w.V > version:
		return Record{}, malformed("key %q: version %d, newer than this redrive's %d", key, w.V, version)
	case w.Kind != kind || w.Pipeline != pipeline:
		return Record{}, malformed("key %q: value is about %s/%s", key, w.Kind, w.Pipeline)
	case perInstance(kind) && w.Instance != instance:
		return Record{}, malformed("key %q: value is of instance %q", key, w.Instance)
	case w.At.IsZero():
		return Record{}, malformed("key %q: no time", key)
	case !writable(w.At) || (w.Line != nil && !w.Line.Until.IsZero() && !writable(w.Line.Until)):
		return Record{}, malformed("key %q: a time outside the years 1 to 9999", key)
	}
	r.Instance, r.At = w.Instance, w.At
	switch kind {
	case KindPause:
		r.Pause = w.Pause
	case KindStatus:
		r.Status = w.Status
	case KindAlone:
		a := w.Alone
		switch {
		case a == nil:
			return Record{}, malformed("key %q: no alone body", key)
		case a.Partition != r.Alone.Partition || a.Offset != r.Alone.Offset:
			return Record{}, malformed("key %q: value is about partition %d offset %d", key, a.Partition, a.Offset)
		case a.Delivery < 1:
			return Record{}, malformed("key %q: delivery %d, want 1 or more", key, a.Delivery)
		}
		r.Alone = a
	default:
		r.Line = w.Line
	}
	if r.Pause == nil && r.Line == nil && r.Status == nil && r.Alone == nil {
		return Record{}, malformed("key %q: no %s body", key, kind)
	}
	if r.Line != nil {
		if err := checkLine(kind, r.Line); err != nil {
			return Record{}, malformed("key %q: %v", key, err)
		}
	}
	return r, nil
}

func checkLine(kind Kind, l *Line) error {
	ok := map[Kind][]string{
		KindBreaker:   {StateOpen, StateHalfOpen, StateClosed},
		KindPauseCode: {StateOn, StateOff},
		KindGuard:     {StateOn, StateOff},
		KindFailing:   {StateOn, StateOff},
	}[kind]
	for _, s := range ok {
		if l.State == s {
			return nil
		}
	}
	return fmt.Errorf("state %q, want one of %s", l.State, strings.Join(ok, ", "))
}

func parseKey(key string) (kind Kind, pipeline, instance string, err error) {
	k, rest, ok := strings.Cut(key, "/")
	kind = Kind(k)
	known := false
	for _, c := range kinds {
		known = known || c == kind
	}
	if !ok || !known {
		return "", "", "", malformed("key %q: want <kind>/<pipeline>, kind one of pause, breaker, pausecode, guard, status, failing, alone", key)
	}
	pipeline = rest
	if perInstance(kind) || kind == KindAlone {
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return "", "", "", malformed("key %q: want %s/<pipeline>/<instance>", key, kind)
		}
		pipeline, instance = rest[:i], rest[i+1:]
	}
	if err := checkNames(kind, pipeline, instance); err != nil {
		return "", "", "", malformed("key %q: %v", key, err)
	}
	return kind, pipeline, instance, nil
}

// checkNames refuses a pipeline or instance name a key cannot carry.
func checkNames(kind Kind, pipeline, instance string) error {
	if pipeline == "" || len(pipeline) > 249 {
		return fmt.Errorf("pipeline name %q: want 1 to 249 characters", pipeline)
	}
	if perInstance(kind) {
		if instance == "" || len(instance) > 255 || strings.ContainsRune(instance, '/') {
			return fmt.Errorf("instance %q: want 1 to 255 characters, no /", instance)
		}
	}
	return nil
}

// parseAlone reads an alone key's <partition>.<offset>.
func parseAlone(s string) (*Alone, error) {
	ps, os, ok := strings.Cut(s, ".")
	part, perr := strconv.ParseInt(ps, 10, 32)
	off, oerr := strconv.ParseInt(os, 10, 64)
	if !ok || perr != nil || oerr != nil || part < 0 || off < 0 || AloneKey("", int32(part), off) != string(KindAlone)+"//"+s {
		return nil, fmt.Errorf("record %q: want <partition>.<offset>", s)
	}
	return &Alone{Partition: int32(part), Offset: off}, nil
}

// writable reports a time JSON can carry back: a year from 1 to 9999 in
// UTC (Encode writes UTC).
func writable(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}
