// Package kafkatest gives behaviour tests a broker: REDRIVE_TEST_BROKERS (the
// real Apache Kafka that `make test` starts), else testcontainers when Docker
// is healthy, else an embedded kfake cluster — which is refused under CI=true,
// so that a missing broker fails a CI run instead of hiding behind a fake.
//
// It also holds the one copy of the broker-side helpers behaviour tests
// share: CreateTopics, CollectUntil (read outputs until a condition, then a
// settle time for extras), Lag and LagProblem (wait for lag 0), Eventually
// and Header. What needs the processor is in internal/pipetest, so that
// this package stays importable by every test, internal ones included.
//
// It is imported only by tests.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor/control"
)

// Cluster is the broker a test runs against.
type Cluster struct {
	Brokers []string
	// Kind is KindReal (REDRIVE_TEST_BROKERS), KindContainer or KindKfake.
	Kind string
}

// Kinds of broker.
const (
	KindReal      = "real"
	KindContainer = "testcontainers"
	KindKfake     = "kfake"
)

// HowToStart is the message a CI run without a broker fails with.
const HowToStart = "behaviour tests need a real Kafka broker under CI=true: run `make test` " +
	"(it starts one), or `eval \"$(bash scripts/kafka.sh up | tail -1)\"; export REDRIVE_TEST_BROKERS=$KAFKA_BROKERS`"

// Choose decides where the broker comes from: the env's
// REDRIVE_TEST_BROKERS, a healthy Docker, or kfake outside CI. An empty kind
// with an error means the test must fail.
func Choose(getenv func(string) string, dockerHealthy func() bool) (kind string, err error) {
	if getenv("REDRIVE_TEST_BROKERS") != "" {
		return KindReal, nil
	}
	if getenv("REDRIVE_TEST_NO_DOCKER") == "" && dockerHealthy() {
		return KindContainer, nil
	}
	if isCI(getenv) {
		return "", fmt.Errorf("%s", HowToStart)
	}
	return KindKfake, nil
}

// InCI reports whether the tests run under CI (CI=true or CI=1): there,
// whatever a test needs and lacks is a failure, never a skip.
func InCI() bool { return isCI(os.Getenv) }

func isCI(getenv func(string) string) bool {
	ci := strings.ToLower(getenv("CI"))
	return ci == "true" || ci == "1"
}

// Missing ends a test that lacks something it needs (a broker, a tool, a
// client): it fails under CI and is skipped elsewhere, with msg either way.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg + " (skipped outside CI; under CI=true this fails)")
}

// New returns a broker for t (see the package doc for the order).
func New(t testing.TB) *Cluster {
	t.Helper()
	kind, err := Choose(os.Getenv, dockerHealthy)
	if err != nil {
		t.Fatal("kafkatest: " + err.Error())
	}
	switch kind {
	case KindReal:
		brokers := strings.Split(os.Getenv("REDRIVE_TEST_BROKERS"), ",")
		t.Logf("kafkatest: real broker at %s (%s)", strings.Join(brokers, ","), version(brokers))
		return withControl(t, &Cluster{Brokers: brokers, Kind: KindReal})
	case KindContainer:
		brokers, err := container()
		if err != nil {
			t.Fatalf("kafkatest: testcontainers: %v", err)
		}
		t.Logf("kafkatest: testcontainers broker at %s (%s)", strings.Join(brokers, ","), version(brokers))
		return withControl(t, &Cluster{Brokers: brokers, Kind: KindContainer})
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatalf("kafkatest: kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	t.Logf("kafkatest: embedded kfake broker at %v (not Apache Kafka: set REDRIVE_TEST_BROKERS or run make test for the real one)", kc.ListenAddrs())
	return withControl(t, &Cluster{Brokers: kc.ListenAddrs(), Kind: KindKfake})
}

var controlMade sync.Map // brokers → true

// withControl creates the control topic processors read (as `redrive
// topics ensure` does for users), once per broker: every test's processor
// runs at the defaults, the control topic included.
func withControl(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	key := strings.Join(c.Brokers, ",")
	if _, ok := controlMade.Load(key); ok {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := c.Admin(t)
	resp, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, control.DefaultTopic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("kafkatest: create the control topic: %v", err)
	}
	controlMade.Store(key, true)
	return c
}

var (
	versionOnce sync.Map // brokers → string
)

// version is the broker's version as guessed from its ApiVersions, once
// per test binary and broker list.
func version(brokers []string) string {
	key := strings.Join(brokers, ",")
	if v, ok := versionOnce.Load(key); ok {
		return v.(string)
	}
	v := "version unknown"
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		vs, err := kadm.NewClient(cl).ApiVersions(ctx)
		cancel()
		cl.Close()
		if err == nil {
			for _, bv := range vs.Sorted() {
				if bv.Err == nil {
					v = "Apache Kafka " + bv.VersionGuess()
					break
				}
			}
		}
	}
	versionOnce.Store(key, v)
	return v
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

// Admin returns an admin client for c, closed when t ends.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

// CreateTopic creates a topic and fails t on any error, the per-topic one
// included.
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	c.CreateTopics(t, partitions, configs, name)
}

// CreateTopics creates topics with the same partition count and configs,
// fails t on any error (per-topic ones included), and returns once every
// one is in the metadata with a leader for every partition.
func (c *Cluster) CreateTopics(t testing.TB, partitions int32, configs map[string]*string, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := c.Admin(t)
	resp, err := adm.CreateTopics(ctx, partitions, 1, configs, names...)
	if err != nil {
		t.Fatalf("kafkatest: create topics %v: %v", names, err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("kafkatest: create topic %s: %v", r.Topic, r.Err)
		}
	}
	// A real broker answers CreateTopics before every listener's metadata
	// shows the topic; wait until it does, with a leader for every partition.
	for _, name := range names {
		for {
			td, err := adm.ListTopics(ctx, name)
			if err == nil {
				if d, ok := td[name]; ok && d.Err == nil && len(d.Partitions) == int(partitions) {
					ready := true
					for _, p := range d.Partitions {
						ready = ready && p.Leader >= 0 && p.Err == nil
					}
					if ready {
						break
					}
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("kafkatest: topic %s created but not in the metadata within 30s", name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

var seq atomic.Int64

// Topic returns a topic name unique to this run, so tests can share a broker.
func Topic(t testing.TB, base string) string {
	return fmt.Sprintf("%s.%d.%d", base, time.Now().UnixNano()%1e9, seq.Add(1))
}

// Collect reads topic from its start until n records arrived or timeout
// passed, and returns what it read (fewer than n on timeout).
func (c *Cluster) Collect(t testing.TB, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return c.CollectUntil(t, []string{topic}, func(got Got) bool { return len(got[topic]) >= n }, timeout, 0)[topic]
}

// Got is what CollectUntil read: each topic's records in consumed order.
type Got map[string][]*kgo.Record

// Total is the number of records read from topics.
func (g Got) Total(topics ...string) int {
	n := 0
	for _, tp := range topics {
		n += len(g[tp])
	}
	return n
}

// CollectUntil reads topics from their start until enough(got) holds or
// timeout passes, then for settle more so that extras (duplicates, records
// that should not exist) are caught too. It never fails t: the caller
// asserts on what arrived.
func (c *Cluster) CollectUntil(t testing.TB, topics []string, enough func(got Got) bool, timeout, settle time.Duration) Got {
	t.Helper()
	return c.collectUntil(t, kgo.ReadUncommitted(), topics, enough, timeout, settle)
}

// CollectCommittedUntil is CollectUntil as a read_committed consumer: it
// sees what an exactly-once writer committed, never what it aborted.
func (c *Cluster) CollectCommittedUntil(t testing.TB, topics []string, enough func(got Got) bool, timeout, settle time.Duration) Got {
	t.Helper()
	return c.collectUntil(t, kgo.ReadCommitted(), topics, enough, timeout, settle)
}

func (c *Cluster) collectUntil(t testing.TB, level kgo.IsolationLevel, topics []string, enough func(got Got) bool, timeout, settle time.Duration) Got {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(100*time.Millisecond))
	got := Got{}
	deadline := time.Now().Add(timeout)
	var settleAt time.Time
	for {
		now := time.Now()
		if settleAt.IsZero() && enough(got) {
			settleAt = now.Add(settle)
		}
		if !settleAt.IsZero() && !now.Before(settleAt) || now.After(deadline) {
			return got
		}
		end := deadline
		if !settleAt.IsZero() {
			end = settleAt
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { got[r.Topic] = append(got[r.Topic], r) })
	}
}

// LagProblem describes why group has not consumed every partition
// 0..parts-1 of topics to the end; "" when it has (lag 0 everywhere).
func (c *Cluster) LagProblem(t testing.TB, group string, topics []string, parts int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lags, err := c.Admin(t).Lag(ctx, group)
	if err != nil {
		return "lag: " + err.Error()
	}
	gl, ok := lags[group]
	if !ok {
		return "lag: group not described"
	}
	if err := gl.Error(); err != nil {
		return "lag: " + err.Error()
	}
	var problems []string
	for _, topic := range topics {
		for p := int32(0); p < parts; p++ {
			l, ok := gl.Lag.Lookup(topic, p)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s/%d: no lag", topic, p))
			case l.Err != nil:
				problems = append(problems, fmt.Sprintf("%s/%d: %v", topic, p, l.Err))
			case l.Lag != 0:
				problems = append(problems, fmt.Sprintf("%s/%d: lag %d (committed %d, end %d)", topic, p, l.Lag, l.Commit.At, l.End.Offset))
			}
		}
	}
	slices.Sort(problems)
	return strings.Join(problems, "; ")
}

// Lag is group's total lag on topic; it fails t when the lag cannot be
// described.
func (c *Cluster) Lag(t testing.TB, group, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	lags, err := c.Admin(t).Lag(ctx, group)
	if err != nil {
		t.Fatalf("kafkatest: lag: %v", err)
	}
	gl, ok := lags[group]
	if !ok || gl.Error() != nil {
		t.Fatalf("kafkatest: lag of %s: %v", group, gl.Error())
	}
	return gl.Lag.TotalByTopic()[topic].Lag
}

// Eventually polls cond every 50ms until it holds (true) or timeout passes
// (false).
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Header is the value of r's first header k; ok is false without one.
func Header(r *kgo.Record, k string) (v string, ok bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

// CountHeader is how many headers named k r carries.
func CountHeader(r *kgo.Record, k string) int {
	n := 0
	for _, h := range r.Headers {
		if h.Key == k {
			n++
		}
	}
	return n
}
