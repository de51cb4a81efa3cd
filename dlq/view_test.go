package dlq

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/retry"
)

func viewSample(t *testing.T) *DeadLetter {
	t.Helper()
	src, m, user := sample()
	src.Key = []byte{0x00, 0xff, 0x10}
	user = append(user, kgo.RecordHeader{Key: "bin", Value: []byte{0xff, 0xfe}}, kgo.RecordHeader{Key: "empty", Value: []byte{}})
	r := Build(src, m, user, BuildOptions{Topic: "solve.dlq", RedactHeaders: []string{"authorization"}, Group: "redrive.solve", Instance: "pod-1"})
	r.Partition, r.Offset, r.Timestamp = 3, 42, time.UnixMilli(1_700_000_123_456)
	d, err := Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestNewViewJSON(t *testing.T) {
	d := viewSample(t)
	b, err := json.Marshal(NewView(d))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"topic": "solve.dlq", "partition": 3.0, "offset": 42.0, "timestamp": "2023-11-14T22:15:23.456Z",
		"key": "AP8Q", "key_encoding": "base64", "value": `{"site":"x"}`, "value_encoding": "text",
		"headers": []any{
			map[string]any{"key": "Authorization", "value": Redacted, "encoding": "text"},
			map[string]any{"key": "trace", "value": "a", "encoding": "text"},
			map[string]any{"key": "trace", "value": "b", "encoding": "text"},
			map[string]any{"key": "bin", "value": "//4=", "encoding": "base64"},
			map[string]any{"key": "empty", "value": "", "encoding": "text"},
		},
		"id": "solve/1/10", "reason": "exhausted", "error": "503 Service Unavailable", "code": "http_503", "class": "transient",
		"attempt": 4.0, "polls": 1.0,
		"origin":         map[string]any{"topic": "solve", "partition": 1.0, "offset": 10.0, "timestamp": "2023-11-14T22:12:20.000Z"},
		"first_error_at": "2023-11-14T22:12:30.000Z", "last_error_at": "2023-11-14T22:13:20.000Z",
		"redrives": 1.0, "group": "redrive.solve", "instance": "pod-1", "truncated": 0.0, "deliveries": 0.0,
	}
	if !reflect.DeepEqual(got, want) {
		for k := range want {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("%s = %#v, want %#v", k, got[k], want[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected field %s = %#v", k, got[k])
			}
		}
	}

	// Read back: the bytes come out as they went in.
	var v View
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if !v.Timestamp.Equal(d.Timestamp) || !v.FirstErrorAt.Equal(d.FirstErrorAt) || v.Origin == nil || !v.Origin.Timestamp.Equal(d.OriginTimestamp) {
		t.Errorf("times do not round-trip: %+v", v)
	}
	key, err := DecodeBytes(v.Key, v.KeyEncoding)
	if err != nil || !bytes.Equal(key, d.Key) {
		t.Errorf("key %q %v, want %q", key, err, d.Key)
	}
	for i, h := range v.Headers {
		val := h.Value
		b, err := DecodeBytes(&val, h.Encoding)
		if err != nil || h.Key != d.UserHeaders[i].Key || !bytes.Equal(b, d.UserHeaders[i].Value) {
			t.Errorf("header %d: %q=%q (%v), want %q=%q", i, h.Key, b, err, d.UserHeaders[i].Key, d.UserHeaders[i].Value)
		}
	}
}

func TestNewViewAbsentFields(t *testing.T) {
	r := &kgo.Record{Topic: "t.dlq", Timestamp: time.UnixMilli(1_700_000_000_000),
		Headers: retry.Encode(retry.Meta{Reason: string(ReasonInvalid), ErrorClass: retry.ClassInvalid}, nil)}
	d, err := Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(NewView(d))
	for _, frag := range []string{`"key":null`, `"value":null`, `"headers":[]`, `"origin":null`, `"first_error_at":null`, `"last_error_at":null`, `"code":""`} {
		if !strings.Contains(string(b), frag) {
			t.Errorf("view %s lacks %s", b, frag)
		}
	}
	var v View
	if err := json.Unmarshal(b, &v); err != nil || v.Key != nil || !v.FirstErrorAt.IsZero() || v.Origin != nil {
		t.Errorf("read back %+v %v", v, err)
	}
	if z, _ := json.Marshal(NewView(nil)); !strings.Contains(string(z), `"headers":[]`) {
		t.Errorf("NewView(nil) = %s", z)
	}
}

func TestViewCSV(t *testing.T) {
	d := viewSample(t)
	v := NewView(d)
	h, rec := CSVHeader(), v.CSVRecord()
	if len(h) != len(rec) {
		t.Fatalf("%d columns, %d fields", len(h), len(rec))
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(h)
	_ = w.Write(rec)
	w.Flush()
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 2 {
		t.Fatalf("csv: %v %v", rows, err)
	}
	got := map[string]string{}
	for i, c := range rows[0] {
		got[c] = rows[1][i]
	}
	for col, want := range map[string]string{
		"topic": "solve.dlq", "partition": "3", "offset": "42", "timestamp": "2023-11-14T22:15:23.456Z",
		"key": "AP8Q", "key_encoding": "base64", "value": `{"site":"x"}`, "code": "http_503", "reason": "exhausted",
		"attempt": "4", "redrives": "1", "origin_topic": "solve", "origin_partition": "1", "origin_offset": "10",
		"last_error_at": "2023-11-14T22:13:20.000Z", "truncated": "0", "instance": "pod-1",
	} {
		if got[col] != want {
			t.Errorf("column %s = %q, want %q", col, got[col], want)
		}
	}
	var hs []ViewHeader
	if err := json.Unmarshal([]byte(got["headers"]), &hs); err != nil || !reflect.DeepEqual(hs, v.Headers) {
		t.Errorf("headers column %q: %v", got["headers"], err)
	}
	// The header row is a copy: callers may change it.
	h[0] = "x"
	if CSVHeader()[0] != "topic" {
		t.Error("CSVHeader shares its slice")
	}
	// Without an origin the origin columns are empty.
	v.Origin = nil
	rec = v.CSVRecord()
	for i, c := range CSVHeader() {
		if strings.HasPrefix(c, "origin_") && rec[i] != "" {
			t.Errorf("%s = %q without an origin", c, rec[i])
		}
	}
}

func TestViewTimeUnmarshalRejects(t *testing.T) {
	var vt ViewTime
	for _, in := range []string{`"yesterday"`, `12`, `"2024-05-01T10:00:00"`} {
		if err := json.Unmarshal([]byte(in), &vt); err == nil {
			t.Errorf("%s accepted as %v", in, vt)
		}
	}
	if _, err := DecodeBytes(new(string), "hex"); err == nil {
		t.Error("unknown encoding accepted")
	}
}

func ExampleNewView() {
	src := &kgo.Record{Key: []byte("order-7"), Value: []byte(`{"site":"x"}`), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}}}
	meta := retry.Meta{ID: "order-7", Attempt: 1, Reason: string(ReasonPermanent), ErrorCode: "ERROR_WRONG_USER_KEY",
		ErrorClass: retry.ClassPermanent, Error: "400 Bad Request"}
	r := Build(src, meta, src.Headers, BuildOptions{Topic: "solve.dlq"})
	r.Timestamp = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	d, _ := Decode(r)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(NewView(d)); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {
	//   "topic": "solve.dlq",
	//   "partition": 0,
	//   "offset": 0,
	//   "timestamp": "2024-05-01T10:00:00.000Z",
	//   "key": "order-7",
	//   "key_encoding": "text",
	//   "value": "{\"site\":\"x\"}",
	//   "value_encoding": "text",
	//   "headers": [
	//     {
	//       "key": "trace",
	//       "value": "t1",
	//       "encoding": "text"
	//     }
	//   ],
	//   "id": "order-7",
	//   "reason": "permanent",
	//   "error": "400 Bad Request",
	//   "code": "ERROR_WRONG_USER_KEY",
	//   "class": "permanent",
	//   "attempt": 1,
	//   "polls": 0,
	//   "origin": null,
	//   "first_error_at": null,
	//   "last_error_at": null,
	//   "redrives": 0,
	//   "group": "",
	//   "instance": "",
	//   "truncated": 0,
	//   "deliveries": 0
	// }
}

// A field a spreadsheet would evaluate starts with a
// single quote; ordinary fields are unchanged.
func TestViewCSVSpreadsheetSafe(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"}, {"+1+1", "'+1+1"}, {"-2+3", "'-2+3"}, {"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1", "'\t=1"}, {"\r=1", "'\r=1"},
		{"", ""}, {"plain", "plain"}, {"a=1", "a=1"}, {"'quoted", "'quoted"}, {"42", "42"}, {" =1", " =1"},
	} {
		if got := SpreadsheetSafe(c.in); got != c.want {
			t.Errorf("SpreadsheetSafe(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A crashed dead letter shows its delivery count in JSON and CSV; the CSV
// column comes after the ones a spreadsheet already reads by position.
func TestViewCrashed(t *testing.T) {
	src, m := crashedSample()
	r := Build(src, m, nil, BuildOptions{Topic: "solve.dlq"})
	d, err := Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	v := NewView(d)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{`"reason":"crashed"`, `"deliveries":4`} {
		if !strings.Contains(string(b), frag) {
			t.Errorf("view %s lacks %s", b, frag)
		}
	}
	var back View
	if err := json.Unmarshal(b, &back); err != nil || back.Deliveries != 4 {
		t.Errorf("read back deliveries %d, %v", back.Deliveries, err)
	}
	h, rec := CSVHeader(), v.CSVRecord()
	if n := len(h); n < 2 || h[n-2] != "headers" || h[n-1] != "deliveries" || rec[n-1] != "4" {
		t.Errorf("CSV ends %q = %q, want headers, deliveries = 4", h[len(h)-2:], rec[len(rec)-2:])
	}
}
