package control

import (
	"context"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq/dlqread"
)

// Publish writes r to topic with cl and returns once the broker
// acknowledged it (cl should produce with acks=all, franz-go's default).
func Publish(ctx context.Context, cl *kgo.Client, topic string, r Record) error {
	key, value, err := r.Encode()
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}).FirstErr()
}

// SetPause publishes an operator's pause of pipeline (paused) or its
// resume, by instance ("" names this host).
func SetPause(ctx context.Context, cl *kgo.Client, topic, pipeline, instance string, paused bool, reason string) error {
	if instance == "" {
		instance, _ = os.Hostname()
	}
	return Publish(ctx, cl, topic, Record{Kind: KindPause, Pipeline: pipeline, Instance: instance,
		At: time.Now(), Pause: &Pause{Paused: paused, Reason: reason}})
}

// Read reads topic from its start to the end offsets listed when it
// starts and returns what it holds; skipped are the records Decode
// refused, each with its error.
func Read(ctx context.Context, cl *kgo.Client, topic string) (s *State, skipped []error, err error) {
	s = NewState()
	err = dlqread.Scan(ctx, cl, topic, func(rec *kgo.Record) error {
		r, derr := Decode(rec.Key, rec.Value)
		if derr != nil {
			skipped = append(skipped, derr)
			return nil
		}
		s.Apply(r)
		return nil
	})
	return s, skipped, err
}
