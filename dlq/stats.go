package dlq

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redrive/redrive/retry"
)

// Limits of Stats, so that its memory stays bounded whatever the DLQ holds.
const (
	// DefaultMaxKeys is how many distinct keys Stats counts for TopKeys.
	DefaultMaxKeys = 10_000
	// MaxKeyBytes: a longer key is counted by its first MaxKeyBytes bytes
	// (KeyCount.Truncated).
	MaxKeyBytes = 256
	// MaxDistinct is how many distinct codes (and reasons, classes, origin
	// topics) Stats counts one by one; the rest are counted as Other.
	MaxDistinct = 1000
	// MaxLabelBytes: a longer code (reason, class, origin topic) is
	// counted by its first bytes, ending in "…".
	MaxLabelBytes = 256
	// StatsWindow is how far back the per-minute counts go.
	StatsWindow = 24 * time.Hour
)

// Other names the count of the values beyond MaxDistinct in a by_* map.
const Other = "(other)"

// NoRule names the rule of a decision no rule made: Decide keeps a dead
// letter no rule matches, and Stats counts it under this name. Rule names
// from the configuration cannot take it (they use [A-Za-z0-9._-]).
const NoRule = "(none)"

const minutes = int(StatsWindow / time.Minute) // 1440

// Stats aggregates dead letters: totals by code, reason, class and origin
// topic, per minute for the last 24 hours, the oldest and newest, the most
// frequent keys, and what the rules did. It is safe for concurrent use.
// The zero value is ready (with DefaultMaxKeys); do not copy it after use.
//
// A dead letter is counted in the minute of its dead-lettering time
// (DeadLetter.Timestamp). Dead letters older than 24 hours before the
// Snapshot's now count in the totals but in no minute, and a minute is
// forgotten once a dead letter 24 hours newer is added, so memory does not
// grow with time.
type Stats struct {
	mu       sync.Mutex
	total    int64
	undec    int64 // DLQ records that are not dead letters (Undecodable)
	byCode   map[string]int64
	byReason map[string]int64
	byClass  map[string]int64
	byOrigin map[string]int64
	perMin   [minutes]minuteCount
	oldest   time.Time
	newest   time.Time
	keys     topKeys
	rules    map[string]*RuleCounts
}

type minuteCount struct {
	minute int64 // Unix minute
	n      int64
}

// NewStats is a Stats that counts up to maxKeys distinct keys
// (DefaultMaxKeys when maxKeys <= 0).
func NewStats(maxKeys int) *Stats {
	s := &Stats{}
	s.keys.max = maxKeys
	return s
}

// RuleCounts are what one rule did.
type RuleCounts struct {
	Republished int64 `json:"republished"`
	Parked      int64 `json:"parked"` // max_redrives reached: never republished again
	Kept        int64 `json:"kept"`
	Dropped     int64 `json:"dropped"`
}

// Add counts d. A nil d is ignored.
func (s *Stats) Add(d *DeadLetter) {
	if d == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCode == nil {
		s.byCode, s.byReason, s.byClass, s.byOrigin = map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	}
	s.total++
	bump(s.byCode, d.Code)
	bump(s.byReason, string(d.Reason))
	bump(s.byClass, string(d.Class))
	bump(s.byOrigin, d.OriginTopic)
	if ts := d.Timestamp; !ts.IsZero() {
		if s.oldest.IsZero() || ts.Before(s.oldest) {
			s.oldest = ts
		}
		if s.newest.IsZero() || ts.After(s.newest) {
			s.newest = ts
		}
		m := unixMinute(ts)
		b := &s.perMin[slot(m)]
		switch {
		case b.minute == m:
			b.n++
		case b.minute < m || b.n == 0:
			*b = minuteCount{minute: m, n: 1}
		default:
			// The slot holds a minute 24 hours newer: m is out of every
			// window that minute is in.
		}
	}
	if len(d.Key) > 0 {
		s.keys.add(d.Key)
	}
}

func bump(m map[string]int64, k string) {
	if len(k) > MaxLabelBytes {
		// A value from a record: bounded in length as in count, so that
		// 1,000 distinct 500 KB codes cannot take 500 MB.
		k = retry.TruncateUTF8(k, MaxLabelBytes-len("…")) + "…"
	}
	if _, ok := m[k]; ok || len(m) < MaxDistinct {
		m[k]++
		return
	}
	m[Other]++
}

func unixMinute(t time.Time) int64 {
	u := t.Unix()
	m := u / 60
	if u < 0 && u%60 != 0 {
		m--
	}
	return m
}

func slot(m int64) int { return int(((m % int64(minutes)) + int64(minutes)) % int64(minutes)) }

// Republished counts a dead letter that rule republished (after the
// broker acknowledged the write).
func (s *Stats) Republished(rule string) { s.rule(rule, func(c *RuleCounts) { c.Republished++ }) }

// Parked counts a dead letter that rule would have republished but that
// reached its max_redrives.
func (s *Stats) Parked(rule string) { s.rule(rule, func(c *RuleCounts) { c.Parked++ }) }

// Undecodable counts a DLQ record that is not a valid redrive dead
// letter (Decode failed): never in Total or the by_* counts, never
// decided by a rule, never republished. The analyzer and `redrive dlq
// stats` count them alike.
func (s *Stats) Undecodable() {
	s.mu.Lock()
	s.undec++
	s.mu.Unlock()
}

// Kept counts a dead letter that rule kept (NoRule or "": none matched).
func (s *Stats) Kept(rule string) { s.rule(rule, func(c *RuleCounts) { c.Kept++ }) }

// Dropped counts a dead letter that rule dropped.
func (s *Stats) Dropped(rule string) { s.rule(rule, func(c *RuleCounts) { c.Dropped++ }) }

func (s *Stats) rule(name string, f func(*RuleCounts)) {
	if name == "" {
		name = NoRule
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rules == nil {
		s.rules = map[string]*RuleCounts{}
	}
	c := s.rules[name]
	if c == nil {
		c = &RuleCounts{}
		s.rules[name] = c
	}
	f(c)
}

// Reset forgets everything counted (an analyzer rebuilding its state from
// the start of the DLQ).
func (s *Stats) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.keys.max
	s.total, s.byCode, s.byReason, s.byClass, s.byOrigin = 0, nil, nil, nil, nil
	s.perMin = [minutes]minuteCount{}
	s.oldest, s.newest, s.rules = time.Time{}, time.Time{}, nil
	s.keys = topKeys{max: limit}
}

// StatsSnapshot is Stats at one moment, as GET /api/stats returns it.
// Maps and lists are never null in JSON. Times are UTC, RFC 3339.
type StatsSnapshot struct {
	// At is the now the snapshot was taken for.
	At    time.Time `json:"at"`
	Total int64     `json:"total"`
	// Undecodable counts the DLQ records that are not redrive dead
	// letters: not in Total, never republished (added field).
	Undecodable int64            `json:"undecodable"`
	ByCode      map[string]int64 `json:"by_code"`   // "" is no code; Other the rest beyond MaxDistinct
	ByReason    map[string]int64 `json:"by_reason"` // exhausted, permanent, invalid, expired, crashed
	ByClass     map[string]int64 `json:"by_class"`
	ByOrigin    map[string]int64 `json:"by_origin"` // origin topic; "" when the dead letter has none
	// PerMinute has one entry for every minute of the 24 hours up to At,
	// oldest first, zeros included: always 1440 entries.
	PerMinute []MinuteCount `json:"per_minute"`
	// Oldest and Newest are the dead-lettering times of the oldest and
	// newest dead letter counted; null before the first.
	Oldest *time.Time `json:"oldest"`
	Newest *time.Time `json:"newest"`
	// TopKeys are the most frequent keys, most frequent first.
	TopKeys []KeyCount `json:"top_keys"`
	// Rules are what each rule did, by rule name (NoRule: no rule matched).
	Rules map[string]RuleCounts `json:"rules"`
}

// MinuteCount is the dead letters of one minute.
type MinuteCount struct {
	Minute time.Time `json:"minute"` // its start
	Count  int64     `json:"count"`
}

// KeyCount is one of the top keys.
type KeyCount struct {
	// Key is the key as text, or base64 (standard, padded) when Base64.
	Key    string `json:"key"`
	Base64 bool   `json:"base64,omitempty"`
	// Truncated: the key is longer than MaxKeyBytes and shown (and
	// counted) by its first MaxKeyBytes bytes.
	Truncated bool  `json:"truncated,omitempty"`
	Count     int64 `json:"count"`
	// Overestimate bounds how much Count may be too high: once more than
	// the maximum of distinct keys were seen, a newly seen key inherits the
	// count of the key it evicts (the space-saving algorithm). 0: exact.
	Overestimate int64 `json:"overestimate,omitempty"`
}

// DefaultTopKeys is how many keys Snapshot reports when asked for 0.
const DefaultTopKeys = 10

// Snapshot copies the counts as of now, with the topN most frequent keys
// (DefaultTopKeys when topN <= 0).
func (s *Stats) Snapshot(now time.Time, topN int) StatsSnapshot {
	if topN <= 0 {
		topN = DefaultTopKeys
	}
	return s.snapshot(now, topN)
}

func (s *Stats) snapshot(now time.Time, topN int) StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StatsSnapshot{
		At:          now.UTC(),
		Total:       s.total,
		Undecodable: s.undec,
		ByCode:      copyMap(s.byCode),
		ByReason:    copyMap(s.byReason),
		ByClass:     copyMap(s.byClass),
		ByOrigin:    copyMap(s.byOrigin),
		PerMinute:   make([]MinuteCount, minutes),
		TopKeys:     s.keys.top(topN),
		Rules:       make(map[string]RuleCounts, len(s.rules)),
	}
	last := unixMinute(now)
	for i := range minutes {
		m := last - int64(minutes-1) + int64(i)
		mc := MinuteCount{Minute: time.Unix(m*60, 0).UTC()}
		if b := s.perMin[slot(m)]; b.minute == m {
			mc.Count = b.n
		}
		out.PerMinute[i] = mc
	}
	if !s.oldest.IsZero() {
		o, n := s.oldest.UTC(), s.newest.UTC()
		out.Oldest, out.Newest = &o, &n
	}
	for name, c := range s.rules {
		out.Rules[name] = *c
	}
	return out
}

func copyMap(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	maps.Copy(out, m)
	return out
}

// Table writes the counts as `redrive dlq stats` prints them: the total
// with the oldest and newest, then tables by code and by reason (most
// frequent first), and what each rule did when a rule did anything.
func (s *Stats) Table(w io.Writer) error {
	return s.snapshot(time.Now(), 0).Table(w)
}

// Table writes the snapshot as Stats.Table does.
func (snap StatsSnapshot) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%d dead letters", snap.Total)
	if snap.Oldest != nil {
		fmt.Fprintf(tw, ", oldest %s, newest %s", snap.Oldest.Format(time.RFC3339), snap.Newest.Format(time.RFC3339))
	}
	fmt.Fprintln(tw)
	if snap.Undecodable > 0 {
		fmt.Fprintf(tw, "%d undecodable: not redrive dead letters\n", snap.Undecodable)
	}
	share := func(n int64) string {
		if snap.Total == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(snap.Total))
	}
	for _, t := range []struct {
		title string
		m     map[string]int64
	}{{"CODE", snap.ByCode}, {"REASON", snap.ByReason}} {
		if len(t.m) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\n%s\tCOUNT\tSHARE\n", t.title)
		for _, k := range byCount(t.m) {
			name := k
			if name == "" {
				name = "(none)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", tabSafe(name), t.m[k], share(t.m[k]))
		}
	}
	if len(snap.Rules) > 0 {
		fmt.Fprintf(tw, "\nRULE\tREPUBLISHED\tPARKED\tKEPT\tDROPPED\n")
		for _, name := range slices.Sorted(maps.Keys(snap.Rules)) {
			c := snap.Rules[name]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", tabSafe(name), c.Republished, c.Parked, c.Kept, c.Dropped)
		}
	}
	return tw.Flush()
}

// byCount sorts m's keys by count, most first, then by name.
func byCount(m map[string]int64) []string {
	ks := slices.Collect(maps.Keys(m))
	slices.SortFunc(ks, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return ks
}

// tabSafe keeps a code from breaking the table's columns and lines.
func tabSafe(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) || !utf8.ValidString(s) {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// DisplayBytes shows a key or value: as itself when it is valid UTF-8
// without control characters other than tab, newline and carriage return,
// else as standard base64 (padded) with isBase64 set. The API and the
// export show keys and values this way; ParseKeyFilter reads the base64
// form back with its "base64:" prefix.
func DisplayBytes(b []byte) (text string, isBase64 bool) {
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool {
		return unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r'
	}) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

// topKeys counts keys with the space-saving algorithm (Metwally et al.):
// at most max keys are tracked; a new key when full replaces the one with
// the smallest count and starts from that count + 1, remembering it as its
// possible overestimate. Frequent keys stay; counts are exact until more
// than max distinct keys were seen. entries is a min-heap by count.
type topKeys struct {
	max     int
	index   map[string]int // key → position in entries
	entries []keyEntry
}

type keyEntry struct {
	key       string
	count     int64
	over      int64
	truncated bool
}

func (t *topKeys) add(key []byte) {
	truncated := len(key) > MaxKeyBytes
	if truncated {
		key = key[:MaxKeyBytes]
	}
	if t.index == nil {
		t.index = map[string]int{}
	}
	if i, ok := t.index[string(key)]; ok {
		t.entries[i].count++
		t.entries[i].truncated = t.entries[i].truncated || truncated
		t.down(i)
		return
	}
	limit := t.max
	if limit <= 0 {
		limit = DefaultMaxKeys
	}
	k := string(key)
	if len(t.entries) < limit {
		t.entries = append(t.entries, keyEntry{key: k, count: 1, truncated: truncated})
		t.index[k] = len(t.entries) - 1
		t.up(len(t.entries) - 1)
		return
	}
	least := &t.entries[0]
	delete(t.index, least.key)
	*least = keyEntry{key: k, count: least.count + 1, over: least.count, truncated: truncated}
	t.index[k] = 0
	t.down(0)
}

func (t *topKeys) less(i, j int) bool { return t.entries[i].count < t.entries[j].count }

func (t *topKeys) swap(i, j int) {
	t.entries[i], t.entries[j] = t.entries[j], t.entries[i]
	t.index[t.entries[i].key] = i
	t.index[t.entries[j].key] = j
}

func (t *topKeys) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *topKeys) down(i int) {
	n := len(t.entries)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.less(r, l) {
			m = r
		}
		if !t.less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

func (t *topKeys) top(n int) []KeyCount {
	if n <= 0 {
		return []KeyCount{}
	}
	es := slices.Clone(t.entries)
	slices.SortFunc(es, func(a, b keyEntry) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	if len(es) > n {
		es = es[:n]
	}
	out := make([]KeyCount, len(es))
	for i, e := range es {
		text, b64 := DisplayBytes([]byte(e.key))
		out[i] = KeyCount{Key: text, Base64: b64, Truncated: e.truncated, Count: e.count, Overestimate: e.over}
	}
	return out
}
