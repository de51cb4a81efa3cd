package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
)

// preflight is every Kafka command's start-up check (kafkaconn.Check): a
// problem no retry can fix (an untrusted certificate, failed SASL
// authentication, a consumer group the user may not use) exits 1 with a
// message naming the cause and the fix, within kafkaconn.CheckTimeout,
// instead of the clients retrying it forever. Anything else (a broker not
// up yet) is logged and the command goes on: its clients retry.
func preflight(ctx context.Context, c *config.Config, groups ...string) error {
	err := kafkaconn.Check(ctx, c, groups...)
	var f *kafkaconn.FatalError
	if errors.As(err, &f) {
		return &exitError{1, f}
	}
	if err != nil && ctx.Err() == nil {
		slog.Warn("start-up check: the cluster did not answer; going on, the clients retry", "err", err)
	}
	return nil
}

// processorGroups are the consumer groups of c's pipelines' processors.
func processorGroups(c *config.Config) []string {
	var gs []string
	for _, p := range c.Pipelines {
		gs = append(gs, p.GroupID())
	}
	return gs
}

// analyzerGroups are the consumer groups of c's pipelines' rule workers.
func analyzerGroups(c *config.Config) []string {
	var gs []string
	for _, p := range c.Pipelines {
		gs = append(gs, p.AnalyzerGroupID())
	}
	return gs
}
