package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
	"github.com/redrive/redrive/topics"
)

func newTopicsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "create (ensure) or verify (check) every topic of the config's pipelines, their share groups (consume: share), and the control topic",
	}
	var timeout time.Duration
	var grow bool
	mk := func(use, short string, ensure bool) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				c, err := g.load()
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				defer cancel()
				if err := preflight(ctx, c, kafkaconn.Need{}); err != nil {
					return err
				}
				rep, err := topicsGrowRun(ctx, c, ensure, ensure && grow)
				rep.WriteTable(cmd.OutOrStdout())
				if err != nil {
					return &exitError{1, err}
				}
				return nil
			},
		}
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long")
	ensureCmd := mk("ensure", "create missing topics with the configured partitions, replication and configs; then check all (exit 1 on a problem)", true)
	ensureCmd.Flags().BoolVar(&grow, "grow", false, "also add partitions to a tier or DLQ that has fewer than its main topic (the only change made to an existing topic)")
	cmd.AddCommand(
		ensureCmd,
		mk("check", "report missing or misconfigured topics without changing anything (exit 1 on a problem)", false),
	)
	return cmd
}

// topicsRun ensures or checks every pipeline's topics.
func topicsRun(ctx context.Context, c *config.Config, ensure bool) (topics.Report, error) {
	return topicsGrowRun(ctx, c, ensure, false)
}

// topicsGrowRun is topicsRun; grow (with ensure) first widens tiers and
// DLQs narrower than their main topic (topics.Grow).
func topicsGrowRun(ctx context.Context, c *config.Config, ensure, grow bool) (topics.Report, error) {
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return topics.Report{}, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return topics.Report{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var all topics.Report
	found, err := keepFormerTierNames(ctx, c, cl)
	if err != nil {
		return all, err
	}
	for _, f := range found {
		all.Notes = append(all.Notes, tierNote(c, f))
	}
	var errs []error
	for _, p := range c.Pipelines {
		ps := p.TopicSpec()
		specs := topics.ForPipeline(ps)
		var rep topics.Report
		var grown []topics.Growth
		if grow {
			if grown, err = topics.Grow(ctx, adm, specs); err != nil {
				errs = append(errs, fmt.Errorf("pipeline %s: %w", p.Name, err))
			}
		}
		if ensure {
			rep, err = topics.Ensure(ctx, adm, specs)
			rep.MarkGrown(grown)
		} else {
			rep, err = topics.Check(ctx, adm, specs)
		}
		all.Topics = append(all.Topics, rep.Topics...)
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
		if !ps.Share {
			continue
		}
		// After the topics: a new share group is seeded from the
		// consumer group's offsets on the main topic.
		var st topics.ShareState
		if ensure {
			st, err = topics.EnsureShare(ctx, cl, p.Name, ps.Topic)
		} else {
			st, err = topics.CheckShare(ctx, cl, p.Name, ps.Topic)
		}
		all.Shares = append(all.Shares, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
	}
	if spec, ok := c.ControlSpec(); ok {
		var rep topics.Report
		if ensure {
			rep, err = topics.Ensure(ctx, adm, []topics.Spec{spec})
		} else {
			rep, err = topics.Check(ctx, adm, []topics.Spec{spec})
		}
		all.Topics = append(all.Topics, rep.Topics...)
		if err != nil {
			errs = append(errs, fmt.Errorf("control topic: %w", err))
		}
	}
	return all, errors.Join(errs...)
}
