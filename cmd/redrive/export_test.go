package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// `dlq export --format csv` writes no cell a spreadsheet
// evaluates. A dead letter whose key, value, error or header value starts
// with =, +, -, @, a tab or a carriage return exports those cells with a
// leading single quote; ordinary cells are exported as they are.
func TestDLQExportCSVIsSpreadsheetSafe(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "csvsafe")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: %s", out)
	}
	starts := []string{"=", "+", "-", "@", "\t", "\r"}
	now := time.Now()
	var rs []*kgo.Record
	for i, s := range append(starts, "") { // the last: an ordinary dead letter
		m := retry.Meta{ID: fmt.Sprintf("id-%d", i), Attempt: 1, Error: s + "cmd|' /C calc'!A0", ErrorCode: "E", ErrorClass: retry.ClassPermanent,
			Reason: string(dlq.ReasonPermanent), HasOrigin: true, OriginTopic: topic, OriginTimestamp: now, FirstErrorAt: now, LastErrorAt: now}
		if s == "" {
			m.Error = "plain error"
		}
		src := &kgo.Record{Key: []byte(s + "key"), Value: []byte(s + "SUM(1+1)*cmd|' /C calc'!A0")}
		if s == "" {
			src.Value = []byte("plain value")
		}
		r := dlq.Build(src, m, []kgo.RecordHeader{{Key: "h", Value: []byte(s + "1+1")}}, dlq.BuildOptions{Topic: topic + ".dlq", Group: "redrive." + topic, Instance: "test"})
		r.Timestamp = now
		rs = append(rs, r)
	}
	if err := c.Client(t).ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runSplit(context.Background(), "dlq", "export", "-c", cfg, "--format", "csv")
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("the export does not parse as CSV: %v\n%s", err, out)
	}
	if len(rows) != len(starts)+2 || !slices.Equal(rows[0], dlq.CSVHeader()) {
		t.Fatalf("%d rows, want a header and %d:\n%s", len(rows), len(starts)+1, out)
	}
	col := func(r []string, name string) string { return r[slices.Index(rows[0], name)] }
	for _, r := range rows[1:] {
		for i, f := range r {
			if f != "" && strings.ContainsRune("=+-@\t\r", rune(f[0])) {
				t.Errorf("column %s = %q: a spreadsheet evaluates it", rows[0][i], f)
			}
		}
		var hs []dlq.ViewHeader
		if err := json.Unmarshal([]byte(col(r, "headers")), &hs); err != nil {
			t.Errorf("headers column %q: %v", col(r, "headers"), err)
		}
		id := col(r, "id")
		var i int
		fmt.Sscanf(id, "id-%d", &i)
		if i == len(starts) { // the ordinary one: unchanged
			if col(r, "value") != "plain value" || col(r, "error") != "plain error" || col(r, "key") != "key" || col(r, "topic") != topic+".dlq" {
				t.Errorf("an ordinary row changed: %q", r)
			}
			continue
		}
		s := starts[i]
		if want := "'" + s + "cmd|' /C calc'!A0"; col(r, "error") != want {
			t.Errorf("error starting with %q exported as %q, want %q", s, col(r, "error"), want)
		}
		if s == "\t" || s == "\r" {
			continue // key and value are base64 then: control characters
		}
		if want := "'" + s + "SUM(1+1)*cmd|' /C calc'!A0"; col(r, "value") != want {
			t.Errorf("value starting with %q exported as %q, want %q", s, col(r, "value"), want)
		}
		if want := "'" + s + "key"; col(r, "key") != want {
			t.Errorf("key starting with %q exported as %q, want %q", s, col(r, "key"), want)
		}
		if len(hs) != 1 || hs[0].Value != s+"1+1" {
			t.Errorf("headers %+v, want h=%q", hs, s+"1+1")
		}
	}
}
