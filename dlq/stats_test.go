package dlq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redrive/redrive/retry"
)

func TestStatsAggregates(t *testing.T) {
	now := t0.Add(30 * time.Second)
	var s Stats
	add := func(n int, sp spec) {
		d := sp.build(t)
		for range n {
			s.Add(d)
		}
	}
	add(3, spec{code: "ERROR_NO_SLOT_AVAILABLE", class: retry.ClassTransient, key: "a"})
	add(2, spec{at: t0.Add(-time.Minute), code: "http_503", class: retry.ClassTransient, key: "b"})
	add(1, spec{at: t0.Add(-23*time.Hour - 59*time.Minute), reason: ReasonPermanent, code: "ERROR_WRONG_USER_KEY", class: retry.ClassPermanent, origin: "captcha.requests"})
	add(1, spec{at: t0.Add(-25 * time.Hour), reason: ReasonExpired, class: retry.ClassExpired, origin: "-"}) // in the totals, in no minute
	s.Add(nil)

	snap := s.Snapshot(now, 0)
	if snap.Total != 7 {
		t.Errorf("total = %d", snap.Total)
	}
	wantMaps := map[string]struct{ got, want map[string]int64 }{
		"by_code":   {snap.ByCode, map[string]int64{"ERROR_NO_SLOT_AVAILABLE": 3, "http_503": 2, "ERROR_WRONG_USER_KEY": 1, "": 1}},
		"by_reason": {snap.ByReason, map[string]int64{"exhausted": 5, "permanent": 1, "expired": 1}},
		"by_class":  {snap.ByClass, map[string]int64{"transient": 5, "permanent": 1, "expired": 1}},
		"by_origin": {snap.ByOrigin, map[string]int64{"solve.requests": 5, "captcha.requests": 1, "": 1}},
	}
	for name, m := range wantMaps {
		if fmt.Sprint(m.got) != fmt.Sprint(m.want) {
			t.Errorf("%s = %v, want %v", name, m.got, m.want)
		}
	}
	if len(snap.PerMinute) != 1440 {
		t.Fatalf("%d minutes", len(snap.PerMinute))
	}
	first, last := snap.PerMinute[0], snap.PerMinute[1439]
	if !last.Minute.Equal(t0) || !first.Minute.Equal(t0.Add(-1439*time.Minute)) {
		t.Errorf("minutes from %v to %v", first.Minute, last.Minute)
	}
	var sum int64
	for _, m := range snap.PerMinute {
		sum += m.Count
	}
	if last.Count != 3 || snap.PerMinute[1438].Count != 2 || first.Count != 1 || sum != 6 {
		t.Errorf("per minute: first %d, last two %d %d, sum %d; want 1, 2 3, 6", first.Count, snap.PerMinute[1438].Count, last.Count, sum)
	}
	if snap.Oldest == nil || !snap.Oldest.Equal(t0.Add(-25*time.Hour)) || !snap.Newest.Equal(t0) {
		t.Errorf("oldest %v newest %v", snap.Oldest, snap.Newest)
	}
	if len(snap.TopKeys) != 2 || snap.TopKeys[0] != (KeyCount{Key: "a", Count: 3}) || snap.TopKeys[1] != (KeyCount{Key: "b", Count: 2}) {
		t.Errorf("top keys = %+v (null keys are not counted)", snap.TopKeys)
	}
	if !snap.At.Equal(now) {
		t.Errorf("at = %v", snap.At)
	}

	// A day later, the minutes have moved on; the totals have not.
	later := s.Snapshot(now.Add(24*time.Hour), 1)
	for _, m := range later.PerMinute {
		if m.Count != 0 {
			t.Fatalf("a day later, minute %v has %d", m.Minute, m.Count)
		}
	}
	if later.Total != 7 || len(later.TopKeys) != 1 {
		t.Errorf("a day later: total %d, %d top keys", later.Total, len(later.TopKeys))
	}
	// The snapshot is a copy.
	snap.ByCode["x"] = 1
	if _, ok := s.Snapshot(now, 0).ByCode["x"]; ok {
		t.Errorf("the snapshot shares its map")
	}
}

func TestStatsMinuteRing(t *testing.T) {
	var s Stats
	d := func(at time.Time) *DeadLetter { return &DeadLetter{Timestamp: at} }
	s.Add(d(t0))
	s.Add(d(t0.Add(24 * time.Hour))) // the same slot, a day later: replaces it
	s.Add(d(t0))                     // a day older than the slot's minute: in no window with it
	s.Add(d(t0.Add(24*time.Hour + 59*time.Second)))
	snap := s.Snapshot(t0.Add(24*time.Hour+time.Minute), 0)
	if got := snap.PerMinute[1438]; !got.Minute.Equal(t0.Add(24*time.Hour)) || got.Count != 2 {
		t.Errorf("minute %v = %d, want 2", got.Minute, got.Count)
	}
	if snap.Total != 4 {
		t.Errorf("total = %d", snap.Total)
	}
	// Before the Unix epoch, minutes still fall into their own slot.
	var old Stats
	pre := time.Unix(-90, 0)
	old.Add(d(pre))
	snap = old.Snapshot(pre, 0)
	if got := snap.PerMinute[1439]; got.Count != 1 || !got.Minute.Equal(time.Unix(-120, 0)) {
		t.Errorf("pre-epoch minute %v = %d", got.Minute, got.Count)
	}
	// A dead letter from the future counts, in no minute yet.
	var fut Stats
	fut.Add(d(t0.Add(time.Hour)))
	if snap := fut.Snapshot(t0, 0); snap.Total != 1 || snap.PerMinute[1439].Count != 0 {
		t.Errorf("future: %+v", snap.PerMinute[1439])
	}
	if snap := fut.Snapshot(t0.Add(time.Hour), 0); snap.PerMinute[1439].Count != 1 {
		t.Errorf("future, once now: %+v", snap.PerMinute[1439])
	}
}

func TestStatsTopKeys(t *testing.T) {
	s := NewStats(10)
	add := func(key string, n int) {
		for range n {
			s.Add(&DeadLetter{Key: []byte(key)})
		}
	}
	add("heavy", 500)
	add("medium", 200)
	for i := range 300 { // many keys once each: they churn through the other slots
		add("once-"+strconv.Itoa(i), 1)
	}
	add("heavy", 10)
	top := s.Snapshot(t0, 20).TopKeys
	if len(top) != 10 {
		t.Fatalf("top = %+v; want 10 (the capacity)", top)
	}
	if top[0] != (KeyCount{Key: "heavy", Count: 510}) || top[1] != (KeyCount{Key: "medium", Count: 200}) {
		t.Errorf("top = %+v: the frequent keys must stay, exact", top[:2])
	}
	var churned int64
	for _, c := range top[2:] {
		// Each was seen once: the truth is within [count-overestimate, count].
		if !strings.HasPrefix(c.Key, "once-") || c.Count-c.Overestimate > 1 || c.Count < 1 {
			t.Errorf("churned slot %+v does not bound its true count 1", c)
		}
		churned += c.Count
	}
	if churned != 300 {
		t.Errorf("the churned slots count %d, want the 300 they saw", churned)
	}
	if got := s.Snapshot(t0, 1).TopKeys; len(got) != 1 || got[0].Key != "heavy" {
		t.Errorf("top 1 = %+v", got)
	}

	var b Stats
	bin := []byte{0xff, 0x00, 'k'}
	long := bytes.Repeat([]byte("k"), MaxKeyBytes+10)
	b.Add(&DeadLetter{Key: bin})
	b.Add(&DeadLetter{Key: long})
	b.Add(&DeadLetter{Key: long[:MaxKeyBytes+1]}) // the same first MaxKeyBytes bytes
	b.Add(&DeadLetter{Key: []byte{}})             // empty: not counted
	top = b.Snapshot(t0, 0).TopKeys
	if len(top) != 2 || top[0].Key != strings.Repeat("k", MaxKeyBytes) || !top[0].Truncated || top[0].Count != 2 ||
		top[1] != (KeyCount{Key: "/wBr", Base64: true, Count: 1}) {
		t.Errorf("top = %+v", top)
	}
}

func TestStatsMaxDistinct(t *testing.T) {
	var s Stats
	for i := range MaxDistinct + 5 {
		s.Add(&DeadLetter{Code: "code-" + strconv.Itoa(i)})
	}
	s.Add(&DeadLetter{Code: "code-0"}) // an old code still counts as itself
	by := s.Snapshot(t0, 0).ByCode
	if len(by) != MaxDistinct+1 || by[Other] != 5 || by["code-0"] != 2 {
		t.Errorf("%d codes, %d other, code-0 %d", len(by), by[Other], by["code-0"])
	}
}

func TestStatsRules(t *testing.T) {
	var s Stats
	s.Republished("no-slot")
	s.Republished("no-slot")
	s.Parked("no-slot")
	s.Dropped("wrong-key")
	s.Kept("")
	s.Kept(NoRule)
	rules := s.Snapshot(t0, 0).Rules
	want := map[string]RuleCounts{"no-slot": {Republished: 2, Parked: 1}, "wrong-key": {Dropped: 1}, NoRule: {Kept: 2}}
	if fmt.Sprint(rules) != fmt.Sprint(want) {
		t.Errorf("rules = %+v, want %+v", rules, want)
	}
}

func TestStatsJSON(t *testing.T) {
	var empty Stats
	out, err := json.Marshal(empty.Snapshot(t0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"total":0`, `"by_code":{}`, `"by_reason":{}`, `"by_class":{}`, `"by_origin":{}`, `"oldest":null`, `"newest":null`,
		`"top_keys":[]`, `"rules":{}`, `"per_minute":[{"minute":"2024-04-30T10:01:00Z","count":0}`, `"at":"2024-05-01T10:00:00Z"`} {
		if !strings.Contains(string(out), w) {
			t.Errorf("JSON does not contain %s:\n%.600s", w, out)
		}
	}

	var s Stats
	s.Add(spec{code: "http_503", key: "k\x00"}.build(t))
	s.Republished("r")
	out, err = json.Marshal(s.Snapshot(t0.Add(time.Minute), 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"total":1`, `"by_code":{"http_503":1}`, `"oldest":"2024-05-01T10:00:00Z"`, `{"minute":"2024-05-01T10:00:00Z","count":1}`,
		`"top_keys":[{"key":"awA=","base64":true,"count":1}]`, `"rules":{"r":{"republished":1,"parked":0,"kept":0,"dropped":0}}`} {
		if !strings.Contains(string(out), w) {
			t.Errorf("JSON does not contain %s", w)
		}
	}
	var back StatsSnapshot
	if err := json.Unmarshal(out, &back); err != nil || back.Total != 1 || len(back.PerMinute) != 1440 || !back.Oldest.Equal(t0) {
		t.Errorf("read back: %v %+v", err, back.Oldest)
	}
}

func TestStatsTable(t *testing.T) {
	var s Stats
	for range 2 {
		s.Add(spec{code: "ERROR_NO_SLOT_AVAILABLE"}.build(t))
	}
	s.Add(spec{at: t0.Add(time.Minute), reason: ReasonPermanent, code: "bad\tcode"}.build(t))
	s.Add(spec{at: t0.Add(-time.Minute), reason: ReasonInvalid}.build(t))
	s.Parked("no-slot")
	var b strings.Builder
	if err := s.Table(&b); err != nil {
		t.Fatal(err)
	}
	want := `4 dead letters, oldest 2024-05-01T09:59:00Z, newest 2024-05-01T10:01:00Z

CODE                     COUNT  SHARE
ERROR_NO_SLOT_AVAILABLE  2      50.0%
(none)                   1      25.0%
"bad\tcode"              1      25.0%

REASON     COUNT  SHARE
exhausted  2      50.0%
invalid    1      25.0%
permanent  1      25.0%

RULE     REPUBLISHED  PARKED  KEPT  DROPPED
no-slot  0            1       0     0
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	var empty Stats
	b.Reset()
	if err := empty.Table(&b); err != nil || b.String() != "0 dead letters\n" {
		t.Errorf("empty table %q, %v", b.String(), err)
	}
}

func TestStatsReset(t *testing.T) {
	s := NewStats(5)
	s.Add(spec{key: "k"}.build(t))
	s.Kept("")
	s.Reset()
	snap := s.Snapshot(t0, 0)
	if snap.Total != 0 || len(snap.ByCode) != 0 || snap.Oldest != nil || len(snap.TopKeys) != 0 || len(snap.Rules) != 0 || snap.PerMinute[1439].Count != 0 {
		t.Errorf("after Reset: %+v", snap)
	}
	s.Add(spec{key: "k"}.build(t))
	if s.Snapshot(t0, 0).Total != 1 || s.keys.max != 5 {
		t.Errorf("Reset lost the key capacity or broke Add")
	}
}

func TestStatsConcurrent(t *testing.T) {
	s := NewStats(50)
	d := spec{code: "x", key: "k"}.build(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				dd := *d
				dd.Key = []byte(strconv.Itoa(g*1000 + i%70))
				s.Add(&dd)
				if i%50 == 0 {
					s.Republished("r")
					_ = s.Snapshot(t0, 5)
					_ = s.Table(&bytes.Buffer{})
				}
			}
		}()
	}
	wg.Wait()
	snap := s.Snapshot(t0, 0)
	if snap.Total != 8*500 || snap.Rules["r"].Republished != 8*10 || snap.PerMinute[1439].Count != 8*500 {
		t.Errorf("total %d, republished %d", snap.Total, snap.Rules["r"].Republished)
	}
}

func TestStatsAddDoesNotAllocate(t *testing.T) {
	var s Stats
	d := spec{code: "ERROR_NO_SLOT_AVAILABLE", key: "user-7"}.build(t)
	s.Add(d)
	if n := testing.AllocsPerRun(1000, func() { s.Add(d) }); n != 0 {
		t.Errorf("Add of a known key and code allocates %v times", n)
	}
}

func TestDisplayBytes(t *testing.T) {
	tests := []struct {
		in   []byte
		want string
		b64  bool
	}{
		{nil, "", false},
		{[]byte(`{"site":"x"}`), `{"site":"x"}`, false},
		{[]byte("line\nline\ttab"), "line\nline\ttab", false},
		{[]byte("héllo ✓"), "héllo ✓", false},
		{[]byte{0xff}, "/w==", true},
		{[]byte("a\x00b"), "YQBi", true},
		{[]byte("\x1b[31m"), "G1szMW0=", true},
	}
	for _, tt := range tests {
		got, b64 := DisplayBytes(tt.in)
		if got != tt.want || b64 != tt.b64 {
			t.Errorf("DisplayBytes(%q) = %q, %v; want %q, %v", tt.in, got, b64, tt.want, tt.b64)
		}
	}
}

func BenchmarkStatsAdd(b *testing.B) {
	ds := make([]*DeadLetter, 1000)
	codes := []string{"ERROR_NO_SLOT_AVAILABLE", "http_503", "timeout", "ERROR_WRONG_USER_KEY"}
	for i := range ds {
		ds[i] = &DeadLetter{Timestamp: t0.Add(time.Duration(i) * time.Second), Key: []byte("user-" + strconv.Itoa(i%200)),
			Code: codes[i%len(codes)], Reason: ReasonExhausted, Class: retry.ClassTransient, OriginTopic: "solve.requests"}
	}
	b.Run("known keys", func(b *testing.B) {
		s := NewStats(0)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Add(ds[i%len(ds)])
		}
	})
	b.Run("keys beyond capacity", func(b *testing.B) {
		s := NewStats(100) // 200 distinct keys churn through 100 slots
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Add(ds[i%len(ds)])
		}
	})
}

func ExampleStats_Table() {
	var s Stats
	for i, code := range []string{"ERROR_NO_SLOT_AVAILABLE", "ERROR_NO_SLOT_AVAILABLE", "http_503"} {
		s.Add(&DeadLetter{Timestamp: t0.Add(time.Duration(i) * time.Minute), Code: code, Reason: ReasonExhausted})
	}
	s.Add(&DeadLetter{Timestamp: t0, Code: "ERROR_WRONG_USER_KEY", Reason: ReasonPermanent})
	s.Republished("no-slot-later")
	_ = s.Table(os.Stdout)
	// Output:
	// 4 dead letters, oldest 2024-05-01T10:00:00Z, newest 2024-05-01T10:02:00Z
	//
	// CODE                     COUNT  SHARE
	// ERROR_NO_SLOT_AVAILABLE  2      50.0%
	// ERROR_WRONG_USER_KEY     1      25.0%
	// http_503                 1      25.0%
	//
	// REASON     COUNT  SHARE
	// exhausted  3      75.0%
	// permanent  1      25.0%
	//
	// RULE           REPUBLISHED  PARKED  KEPT  DROPPED
	// no-slot-later  1            0       0     0
}

// Codes, reasons and origins come from records: 1,000 distinct 100 KB
// codes must not keep 100 MB, and the counts still add up.
func TestStatsBoundLabelLength(t *testing.T) {
	var s Stats
	long := strings.Repeat("é", 50_000) // 100 KB, two bytes a rune
	for i := 0; i < 1000; i++ {
		s.Add(&DeadLetter{Code: fmt.Sprintf("%d%s", i, long), Reason: Reason(long), OriginTopic: long})
	}
	snap := s.Snapshot(time.Now(), 10)
	var n int64
	for k, c := range snap.ByCode {
		if len(k) > MaxLabelBytes || !utf8.ValidString(k) {
			t.Fatalf("a code of %d bytes (valid UTF-8: %v) is counted; want at most %d", len(k), utf8.ValidString(k), MaxLabelBytes)
		}
		n += c
	}
	if n != 1000 {
		t.Errorf("by code adds up to %d, want 1000", n)
	}
	for _, m := range []map[string]int64{snap.ByReason, snap.ByOrigin} {
		if len(m) != 1 {
			t.Errorf("%d distinct long reasons/origins, want 1 (the same prefix)", len(m))
		}
		for k := range m {
			if len(k) > MaxLabelBytes {
				t.Errorf("a %d-byte label is counted", len(k))
			}
		}
	}
}
