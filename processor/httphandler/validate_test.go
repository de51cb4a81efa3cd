package httphandler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// Every problem is reported, each at its field, with the key of a header
// and the index of a code.
func TestValidateFields(t *testing.T) {
	o := Options{
		URL:     "ftp://u:secret@h/",
		Headers: map[string]string{"Idempotency-Key": "k", "Redrive-Foo": "f", "Host": "h", "bad name": "v", "X": "a\nb", "x-a": "1", "X-A": "2", "Content-Type": "text/plain"},
		JSON:    &JSONRule{OKField: "a..b", OKValue: []int{1}},
		Codes:   Codes{Transient: []string{"A"}, Permanent: []string{"B", "A"}, MinDelay: map[string]time.Duration{"A": -time.Second}},
	}.WithDefaults()
	err := o.Validate()
	type at struct{ field, key string }
	got := map[at]string{}
	var idx []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *processor.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("not a FieldError: %v", e)
		}
		got[at{fe.Field, fe.Key}] = fe.Msg
		if fe.Field == "Codes.Permanent" {
			idx = append(idx, fe.Index)
		}
	}
	for w, msg := range map[at]string{
		{"URL", ""}:                    `"ftp://u:xxxxx@h/": want an absolute http:// or https:// URL`,
		{"Headers", "Idempotency-Key"}: "Idempotency-Key is set by the handler and cannot be configured",
		{"Headers", "Redrive-Foo"}:     "Redrive-Foo is set by the handler",
		{"Headers", "Host"}:            "Host is set by the handler",
		{"Headers", "bad name"}:        `"bad name" is not a valid HTTP header name`,
		{"Headers", "X"}:               "control characters",
		{"Headers", "x-a"}:             `the same header as "X-A"`,
		{"JSON.OKField", ""}:           `"a..b": a dotted path without empty parts`,
		{"JSON.OKValue", ""}:           "want a string, a bool or a number, got []int",
		{"Codes.MinDelay", "A"}:        "-1s: must not be negative",
		{"Codes.Permanent", ""}:        `"A" is in transient too`,
	} {
		if !strings.Contains(got[w], msg) {
			t.Errorf("%v: %q, want %q", w, got[w], msg)
		}
	}
	if _, ok := got[at{"Headers", "Content-Type"}]; ok || len(idx) != 1 || idx[0] != 1 {
		t.Errorf("Content-Type refused or wrong index %v: %v", idx, err)
	}
	if err := ValidateHeaders(map[string]string{"Authorization": "Bearer x", "Content-Type": "a/b"}); err != nil {
		t.Errorf("ValidateHeaders: %v", err)
	}
	if err := (Options{URL: "http://h/"}).Validate(); err == nil || !strings.Contains(err.Error(), "Timeout: 0s: must be more than 0") {
		t.Errorf("Validate before WithDefaults: %v", err)
	}
}
