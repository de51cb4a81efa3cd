package topics

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/retry"
)

// FormerTier is a tier whose name as written ("64s") differs from its
// delay's shortest form ("1m4s"), the name every tier had before tiers
// kept the written one, and whose topic under that former name exists.
type FormerTier struct {
	// Pipeline is the index of the tier's pipeline in the specs given to
	// FormerTierNames; Tier the tier's index in it.
	Pipeline, Tier int
	// Main is the pipeline's main topic.
	Main string
	// Written is the name as written; Former the shortest form.
	Written, Former string
	// Kept: the topic under the written name does not exist, so the tier
	// keeps its former name and topic. Otherwise both topics exist: the
	// tier uses the written name and the former topic is no longer read.
	Kept bool
}

// Name is the name the tier has: Former when Kept, else Written.
func (f FormerTier) Name() string {
	if f.Kept {
		return f.Former
	}
	return f.Written
}

// Note says what redrive does with the tier, for `topics check|ensure`
// and the start-up log of the commands that read or write tiers.
func (f FormerTier) Note() string {
	written, former := f.Main+".retry."+f.Written, f.Main+".retry."+f.Former
	if f.Kept {
		return fmt.Sprintf("tier %s uses the existing topic %s (its name before tier topics kept the written delay), not %s; write the tier as %s to name it so (docs/topics.md, \"Tier names\")",
			f.Written, former, written, f.Former)
	}
	return fmt.Sprintf("tier %s uses the topic %s; %s, its topic before tier topics kept the written delay, exists too and is not read: records still in it are not retried (write the tier as %s to read it instead)",
		f.Written, written, former, f.Former)
}

// FormerTierNames finds the tiers of ps that a topic of their former name
// (retry.TierTopic: the delay's shortest form) still serves: written
// "64s", a tier was the topic `<topic>.retry.1m4s` before tiers kept the
// name the configuration wrote, and that topic may hold retries waiting to
// be due. The rule: when the topic under the written name does not exist
// and the one under the former name does, the tier keeps its former name
// (Kept); when both exist, the written name wins and the former topic is
// reported. Tiers whose two names are one, or whose former topic does not
// exist, are not listed, and without such a tier no request is made.
//
// It asks the broker for metadata only, never creating a topic. A topic
// the broker does not describe to us counts as absent: without an ACL on
// the written name (ACLs granted topic by topic before the upgrade), the
// former topic is kept. It takes a kgo client, not a kadm one: kadm's
// Metadata fails as a whole on one topic we may not describe.
func FormerTierNames(ctx context.Context, cl *kgo.Client, ps []PipelineSpec) ([]FormerTier, error) {
	var cands []FormerTier
	var ask []string
	for pi, p := range ps {
		s := retry.Schedule{Tiers: p.Tiers, Names: p.TierNames}
		for i, d := range s.Tiers {
			written, former := s.TierName(i), retry.FormatDelay(d)
			if written == former {
				continue
			}
			cands = append(cands, FormerTier{Pipeline: pi, Tier: i, Main: p.Topic, Written: written, Former: former})
			ask = append(ask, s.TierTopic(p.Topic, i), retry.TierTopic(p.Topic, d))
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	req := kmsg.NewPtrMetadataRequest() // AllowAutoTopicCreation false
	for _, t := range ask {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("topics: look for tier topics under their former names (%s): %w", strings.Join(ask, ", "), err)
	}
	found := map[string]bool{}
	for _, t := range resp.Topics {
		err := kerr.ErrorForCode(t.ErrorCode)
		if t.Topic != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kerr.TopicAuthorizationFailed) {
			found[*t.Topic] = true
		}
	}
	exists := func(name string) bool { return found[name] }
	var out []FormerTier
	for _, c := range cands {
		if !exists(c.Main + ".retry." + c.Former) {
			continue
		}
		c.Kept = !exists(c.Main + ".retry." + c.Written)
		out = append(out, c)
	}
	return out, nil
}
