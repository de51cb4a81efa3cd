package topics

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// SeedShareGroup starts a new share group where the pipeline's consumer
// group left off: when ShareGroupID(pipeline) has no start offset on
// mainTopic yet and GroupID(pipeline) has committed offsets there, it
// sets the share group's start offsets to those commits
// (AlterShareGroupOffsets). A pipeline switched from consume: group to
// share then neither reads the retained topic again (share groups start
// at earliest, ShareGroupConfigs) nor skips what arrived while it was
// stopped. Partitions without a commit are left to the group's
// share.auto.offset.reset; a commit outside the partition's offsets
// (deleted by retention, or a topic created again) becomes its log start
// offset, as the consumer group would reset it.
//
// seeded is true when it set offsets. A share group that already has a
// start offset on mainTopic is never changed, so running it again (topics
// ensure, every replica's start) is harmless. A group with members is
// being read already: the broker refuses to move its offsets
// (NON_EMPTY_GROUP), and SeedShareGroup leaves it as it is, without an
// error. It needs DESCRIBE on both groups and READ on the share group and
// on mainTopic.
func SeedShareGroup(ctx context.Context, adm *kadm.Client, pipeline, mainTopic string) (seeded bool, err error) {
	share, group := ShareGroupID(pipeline), GroupID(pipeline)
	described, err := adm.DescribeShareGroupOffsets(ctx, share)
	if err != nil {
		return false, fmt.Errorf("share group %s: describe its start offsets: %w", share, err)
	}
	if d, ok := described[share]; ok {
		if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
			return false, fmt.Errorf("share group %s: describe its start offsets: %w", share, d.Err)
		}
		for _, o := range d.Offsets[mainTopic] {
			if o.Err == nil && o.StartOffset >= 0 {
				return false, nil // started already: its offsets are its own
			}
		}
	}

	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return false, nil // never committed: nothing to start from
	}
	if err != nil {
		return false, fmt.Errorf("consumer group %s: fetch its offsets: %w", group, err)
	}
	at := make(map[int32]int64)
	for p, o := range committed[mainTopic] {
		if o.Err == nil && o.At >= 0 {
			at[p] = o.At
		}
	}
	if len(at) == 0 {
		return false, nil
	}

	starts, err := adm.ListStartOffsets(ctx, mainTopic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return false, fmt.Errorf("%s: list its start offsets: %w", mainTopic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, mainTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return false, fmt.Errorf("%s: list its end offsets: %w", mainTopic, err)
	}
	seed := make(kadm.Offsets)
	for p, o := range at {
		start, sok := starts.Lookup(mainTopic, p)
		end, eok := ends.Lookup(mainTopic, p)
		if !sok || !eok {
			continue // a partition no longer there
		}
		if o < start.Offset || o > end.Offset {
			o = start.Offset
		}
		seed.Add(kadm.Offset{Topic: mainTopic, Partition: p, At: o})
	}
	if len(seed) == 0 {
		return false, nil
	}

	resp, err := adm.AlterShareGroupOffsets(ctx, share, seed)
	if errors.Is(err, kerr.NonEmptyGroup) {
		return false, nil
	}
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return false, fmt.Errorf("share group %s: set its start offsets on %s to the consumer group %s's: %w", share, mainTopic, group, err)
	}
	return true, nil
}
