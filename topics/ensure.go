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
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/redrive/redrive/retry"
)

// ErrProblems is wrapped by the error of Ensure and Check when a topic is
// missing or misconfigured; the Report says which and how to fix it.
var ErrProblems = errors.New("topic problems")

// ErrBadSpec is wrapped when a Spec cannot be ensured or checked.
var ErrBadSpec = errors.New("bad topic spec")

// visibleWithin bounds how long Ensure waits for topics it (or a racing
// instance) just created to show up in the broker's metadata.
const visibleWithin = 30 * time.Second

// Ensure creates the topics of specs that do not exist yet, with their
// partitions, replication and configs, and then checks all of them (see
// Check). It never alters an existing topic: what is wrong with one is
// reported, with the fix.
//
// A topic that another instance creates at the same moment
// (TopicAlreadyExists) counts as existing and is verified like any other.
// A tier or DLQ is created with at least as many partitions as its main
// topic already has.
//
// The error is non-nil if a request failed, a topic could not be created
// or a problem remains (errors.Is(err, ErrProblems)). The Report is filled
// in as far as the broker answered, also when the error is non-nil.
func Ensure(ctx context.Context, adm *kadm.Client, specs []Spec) (Report, error) {
	specs, err := normalize(specs)
	if err != nil {
		return Report{}, err
	}
	md, err := freshMetadata(ctx, adm, names(specs))
	if err != nil {
		return Report{}, fmt.Errorf("topics: list %s: %w", strings.Join(names(specs), ", "), err)
	}

	var (
		errs    []error
		created = make(map[string]bool)
		appear  []string // created by us or by someone else just now
	)
	for _, s := range specs {
		td, listed := md.Topics[s.Name]
		if listed && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			continue // exists, or cannot be described: Check reports it
		}
		parts := s.Partitions
		if main, ok := md.Topics[s.Main]; ok && main.Err == nil && (s.Role == RoleRetry || s.Role == RoleDLQ) {
			parts = max(parts, int32(len(main.Partitions)))
		}
		if parts <= 0 {
			parts = -1 // the broker's default
		}
		repl := s.Replication
		if repl <= 0 {
			repl = -1
		}
		configs := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			configs[k] = kadm.StringPtr(v)
		}
		resp, err := adm.CreateTopics(ctx, parts, repl, configs, s.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("topics: create %s: %w", s.Name, err))
			continue
		}
		r, ok := resp[s.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topics: create %s: the broker's response does not name the topic", s.Name))
		case r.Err == nil:
			created[s.Name] = true
			appear = append(appear, s.Name)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
			appear = append(appear, s.Name) // a racing instance won; verify below
		default:
			errs = append(errs, fmt.Errorf("topics: create %s: %w%s", s.Name, r.Err, detail(r.ErrMessage)))
		}
	}
	if len(appear) > 0 {
		waitVisible(ctx, adm, appear)
	}

	rep, cerrs := check(ctx, adm, specs)
	for i := range rep.Topics {
		rep.Topics[i].Created = created[rep.Topics[i].Spec.Name]
	}
	return rep, outcome(rep, append(errs, cerrs...))
}

// Check reports, without changing anything, whether the topics of specs
// exist and are safe to use:
//
//   - every topic exists;
//   - a tier or DLQ has at least as many partitions as its main topic
//     (Spec.Main) has, or is to be created with;
//   - a tier or DLQ has cleanup.policy=delete, without compact;
//   - a tier keeps records longer than its delay (retention.ms -1,
//     infinite, is fine);
//   - a DLQ keeps records at least as long as its configured retention.ms;
//   - a callbacks topic has cleanup.policy=delete, without compact, and
//     keeps records at least Spec.MinRetention;
//   - the control topic has cleanup.policy=compact, without delete.
//
// Each problem names the topic and the command that fixes it. The error is
// non-nil if a request failed or a problem exists (errors.Is(err,
// ErrProblems)); the Report is filled in as far as the broker answered.
func Check(ctx context.Context, adm *kadm.Client, specs []Spec) (Report, error) {
	specs, err := normalize(specs)
	if err != nil {
		return Report{}, err
	}
	rep, errs := check(ctx, adm, specs)
	return rep, outcome(rep, errs)
}

// normalize rejects nameless specs and more than retry.MaxTiers tiers of
// one main topic, and drops later specs that name a topic again (a results
// topic that is another pipeline's main topic): the first one wins.
func normalize(specs []Spec) ([]Spec, error) {
	seen := make(map[string]bool, len(specs))
	out := make([]Spec, 0, len(specs))
	tiers := map[string]int{}
	for i, s := range specs {
		if s.Name == "" {
			return nil, fmt.Errorf("topics: %w: spec %d (role %q) has no topic name", ErrBadSpec, i, s.Role)
		}
		if seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		if s.Role == RoleRetry {
			if tiers[s.Main]++; tiers[s.Main] > retry.MaxTiers {
				return nil, fmt.Errorf("topics: %w: more than %d tiers for %s", ErrBadSpec, retry.MaxTiers, s.Main)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func names(specs []Spec) []string {
	ns := make([]string, len(specs))
	for i, s := range specs {
		ns[i] = s.Name
	}
	return ns
}

// freshMetadata asks the broker for the topics' metadata. kadm serves
// Metadata from the client's cache when it is younger than MetadataMinAge
// (5 s by default), which would hide a topic created a moment ago, by us or
// by a racing instance. Asking for authorized operations makes kadm send a
// fresh request (and refreshes the cache on the way).
func freshMetadata(ctx context.Context, adm *kadm.Client, topics []string) (kadm.Metadata, error) {
	return adm.Metadata(kadm.WithAuthorizedOps(ctx), topics...)
}

// waitVisible waits until every topic is in the metadata with a leader for
// each partition, up to visibleWithin: a broker learns of a new topic a
// moment after the controller created it. When the wait runs out, Check
// shows what is still missing.
func waitVisible(ctx context.Context, adm *kadm.Client, topics []string) {
	ctx, cancel := context.WithTimeout(ctx, visibleWithin)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := freshMetadata(ctx, adm, topics)
		if err == nil && allVisible(md, topics) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func allVisible(md kadm.Metadata, topics []string) bool {
	for _, t := range topics {
		td, ok := md.Topics[t]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	return true
}

// observed is what the broker says about one topic.
type observed struct {
	exists          bool
	partitions      int32
	replication     int
	cleanup         string
	cleanupKnown    bool
	retentionMs     int64
	retentionKnown  bool
	brokerProblems  []string // the broker could not describe it
	describeFailure bool
}

// check describes every topic of specs and judges it. It returns the
// report and the errors of requests that failed, per topic or entirely.
func check(ctx context.Context, adm *kadm.Client, specs []Spec) (Report, []error) {
	ns := names(specs)
	md, err := freshMetadata(ctx, adm, ns)
	if err != nil {
		return Report{}, []error{fmt.Errorf("topics: list %s: %w", strings.Join(ns, ", "), err)}
	}
	bootstrap := "BROKER"
	if len(md.Brokers) > 0 {
		b := md.Brokers[0]
		bootstrap = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}

	var errs []error
	obs := make(map[string]*observed, len(specs))
	var existing []string
	for _, n := range ns {
		o := &observed{}
		obs[n] = o
		td, ok := md.Topics[n]
		switch {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		case td.Err != nil:
			o.describeFailure = true
			o.brokerProblems = append(o.brokerProblems, fmt.Sprintf("%s: the broker cannot describe it: %v", n, td.Err))
			errs = append(errs, fmt.Errorf("topics: describe %s: %w", n, td.Err))
		default:
			o.exists = true
			o.partitions = int32(len(td.Partitions))
			o.replication = minReplicas(td.Partitions)
			existing = append(existing, n)
		}
	}

	if len(existing) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
		if err != nil {
			// *kadm.ShardErrors: some brokers answered; use what came back.
			errs = append(errs, fmt.Errorf("topics: describe configs of %s: %w", strings.Join(existing, ", "), err))
		}
		got := make(map[string]bool, len(rcs))
		for _, rc := range rcs {
			o, ok := obs[rc.Name]
			if !ok || got[rc.Name] {
				continue
			}
			got[rc.Name] = true
			if rc.Err != nil {
				o.describeFailure = true
				o.brokerProblems = append(o.brokerProblems, fmt.Sprintf("%s: the broker cannot describe its configs: %v%s", rc.Name, rc.Err, detail(rc.ErrMessage)))
				errs = append(errs, fmt.Errorf("topics: describe configs of %s: %w%s", rc.Name, rc.Err, detail(rc.ErrMessage)))
				continue
			}
			for _, c := range rc.Configs {
				switch c.Key {
				case ConfigCleanupPolicy:
					o.cleanup, o.cleanupKnown = c.MaybeValue(), c.Value != nil
				case ConfigRetentionMs:
					if c.Value == nil {
						continue
					}
					if v, perr := strconv.ParseInt(*c.Value, 10, 64); perr == nil {
						o.retentionMs, o.retentionKnown = v, true
					}
				}
			}
		}
		for _, n := range existing {
			if got[n] {
				continue
			}
			o := obs[n]
			o.describeFailure = true
			if err != nil {
				o.brokerProblems = append(o.brokerProblems, fmt.Sprintf("%s: its configs could not be described: %v", n, err))
				continue
			}
			o.brokerProblems = append(o.brokerProblems, n+": the broker returned no configs for it")
			errs = append(errs, fmt.Errorf("topics: describe configs of %s: no configs in the response", n))
		}
	}

	// A tier or DLQ must be as wide as its main topic is, or will be.
	mainParts := make(map[string]int32)
	for _, s := range specs {
		if s.Role != RoleMain {
			continue
		}
		if o := obs[s.Name]; o.exists {
			mainParts[s.Name] = o.partitions
		} else if s.Partitions > 0 {
			mainParts[s.Name] = s.Partitions
		}
	}

	rep := Report{Topics: make([]TopicState, 0, len(specs))}
	for _, s := range specs {
		o := obs[s.Name]
		st := TopicState{
			Spec:          s,
			Exists:        o.exists,
			Partitions:    o.partitions,
			Replication:   o.replication,
			CleanupPolicy: o.cleanup,
			RetentionMs:   o.retentionMs,
			Problems:      o.brokerProblems,
		}
		if !o.describeFailure {
			st.Problems = append(st.Problems, judge(s, o, mainParts, bootstrap)...)
		}
		rep.Topics = append(rep.Topics, st)
	}
	return rep, errs
}

func minReplicas(ps kadm.PartitionDetails) int {
	n := -1
	for _, p := range ps {
		if n < 0 || len(p.Replicas) < n {
			n = len(p.Replicas)
		}
	}
	return max(n, 0)
}

// judge lists what is wrong with one topic, each with its fix.
func judge(s Spec, o *observed, mainParts map[string]int32, bootstrap string) []string {
	if !o.exists {
		return []string{fmt.Sprintf("%s does not exist; fix: redrive topics ensure, or %s", s.Name, createCommand(s, mainParts, bootstrap))}
	}
	if s.Role == RoleControl {
		return judgeControl(s, o, bootstrap)
	}
	if s.Role != RoleRetry && s.Role != RoleDLQ && s.Role != RoleCallbacks {
		return nil
	}
	what, why := "retry tier", "compaction keeps one record per key and drops the rest"
	switch s.Role {
	case RoleDLQ:
		what = "dead-letter topic"
	case RoleCallbacks:
		what, why = "callbacks topic", "compaction keeps the last callback of every job id for ever, so the topic only grows"
	}
	var ps []string

	want, of := s.Partitions, "configured"
	if p, ok := mainParts[s.Main]; ok {
		want, of = p, "its main topic "+s.Main
	}
	if s.Role != RoleCallbacks && want > 0 && o.partitions < want {
		grow := ""
		if of != "configured" {
			grow = "redrive topics ensure --grow, or "
		}
		ps = append(ps, fmt.Sprintf("%s has %s, fewer than %s (%d); fix: %skafka-topics.sh --bootstrap-server %s --alter --topic %s --partitions %d",
			s.Name, partitions(o.partitions), of, want, grow, bootstrap, s.Name, want))
	}

	switch {
	case !o.cleanupKnown:
		ps = append(ps, fmt.Sprintf("%s: the broker did not report cleanup.policy, so it cannot be verified; fix: check it with kafka-configs.sh --bootstrap-server %s --describe --entity-type topics --entity-name %s",
			s.Name, bootstrap, s.Name))
	case !deleteOnly(o.cleanup):
		ps = append(ps, fmt.Sprintf("%s has cleanup.policy=%s; a %s must only delete old records (%s); fix: %s",
			s.Name, o.cleanup, what, why, alterConfig(bootstrap, s.Name, ConfigCleanupPolicy, "delete")))
	}

	wantRetention := specRetention(s)
	if wantRetention <= 0 {
		wantRetention = TierRetention(s.Delay).Milliseconds()
	}
	switch {
	case !o.retentionKnown:
		ps = append(ps, fmt.Sprintf("%s: the broker did not report retention.ms, so it cannot be verified; fix: check it with kafka-configs.sh --bootstrap-server %s --describe --entity-type topics --entity-name %s",
			s.Name, bootstrap, s.Name))
	case o.retentionMs < 0: // -1: kept forever
	case s.Role == RoleRetry && s.Delay > 0 && o.retentionMs < s.Delay.Milliseconds():
		ps = append(ps, fmt.Sprintf("%s keeps records for %s (retention.ms=%d), less than its delay of %s, so records are deleted before they are due; fix: %s",
			s.Name, formatMs(o.retentionMs), o.retentionMs, formatMs(s.Delay.Milliseconds()), alterConfig(bootstrap, s.Name, ConfigRetentionMs, strconv.FormatInt(wantRetention, 10))))
	case s.Role == RoleCallbacks && s.MinRetention > 0 && o.retentionMs < s.MinRetention.Milliseconds():
		ps = append(ps, fmt.Sprintf("%s keeps callbacks for %s (retention.ms=%d), less than the %s a callback must stay readable (the callback wait and its margin), so a processor starting up misses callbacks and polls instead; fix: %s",
			s.Name, formatMs(o.retentionMs), o.retentionMs, formatMs(s.MinRetention.Milliseconds()), alterConfig(bootstrap, s.Name, ConfigRetentionMs, strconv.FormatInt(wantRetention, 10))))
	case s.Role == RoleDLQ && specRetention(s) > 0 && o.retentionMs < specRetention(s):
		ps = append(ps, fmt.Sprintf("%s keeps dead letters for %s (retention.ms=%d), less than the configured %s; fix: %s",
			s.Name, formatMs(o.retentionMs), o.retentionMs, formatMs(specRetention(s)), alterConfig(bootstrap, s.Name, ConfigRetentionMs, strconv.FormatInt(wantRetention, 10))))
	}
	return ps
}

// judgeControl lists what is wrong with the control topic: anything but
// compact alone. Its partitions are not judged: records of one key
// always go to one partition, so a wider topic still keeps each key's
// latest.
func judgeControl(s Spec, o *observed, bootstrap string) []string {
	switch {
	case !o.cleanupKnown:
		return []string{fmt.Sprintf("%s: the broker did not report cleanup.policy, so it cannot be verified; fix: check it with kafka-configs.sh --bootstrap-server %s --describe --entity-type topics --entity-name %s",
			s.Name, bootstrap, s.Name)}
	case !compactOnly(o.cleanup):
		return []string{fmt.Sprintf("%s has cleanup.policy=%s; the control topic must be compacted and never delete (the latest record of each key is a pipeline's state: a pause deleted by retention would end by itself, and processes starting up would not see it); fix: %s",
			s.Name, o.cleanup, alterConfig(bootstrap, s.Name, ConfigCleanupPolicy, "compact"))}
	}
	return nil
}

// compactOnly reports whether a cleanup.policy value compacts and never
// deletes.
func compactOnly(policy string) bool {
	var compact bool
	for p := range strings.SplitSeq(policy, ",") {
		switch strings.TrimSpace(p) {
		case "compact":
			compact = true
		case "delete":
			return false
		}
	}
	return compact
}

// deleteOnly reports whether a cleanup.policy value deletes old records and
// never compacts.
func deleteOnly(policy string) bool {
	var del bool
	for p := range strings.SplitSeq(policy, ",") {
		switch strings.TrimSpace(p) {
		case "delete":
			del = true
		case "compact":
			return false
		}
	}
	return del
}

// specRetention is the spec's retention.ms, 0 if it sets none.
func specRetention(s Spec) int64 {
	v, err := strconv.ParseInt(s.Configs[ConfigRetentionMs], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func alterConfig(bootstrap, topic, key, value string) string {
	return fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s=%s",
		bootstrap, topic, key, value)
}

func createCommand(s Spec, mainParts map[string]int32, bootstrap string) string {
	parts := s.Partitions
	if p, ok := mainParts[s.Main]; ok && (s.Role == RoleRetry || s.Role == RoleDLQ) {
		parts = max(parts, p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kafka-topics.sh --bootstrap-server %s --create --topic %s", bootstrap, s.Name)
	if parts > 0 {
		fmt.Fprintf(&b, " --partitions %d", parts)
	}
	if s.Replication > 0 {
		fmt.Fprintf(&b, " --replication-factor %d", s.Replication)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
		fmt.Fprintf(&b, " --config %s=%s", k, s.Configs[k])
	}
	return b.String()
}

func partitions(n int32) string {
	if n == 1 {
		return "1 partition"
	}
	return fmt.Sprintf("%d partitions", n)
}

func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

// outcome joins the request errors with ErrProblems when the report has
// problems. The problems themselves are in the report; the error names
// the topics.
func outcome(rep Report, errs []error) error {
	var bad []string
	n := 0
	for _, t := range rep.Topics {
		if len(t.Problems) > 0 || !t.Exists {
			bad = append(bad, t.Spec.Name)
			n += max(len(t.Problems), 1)
		}
	}
	if len(bad) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d in %s", ErrProblems, n, strings.Join(bad, ", ")))
	}
	return errors.Join(errs...)
}
