package txnoffsets

import (
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CommitExactly rewrites req, the TxnOffsetCommit franz-go is about to
// send, to commit offsets and nothing else: franz-go fills it with the
// polled positions, which run ahead of the records finished.
//
// A topic keeps the id franz-go put in req; one that was not in req has
// none, and franz-go then sends a version that matches topics by name.
// Each partition's metadata is meta's for it or, with meta nil, the
// request's member id, as franz-go itself commits. A topic without
// partitions is left out; topics and partitions go in order.
func CommitExactly(req *kmsg.TxnOffsetCommitRequest, offsets map[string]map[int32]kgo.EpochOffset, meta func(topic string, partition int32) string) {
	ids := make(map[string][16]byte, len(req.Topics))
	for _, t := range req.Topics {
		ids[t.Topic] = t.TopicID
	}
	var topics []kmsg.TxnOffsetCommitRequestTopic
	for _, topic := range slices.Sorted(maps.Keys(offsets)) {
		parts := offsets[topic]
		if len(parts) == 0 {
			continue
		}
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, ids[topic]
		for _, part := range slices.Sorted(maps.Keys(parts)) {
			eo := parts[part]
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = part, eo.Offset, eo.Epoch
			rp.Metadata = &req.MemberID
			if meta != nil {
				m := meta(topic, part)
				rp.Metadata = &m
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		topics = append(topics, rt)
	}
	req.Topics = topics
}
