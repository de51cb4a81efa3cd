package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// runSplit runs a command line with stdout and stderr apart.
func runSplit(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runCtx(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// deadSpec is a dead letter to put in a DLQ.
type deadSpec struct {
	key      []byte
	value    string
	code     string
	reason   dlq.Reason
	attempt  int
	redrives int
	ago      time.Duration // dead-lettered this long before now
	headers  []kgo.RecordHeader
	maxBytes int // > 0: build to fit this, truncating the value
}

func (s deadSpec) record(topic, origin string, now time.Time, n int) *kgo.Record {
	class := map[dlq.Reason]retry.Class{dlq.ReasonPermanent: retry.ClassPermanent, dlq.ReasonExhausted: retry.ClassTransient,
		dlq.ReasonExpired: retry.ClassExpired, dlq.ReasonInvalid: retry.ClassInvalid}[s.reason]
	at := now.Add(-s.ago)
	m := retry.Meta{ID: fmt.Sprintf("req-%d", n), Attempt: s.attempt, HasOrigin: true, OriginTopic: origin, OriginPartition: int32(n % 3),
		OriginOffset: int64(100 + n), OriginTimestamp: at.Add(-time.Minute), FirstErrorAt: at.Add(-30 * time.Second), LastErrorAt: at,
		Error: "failed: " + s.code, ErrorCode: s.code, ErrorClass: class, Reason: string(s.reason), Redrives: s.redrives}
	src := &kgo.Record{Key: s.key, Value: []byte(s.value)}
	r := dlq.Build(src, m, s.headers, dlq.BuildOptions{Topic: topic, Group: "redrive." + origin, Instance: "test", MaxRecordBytes: s.maxBytes})
	r.Timestamp = at
	return r
}

func rh(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

var binKey = []byte{0x00, 0x01, 0xff}

// replayFixture is a pipeline whose DLQ holds a known mix of dead letters.
type replayFixture struct {
	c     *kafkatest.Cluster
	topic string // main topic = pipeline name
	dlq   string
	cfg   string
	specs []deadSpec
}

func newReplayFixture(t *testing.T) *replayFixture {
	t.Helper()
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "replay")
	f := &replayFixture{c: c, topic: topic, dlq: topic + ".dlq", cfg: writeConfig(t, c.Brokers, topic, "", "")}
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", f.cfg); code != 0 {
		t.Fatalf("topics ensure: %s", out)
	}
	f.specs = []deadSpec{
		{key: []byte("k1"), value: "v1", code: "ERROR_WRONG_USER_KEY", reason: dlq.ReasonPermanent, attempt: 1, ago: 30 * time.Minute,
			headers: []kgo.RecordHeader{rh("trace", "a"), rh("trace", "b"), rh("tenant", "acme")}},
		{key: []byte("k2"), value: "v2", code: "ERROR_WRONG_USER_KEY", reason: dlq.ReasonPermanent, attempt: 1, ago: 3 * time.Hour,
			headers: []kgo.RecordHeader{rh("tenant", "globex")}},
		{key: []byte("k3"), value: `{"site":"x"}`, code: "http_503", reason: dlq.ReasonExhausted, attempt: 3, redrives: 1, ago: 10 * time.Minute,
			headers: []kgo.RecordHeader{rh("tenant", "acme"), {Key: "bin", Value: []byte{0xff, 0xfe}}}},
		{key: binKey, value: "v4", code: "http_503", reason: dlq.ReasonExhausted, attempt: 3, ago: 2 * time.Hour},
		{key: []byte("k5"), value: "v5", code: "timeout", reason: dlq.ReasonExpired, attempt: 2, ago: 5 * time.Minute},
		// Cut to fit: matches, never republished.
		{key: []byte("k7"), value: strings.Repeat("x", 5000), code: "ERROR_WRONG_USER_KEY", reason: dlq.ReasonPermanent, attempt: 1,
			ago: time.Minute, maxBytes: 2000},
	}
	now := time.Now()
	var rs []*kgo.Record
	for i, s := range f.specs {
		rs = append(rs, s.record(f.dlq, topic, now, i))
	}
	// Not a dead letter: skipped and counted by every command.
	rs = append(rs, &kgo.Record{Topic: f.dlq, Key: []byte("stray"), Value: []byte("no redrive headers")})
	if err := c.Client(t).ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return f
}

// keysIn are the keys of the JSON lines in out, sorted.
func keysIn(t *testing.T, out string) []string {
	t.Helper()
	var keys []string
	for _, v := range views(t, out) {
		k, err := dlq.DecodeBytes(v.Key, v.KeyEncoding)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, keyCell(k))
	}
	slices.Sort(keys)
	return keys
}

func views(t *testing.T, out string) []dlq.View {
	t.Helper()
	var vs []dlq.View
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v dlq.View
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		vs = append(vs, v)
	}
	return vs
}

// tableKeys are the KEY column of replay's table, sorted.
func tableKeys(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "PARTITION") {
		t.Fatalf("no table header in %q", out)
	}
	var keys []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		keys = append(keys, f[len(f)-1])
	}
	slices.Sort(keys)
	return keys
}

func endOffsets(t *testing.T, c *kafkatest.Cluster, topic string) int64 {
	t.Helper()
	ends, err := c.Admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func TestDLQStats(t *testing.T) {
	f := newReplayFixture(t)
	ctx := context.Background()
	code, out, errs := runSplit(ctx, "dlq", "stats", "-c", f.cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	for _, want := range []string{
		`(?m)^6 dead letters, oldest \S+, newest \S+$`,
		`(?m)^ERROR_WRONG_USER_KEY\s+3\s+50\.0%$`, `(?m)^http_503\s+2\s+33\.3%$`, `(?m)^timeout\s+1\s+16\.7%$`,
		`(?m)^permanent\s+3\s+50\.0%$`, `(?m)^exhausted\s+2\s+33\.3%$`, `(?m)^expired\s+1\s+16\.7%$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("stats table lacks %s:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "7 records scanned, 6 matched; 1 skipped: not redrive dead letters") || !strings.Contains(errs, "skipped "+f.dlq+"/") {
		t.Errorf("stderr: %s", errs)
	}
	t.Logf("dlq stats:\n%s%s", out, errs)

	code, out, _ = runSplit(ctx, "dlq", "stats", "-c", f.cfg, "--reason", "exhausted", "--json")
	var snap dlq.StatsSnapshot
	if err := json.Unmarshal([]byte(out), &snap); code != 0 || err != nil {
		t.Fatalf("stats --json: exit %d, %v: %s", code, err, out)
	}
	if snap.Total != 2 || snap.ByCode["http_503"] != 2 || len(snap.ByReason) != 1 {
		t.Errorf("--reason exhausted: %+v", snap)
	}
}

func TestDLQExport(t *testing.T) {
	f := newReplayFixture(t)
	ctx := context.Background()
	t.Run("jsonl exports every dead letter with headers and binary keys and truncation", func(t *testing.T) {
		code, out, errs := runSplit(ctx, "dlq", "export", "-c", f.cfg, "--format", "jsonl")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		vs := views(t, out)
		if len(vs) != 6 {
			t.Fatalf("%d lines, want 6:\n%s", len(vs), out)
		}
		byKey := map[string]dlq.View{}
		for _, v := range vs {
			byKey[*v.Key] = v
		}
		k1 := byKey["k1"]
		want := []dlq.ViewHeader{{Key: "trace", Value: "a", Encoding: "text"}, {Key: "trace", Value: "b", Encoding: "text"}, {Key: "tenant", Value: "acme", Encoding: "text"}}
		if !slices.Equal(k1.Headers, want) || k1.Code != "ERROR_WRONG_USER_KEY" || k1.Reason != "permanent" || *k1.Value != "v1" ||
			k1.Origin == nil || k1.Origin.Topic != f.topic || k1.Topic != f.dlq || k1.Timestamp.IsZero() {
			t.Errorf("k1 exported as %+v", k1)
		}
		if k3 := byKey["k3"]; len(k3.Headers) != 2 || k3.Headers[1] != (dlq.ViewHeader{Key: "bin", Value: "//4=", Encoding: "base64"}) || k3.Redrives != 1 {
			t.Errorf("k3 headers %+v", k3.Headers)
		}
		bin, ok := byKey["AAH/"]
		if !ok || bin.KeyEncoding != "base64" {
			t.Fatalf("binary key not exported as base64: %v", byKey)
		}
		if k, _ := dlq.DecodeBytes(bin.Key, bin.KeyEncoding); !bytes.Equal(k, binKey) {
			t.Errorf("binary key reads back as %x", k)
		}
		if k7 := byKey["k7"]; k7.Truncated != 5000 {
			t.Errorf("k7 truncated = %d, want 5000", k7.Truncated)
		}
		if !strings.Contains(errs, "exported 6 dead letters") || !strings.Contains(errs, "1 skipped") {
			t.Errorf("stderr: %s", errs)
		}
	})

	t.Run("csv to a file with a code filter leaves no temporary file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "dead.csv")
		code, _, errs := runSplit(ctx, "dlq", "export", "-c", f.cfg, "--format", "csv", "-o", path, "--code", "http_5*")
		if code != 0 {
			t.Fatalf("csv: exit %d: %s", code, errs)
		}
		file, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		rows, err := csv.NewReader(file).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 3 || !slices.Equal(rows[0], dlq.CSVHeader()) {
			t.Fatalf("csv: %d rows (want header + 2), header %v", len(rows), rows[0])
		}
		col := slices.Index(rows[0], "code")
		for _, r := range rows[1:] {
			if r[col] != "http_503" {
				t.Errorf("csv row with code %q", r[col])
			}
		}
		if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
			t.Errorf("temporary files left beside the export: %v", entries)
		}
	})

	t.Run("limit stops after n dead letters", func(t *testing.T) {
		code, out, _ := runSplit(ctx, "dlq", "export", "-c", f.cfg, "--limit", "2")
		if code != 0 || len(views(t, out)) != 2 {
			t.Errorf("--limit 2: exit %d, %d lines", code, len(views(t, out)))
		}
	})
}

func TestReplayDryRunWritesNothing(t *testing.T) {
	f := newReplayFixture(t)
	ctx := context.Background()
	code, out, errs := runSplit(ctx, "replay", "-c", f.cfg, "--dry-run", "--code", "ERROR_WRONG_USER_KEY")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := tableKeys(t, out); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Errorf("listed %v, want k1 k2 (k7 is truncated):\n%s", got, out)
	}
	if !strings.Contains(errs, "dry run: would republish 2 of 3 matching to "+f.topic+" (7 scanned; 1 truncated, not republished; 1 skipped") ||
		!strings.Contains(errs, "nothing written") || !strings.Contains(errs, "not republishing "+f.dlq) {
		t.Errorf("stderr: %s", errs)
	}
	t.Logf("replay --dry-run:\n%s%s", out, errs)
	time.Sleep(500 * time.Millisecond)
	if n := endOffsets(t, f.c, f.topic); n != 0 {
		t.Errorf("dry run wrote %d records to the main topic", n)
	}
}

func TestReplayFilters(t *testing.T) {
	f := newReplayFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--since", "1h"}, []string{"k1", "k3", "k5"}}, // k7 matches but is truncated
		{[]string{"--until", "1h"}, []string{"base64:AAH/", "k2"}},
		{[]string{"--since", "4h", "--until", "90m"}, []string{"base64:AAH/", "k2"}},
		{[]string{"--since", time.Now().Add(-15 * time.Minute).UTC().Format(time.RFC3339)}, []string{"k3", "k5"}},
		{[]string{"--reason", "expired"}, []string{"k5"}},
		{[]string{"--reason", "expired", "--reason", "exhausted"}, []string{"base64:AAH/", "k3", "k5"}},
		{[]string{"--code", "http_5*", "--code", "timeout"}, []string{"base64:AAH/", "k3", "k5"}},
		{[]string{"--key", "base64:AAH/"}, []string{"base64:AAH/"}},
		{[]string{"--key", "k2"}, []string{"k2"}},
		{[]string{"--header", "tenant=acme"}, []string{"k1", "k3"}},
		{[]string{"--header", "tenant=acme", "--header", "trace=b"}, []string{"k1"}},
		{[]string{"--header", "redrive-redrives=1"}, []string{"k3"}},
		{[]string{"--class", "expired"}, []string{"k5"}},
		{[]string{"--code", "nothing-like-it"}, nil},
	} {
		args := append([]string{"replay", "-c", f.cfg, "--dry-run", "--json"}, tc.args...)
		code, out, errs := runSplit(ctx, args...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", tc.args, code, errs)
			continue
		}
		if got := keysIn(t, out); !slices.Equal(got, tc.want) {
			t.Errorf("%v: selected %v, want %v", tc.args, got, tc.want)
		}
	}
	code, out, errs := runSplit(ctx, "replay", "-c", f.cfg, "--dry-run", "--json", "--limit", "1", "--code", "ERROR_WRONG_USER_KEY")
	// The DLQ's partitions are read as the broker returns them, so the
	// truncated k7 (which does not count against the limit) may or may
	// not have been scanned when the limit stopped the scan; the counts
	// must agree with each other either way.
	want := "would republish 1 of 1 matching"
	if strings.Contains(errs, "1 truncated") {
		want = "would republish 1 of 2 matching"
	}
	if vs := views(t, out); code != 0 || len(vs) != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "stopped at --limit 1") {
		t.Errorf("--limit 1: exit %d, %d lines, want %q: %s", code, len(vs), want, errs)
	}
}

func TestReplayRepublishes(t *testing.T) {
	f := newReplayFixture(t)
	ctx := context.Background()
	to := f.topic + ".failover"
	f.c.CreateTopic(t, to, 2, nil)
	code, out, errs := runSplit(ctx, "replay", "-c", f.cfg, "--code", "http_503", "--to", to, "--rate", "50/s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := tableKeys(t, out); !slices.Equal(got, []string{"base64:AAH/", "k3"}) {
		t.Errorf("listed %v", got)
	}
	if !strings.Contains(errs, "republished 2 of 2 matching to "+to+" (7 scanned") {
		t.Errorf("stderr: %s", errs)
	}
	got := f.c.Collect(t, to, 2, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	if len(got) != 2 || endOffsets(t, f.c, to) != 2 {
		t.Fatalf("%d records in %s, want 2", len(got), to)
	}
	for _, r := range got {
		m, user, err := retry.Decode(r.Headers)
		if err != nil {
			t.Fatal(err)
		}
		var spec deadSpec
		var n int
		for i, s := range f.specs {
			if bytes.Equal(s.key, r.Key) {
				spec, n = s, i
			}
		}
		if string(r.Value) != spec.value || m.ID != fmt.Sprintf("req-%d", n) || m.Redrives != spec.redrives+1 || m.Attempt != 0 ||
			m.Reason != "" || m.ErrorCode != "" || m.Error != "" || m.OriginTopic != f.topic || m.OriginOffset != int64(100+n) {
			t.Errorf("republished %q: value %q, meta %+v", r.Key, r.Value, m)
		}
		if a := hdr(r, retry.HeaderAttempt); a != "" && a != "0" { // reset: the full schedule again
			t.Errorf("%q carries %s=%s", r.Key, retry.HeaderAttempt, hdr(r, retry.HeaderAttempt))
		}
		if !slices.EqualFunc(user, spec.headers, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
			t.Errorf("%q user headers %v, want %v", r.Key, user, spec.headers)
		}
	}
	if n := endOffsets(t, f.c, f.topic); n != 0 {
		t.Errorf("--to %s, yet %d records went to the main topic", to, n)
	}

	// Without --to: the main topic.
	code, _, errs = runSplit(ctx, "replay", "-c", f.cfg, "--key", "k5")
	if code != 0 || !strings.Contains(errs, "republished 1 of 1 matching to "+f.topic) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if main := f.c.Collect(t, f.topic, 1, 30*time.Second); len(main) != 1 || string(main[0].Key) != "k5" || hdr(main[0], retry.HeaderRedrives) != "1" {
		t.Errorf("main topic after --key k5: %v", main)
	}
}

func TestReplayWriteFailureAndInterrupt(t *testing.T) {
	f := newReplayFixture(t)
	ctx := context.Background()
	// A topic that takes no record this large: every write fails.
	small := f.topic + ".small"
	mb := "200"
	f.c.CreateTopic(t, small, 1, map[string]*string{"max.message.bytes": &mb})
	code, _, errs := runSplit(ctx, "replay", "-c", f.cfg, "--key", "k3", "--to", small)
	if code != 1 || !strings.Contains(errs, "republished 0 of 1 matching") || !strings.Contains(errs, "1 writes failed") {
		t.Errorf("write failure: exit %d, want 1 saying 0 written:\n%s", code, errs)
	}

	// Interrupted part way: it says how many it wrote, and that many are there.
	var rs []*kgo.Record
	now := time.Now()
	for i := range 40 {
		rs = append(rs, deadSpec{key: fmt.Appendf(nil, "bulk-%d", i), value: "v", code: "bulk", reason: dlq.ReasonExhausted, attempt: 3}.record(f.dlq, f.topic, now, 10+i))
	}
	if err := f.c.Client(t).ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	to := f.topic + ".slow"
	f.c.CreateTopic(t, to, 1, nil)
	ictx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	code, _, errs = runSplit(ictx, "replay", "-c", f.cfg, "--code", "bulk", "--to", to, "--rate", "10/s")
	m := regexp.MustCompile(`interrupted: republished (\d+) of (\d+) matching`).FindStringSubmatch(errs)
	if code != 1 || m == nil {
		t.Fatalf("interrupted: exit %d, want 1 with the count:\n%s", code, errs)
	}
	var n int
	fmt.Sscan(m[1], &n)
	if n == 0 || n >= 40 {
		t.Errorf("interrupted after %d of 40 at 10/s in 1.5s", n)
	}
	if !strings.Contains(errs, "replay: ") {
		t.Errorf("no progress line in 1.5s:\n%s", errs)
	}
	time.Sleep(500 * time.Millisecond)
	if got := endOffsets(t, f.c, to); got != int64(n) {
		t.Errorf("said %d republished, %s holds %d", n, to, got)
	}
}

func TestReplayAndDLQBadFlagsExit2(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "badflags")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--since", "yesterday"}, `--since: bad dead-letter filter: time "yesterday"`},
		{[]string{"replay", "--until", "2024-05-01T10:00:00"}, "has no zone"},
		{[]string{"replay", "--since", "1h", "--until", "2h"}, "is not before until"},
		{[]string{"replay", "--header", "tenant"}, `--header: bad dead-letter filter: header "tenant": want name=value`},
		{[]string{"replay", "--reason", "tired"}, `unknown dead-letter reason "tired"`},
		{[]string{"replay", "--key", "base64:!!"}, "bad base64"},
		{[]string{"replay", "--pipeline", "nope"}, `--pipeline "nope" is not in the config (pipelines: ` + topic + `)`},
		{[]string{"replay", "--rate", "fast"}, `--rate "fast"`},
		{[]string{"replay", "--limit", "-1"}, "--limit -1"},
		{[]string{"replay", "--to", topic + ".dlq"}, "is the DLQ replay reads"},
		{[]string{"replay", "--frobnicate"}, "unknown flag"},
		{[]string{"replay"}, "no filter flag: this would republish every dead letter; pass --all"},
		{[]string{"replay", "--to", topic}, "pass --all"},
		{[]string{"replay", "--all", "--code", "http_503"}, "--all and a filter flag"},
		{[]string{"dlq", "stats", "--class", "sad"}, `unknown error class "sad"`},
		{[]string{"dlq", "export", "--format", "xml"}, `--format "xml": want jsonl or csv`},
		{[]string{"dlq", "tail", "--since", "-2h"}, "without a sign"},
	} {
		code, out := runOut(ctx, append(tc.args, "-c", cfg)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	// No DLQ topic yet: exit 1, and the fix.
	code, out := runOut(ctx, "dlq", "stats", "-c", cfg)
	if code != 1 || !strings.Contains(out, "DLQ "+topic+".dlq does not exist") || !strings.Contains(out, "topics ensure") {
		t.Errorf("missing DLQ: exit %d:\n%s", code, out)
	}
	code, out = runOut(ctx, "replay", "-c", cfg, "--all", "--to", "no.such.topic."+topic)
	if code != 1 || !strings.Contains(out, "does not exist") {
		t.Errorf("missing --to topic: exit %d:\n%s", code, out)
	}
}

func TestDLQTailFollows(t *testing.T) {
	f := newReplayFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuf
	done := make(chan int, 1)
	go func() {
		done <- runCtx(ctx, []string{"dlq", "tail", "-c", f.cfg, "--code", "ERROR_WRONG_USER_KEY"}, &out, &errb)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errb.String(), "following "+f.dlq) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(errb.String(), "following") {
		t.Fatalf("tail did not start: %s", errb.String())
	}
	now := time.Now()
	late := []*kgo.Record{
		deadSpec{key: []byte("late-other"), value: "x", code: "http_503", reason: dlq.ReasonExhausted, attempt: 3}.record(f.dlq, f.topic, now, 50),
		deadSpec{key: []byte("late-1"), value: "x", code: "ERROR_WRONG_USER_KEY", reason: dlq.ReasonPermanent, attempt: 1}.record(f.dlq, f.topic, now, 51),
	}
	if err := f.c.Client(t).ProduceSync(ctx, late...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "late-1") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("tail exit %d after cancel, want 0: %s", code, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("tail did not stop after cancel")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "TIME") || !regexp.MustCompile(`permanent\s+ERROR_WRONG_USER_KEY\s+1\s+late-1\s+failed: ERROR_WRONG_USER_KEY$`).MatchString(lines[1]) {
		t.Errorf("tail printed (want the header and late-1 only):\n%s", out.String())
	}
	t.Logf("dlq tail:\n%s%s", out.String(), errb.String())
}
