package main

import (
	"strings"
	"testing"
)

func TestParseCredentials(t *testing.T) {
	kv, err := parseCredentials(strings.NewReader("# comment\nKAFKA_ADMIN_USER=admin\n\nKAFKA_ADMIN_PASSWORD=a=b\n"))
	if err != nil || kv["KAFKA_ADMIN_USER"] != "admin" || kv["KAFKA_ADMIN_PASSWORD"] != "a=b" || len(kv) != 2 {
		t.Fatalf("parseCredentials = %v, %v", kv, err)
	}
	for _, bad := range []string{"no equals sign\n", "=value\n"} {
		if _, err := parseCredentials(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: err = %v, want line 1", bad, err)
		}
	}
}

// FuzzParseCredentials: any input parses or fails without panicking, and
// every key parsed is non-empty and has no newline.
func FuzzParseCredentials(f *testing.F) {
	f.Add("KAFKA_ADMIN_USER=admin\nKAFKA_ADMIN_PASSWORD=x\n")
	f.Add("# c\n\n=x\nK=")
	f.Fuzz(func(t *testing.T, s string) {
		kv, err := parseCredentials(strings.NewReader(s))
		if err != nil {
			return
		}
		for k := range kv {
			if k == "" || strings.ContainsAny(k, "\n") {
				t.Fatalf("key %q", k)
			}
		}
	})
}
