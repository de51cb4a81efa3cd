package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Encodings of View's key, value and header values.
const (
	EncodingText   = "text"   // the bytes are valid UTF-8 text, shown as they are
	EncodingBase64 = "base64" // standard base64, padded (as DisplayBytes shows binary)
)

// ViewTimeLayout is how View writes times: RFC 3339, UTC, milliseconds.
const ViewTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// View is a dead letter as JSON: what `dlq export --format jsonl`,
// `replay --json` and the analyzer's /api/deadletters show, one shape for
// all three. Keys, values and header values are text when they are valid
// UTF-8 without control characters (tab, newline and carriage return
// allowed), else base64, as DisplayBytes decides; the *_encoding field says
// which. Absent times are null; a null key or value is null.
type View struct {
	// Where the dead letter itself is, and when it was dead-lettered.
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Timestamp ViewTime `json:"timestamp"`

	Key           *string `json:"key"` // null: no key
	KeyEncoding   string  `json:"key_encoding"`
	Value         *string `json:"value"` // null: no value
	ValueEncoding string  `json:"value_encoding"`
	// Headers are the user headers (every header but redrive-*; the
	// compatibility headers included), in record order, duplicates kept.
	Headers []ViewHeader `json:"headers"`

	// The decoded redrive-* headers.
	ID           string      `json:"id"`
	Reason       string      `json:"reason"`
	Error        string      `json:"error"`
	Code         string      `json:"code"`
	Class        string      `json:"class"`
	Attempt      int         `json:"attempt"`
	Polls        int         `json:"polls"`
	Origin       *ViewOrigin `json:"origin"` // null: no redrive-origin-* headers
	FirstErrorAt ViewTime    `json:"first_error_at"`
	LastErrorAt  ViewTime    `json:"last_error_at"`
	Redrives     int         `json:"redrives"`
	Group        string      `json:"group"`
	Instance     string      `json:"instance"`
	// Truncated is the value's original size when it was cut to fit the
	// DLQ (redrive-truncated); 0: the value is whole.
	Truncated int64 `json:"truncated"`
	// Deliveries is redrive-deliveries: the share group's delivery count
	// of a crashed dead letter; 0 for every other reason.
	Deliveries int `json:"deliveries"`
}

// ViewHeader is one user header.
type ViewHeader struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Encoding string `json:"encoding"` // EncodingText or EncodingBase64
}

// ViewOrigin is where and when the request first entered.
type ViewOrigin struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Timestamp ViewTime `json:"timestamp"`
}

// ViewTime is a time in a View: ViewTimeLayout in JSON and CSV, null (an
// empty CSV field) when zero.
type ViewTime struct{ time.Time }

// String is the time in ViewTimeLayout, or "" when zero.
func (t ViewTime) String() string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(ViewTimeLayout)
}

// MarshalJSON writes the time in ViewTimeLayout, or null.
func (t ViewTime) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return strconv.AppendQuote(nil, t.String()), nil
}

// UnmarshalJSON reads null or an RFC 3339 time.
func (t *ViewTime) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*t = ViewTime{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("time: %w", err)
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("time %q: want RFC 3339", s)
	}
	*t = ViewTime{v}
	return nil
}

// NewView shows d. A nil d is the zero View.
func NewView(d *DeadLetter) View {
	if d == nil {
		return View{Headers: []ViewHeader{}}
	}
	v := View{
		Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Timestamp: viewTime(d.Timestamp),
		Headers: make([]ViewHeader, 0, len(d.UserHeaders)),
		ID:      d.ID, Reason: string(d.Reason), Error: d.Error, Code: d.Code, Class: string(d.Class),
		Attempt: d.Attempt, Polls: d.Polls,
		FirstErrorAt: viewTime(d.FirstErrorAt), LastErrorAt: viewTime(d.LastErrorAt),
		Redrives: d.Redrives, Group: d.Group, Instance: d.Instance, Truncated: d.Truncated,
		Deliveries: d.Deliveries,
	}
	v.Key, v.KeyEncoding = viewBytes(d.Key)
	v.Value, v.ValueEncoding = viewBytes(d.Value)
	for _, h := range d.UserHeaders {
		s, enc := viewBytes(h.Value)
		vh := ViewHeader{Key: h.Key, Encoding: enc}
		if s != nil {
			vh.Value = *s
		}
		v.Headers = append(v.Headers, vh)
	}
	if d.Meta.HasOrigin || d.OriginTopic != "" {
		v.Origin = &ViewOrigin{Topic: d.OriginTopic, Partition: d.OriginPartition, Offset: d.OriginOffset, Timestamp: viewTime(d.OriginTimestamp)}
	}
	return v
}

func viewTime(t time.Time) ViewTime {
	if t.IsZero() {
		return ViewTime{}
	}
	return ViewTime{t.UTC()}
}

// viewBytes shows b as DisplayBytes does; nil stays nil (shown as text).
func viewBytes(b []byte) (*string, string) {
	if b == nil {
		return nil, EncodingText
	}
	s, b64 := DisplayBytes(b)
	if b64 {
		return &s, EncodingBase64
	}
	return &s, EncodingText
}

// DecodeBytes reads back a key, value or header value shown by View.
func DecodeBytes(s *string, encoding string) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	switch encoding {
	case EncodingText, "":
		return []byte(*s), nil
	case EncodingBase64:
		return base64.StdEncoding.DecodeString(*s)
	}
	return nil, fmt.Errorf("encoding %q: want %s or %s", encoding, EncodingText, EncodingBase64)
}

// csvColumns are CSVHeader's columns, in order.
var csvColumns = []string{
	"topic", "partition", "offset", "timestamp",
	"key", "key_encoding", "value", "value_encoding",
	"id", "reason", "code", "class", "error", "attempt", "polls", "redrives",
	"origin_topic", "origin_partition", "origin_offset", "origin_timestamp",
	"first_error_at", "last_error_at", "group", "instance", "truncated",
	"headers", "deliveries",
}

// CSVHeader is the header row of `dlq export --format csv`. The columns are
// fixed; new ones are only ever added at the end.
func CSVHeader() []string { return append([]string(nil), csvColumns...) }

// CSVRecord is v as a CSV row under CSVHeader: times in ViewTimeLayout
// (empty when absent), a null key or value as an empty field (key_encoding
// tells nothing apart then: use JSON lines when that matters), the origin
// columns empty without an origin, and headers as the JSON array View
// writes ([{"key":..,"value":..,"encoding":..}]). Every field is
// spreadsheet-safe (SpreadsheetSafe): one a spreadsheet would take for a
// formula gets a leading single quote.
func (v View) CSVRecord() []string {
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	hs := v.Headers
	if hs == nil {
		hs = []ViewHeader{}
	}
	headers, err := json.Marshal(hs)
	if err != nil { // cannot happen: strings only
		headers = []byte("[]")
	}
	var ot, op, oo, ots string
	if o := v.Origin; o != nil {
		ot, op, oo, ots = o.Topic, strconv.Itoa(int(o.Partition)), strconv.FormatInt(o.Offset, 10), o.Timestamp.String()
	}
	rec := []string{
		v.Topic, strconv.Itoa(int(v.Partition)), strconv.FormatInt(v.Offset, 10), v.Timestamp.String(),
		str(v.Key), v.KeyEncoding, str(v.Value), v.ValueEncoding,
		v.ID, v.Reason, v.Code, v.Class, v.Error, strconv.Itoa(v.Attempt), strconv.Itoa(v.Polls), strconv.Itoa(v.Redrives),
		ot, op, oo, ots,
		v.FirstErrorAt.String(), v.LastErrorAt.String(), v.Group, v.Instance, strconv.FormatInt(v.Truncated, 10),
		string(headers), strconv.Itoa(v.Deliveries),
	}
	for i, f := range rec {
		rec[i] = SpreadsheetSafe(f)
	}
	return rec
}

// SpreadsheetSafe is a CSV field as text a spreadsheet does not evaluate:
// a field starting with =, +, -, @, a tab or a carriage return (a formula,
// or DDE, to Excel, LibreOffice and Google Sheets) gets a leading single
// quote, so that it is text; any other field is unchanged (the OWASP rule
// for CSV injection). JSON lines carry the values unchanged.
func SpreadsheetSafe(f string) string {
	if f == "" {
		return f
	}
	switch f[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + f
	}
	return f
}
