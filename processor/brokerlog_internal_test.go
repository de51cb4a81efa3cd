package processor

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerLogSaysDownOnceAndBackOnce: many failed dials to one broker
// within brokerLogEvery are one warning; the next successful dial is one
// "reachable again" line; a broker that never failed logs nothing.
func TestBrokerLogSaysDownOnceAndBackOnce(t *testing.T) {
	var buf bytes.Buffer
	b := &brokerLog{log: slog.New(slog.NewTextHandler(&buf, nil))}
	down := kgo.BrokerMetadata{NodeID: 1, Host: "127.0.0.1", Port: 9092}
	other := kgo.BrokerMetadata{NodeID: 2, Host: "127.0.0.1", Port: 9093}
	b.OnBrokerConnect(other, 0, nil, nil)
	for range 5 {
		b.OnBrokerConnect(down, 0, nil, errors.New("connection refused"))
	}
	b.OnBrokerConnect(down, 0, nil, nil)
	b.OnBrokerConnect(down, 0, nil, nil)
	out := buf.String()
	if n := strings.Count(out, `msg="cannot reach the broker`); n != 1 {
		t.Errorf("%d unreachable lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, `msg="broker reachable again" broker=127.0.0.1:9092`); n != 1 || !strings.Contains(out, "failed_dials=5") {
		t.Errorf("want one reachable-again line for 127.0.0.1:9092 after 5 failed dials:\n%s", out)
	}
	if strings.Contains(out, "9093") {
		t.Errorf("a broker that never failed is logged:\n%s", out)
	}
}
