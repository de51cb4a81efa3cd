package analyzer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// startWith runs an analyzer of e's pipeline with rules and limits.
func (e *env) startWith(rules []dlq.Rule, l analyzer.Limits, token string) string {
	e.t.Helper()
	base, _ := e.serve(analyzer.Options{Pipelines: e.pipelines(rules), Limits: l}, token)
	return base
}

// bigDeadLetter produces a dead letter of id with value to e's DLQ
// partition 1 (the client must partition manually; uncompressed, so that
// the batch is as large as the value).
func (e *env) bigDeadLetter(cl *kgo.Client, id string, value []byte) *kgo.Record {
	e.t.Helper()
	now := time.Now()
	src := &kgo.Record{Topic: e.main, Partition: 0, Offset: 1, Key: []byte("key-" + id), Value: value}
	m := retry.Meta{ID: id, Attempt: 3, HasOrigin: true, OriginTopic: e.main, OriginOffset: 1, OriginTimestamp: now,
		ErrorClass: retry.ClassTransient, ErrorCode: "http_503", Error: "failed", Reason: "exhausted"}
	r := dlq.Build(src, m, []kgo.RecordHeader{{Key: "trace", Value: []byte("t-" + id)}}, dlq.BuildOptions{Topic: e.dlqName, Group: "redrive.x", Instance: "i"})
	r.Partition = 1
	res := cl.ProduceSync(context.Background(), r)
	if err := res.FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	return res[0].Record
}

// bigValue is n bytes of text that differ along their length.
func bigValue(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%08d,", i)
	}
	return b.Bytes()[:n]
}

// TestDeadLetterByOffsetHasTheWholeValue: the listing shows 1 KiB of a
// 300 KB value, marked cut; GET /api/deadletters/{partition}/{offset}
// reads the whole value from the DLQ; wrong positions are 404, bad ones
// 400; a batch larger than response_bytes is 413.
func TestDeadLetterByOffsetHasTheWholeValue(t *testing.T) {
	e := newEnv(t)
	cl := e.c.Client(t, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	value := bigValue(300_000)
	rec := e.bigDeadLetter(cl, "big", value)
	small := e.bigDeadLetter(cl, "small", []byte("tiny"))
	base := e.startWith(nil, analyzer.Limits{}, "")
	waitStats(t, base, 2)

	var list analyzer.DeadLettersResponse
	getJSON(t, base+"/api/deadletters?key=key-big", &list)
	if len(list.DeadLetters) != 1 {
		t.Fatalf("key=key-big: %d dead letters", len(list.DeadLetters))
	}
	v := list.DeadLetters[0]
	if v.Value == nil || *v.Value != string(value[:analyzer.DefaultRecentValueBytes]) || !v.ValueCut || v.ValueSize != len(value) {
		t.Errorf("listed: %d bytes of value, value_cut %v, value_size %d; want the first %d, cut, %d", len(deref(v.Value)), v.ValueCut, v.ValueSize, analyzer.DefaultRecentValueBytes, len(value))
	}

	var one analyzer.DeadLetterResponse
	url := fmt.Sprintf("%s/api/deadletters/%d/%d?pipeline=%s", base, rec.Partition, rec.Offset, e.main)
	if code := getJSON(t, url, &one); code != 200 {
		t.Fatalf("%s: %d", url, code)
	}
	d := one.DeadLetter
	if d.Value == nil || *d.Value != string(value) || d.ValueCut || d.ValueSize != len(value) || d.ID != "big" || d.Offset != rec.Offset || one.Pipeline != e.main {
		t.Errorf("by offset: id %q offset %d, %d bytes of value (want %d), value_cut %v, value_size %d", d.ID, d.Offset, len(deref(d.Value)), len(value), d.ValueCut, d.ValueSize)
	}
	if len(d.Headers) != 1 || d.Headers[0].Value != "t-big" {
		t.Errorf("by offset: headers %+v", d.Headers)
	}
	one = analyzer.DeadLetterResponse{}
	getJSON(t, fmt.Sprintf("%s/api/deadletters/%d/%d", base, small.Partition, small.Offset), &one)
	if deref(one.DeadLetter.Value) != "tiny" || one.DeadLetter.ID != "small" {
		t.Errorf("the next offset: %+v", one.DeadLetter)
	}

	for path, want := range map[string]int{
		fmt.Sprintf("/api/deadletters/%d/%d", rec.Partition, small.Offset+1): 404, // past the end
		fmt.Sprintf("/api/deadletters/0/%d", 0):                              404, // an empty partition
		"/api/deadletters/7/0":                                               404, // no such partition
		"/api/deadletters/x/0":                                               400,
		"/api/deadletters/0/-1":                                              400,
		"/api/deadletters/0/0?limit=3":                                       400,
		"/api/deadletters/0/0?pipeline=nope":                                 400,
		"/api/deadletters/0/0?pipeline=%zz":                                  400, // a query that does not parse
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s: %d %s, want %d with an error", path, resp.StatusCode, b, want)
		}
	}

	// A batch larger than response_bytes is refused, not read.
	e2 := &env{t: t, c: e.c, cl: e.cl, main: e.main, dlqName: e.dlqName}
	base2 := e2.startWith(nil, analyzer.Limits{ResponseBytes: 64 << 10}, "")
	waitStats(t, base2, 2)
	resp, err := http.Get(fmt.Sprintf("%s/api/deadletters/%d/%d", base2, rec.Partition, rec.Offset))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "analyzer.response_bytes") {
		t.Errorf("a 300 KB batch under a 64 KiB bound: %d %s, want 413", resp.StatusCode, b)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestReplayAndRulesRepublishWholeValues: the recent list keeps 1 KiB of
// a 300 KB value, but POST /api/replay and a rule read the DLQ itself:
// what they republish has the whole value.
func TestReplayAndRulesRepublishWholeValues(t *testing.T) {
	e := newEnv(t)
	cl := e.c.Client(t, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	value := bigValue(300_000)
	e.bigDeadLetter(cl, "big", value)
	rules := []dlq.Rule{{Name: "failover", Action: dlq.ActionRepublish, To: e.other}}
	base := e.startWith(rules, analyzer.Limits{}, "secret")
	waitStats(t, base, 1)

	req, _ := http.NewRequest("POST", base+"/api/replay", strings.NewReader(`{"codes":["http_503"]}`))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("replay: %d %s", resp.StatusCode, b)
	}
	// The answer shows what was republished as a listing does: the value
	// cut to its prefix, so that an answer stays small whatever the values.
	var rr analyzer.ReplayResponse
	if err := json.Unmarshal(b, &rr); err != nil {
		t.Fatal(err)
	}
	if rr.Republished != 1 || len(rr.DeadLetters) != 1 {
		t.Fatalf("replay answer: republished %d, %d shown, want 1 and 1", rr.Republished, len(rr.DeadLetters))
	}
	if d := rr.DeadLetters[0]; !d.ValueCut || d.ValueSize != len(value) {
		t.Errorf("replay answer: value_cut %v, value_size %d; want true, %d", d.ValueCut, d.ValueSize, len(value))
	}
	if len(b) > 64<<10 {
		t.Errorf("replay answer is %d bytes for one dead letter; its value should be cut to the recent prefix", len(b))
	}
	for _, topic := range []string{e.main, e.other} { // replay, the rule
		got := collect(t, e.c, topic, 1, 20*time.Second)
		if len(got) != 1 {
			t.Fatalf("%d records on %s, want 1", len(got), topic)
		}
		if !bytes.Equal(got[0].Value, value) {
			t.Errorf("%s: republished a %d-byte value, want the whole %d bytes", topic, len(got[0].Value), len(value))
		}
	}
}
