package txnoffsets

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// polled is a request as franz-go builds it: the polled head of two
// topics, with their ids and the member id as each partition's metadata.
func polled() *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.MemberID = "member-1"
	for i, topic := range []string{"orders", "orders.retry.5s"} {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, [16]byte{byte(i + 1)}
		for p := range int32(3) {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, 1000, 7, &req.MemberID
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// commits is what req commits: topic/id/partition → offset@epoch metadata.
func commits(req *kmsg.TxnOffsetCommitRequest) []string {
	var out []string
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			m := "<nil>"
			if p.Metadata != nil {
				m = *p.Metadata
			}
			out = append(out, fmt.Sprintf("%s/%x/%d %d@%d %s", t.Topic, t.TopicID[0], p.Partition, p.Offset, p.LeaderEpoch, m))
		}
	}
	return out
}

func TestCommitExactly(t *testing.T) {
	req := polled()
	CommitExactly(req, map[string]map[int32]kgo.EpochOffset{
		"orders.retry.5s": {2: {Epoch: 7, Offset: 40}, 0: {Epoch: 6, Offset: 12}},
		"orders":          {1: {Epoch: -1, Offset: 5}},
		"orders.dlq":      {0: {Epoch: 3, Offset: 9}}, // not polled: no id
		"orders.results":  {},                         // nothing to commit
	}, nil)
	want := []string{
		"orders/1/1 5@-1 member-1",
		"orders.dlq/0/0 9@3 member-1",
		"orders.retry.5s/2/0 12@6 member-1",
		"orders.retry.5s/2/2 40@7 member-1",
	}
	if got := commits(req); !reflect.DeepEqual(got, want) {
		t.Errorf("committed %q, want %q", got, want)
	}
	// The member id is the request's, as franz-go commits it.
	req.MemberID = "member-2"
	if got := *req.Topics[0].Partitions[0].Metadata; got != "member-2" {
		t.Errorf("metadata %q does not follow the request's member id", got)
	}
	if req.Group != "" || req.TransactionalID != "" {
		t.Errorf("changed more than the topics: %+v", req)
	}
}

func TestCommitExactlyMetadata(t *testing.T) {
	req := polled()
	CommitExactly(req, map[string]map[int32]kgo.EpochOffset{"orders": {0: {Epoch: -1, Offset: 3}, 2: {Epoch: -1, Offset: 8}}},
		func(topic string, part int32) string {
			if part == 0 {
				return ""
			}
			return fmt.Sprintf("%s-%d", topic, part)
		})
	want := []string{"orders/1/0 3@-1 ", "orders/1/2 8@-1 orders-2"}
	if got := commits(req); !reflect.DeepEqual(got, want) {
		t.Errorf("committed %q, want %q", got, want)
	}
}

// Nothing to commit leaves no topic: franz-go's polled head is not sent.
func TestCommitExactlyNothing(t *testing.T) {
	for _, offsets := range []map[string]map[int32]kgo.EpochOffset{nil, {"orders": {}}} {
		req := polled()
		CommitExactly(req, offsets, nil)
		if len(req.Topics) != 0 {
			t.Errorf("%v: committed %q, want nothing", offsets, commits(req))
		}
	}
}
