package analyzer

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The body of a pause or resume is nothing, or one JSON object with only
// a reason, of at most MaxPauseReason bytes.
func FuzzDecodePauseRequest(f *testing.F) {
	for _, s := range []string{``, ` `, `{}`, `{"reason":"provider down"}`, `null`, `[]`, `{"reason":1}`, `{"reason":"a"}}`, `{"why":"x"}`, `{} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodePauseRequest(bytes.NewReader(b))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "body") {
				t.Fatalf("error %q does not start with body", err)
			}
			return
		}
		if len(req.Reason) > MaxPauseReason {
			t.Fatalf("accepted a reason of %d bytes", len(req.Reason))
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		var m map[string]json.RawMessage
		if err := dec.Decode(&m); err != nil || m == nil {
			t.Fatalf("accepted %q, which is not one JSON object: %v", b, err)
		}
		for k := range m {
			if !strings.EqualFold(k, "reason") { // encoding/json matches names in any case
				t.Fatalf("accepted %q with the field %q", b, k)
			}
		}
		if dec.More() {
			t.Fatalf("accepted %q with something after the object", b)
		}
	})
}
