package kafkatest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestChoose(t *testing.T) {
	cases := []struct {
		name   string
		env    map[string]string
		docker bool
		want   string
		fails  bool
	}{
		{"real broker wins", map[string]string{"REDRIVE_TEST_BROKERS": "127.0.0.1:9092", "CI": "true"}, true, KindReal, false},
		{"docker when healthy", map[string]string{}, true, KindContainer, false},
		{"docker under CI", map[string]string{"CI": "true"}, true, KindContainer, false},
		{"docker opt-out", map[string]string{"REDRIVE_TEST_NO_DOCKER": "1"}, true, KindKfake, false},
		{"kfake outside CI", map[string]string{}, false, KindKfake, false},
		{"refused under CI", map[string]string{"CI": "true"}, false, "", true},
		{"refused under CI=1", map[string]string{"CI": "1"}, false, "", true},
		{"CI=false is not CI", map[string]string{"CI": "false"}, false, KindKfake, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kind, err := Choose(func(k string) string { return c.env[k] }, func() bool { return c.docker })
			if kind != c.want || (err != nil) != c.fails {
				t.Fatalf("Choose = %q, %v; want %q, fails=%v", kind, err, c.want, c.fails)
			}
			if c.fails && err.Error() != HowToStart {
				t.Fatalf("error %q does not say how to start a broker", err)
			}
		})
	}
}

func TestBrokerRoundTrip(t *testing.T) {
	c := New(t)
	topic := Topic(t, "kafkatest")
	c.CreateTopic(t, topic, 1, nil)
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record back from %s (%s): %v", topic, c.Kind, err)
		}
		var got []string
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if len(got) > 0 {
			if got[0] != "hello" {
				t.Fatalf("got %q, want hello", got[0])
			}
			return
		}
	}
}

func TestCollectUntil(t *testing.T) {
	c := New(t)
	topic := Topic(t, "collect")
	c.CreateTopics(t, 1, nil, topic)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for _, v := range []string{"a", "b", "c"} {
		rs = append(rs, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	t.Run("keeps reading for settle after enough so extras show", func(t *testing.T) {
		late := Topic(t, "collect-late")
		c.CreateTopics(t, 1, nil, late)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: late, Value: []byte("first")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		// The extra is written only once the condition held: only the
		// settle time can catch it.
		var once sync.Once
		extra := make(chan error, 1)
		got := c.CollectUntil(t, []string{late}, func(got Got) bool {
			if got.Total(late) < 1 {
				return false
			}
			once.Do(func() {
				go func() { extra <- cl.ProduceSync(ctx, &kgo.Record{Topic: late, Value: []byte("extra")}).FirstErr() }()
			})
			return true
		}, 30*time.Second, 3*time.Second)
		if err := <-extra; err != nil {
			t.Fatalf("produce: %v", err)
		}
		if len(got[late]) != 2 || string(got[late][1].Value) != "extra" {
			t.Fatalf("read %d records, want first and the extra written after the condition held", len(got[late]))
		}
	})

	t.Run("reads in consumed order", func(t *testing.T) {
		got := c.CollectUntil(t, []string{topic}, func(got Got) bool { return got.Total(topic) >= 3 }, 30*time.Second, 0)
		if len(got[topic]) != 3 {
			t.Fatalf("read %d records, want all 3", len(got[topic]))
		}
		for i, want := range []string{"a", "b", "c"} {
			if string(got[topic][i].Value) != want {
				t.Errorf("record %d = %q, want %q", i, got[topic][i].Value, want)
			}
		}
	})

	t.Run("returns what arrived when the condition never holds", func(t *testing.T) {
		begin := time.Now()
		got := c.CollectUntil(t, []string{topic}, func(Got) bool { return false }, 2*time.Second, 0)
		if len(got[topic]) != 3 {
			t.Errorf("read %d records by the timeout, want 3", len(got[topic]))
		}
		if d := time.Since(begin); d < 2*time.Second || d > 20*time.Second {
			t.Errorf("returned after %v, want about the 2s timeout", d)
		}
	})

	t.Run("Collect stops at n", func(t *testing.T) {
		if got := c.Collect(t, topic, 2, 30*time.Second); len(got) < 2 {
			t.Errorf("Collect read %d records, want at least 2", len(got))
		}
	})
}

func TestLag(t *testing.T) {
	c := New(t)
	topic := Topic(t, "lag")
	c.CreateTopics(t, 2, nil, topic)
	group := topic + ".group"
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("x")}, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("y")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	adm := c.Admin(t)
	commit := func(at0, at1 int64) {
		t.Helper()
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: topic, Partition: 0, At: at0, LeaderEpoch: -1})
		os.Add(kadm.Offset{Topic: topic, Partition: 1, At: at1, LeaderEpoch: -1})
		if err := adm.CommitAllOffsets(ctx, group, os); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}

	commit(0, 1)
	if p := c.LagProblem(t, group, []string{topic}, 2); !strings.Contains(p, topic+"/0: lag 1") || strings.Contains(p, topic+"/1") {
		t.Errorf("LagProblem = %q, want partition 0 at lag 1 and nothing about partition 1", p)
	}
	if l := c.Lag(t, group, topic); l != 1 {
		t.Errorf("Lag = %d, want 1", l)
	}
	commit(1, 1)
	if p := c.LagProblem(t, group, []string{topic}, 2); p != "" {
		t.Errorf("LagProblem = %q at lag 0, want empty", p)
	}
	if l := c.Lag(t, group, topic); l != 0 {
		t.Errorf("Lag = %d, want 0", l)
	}
}

func TestHeader(t *testing.T) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b"}, {Key: "a", Value: []byte("2")}}}
	if v, ok := Header(r, "a"); !ok || v != "1" {
		t.Errorf("Header(a) = %q, %v; want the first, 1", v, ok)
	}
	if v, ok := Header(r, "b"); !ok || v != "" {
		t.Errorf("Header(b) = %q, %v; want present and empty", v, ok)
	}
	if _, ok := Header(r, "c"); ok {
		t.Errorf("Header(c) present")
	}
	if n := CountHeader(r, "a"); n != 2 {
		t.Errorf("CountHeader(a) = %d, want 2", n)
	}
}
