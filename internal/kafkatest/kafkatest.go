// Package kafkatest gives behaviour tests a broker: REDRIVE_TEST_BROKERS (the
// real Apache Kafka that `make test` starts), else testcontainers when Docker
// is healthy, else an embedded kfake cluster — which is refused under CI=true,
// so that a missing broker fails a CI run instead of hiding behind a fake.
//
// It is imported only by tests.
package kafkatest

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is the broker a test runs against.
type Cluster struct {
	Brokers []string
	// Kind is "real" (REDRIVE_TEST_BROKERS), "testcontainers" or "kfake".
	Kind string
}

// New returns a broker for t (see the package doc for the order).
// TODO(helper): testcontainers branch, CI refusal, version logging.
func New(t testing.TB) *Cluster {
	t.Helper()
	if s := os.Getenv("REDRIVE_TEST_BROKERS"); s != "" {
		c := &Cluster{Brokers: strings.Split(s, ","), Kind: "real"}
		t.Logf("kafkatest: real broker at %s", s)
		return c
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatalf("kafkatest: kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	t.Logf("kafkatest: embedded kfake broker at %v", kc.ListenAddrs())
	return &Cluster{Brokers: kc.ListenAddrs(), Kind: "kfake"}
}

// Client returns a client for c, closed when t ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

var seq atomic.Int64

// Topic returns a topic name unique to this run, so tests can share a broker.
func Topic(t testing.TB, base string) string {
	return fmt.Sprintf("%s.%d.%d", base, time.Now().UnixNano()%1e9, seq.Add(1))
}
