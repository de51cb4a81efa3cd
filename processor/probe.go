package processor

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redrive/redrive/dlq"
)

// minBatchBytes is the smallest ProducerBatchMaxBytes franz-go takes.
const minBatchBytes = 512

// probe looks at the pipeline's topics once at start: it logs every missing
// topic with the fix, and learns the output topics' max.message.bytes so
// that outcome records are sized to fit before they are sent. It never
// fails the start: the write path reports and retries what is still wrong.
func (p *pipeline) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	adm := kadm.NewClient(p.cl)
	outs := append([]string{p.cfg.DLQ}, p.tiers...)
	if p.cfg.Results != "" {
		outs = append(outs, p.cfg.Results)
	}
	if f := p.cfg.Breaker.FailoverTo; f != "" && !p.cfg.Breaker.Disabled {
		outs = append(outs, f)
	}
	names := append([]string{p.cfg.Topic}, outs...)
	if p.cbs != nil {
		names = append(names, p.cbs.cfg.Topic)
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		p.log.Warn("could not look up the pipeline's topics", "err", err)
		return
	}
	for _, n := range names {
		d, ok := details[n]
		if ok && d.Err == nil {
			continue
		}
		if p.cbs != nil && n == p.cbs.cfg.Topic {
			p.log.Error("callbacks topic "+n+" missing: no callback can be read, every submitted job is polled after the callback wait; run `redrive topics ensure`", "topic", n)
			continue
		}
		p.log.Error("topic missing: records for it will wait, nothing is committed past them; run `redrive topics ensure`", "topic", n)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, outs...)
	if err != nil {
		return
	}
	limits := map[string]int{}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
					limits[rc.Name] = n
				}
			}
		}
	}
	p.topicMax.Store(&limits)
	if l := p.limit(p.cfg.DLQ); l < dlq.MinRecordBytes {
		p.log.Error("the DLQ takes records of fewer bytes than every dead letter can be cut to; raise its max.message.bytes", "topic", p.cfg.DLQ, "limit", l, "need", dlq.MinRecordBytes)
	}
}

// topicLimit is topic's max.message.bytes as learned at start, Kafka's
// default when unknown.
func (p *pipeline) topicLimit(topic string) int {
	if m := p.topicMax.Load(); m != nil {
		if n, ok := (*m)[topic]; ok {
			return n
		}
	}
	return dlq.DefaultMaxRecordBytes
}

// limit is the size (dlq.EncodedSize) a record for topic must fit: the
// smallest of the topic's max.message.bytes, the producer's batch limit
// and (less its request overhead) its largest write.
func (p *pipeline) limit(topic string) int {
	l := p.topicLimit(topic)
	if p.batchMax != nil {
		l = min(l, int(p.batchMax(topic)))
	} else {
		l = min(l, dlq.DefaultProducerBatchBytes)
	}
	if p.brokerMax > 0 {
		// A produce request's header and topic name, generously.
		l = min(l, int(p.brokerMax)-1024-len(topic))
	}
	return l
}
