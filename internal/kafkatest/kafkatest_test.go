package kafkatest

import (
	"context"
	"testing"
	"time"

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
