package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/topics"
)

// preflight is every Kafka command's start-up check (kafkaconn.Check): a
// problem no retry can fix (an untrusted certificate, failed SASL
// authentication, a consumer group the user may not use, a topic it must
// read and may not) exits 1 with a message naming the cause and the fix,
// within kafkaconn.CheckTimeout, instead of the clients retrying it for
// ever. A topic it writes and may not is logged. Anything else (a broker
// not up yet) is logged and the command goes on: its clients retry.
func preflight(ctx context.Context, c *config.Config, need kafkaconn.Need) error {
	warnings, err := kafkaconn.Check(ctx, c, need)
	for _, w := range warnings {
		slog.Warn("start-up check: " + w)
	}
	var f *kafkaconn.FatalError
	if errors.As(err, &f) {
		return &exitError{1, f}
	}
	switch {
	case err == nil || ctx.Err() != nil:
	case kafkaconn.Unreachable(err):
		slog.Warn("start-up check: cannot reach the cluster; going on, the clients retry. "+kafkaconn.BrokersHint(c), "err", err)
	default:
		slog.Warn("start-up check: the cluster did not answer; going on, the clients retry", "err", err)
	}
	return nil
}

// processNeeds is what `redrive process` uses: each pipeline's group (and
// share group, with consume: share), its main topic, tiers and callbacks
// topic to read, its outputs to write, and the control topic to read and
// write.
func processNeeds(c *config.Config) kafkaconn.Need {
	var n kafkaconn.Need
	for _, p := range c.Pipelines {
		n.Groups = append(n.Groups, p.GroupID())
		if p.TopicSpec().Share {
			n.Shares = append(n.Shares, kafkaconn.Share{Pipeline: p.Name, Group: topics.ShareGroupID(p.Name)})
		}
		n.Read = append(n.Read, p.Topic)
		n.Read = append(n.Read, p.TierTopics()...)
		if cb := p.CallbacksTopic(); cb != "" {
			n.Read = append(n.Read, cb)
		}
		n.Write = append(n.Write, p.TierTopics()...)
		n.Write = append(n.Write, p.DLQTopic())
		if p.Results != "" {
			n.Write = append(n.Write, p.Results)
		}
		if f := p.Breaker.FailoverTo; f != "" && (p.Breaker.Enabled == nil || *p.Breaker.Enabled) {
			n.Write = append(n.Write, f)
		}
	}
	// Last: a refusal names the pipeline's own topics first.
	if spec, ok := c.ControlSpec(); ok {
		n.Read = append(n.Read, spec.Name)
		n.Write = append(n.Write, spec.Name)
	}
	return n
}

// analyzeNeeds is what `redrive analyze` uses: each pipeline's rule
// worker group and its DLQ.
func analyzeNeeds(c *config.Config) kafkaconn.Need {
	var n kafkaconn.Need
	for _, p := range c.Pipelines {
		n.Groups = append(n.Groups, p.AnalyzerGroupID())
		n.Read = append(n.Read, p.DLQTopic())
	}
	return n
}

// callbacksNeeds is what `redrive callbacks` writes: the callbacks topics
// and, for invalid callbacks, the DLQs.
func callbacksNeeds(c *config.Config) kafkaconn.Need {
	var n kafkaconn.Need
	for _, p := range c.Pipelines {
		if cb := p.CallbacksTopic(); cb != "" {
			n.Write = append(n.Write, cb, p.DLQTopic())
		}
	}
	return n
}
