package processor

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// defaultMaxMessageBytes is Kafka's default max.message.bytes.
const defaultMaxMessageBytes = 1048588

// probe looks at the pipeline's topics once at start: it logs every missing
// topic with the fix, and learns the DLQ's max.message.bytes so dead
// letters can be cut to fit before they are sent. It never fails the start:
// the write path reports and retries what is still wrong.
func (p *pipeline) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	adm := kadm.NewClient(p.cl)
	names := append([]string{p.cfg.Topic, p.cfg.DLQ}, p.tiers...)
	if p.cfg.Results != "" {
		names = append(names, p.cfg.Results)
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		p.log.Warn("could not look up the pipeline's topics", "err", err)
		return
	}
	for _, n := range names {
		d, ok := details[n]
		if !ok || d.Err != nil {
			p.log.Error("topic missing: records for it will wait, nothing is committed past them; run `redrive topics ensure`", "topic", n)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, p.cfg.DLQ)
	if err != nil {
		return
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
					p.dlqMaxBytes.Store(int64(n))
				}
			}
		}
	}
}
