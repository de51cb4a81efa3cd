package main

import (
	"context"
	"net"
	"strings"
	"testing"
)

// TestUnreachableBrokersSayWhereTheyCameFrom: a command that cannot reach
// the cluster at all names the address it tried, where that address came
// from, and each way to change it.
func TestUnreachableBrokersSayWhereTheyCameFrom(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cfg := writeConfig(t, []string{dead}, "unreachable", "", "")
	for _, tc := range []struct {
		name string
		args []string
		from string
	}{
		{"file", nil, "(from brokers: in " + cfg + ", line 1)"},
		{"flag", []string{"--brokers", dead}, "(from --brokers)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runOut(context.Background(), append([]string{"topics", "check", "-c", cfg}, tc.args...)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			for _, want := range []string{"redrive tried the brokers " + dead + " " + tc.from, "--brokers HOST:PORT", "REDRIVE_BROKERS", "brokers: in the config file"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
