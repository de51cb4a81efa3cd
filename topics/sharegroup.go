package topics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
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

// EnsureShareGroup sets ShareGroupConfigs on group (it needs
// ALTER_CONFIGS on the group). It may run before the group exists: the
// configs wait for it.
func EnsureShareGroup(ctx context.Context, cl *kgo.Client, group string) error {
	return SetGroupConfigs(ctx, cl, group, ShareGroupConfigs)
}

// SetGroupConfigs sets configs on group (IncrementalAlterConfigs of the
// GROUP resource), leaving its other configs as they are.
func SetGroupConfigs(ctx context.Context, cl *kgo.Client, group string, configs map[string]string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	var set []string
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = name, kmsg.StringPtr(configs[name]), kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
		set = append(set, name+"="+configs[name])
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("group %s: set %s: %w", group, strings.Join(set, ", "), err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("group %s: set %s: %w%s", group, strings.Join(set, ", "), err, msg)
		}
	}
	return nil
}

// ShareAcknowledged is how far share group has acknowledged each partition
// of topic, where the broker says (ends: topic's end offsets): the end
// offset less the broker's share lag where it gives one (the start offset
// it reports can trail what is acknowledged after it), else the
// share-partition start offset. A partition the group has not started
// (the broker says -1) is left out: it starts at the log start
// (share.auto.offset.reset=earliest). A group that does not exist yet has
// none.
func ShareAcknowledged(ctx context.Context, adm *kadm.Client, group, topic string, ends kadm.ListedOffsets) (map[int32]int64, error) {
	d, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	g, ok := d[group]
	if !ok || errors.Is(g.Err, kerr.GroupIDNotFound) {
		return out, nil
	}
	if g.Err != nil {
		return nil, g.Err
	}
	for part, so := range g.Offsets[topic] {
		at := so.StartOffset
		if end, ok := ends.Lookup(topic, part); ok && end.Err == nil && so.Lag >= 0 {
			at = end.Offset - so.Lag
		}
		if so.Err == nil && at >= 0 {
			out[part] = at
		}
	}
	return out, nil
}

// ShareState is a pipeline's share group as the broker has it: what
// EnsureShare or CheckShare found.
type ShareState struct {
	// Pipeline, its share group (ShareGroupID) and the main topic the
	// group reads.
	Pipeline, Group, Topic string
	// Configs are the group's effective ShareGroupConfigs keys, the
	// broker's default included; a key the broker did not report is
	// missing.
	Configs map[string]string
	// Seeded: this EnsureShare call set the group's start offsets to the
	// consumer group's (SeedShareGroup).
	Seeded bool
	// Problems say what is wrong, each starting with the group's name and
	// ending with the fix.
	Problems []string
}

// OK reports whether the share group has no problem.
func (s ShareState) OK() bool { return len(s.Problems) == 0 }

// EnsureShare makes a pipeline's share group ready to read mainTopic:
// it sets ShareGroupConfigs (EnsureShareGroup), then seeds the start
// offsets of a new group from the consumer group's (SeedShareGroup), then
// checks the group (CheckShare). A broker without share groups is a
// problem, and nothing is changed. Run it after the topics exist: a main
// topic that does not is not seeded.
//
// The error is non-nil if a request failed or a problem remains
// (errors.Is(err, ErrProblems)); the ShareState is filled in as far as
// the broker answered.
func EnsureShare(ctx context.Context, cl *kgo.Client, pipeline, mainTopic string) (ShareState, error) {
	st := ShareState{Pipeline: pipeline, Group: ShareGroupID(pipeline), Topic: mainTopic}
	bootstrap, ok, err := shareSupported(ctx, cl, &st)
	if !ok {
		return st, shareOutcome(st, err)
	}
	var errs []error
	if err := EnsureShareGroup(ctx, cl, st.Group); err != nil {
		errs = append(errs, err)
	}
	seeded, err := SeedShareGroup(ctx, kadm.NewClient(cl), pipeline, mainTopic)
	st.Seeded = seeded
	if err != nil {
		errs = append(errs, err)
	}
	if err := judgeShare(ctx, cl, &st, bootstrap); err != nil {
		errs = append(errs, err)
	}
	return st, shareOutcome(st, errors.Join(errs...))
}

// CheckShare reports, without changing anything, whether a pipeline's
// share group can read its main topic as redrive needs: the brokers
// serve share groups (CheckShareGroups), and the group's
// share.auto.offset.reset is earliest and its share.isolation.level
// read_committed (ShareGroupConfigs; a group that sets neither has the
// broker's defaults, latest and read_uncommitted: a new group would skip
// every request written before its first member, and handle requests of
// aborted transactions). Reading the group's configs needs
// DESCRIBE_CONFIGS on it.
//
// The error is non-nil if a request failed or a problem exists
// (errors.Is(err, ErrProblems)).
func CheckShare(ctx context.Context, cl *kgo.Client, pipeline, mainTopic string) (ShareState, error) {
	st := ShareState{Pipeline: pipeline, Group: ShareGroupID(pipeline), Topic: mainTopic}
	bootstrap, ok, err := shareSupported(ctx, cl, &st)
	if !ok {
		return st, shareOutcome(st, err)
	}
	return st, shareOutcome(st, judgeShare(ctx, cl, &st, bootstrap))
}

// shareSupported runs CheckShareGroups: ok when the brokers serve share
// groups; an unsupporting broker is st's problem, any other failure the
// error. bootstrap is a broker's host:port for the fix commands.
func shareSupported(ctx context.Context, cl *kgo.Client, st *ShareState) (bootstrap string, ok bool, err error) {
	bootstrap = "BROKER"
	if md, err := kadm.NewClient(cl).BrokerMetadata(ctx); err == nil && len(md.Brokers) > 0 {
		b := md.Brokers[0]
		bootstrap = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	err = CheckShareGroups(ctx, cl)
	var no *NoShareGroupsError
	switch {
	case errors.As(err, &no):
		st.Problems = append(st.Problems, fmt.Sprintf("%s: pipeline %s has consume: share, but %s", st.Group, st.Pipeline, no))
		return bootstrap, false, nil
	case err != nil:
		return bootstrap, false, err
	}
	return bootstrap, true, nil
}

// judgeShare describes the group's configs (DescribeConfigs of the GROUP
// resource: kadm has no call for it) into st and adds a problem for each
// config that is not ShareGroupConfigs'.
func judgeShare(ctx context.Context, cl *kgo.Client, st *ShareState, bootstrap string) error {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = st.Group
	res.ConfigNames = shareConfigNames()
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("share group %s: describe its configs: %w", st.Group, err)
	}
	var r *kmsg.DescribeConfigsResponseResource
	for i := range resp.Resources {
		if resp.Resources[i].ResourceName == st.Group {
			r = &resp.Resources[i]
		}
	}
	if r == nil {
		return fmt.Errorf("share group %s: describe its configs: the broker's response does not name the group", st.Group)
	}
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		if errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			st.Problems = append(st.Problems, fmt.Sprintf("%s: the broker refused to describe its configs (%v%s), so they cannot be verified; fix: grant ACL DESCRIBE_CONFIGS (and ALTER_CONFIGS, for topics ensure and the processor's start) on group %s (kafka-acls.sh --bootstrap-server %s --add --allow-principal User:<principal> --operation DescribeConfigs --operation AlterConfigs --group %s)",
				st.Group, err, detail(msg), st.Group, bootstrap, st.Group))
			return nil
		}
		return fmt.Errorf("share group %s: describe its configs: %w%s", st.Group, err, detail(msg))
	}
	st.Configs = make(map[string]string, len(ShareGroupConfigs))
	for _, c := range r.Configs {
		if _, ok := ShareGroupConfigs[c.Name]; ok && c.Value != nil {
			st.Configs[c.Name] = *c.Value
		}
	}
	var wrong []string
	for _, k := range shareConfigNames() {
		got, ok := st.Configs[k]
		switch {
		case !ok:
			wrong = append(wrong, k+" is not reported (the broker's default: "+shareBrokerDefaults[k]+")")
		case got != ShareGroupConfigs[k]:
			wrong = append(wrong, k+"="+got)
		}
	}
	if len(wrong) > 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("%s has %s; redrive's share group must start at the earliest record (a new group would skip every request written before its first member) and never see aborted transactions; fix: redrive topics ensure, or %s",
			st.Group, strings.Join(wrong, ", "), alterShareConfigs(bootstrap, st.Group)))
	}
	return nil
}

// shareBrokerDefaults are Kafka's defaults of ShareGroupConfigs' keys
// (group.share.auto.offset.reset and group.share.isolation.level): what
// a group that sets neither gets.
var shareBrokerDefaults = map[string]string{
	"share.auto.offset.reset": "latest",
	"share.isolation.level":   "read_uncommitted",
}

// shareConfigNames are ShareGroupConfigs' keys, sorted.
func shareConfigNames() []string { return slices.Sorted(maps.Keys(ShareGroupConfigs)) }

// alterShareConfigs is the command that sets ShareGroupConfigs on group.
func alterShareConfigs(bootstrap, group string) string {
	var kv []string
	for _, k := range shareConfigNames() {
		kv = append(kv, k+"="+ShareGroupConfigs[k])
	}
	return fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type groups --entity-name %s --add-config %s",
		bootstrap, group, strings.Join(kv, ","))
}

// shareOutcome joins err with ErrProblems when st has problems.
func shareOutcome(st ShareState, err error) error {
	if len(st.Problems) > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d in share group %s", ErrProblems, len(st.Problems), st.Group))
	}
	return err
}
