package share

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor"
)

// tally follows topics from their start while the test runs and counts
// records per value: the tests' requests carry their id as key and value,
// their dead letters keep it, and the handlers write it as the result.
type tally struct {
	mu    sync.Mutex
	by    map[string]map[string]int // topic → value → records
	recs  map[string][]*kgo.Record  // topic → records (kept: headers are read)
	first map[string]time.Time      // value → when first seen, on any topic
	last  time.Time                 // when a new value was last seen
}

// follow starts a tally of topics; it stops when the test ends.
func follow(t testing.TB, c *kafkatest.Cluster, topics ...string) *tally {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	ta := &tally{by: map[string]map[string]int{}, recs: map[string][]*kgo.Record{}, first: map[string]time.Time{}}
	for _, tp := range topics {
		ta.by[tp] = map[string]int{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			ta.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				v := string(r.Value)
				if ta.by[r.Topic][v] == 0 {
					ta.last = now
				}
				if _, ok := ta.first[v]; !ok {
					ta.first[v] = now
				}
				ta.by[r.Topic][v]++
				ta.recs[r.Topic] = append(ta.recs[r.Topic], r)
			})
			ta.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ta
}

// distinct is how many values topic holds.
func (ta *tally) distinct(topic string) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return len(ta.by[topic])
}

// seen is how many values the topics hold, together.
func (ta *tally) seen() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return len(ta.first)
}

// counts is a copy of topic's records per value.
func (ta *tally) counts(topic string) map[string]int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	out := make(map[string]int, len(ta.by[topic]))
	for k, v := range ta.by[topic] {
		out[k] = v
	}
	return out
}

// records is a copy of topic's records.
func (ta *tally) records(topic string) []*kgo.Record {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return slices.Clone(ta.recs[topic])
}

// firstSeen is when value was first seen (ok false: never).
func (ta *tally) firstSeen(v string) (at time.Time, ok bool) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	at, ok = ta.first[v]
	return at, ok
}

// lastNew is when a value was last seen for the first time.
func (ta *tally) lastNew() time.Time {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.last
}

// waitFor waits until cond holds or timeout passes (false).
func waitFor(timeout time.Duration, cond func() bool) bool {
	return kafkatest.Eventually(timeout, cond)
}

// owned is what the consumer group gives the member with client id
// "redrive-<instance>" (the processor's), per topic.
func owned(ctx context.Context, adm *kadm.Client, group, instance string) (map[string][]int32, error) {
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	g, ok := gs[group]
	if !ok || g.Err != nil {
		return nil, fmt.Errorf("describe %s: %v", group, g.Err)
	}
	out := map[string][]int32{}
	for _, m := range g.Members {
		if m.ClientID != "redrive-"+instance {
			continue
		}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range c.Topics {
				out[tp.Topic] = append(out[tp.Topic], tp.Partitions...)
			}
		}
	}
	return out, nil
}

// uncommitted is, over the partitions tps, how many records lie past
// group's committed offset: what Kafka delivers again to their next owner.
func uncommitted(ctx context.Context, adm *kadm.Client, group string, tps map[string][]int32) (int64, error) {
	if len(tps) == 0 {
		return 0, nil
	}
	topics := make([]string, 0, len(tps))
	for tp := range tps {
		topics = append(topics, tp)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var n int64
	for tp, parts := range tps {
		for _, p := range parts {
			end, ok := ends.Lookup(tp, p)
			if !ok || end.Err != nil {
				return 0, fmt.Errorf("end offset of %s/%d: %v", tp, p, end.Err)
			}
			from := int64(0)
			if o, ok := offs.Lookup(tp, p); ok && o.Err == nil && o.At >= 0 {
				from = o.At
			}
			n += max(0, end.Offset-from)
		}
	}
	return n, nil
}

// drained says why pipeline p has work left ("" when none): the consumer
// group's lag on the tiers (and on the main topic in group mode), the
// share group's on the main topic in share mode.
func drained(t testing.TB, c *kafkatest.Cluster, adm *kadm.Client, p processor.Pipeline, parts int32) string {
	t.Helper()
	topics := p.TierTopics()
	if p.Consume != processor.ConsumeShare {
		topics = append(topics, p.Topic)
	}
	var why []string
	if s := c.LagProblem(t, p.GroupID(), topics, parts); s != "" {
		why = append(why, s)
	}
	if p.Consume == processor.ConsumeShare {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := adm.DescribeShareGroupOffsets(ctx, p.ShareGroupID())
		g, ok := d[p.ShareGroupID()]
		switch {
		case err != nil:
			why = append(why, "share lag: "+err.Error())
		case !ok || g.Err != nil:
			why = append(why, fmt.Sprintf("share lag: %v", g.Err))
		case int32(len(g.Offsets[p.Topic])) != parts:
			why = append(why, fmt.Sprintf("share lag: %d partitions of %s described", len(g.Offsets[p.Topic]), p.Topic))
		default:
			for part, po := range g.Offsets[p.Topic] {
				if po.Lag != 0 {
					why = append(why, fmt.Sprintf("%s/%d: share lag %d", p.Topic, part, po.Lag))
				}
			}
		}
	}
	return strings.Join(why, "; ")
}
