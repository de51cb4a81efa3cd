package topics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Growth is one topic Grow widened.
type Growth struct {
	Topic    string
	From, To int32
}

// Grow adds partitions to every existing tier and DLQ of specs that has
// fewer than its main topic has now, up to the main topic's count, and
// waits until the broker's metadata shows them. It is the one change this
// package makes to an existing topic, and only when asked (`redrive topics
// ensure --grow`): adding partitions loses nothing (records already
// written stay where they are and are still consumed), while a tier or DLQ
// narrower than its main topic is a bottleneck. It never touches a main,
// results or callbacks topic, never removes partitions and never changes
// a config. A topic that does not exist is left to Ensure.
//
// It returns the topics it widened, also when the error is non-nil (a
// request failed for some).
func Grow(ctx context.Context, adm *kadm.Client, specs []Spec) ([]Growth, error) {
	specs, err := normalize(specs)
	if err != nil {
		return nil, err
	}
	md, err := freshMetadata(ctx, adm, names(specs))
	if err != nil {
		return nil, fmt.Errorf("topics: list %s: %w", strings.Join(names(specs), ", "), err)
	}
	width := func(name string) (int32, bool) {
		td, ok := md.Topics[name]
		if !ok || td.Err != nil {
			return 0, false
		}
		return int32(len(td.Partitions)), true
	}
	var (
		grown []Growth
		errs  []error
	)
	for _, s := range specs {
		if s.Role != RoleRetry && s.Role != RoleDLQ {
			continue
		}
		main, ok := width(s.Main)
		if !ok {
			continue
		}
		have, ok := width(s.Name)
		if !ok || have >= main {
			continue
		}
		resp, err := adm.UpdatePartitions(ctx, int(main), s.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("topics: add partitions to %s: %w", s.Name, err))
			continue
		}
		r, ok := resp[s.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topics: add partitions to %s: the broker's response does not name the topic", s.Name))
		case r.Err == nil, errors.Is(r.Err, kerr.InvalidPartitions) && racedWider(ctx, adm, s.Name, main):
			// InvalidPartitions: a racing instance widened it first.
			grown = append(grown, Growth{Topic: s.Name, From: have, To: main})
		default:
			errs = append(errs, fmt.Errorf("topics: add partitions to %s: %w%s", s.Name, r.Err, detail(r.ErrMessage)))
		}
	}
	if len(grown) > 0 {
		waitWidths(ctx, adm, grown)
	}
	return grown, errors.Join(errs...)
}

// racedWider reports whether topic already has at least n partitions.
func racedWider(ctx context.Context, adm *kadm.Client, topic string, n int32) bool {
	md, err := freshMetadata(ctx, adm, []string{topic})
	if err != nil {
		return false
	}
	td, ok := md.Topics[topic]
	return ok && td.Err == nil && int32(len(td.Partitions)) >= n
}

// waitWidths waits, up to visibleWithin, until the metadata shows every
// grown topic with its new partitions, each with a leader.
func waitWidths(ctx context.Context, adm *kadm.Client, gs []Growth) {
	ctx, cancel := context.WithTimeout(ctx, visibleWithin)
	defer cancel()
	ns := make([]string, len(gs))
	for i, g := range gs {
		ns[i] = g.Topic
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := freshMetadata(ctx, adm, ns)
		if err == nil && allVisible(md, ns) {
			wide := true
			for _, g := range gs {
				wide = wide && int32(len(md.Topics[g.Topic].Partitions)) >= g.To
			}
			if wide {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// MarkGrown notes in r the topics Grow widened.
func (r Report) MarkGrown(gs []Growth) {
	for _, g := range gs {
		for i := range r.Topics {
			if r.Topics[i].Spec.Name == g.Topic {
				r.Topics[i].GrownFrom = g.From
			}
		}
	}
}
