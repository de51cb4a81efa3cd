package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/topics"
)

// keepFormerTierNames gives every tier of c that still has its topic
// under its former name (topics.FormerTierNames: written 64s, the topic
// .retry.1m4s exists and .retry.64s does not) that name, so that every
// command reads and writes the topic holding its waiting retries. It
// returns the tiers concerned; tierNote says what became of each. It is
// the one place the rule is applied: topics ensure|check, process,
// analyze and dev call it before they name a tier.
func keepFormerTierNames(ctx context.Context, c *config.Config, cl *kgo.Client) ([]topics.FormerTier, error) {
	specs := make([]topics.PipelineSpec, len(c.Pipelines))
	for i, p := range c.Pipelines {
		specs[i] = p.TopicSpec()
	}
	found, err := topics.FormerTierNames(ctx, cl, specs)
	if err != nil {
		return nil, err
	}
	for _, f := range found {
		c.Pipelines[f.Pipeline].Retry.Tiers[f.Tier].Name = f.Name()
	}
	return found, nil
}

// tierNote is f's note, naming its pipeline in c.
func tierNote(c *config.Config, f topics.FormerTier) string {
	return fmt.Sprintf("pipeline %s: %s", c.Pipelines[f.Pipeline].Name, f.Note())
}

// formerTierRetry is how often a starting command asks again when the
// cluster does not answer the tier lookup.
const formerTierRetry = 2 * time.Second

// startTierNames is keepFormerTierNames for a command that runs (process,
// analyze), with a client of its own: it logs each note once and, when
// the cluster does not answer, waits for it as the command's clients
// would, since a tier named without the answer could leave retries
// waiting in a topic nobody reads; a problem no retry fixes (kafkaconn.Fatal)
// exits 1. Without a tier whose written name differs from its shortest
// form it asks nothing.
func startTierNames(ctx context.Context, c *config.Config) error {
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return &exitError{2, err}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &exitError{2, err}
	}
	defer cl.Close()
	for {
		found, err := keepFormerTierNames(ctx, c, cl)
		if err == nil {
			for _, f := range found {
				if f.Kept {
					slog.Info(tierNote(c, f))
				} else {
					slog.Warn(tierNote(c, f))
				}
			}
			return nil
		}
		if f := kafkaconn.Fatal(c, err); f != nil {
			return &exitError{1, f}
		}
		msg := "start-up: cannot tell yet whether tiers still have topics under their former names; asking again"
		if kafkaconn.Unreachable(err) {
			msg += ". " + kafkaconn.BrokersHint(c)
		}
		slog.Warn(msg, "err", err)
		select {
		case <-ctx.Done():
			return nil // stopping: the command stops at once
		case <-time.After(formerTierRetry):
		}
	}
}
