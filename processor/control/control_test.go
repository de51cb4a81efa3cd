package control_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor/control"
)

// at is a fixed writing time, in UTC as Decode gives it back.
var at = time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC)

// records are one valid record of every kind, the line's states each once.
func records() []control.Record {
	return []control.Record{
		{Kind: control.KindPause, Pipeline: "solve", Instance: "alice@laptop", At: at,
			Pause: &control.Pause{Paused: true, Reason: "provider outage"}},
		{Kind: control.KindPause, Pipeline: "solve", Instance: "alice@laptop", At: at, Pause: &control.Pause{}},
		{Kind: control.KindBreaker, Pipeline: "solve", Instance: "pod-1", At: at,
			Line: &control.Line{State: control.StateOpen, Until: at.Add(30 * time.Second), Why: "60% of 100 calls failed"}},
		{Kind: control.KindBreaker, Pipeline: "solve", Instance: "pod-2", At: at,
			Line: &control.Line{State: control.StateHalfOpen, Until: at.Add(time.Minute)}},
		{Kind: control.KindBreaker, Pipeline: "solve", Instance: "pod-2", At: at, Line: &control.Line{State: control.StateClosed}},
		{Kind: control.KindPauseCode, Pipeline: "captcha", Instance: "pod-1", At: at,
			Line: &control.Line{State: control.StateOn, Until: at.Add(5 * time.Minute), Code: "ERROR_ZERO_BALANCE", Why: "no balance"}},
		{Kind: control.KindPauseCode, Pipeline: "captcha", Instance: "pod-1", At: at, Line: &control.Line{State: control.StateOff}},
		{Kind: control.KindGuard, Pipeline: "solve", Instance: "pod-3", At: at,
			Line: &control.Line{State: control.StateOn, Why: "48 of 50 calls failed permanently"}},
		{Kind: control.KindGuard, Pipeline: "solve", Instance: "pod-3", At: at, Line: &control.Line{State: control.StateOff}},
		{Kind: control.KindStatus, Pipeline: "solve", Instance: "pod-1", At: at, Status: &control.Status{
			Line: "running", Breaker: "closed", Scope: "pipeline", Partitions: 4, MainPartitions: 2, TotalPartitions: 12,
			Share: 1.0 / 3, RateLimit: 16.5, MaxCallsInFlight: 10, Inflight: 37, CallsInFlight: 9, CallsPerSecond: 15.75,
			Control: "", Every: "5s"}},
		// A pipeline name may hold a "/": the instance is after the last one.
		{Kind: control.KindStatus, Pipeline: "team/solve", Instance: "pod-2", At: at, Status: &control.Status{
			Line: "stopped", Why: "paused by alice@laptop", Breaker: "open", Scope: "process", Every: "1m", Control: "lagging"}},
		// The key names the record (partition 3, offset 1042), the value
		// its writer.
		{Kind: control.KindAlone, Pipeline: "team/solve", Instance: "pod-2#a1b2", At: at,
			Alone: &control.Alone{Partition: 3, Offset: 1042, Delivery: 2}},
	}
}

// Every kind's record is read back as it was written, under the key its
// kind names.
func TestEncodeDecodeEveryKind(t *testing.T) {
	keys := map[control.Kind]bool{}
	for _, r := range records() {
		key, value, err := r.Encode()
		if err != nil {
			t.Fatalf("Encode(%s): %v", r.Key(), err)
		}
		want := string(r.Kind) + "/" + r.Pipeline
		switch r.Kind {
		case control.KindStatus:
			want += "/" + r.Instance
		case control.KindAlone:
			want += fmt.Sprintf("/%d.%d", r.Alone.Partition, r.Alone.Offset)
		}
		if string(key) != want {
			t.Errorf("key %q, want %q", key, want)
		}
		if value == nil {
			t.Fatalf("%s: nil value for a record that is no tombstone", key)
		}
		got, err := control.Decode(key, value)
		if err != nil {
			t.Fatalf("Decode(%s): %v\n%s", key, err, value)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%s read back as\n%s\nwant\n%s", key, show(got), show(r))
		}
		keys[r.Kind] = true
	}
	if len(keys) != 6 {
		t.Errorf("records() covers %d kinds, want all 6", len(keys))
	}
}

// A replica that leaves cleanly writes a tombstone for its status, and a
// record run alone has one once it has its outcome; no other kind may be
// one (a pause must outlive compaction).
func TestStatusTombstone(t *testing.T) {
	r := control.Record{Kind: control.KindStatus, Pipeline: "solve", Instance: "pod-1", Tombstone: true}
	key, value, err := r.Encode()
	if err != nil || string(key) != "status/solve/pod-1" || value != nil {
		t.Fatalf("Encode = %q, %q, %v; want the status key and a nil value", key, value, err)
	}
	got, err := control.Decode(key, nil)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("Decode(tombstone) = %+v, %v; want %+v", got, err, r)
	}
	// An alone record ends with a tombstone once its record has an
	// outcome; the key alone names the record.
	a := control.Record{Kind: control.KindAlone, Pipeline: "solve", Tombstone: true, Alone: &control.Alone{Partition: 0, Offset: 7}}
	key, value, err = a.Encode()
	if err != nil || string(key) != "alone/solve/0.7" || value != nil {
		t.Fatalf("Encode(alone tombstone) = %q, %q, %v; want alone/solve/0.7 and a nil value", key, value, err)
	}
	if got, err := control.Decode(key, nil); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("Decode(alone tombstone) = %s, %v; want %s", show(got), err, show(a))
	}
	for _, key := range []string{"pause/solve", "breaker/solve", "pausecode/solve", "guard/solve"} {
		if _, err := control.Decode([]byte(key), nil); !errors.Is(err, control.ErrMalformed) || !strings.Contains(err.Error(), "tombstone") {
			t.Errorf("Decode(%s, nil) = %v, want a malformed tombstone", key, err)
		}
	}
}

// encoded is r's value, for tables that break one part of it.
func encoded(t *testing.T, r control.Record) []byte {
	t.Helper()
	_, v, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Decode refuses, with an error saying why, every record a reader must
// skip: a key and value about different things, a version this redrive
// does not know, an oversize value, a state the kind does not have.
func TestDecodeRefuses(t *testing.T) {
	pause := records()[0]
	status := records()[9]
	breaker := records()[2]
	alone := records()[11]
	big := bytes.Repeat([]byte(" "), control.MaxValueBytes+1)
	copy(big, encoded(t, pause))
	for _, tc := range []struct {
		name       string
		key, value string
		want       string
	}{
		{"value of another kind", "breaker/solve", string(encoded(t, pause)), "value is about pause/solve"},
		{"value of another pipeline", "pause/captcha", string(encoded(t, pause)), "value is about pause/solve"},
		{"status of another instance", "status/solve/pod-9", string(encoded(t, status)), `of instance "pod-1"`},
		{"newer version", "pause/solve", `{"v":2,"kind":"pause","pipeline":"solve","at":"2024-05-01T10:00:00Z","pause":{"paused":true}}`, "version 2, newer than this redrive's 1"},
		{"no version", "pause/solve", `{"kind":"pause","pipeline":"solve","at":"2024-05-01T10:00:00Z","pause":{"paused":true}}`, "no version"},
		{"oversize", "pause/solve", string(big), "more than 65536"},
		{"breaker state of a guard", "breaker/solve", strings.Replace(string(encoded(t, breaker)), `"state":"open"`, `"state":"on"`, 1), `state "on", want one of open, half-open, closed`},
		{"guard state of a breaker", "guard/solve", `{"v":1,"kind":"guard","pipeline":"solve","at":"2024-05-01T10:00:00Z","line":{"state":"open"}}`, `state "open", want one of on, off`},
		{"no state", "pausecode/solve", `{"v":1,"kind":"pausecode","pipeline":"solve","at":"2024-05-01T10:00:00Z","line":{}}`, `state ""`},
		{"no body", "pause/solve", `{"v":1,"kind":"pause","pipeline":"solve","at":"2024-05-01T10:00:00Z","line":{"state":"on"}}`, "no pause body"},
		{"no time", "pause/solve", `{"v":1,"kind":"pause","pipeline":"solve","pause":{"paused":true}}`, "no time"},
		{"not JSON", "pause/solve", "paused", "not a control record"},
		{"unknown kind", "resume/solve", string(encoded(t, pause)), "kind one of pause, breaker"},
		{"no pipeline", "pause/", string(encoded(t, pause)), "pipeline name"},
		{"status without instance", "status/solve", string(encoded(t, status)), "status/<pipeline>/<instance>"},
		{"status with an empty instance", "status/solve/", string(encoded(t, status)), "instance"},
		{"alone key without its kind", "team/solve/3.1043", string(encoded(t, alone)), "kind one of"},
		{"alone value of another offset", "alone/team/solve/3.1043", string(encoded(t, alone)), "value is about partition 3 offset 1042"},
		{"alone key with a leading zero", "alone/team/solve/3.01042", string(encoded(t, alone)), "want <partition>.<offset>"},
		{"alone key without an offset", "alone/team/solve/3", string(encoded(t, alone)), "want <partition>.<offset>"},
		{"alone key with a negative partition", "alone/team/solve/-1.5", string(encoded(t, alone)), "want <partition>.<offset>"},
		{"alone without a record", "alone/solve", string(encoded(t, alone)), "alone/<pipeline>/<instance>"},
		{"alone without a delivery", "alone/team/solve/3.1042", strings.Replace(string(encoded(t, alone)), `"delivery":2`, `"delivery":0`, 1), "delivery 0"},
		{"alone without a body", "alone/team/solve/3.1042", `{"v":1,"kind":"alone","pipeline":"team/solve","at":"2024-05-01T10:00:00Z"}`, "no alone body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := control.Decode([]byte(tc.key), []byte(tc.value))
			if !errors.Is(err, control.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %+v, %v; want ErrMalformed saying %q", r, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error %q does not name the key %q", err, tc.key)
			}
		})
	}
}

// Encode refuses a name its key could not carry, rather than write a
// record every reader skips.
func TestEncodeRefusesBadNames(t *testing.T) {
	for _, r := range []control.Record{
		{Kind: control.KindPause, At: at, Pause: &control.Pause{}},
		{Kind: control.KindPause, Pipeline: strings.Repeat("p", 250), At: at, Pause: &control.Pause{}},
		{Kind: control.KindStatus, Pipeline: "solve", At: at, Status: &control.Status{}},
		{Kind: control.KindStatus, Pipeline: "solve", Instance: "pod/1", At: at, Status: &control.Status{}},
		{Kind: control.KindStatus, Pipeline: "solve", Instance: strings.Repeat("i", 256), Tombstone: true},
	} {
		if k, _, err := r.Encode(); err == nil {
			t.Errorf("Encode(pipeline %.20q, instance %.20q) = %q, want an error", r.Pipeline, r.Instance, k)
		}
	}
}

// State keeps the latest record of each key: a resume ends a pause, a
// tombstone removes a replica, and a replica not heard of for three of
// its status intervals is stale.
func TestState(t *testing.T) {
	s := control.NewState()
	if _, ok := s.Paused("solve"); ok {
		t.Fatal("an empty state is paused")
	}
	pause := records()[0]
	s.Apply(pause)
	if r, ok := s.Paused("solve"); !ok || r.Pause.Reason != "provider outage" || r.Instance != "alice@laptop" {
		t.Fatalf("Paused after a pause = %+v, %v", r, ok)
	}
	if _, ok := s.Paused("captcha"); ok {
		t.Error("a pause of solve pauses captcha")
	}
	resume := records()[1]
	resume.At = at.Add(time.Minute)
	s.Apply(resume)
	if _, ok := s.Paused("solve"); ok {
		t.Error("still paused after a resume")
	}
	if r, ok := s.Get(control.KindPause, "solve"); !ok || !r.At.Equal(resume.At) {
		t.Errorf("Get(pause) = %+v, %v; want the resume", r, ok)
	}

	now := at.Add(time.Hour)
	status := func(pipeline, instance string, ago time.Duration, every string) control.Record {
		return control.Record{Kind: control.KindStatus, Pipeline: pipeline, Instance: instance, At: now.Add(-ago),
			Status: &control.Status{Line: "running", Every: every}}
	}
	s.Apply(status("solve", "pod-b", 14*time.Second, "5s")) // within 3 × 5s
	s.Apply(status("solve", "pod-a", 16*time.Second, "5s")) // past it
	s.Apply(status("solve", "pod-c", 2*time.Minute, "1m"))  // within 3 × 1m
	s.Apply(status("solve", "pod-d", 16*time.Second, "x"))  // unreadable: 5s
	s.Apply(status("captcha", "pod-a", time.Second, "5s"))
	s.Apply(status("solve", "pod-e", time.Second, "5s"))
	s.Apply(control.Record{Kind: control.KindStatus, Pipeline: "solve", Instance: "pod-e", Tombstone: true})
	s.Apply(records()[2]) // a breaker record is no replica

	type row struct {
		pipeline, instance string
		stale              bool
	}
	var got []row
	for _, r := range s.Replicas(now) {
		got = append(got, row{r.Pipeline, r.Instance, r.Stale})
		if r.Line != "running" || r.Seen.IsZero() {
			t.Errorf("%s/%s: status %+v seen %v", r.Pipeline, r.Instance, r.Status, r.Seen)
		}
	}
	want := []row{{"captcha", "pod-a", false}, {"solve", "pod-a", true}, {"solve", "pod-b", false}, {"solve", "pod-c", false}, {"solve", "pod-d", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Replicas =\n%v\nwant\n%v", got, want)
	}
	if p := s.Pipelines(); !reflect.DeepEqual(p, []string{"captcha", "solve"}) {
		t.Errorf("Pipelines = %v", p)
	}
}

// Publish writes records a Read gives back as the state, the latest of
// each key winning; Read skips a record Decode refuses and says why.
func TestPublishRead(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "control")
	c.CreateTopic(t, topic, 1, map[string]*string{"cleanup.policy": ptr("compact")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client(t)
	if err := control.SetPause(ctx, cl, topic, "solve", "alice@laptop", true, "outage"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("pause/solve"), Value: []byte("{")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st := records()[9]
	st.At = time.Now()
	if err := control.Publish(ctx, cl, topic, st); err != nil {
		t.Fatal(err)
	}
	s, skipped, err := control.Read(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || !errors.Is(skipped[0], control.ErrMalformed) {
		t.Errorf("skipped = %v, want the one record that is not JSON", skipped)
	}
	if r, ok := s.Paused("solve"); !ok || r.Pause.Reason != "outage" || r.Instance != "alice@laptop" {
		t.Errorf("Paused = %+v, %v; the malformed record must not hide the pause before it", r, ok)
	}
	if reps := s.Replicas(time.Now()); len(reps) != 1 || reps[0].Instance != "pod-1" || reps[0].Stale {
		t.Errorf("Replicas = %+v", reps)
	}

	if err := control.SetPause(ctx, cl, topic, "solve", "", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := control.Publish(ctx, cl, topic, control.Record{Kind: control.KindStatus, Pipeline: "solve", Instance: "pod-1", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	s, _, err = control.Read(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Paused("solve"); ok {
		t.Errorf("paused after a resume: %+v", r)
	}
	if r, _ := s.Get(control.KindPause, "solve"); r.Instance == "" {
		t.Error("a resume by \"\" names no writer; want the host name")
	}
	if reps := s.Replicas(time.Now()); len(reps) != 0 {
		t.Errorf("Replicas after the tombstone = %+v", reps)
	}
}

// State keeps a pipeline's alone records until their tombstones: the
// records delivered again that ran alone and have no outcome yet.
func TestStateAlone(t *testing.T) {
	s := control.NewState()
	a := records()[11]
	s.Apply(a)
	b := a
	b.Alone = &control.Alone{Partition: 0, Offset: 9, Delivery: 3}
	s.Apply(b)
	other := a
	other.Pipeline = "captcha"
	s.Apply(other)
	got := s.Alone("team/solve")
	slices.SortFunc(got, func(x, y control.Record) int { return cmp.Compare(x.Alone.Offset, y.Alone.Offset) })
	if len(got) != 2 || *got[0].Alone != *b.Alone || *got[1].Alone != *a.Alone {
		t.Fatalf("Alone(team/solve) = %d records, want offsets 9 and 1042", len(got))
	}
	s.Apply(control.Record{Kind: control.KindAlone, Pipeline: "team/solve", Tombstone: true, Alone: &control.Alone{Partition: 3, Offset: 1042}})
	if got := s.Alone("team/solve"); len(got) != 1 || got[0].Alone.Offset != 9 {
		t.Fatalf("Alone after a tombstone = %d records, want offset 9 only", len(got))
	}
}

// canonical is r with its times in UTC: a time read back is the same
// instant, not always in the zone it was written in.
func canonical(r control.Record) control.Record {
	r.At = r.At.UTC()
	if r.Line != nil {
		l := *r.Line
		l.Until = l.Until.UTC()
		r.Line = &l
	}
	return r
}

func FuzzDecode(f *testing.F) {
	for _, r := range records() {
		k, v, err := r.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(k, v, false)
	}
	f.Add([]byte("status/solve/pod-1"), []byte(nil), true)
	f.Add([]byte("pause/solve"), []byte(nil), true)
	f.Add([]byte("status/a/b/c"), []byte(`{"v":1,"kind":"status","pipeline":"a/b","instance":"c","at":"2024-05-01T12:00:00+02:00","status":{"line":"running","share":0.5}}`), false)
	f.Add([]byte("breaker/solve"), []byte(`{"v":1,"kind":"breaker","pipeline":"solve","at":"2024-05-01T10:00:00Z","line":{"state":"open","until":"2024-05-01T10:00:30-07:00"}}`), false)
	f.Add([]byte("guard/solve"), []byte(`{"v":1,"kind":"guard","pipeline":"solve","at":"2024-05-01T10:00:00Z","line":{"state":"open"}}`), false)
	f.Add([]byte("pause/solve"), []byte(`{"v":2,"kind":"pause","pipeline":"solve","at":"2024-05-01T10:00:00Z","pause":{"paused":true}}`), false)
	f.Add([]byte("pause/solve"), []byte(`{"v":1,"KIND":"pause","Pipeline":"solve","at":"2024-05-01T10:00:00Z","pause":{"paused":true},"pause":null}`), false)
	f.Add([]byte("pause/solve"), []byte(`{"v":1,"kind":"pause","pipeline":"solve","at":"2024-05-01T10:00:00Z","pause":{"paused":true,"reason":"\u00e9\ud800<>&"}}`), false)
	f.Add([]byte("pausecode/solve"), []byte(`[1,2]`), false)
	f.Add([]byte("status/solve"), []byte(`{}`), false)
	f.Add([]byte("alone/solve/0.7"), []byte(nil), true)
	f.Add([]byte("alone/a/b/2.9"), []byte(`{"v":1,"kind":"alone","pipeline":"a/b","instance":"x/y","at":"2024-05-01T10:00:00Z","alone":{"partition":2,"offset":9,"delivery":3}}`), false)
	f.Add([]byte("alone/a/2.9"), []byte(`{"v":1,"kind":"alone","pipeline":"a","at":"2024-05-01T10:00:00Z","alone":{"partition":2,"offset":9,"delivery":3},"line":{"state":"on"}}`), false)
	f.Add([]byte(""), []byte(""), false)
	f.Add([]byte("\xff/\xfe"), []byte("\x00"), false)
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		}
		r, err := control.Decode(key, value)
		if err != nil {
			if !errors.Is(err, control.ErrMalformed) {
				t.Fatalf("Decode error %v is not ErrMalformed", err)
			}
			return
		}
		if r.Key() != string(key) {
			t.Fatalf("Decode(%q) gave a record of key %q", key, r.Key())
		}
		if r.Tombstone != (value == nil) {
			t.Fatalf("Tombstone %v for a value of %d bytes (nil %v)", r.Tombstone, len(value), value == nil)
		}
		k2, v2, err := r.Encode()
		if err != nil {
			t.Fatalf("a record Decode took cannot be written back: %v\nkey   %q\nvalue %q", err, key, value)
		}
		r2, err := control.Decode(k2, v2)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(x))): %v\nin  %q %q\nout %q %q", err, key, value, k2, v2)
		}
		if got, want := canonical(r2), canonical(r); !reflect.DeepEqual(got, want) {
			t.Fatalf("read back as\n%s\nwant\n%s\nin  %q\nout %q", show(got), show(want), value, v2)
		}
	})
}

func ptr(s string) *string { return &s }

// show is r with its bodies, not their addresses.
func show(r control.Record) string {
	s := fmt.Sprintf("%s/%s by %q at %s tombstone %v", r.Kind, r.Pipeline, r.Instance, r.At, r.Tombstone)
	if r.Pause != nil {
		s += fmt.Sprintf(" pause %+v", *r.Pause)
	}
	if r.Line != nil {
		s += fmt.Sprintf(" line %+v", *r.Line)
	}
	if r.Status != nil {
		s += fmt.Sprintf(" status %+v", *r.Status)
	}
	if r.Alone != nil {
		s += fmt.Sprintf(" alone %+v", *r.Alone)
	}
	return s
}
