package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
)

func tailCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func strp(s string) *string { return &s }

// tailLines parses tail --json output, one tailRecord a line.
func tailLines(t *testing.T, out string) []tailRecord {
	t.Helper()
	var rs []tailRecord
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var r tailRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not a JSON record: %v: %s", err, l)
		}
		rs = append(rs, r)
	}
	return rs
}

// tail --from-start --json prints every record once, with its partition,
// offset, time, key, value and headers (binary ones as base64), and ends
// at the ends listed at start; without --from-start it reads nothing and
// ends; --max stops early.
func TestTailPrintsRecordsAsJSON(t *testing.T) {
	c := kafkatest.New(t)
	ctx := tailCtx(t)
	topic := kafkatest.Topic(t, "tail")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	results := topic + ".results"
	c.CreateTopic(t, results, 2, nil)
	at := time.Date(2024, 5, 1, 10, 0, 0, 123e6, time.UTC)
	rs := []*kgo.Record{
		{Partition: 0, Key: []byte("order-1"), Value: []byte(`{"answer":42}`),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0xff, 0x00}}}},
		{Partition: 1, Key: []byte{0xff, 0xfe}, Value: []byte{0x00, 0x01}},
		{Partition: 0, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte("2")}}}, // null key and value
		{Partition: 1, Key: []byte("k"), Value: []byte{}},
	}
	for _, r := range rs {
		r.Topic, r.Timestamp = results, at
	}
	if err := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ts := dlq.ViewTime{Time: at}
	want := []tailRecord{
		{Key: strp("order-1"), KeyEncoding: "text", Value: strp(`{"answer":42}`), ValueEncoding: "text", ValueSize: 13,
			Headers: []dlq.ViewHeader{{Key: "trace", Value: "abc", Encoding: "text"}, {Key: "bin", Value: "/wA=", Encoding: "base64"}}},
		{Key: strp("//4="), KeyEncoding: "base64", Value: strp("AAE="), ValueEncoding: "base64", ValueSize: 2, Headers: []dlq.ViewHeader{}},
		{KeyEncoding: "text", ValueEncoding: "text",
			Headers: []dlq.ViewHeader{{Key: "h", Value: "1", Encoding: "text"}, {Key: "h", Value: "2", Encoding: "text"}}},
		{Key: strp("k"), KeyEncoding: "text", Value: strp(""), ValueEncoding: "text", Headers: []dlq.ViewHeader{}},
	}
	for i, r := range rs {
		want[i].Topic, want[i].Partition, want[i].Offset, want[i].Timestamp = results, r.Partition, r.Offset, ts
	}

	code, out, errs := runSplit(ctx, "tail", "-c", cfg, "--from-start", "--json", results)
	if code != 0 || !strings.Contains(errs, "done: 4 records shown") {
		t.Fatalf("exit %d, want 0 after 4 records: %s", code, errs)
	}
	got := tailLines(t, out)
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(got), len(want), out)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.Partition == w.Partition && g.Offset == w.Offset {
				found = true
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%d/%d:\n got %+v\nwant %+v", w.Partition, w.Offset, g, w)
				}
			}
		}
		if !found {
			t.Errorf("%d/%d not printed:\n%s", w.Partition, w.Offset, out)
		}
	}

	code, out, errs = runSplit(ctx, "tail", "-c", cfg, "--json", results)
	if code != 0 || out != "" || !strings.Contains(errs, "nothing to read") {
		t.Errorf("without --from-start: exit %d, want 0 and nothing printed: %q %s", code, out, errs)
	}
	code, out, errs = runSplit(ctx, "tail", "-c", cfg, "--from-start", "--json", "-n", "2", results)
	if n := len(tailLines(t, out)); code != 0 || n != 2 || !strings.Contains(errs, "stopped at --max 2") {
		t.Errorf("-n 2: exit %d, %d records, want 0 and 2: %s", code, n, errs)
	}
}

// tail --follow prints records written after it started (and with
// --from-start the retained ones first) until interrupted, then exits 0.
func TestTailFollowPrintsNewRecords(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "tailf")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	c.CreateTopic(t, topic, 3, nil)
	cl := c.Client(t)
	produce := func(v string) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("old")
	for _, tc := range []struct {
		args    []string
		newer   string
		showOld bool
	}{
		{[]string{"--follow"}, "new-1", false},
		{[]string{"--follow", "--from-start"}, "new-2", true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(tailCtx(t))
			defer cancel()
			var out, errb syncBuf
			done := make(chan int, 1)
			go func() {
				done <- runCtx(ctx, append([]string{"tail", "-c", cfg, "--json", topic}, tc.args...), &out, &errb)
			}()
			if !kafkatest.Eventually(30*time.Second, func() bool { return strings.Contains(errb.String(), "following") }) {
				t.Fatalf("tail did not start: %s", errb.String())
			}
			produce(tc.newer)
			printed := func() bool {
				s := out.String()
				return strings.Contains(s, tc.newer) && (!tc.showOld || strings.Contains(s, `"old"`))
			}
			if !kafkatest.Eventually(30*time.Second, printed) {
				t.Fatalf("%s not printed within 30s:\n%s\n%s", tc.newer, out.String(), errb.String())
			}
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("interrupted: exit %d, want 0: %s", code, errb.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("tail --follow did not stop within 30s of the interrupt")
			}
			if strings.Contains(out.String(), `"old"`) != tc.showOld {
				t.Errorf("the record written before start printed: %v, want %v:\n%s", !tc.showOld, tc.showOld, out.String())
			}
		})
	}
}

// With analyzer.hide_values every topic of the pipeline, named by its
// short name or in full, shows each value as its size and SHA-256 only,
// in JSON and in lines; keys and headers are shown.
func TestTailHidesValues(t *testing.T) {
	c := kafkatest.New(t)
	ctx := tailCtx(t)
	topic := kafkatest.Topic(t, "tailhide")
	cfg := writeConfig(t, c.Brokers, topic, "", "analyzer: {hide_values: true}\n")
	if code, out := runOut(ctx, "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: %s", out)
	}
	secret := []byte(`{"iban":"TR330006100519786457841326"}`)
	names := map[string]string{"main": topic, "retry.1s": topic + ".retry.1s", "dlq": topic + ".dlq", "results": topic + ".results"}
	cl := c.Client(t)
	for name, tp := range names {
		rs := []*kgo.Record{
			{Topic: tp, Key: []byte("key-" + name), Value: secret, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("hv")}}},
			{Topic: tp, Key: []byte("null-" + name)}, // a null value has no hash
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	leak := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, "TR3300061005") || strings.Contains(out, "iban") {
			t.Errorf("a hidden value shows:\n%s", out)
		}
	}
	hash := analyzer.ValueHash(secret)
	for name, tp := range names {
		for _, target := range [][]string{{"--pipeline", topic, name}, {tp}} {
			t.Run(strings.Join(target, " "), func(t *testing.T) {
				code, out, errs := runSplit(ctx, append([]string{"tail", "-c", cfg, "--from-start", "--json"}, target...)...)
				if code != 0 || !strings.Contains(errs, "values hidden") {
					t.Fatalf("exit %d: %s", code, errs)
				}
				leak(t, out)
				got := tailLines(t, out)
				if len(got) != 2 {
					t.Fatalf("%d records, want 2:\n%s", len(got), out)
				}
				for _, r := range got {
					if r.Topic != tp || r.Value != nil {
						t.Errorf("%s: topic %s value %v, want %s and null", out, r.Topic, r.Value, tp)
					}
					switch *r.Key {
					case "key-" + name:
						if r.ValueEncoding != analyzer.EncodingHidden || r.ValueSHA256 != hash || r.ValueSize != len(secret) ||
							len(r.Headers) != 1 || r.Headers[0].Value != "hv" {
							t.Errorf("%+v, want hidden %s, %d bytes, header h=hv", r, hash, len(secret))
						}
					case "null-" + name:
						if r.ValueSHA256 != "" || r.ValueSize != 0 {
							t.Errorf("a null value: %+v, want no hash and size 0", r)
						}
					default:
						t.Errorf("key %q, not one written to %s", *r.Key, tp)
					}
				}

				code, out, errs = runSplit(ctx, append([]string{"tail", "-c", cfg, "--from-start"}, target...)...)
				if code != 0 {
					t.Fatalf("lines: exit %d: %s", code, errs)
				}
				leak(t, out)
				if want := fmt.Sprintf("hidden: %d bytes, %s", len(secret), hash); !strings.Contains(out, want) || !strings.Contains(out, "key-"+name) || !strings.Contains(out, "[h=hv]") {
					t.Errorf("lines do not show the key, the header and %q:\n%s", want, out)
				}
			})
		}
	}
}

// A missing TOPIC or bad flags are usage errors (exit 2); a topic that
// does not exist exits 1 at once, naming it.
func TestTailErrors(t *testing.T) {
	c := kafkatest.New(t)
	ctx := tailCtx(t)
	topic := kafkatest.Topic(t, "tailerr")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tail", "-c", cfg}, "one TOPIC"},
		{[]string{"tail", "-c", cfg, "a", "b"}, "one TOPIC"},
		{[]string{"tail", topic}, "no config"},
		{[]string{"tail", "-c", cfg, "--max", "-1", topic}, "--max"},
		{[]string{"tail", "-c", cfg, "--pipeline", "nosuch", "main"}, "nosuch"},
		{[]string{"tail", "-c", cfg, "--pipeline", topic, "retry.9s"}, "retry.1s, retry.2s"},
	} {
		if code, out := runOut(ctx, tc.args...); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 mentioning %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	missing := topic + ".nosuch"
	start := time.Now()
	code, out := runOut(ctx, "tail", "-c", cfg, "--follow", missing)
	if code != 1 || !strings.Contains(out, missing+" does not exist") {
		t.Errorf("unknown topic: exit %d, want 1 naming %s:\n%s", code, missing, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("unknown topic took %v to fail", d)
	}
}
