package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
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

// TestTailWithBrokersAlone: tail needs no config file when --brokers names
// the cluster, so `redrive dev`'s broker can be read with it; without
// either it is a usage error.
func TestTailWithBrokersAlone(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "tailbrokers")
	c.CreateTopic(t, topic, 1, nil)
	if err := c.Client(t).ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v-1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, out := runOut(context.Background(), "tail", "--brokers", strings.Join(c.Brokers, ","), topic, "--from-start", "--json")
	if code != 0 || !strings.Contains(out, `"value":"v-1"`) {
		t.Fatalf("tail --brokers without -c: exit %d:\n%s", code, out)
	}
	if code, out := runOut(context.Background(), "tail", topic); code != 2 {
		t.Fatalf("tail without -c or --brokers: exit %d, want 2:\n%s", code, out)
	}
}
