package topics

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupID is the share group that reads a pipeline's main topic with
// consume: share: "redrive.<pipeline>.share". Share groups and consumer
// groups share one name space, and the tiers stay in GroupID.
func ShareGroupID(pipeline string) string { return GroupID(pipeline) + ".share" }

// ShareGroupConfigs are the group configs redrive's share groups need: a
// new share group starts at the earliest record (Kafka's default, latest,
// would skip every request written before the first replica started),
// and sees records of aborted transactions never (Kafka's default reads
// them).
var ShareGroupConfigs = map[string]string{
	"share.auto.offset.reset": "earliest",
	"share.isolation.level":   "read_committed",
}

// EnsureShareGroup sets ShareGroupConfigs on group (IncrementalAlterConfigs
// of the GROUP resource; it needs ALTER_CONFIGS on the group). It may run
// before the group exists: the configs wait for it.
func EnsureShareGroup(ctx context.Context, cl *kgo.Client, group string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for _, name := range []string{"share.auto.offset.reset", "share.isolation.level"} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = name
		v := ShareGroupConfigs[name]
		c.Value = &v
		c.Op = kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("share group %s: set its configs: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("share group %s: set share.auto.offset.reset=earliest and share.isolation.level=read_committed: %w%s", group, err, msg)
		}
	}
	return nil
}
