package topics_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/topics"
)

// apiVersions is the ApiVersions answer of a broker of vs's release: its
// keys, the features it supports and those a cluster it formats has.
func apiVersions(vs *kversion.Versions) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	vs.EachMaxKeyVersion(func(k, v int16) {
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MaxVersion = k, v
		resp.ApiKeys = append(resp.ApiKeys, ak)
	})
	vs.EachSupportedFeature(func(name string, lo, hi int16) {
		f := kmsg.NewApiVersionsResponseSupportedFeature()
		f.Name, f.MinVersion, f.MaxVersion = name, lo, hi
		resp.SupportedFeatures = append(resp.SupportedFeatures, f)
	})
	vs.EachFinalizedFeature(func(name string, level int16) {
		if level == 0 {
			return // a broker lists a finalized feature only above 0
		}
		f := kmsg.NewApiVersionsResponseFinalizedFeature()
		f.Name, f.MinVersionLevel, f.MaxVersionLevel = name, level, level
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, f)
	})
	resp.FinalizedFeaturesEpoch = 1
	return resp
}

func TestShareGroupsSupport(t *testing.T) {
	noFeature := apiVersions(kversion.V4_2_0())
	noFeature.FinalizedFeatures = slices.DeleteFunc(noFeature.FinalizedFeatures, func(f kmsg.ApiVersionsResponseFinalizedFeature) bool {
		return f.Name == topics.FeatureShareVersion
	})
	noFetch := apiVersions(kversion.V4_2_0())
	noFetch.ApiKeys = slices.DeleteFunc(noFetch.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == 78 })
	epochless := apiVersions(kversion.V4_2_0())
	epochless.FinalizedFeaturesEpoch = -1 // features not known yet: not enabled

	for _, tc := range []struct {
		name string
		resp *kmsg.ApiVersionsResponse
		want string // "": supported
	}{
		{"4.4", apiVersions(kversion.V4_4_0()), ""},
		{"4.2", apiVersions(kversion.V4_2_0()), ""},
		{"4.1: the keys as a preview, the feature off", apiVersions(kversion.V4_1_0()),
			"the broker at 127.0.0.1:9092 (Apache Kafka v4.1, guessed from its API versions) does not support share groups (feature share.version is 0; share groups need Apache Kafka 4.2 or newer with share.version=1); fix: kafka-features.sh --bootstrap-server 127.0.0.1:9092 upgrade --feature share.version=1"},
		{"4.0: no share requests", apiVersions(kversion.V4_0_0()),
			"the broker at 127.0.0.1:9092 (Apache Kafka v4.0, guessed from its API versions) does not support share groups (it has no ShareGroupHeartbeat (API key 76), ShareFetch (API key 78), ShareAcknowledge (API key 79); share groups need Apache Kafka 4.2 or newer with share.version=1)"},
		{"3.9", apiVersions(kversion.V3_9_0()), "does not support share groups (it has no ShareGroupHeartbeat"},
		{"share.version not finalized", noFeature, "(feature share.version is 0; share groups need"},
		{"ShareFetch missing", noFetch, "(it has no ShareFetch (API key 78); share groups need"},
		{"no finalized features yet", epochless, "(feature share.version is 0;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := topics.ShareGroupsSupport("127.0.0.1:9092", tc.resp)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ShareGroupsSupport = %v, want supported", err)
				}
				return
			}
			var no *topics.NoShareGroupsError
			if !errors.As(err, &no) || !errors.Is(err, topics.ErrNoShareGroups) || no.Broker != "127.0.0.1:9092" {
				t.Fatalf("ShareGroupsSupport = %#v, want a *NoShareGroupsError of 127.0.0.1:9092", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ShareGroupsSupport = %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// shareCluster is a broker that serves share groups: kfake, or a real
// one of Kafka 4.2 or newer (an older one is Missing: it fails the test
// under CI, skips it elsewhere).
func shareCluster(t *testing.T) (*kafkatest.Cluster, *kgo.Client) {
	t.Helper()
	c := kafkatest.New(t)
	cl := c.Client(t)
	if err := topics.CheckShareGroups(ctxFor(t), cl); err != nil {
		if errors.Is(err, topics.ErrNoShareGroups) {
			kafkatest.Missing(t, "share groups: "+err.Error())
		}
		t.Fatalf("CheckShareGroups: %v", err)
	}
	return c, cl
}

func TestCheckShareGroupsOnTheTestBroker(t *testing.T) {
	_, cl := shareCluster(t)
	if err := topics.CheckShareGroups(ctxFor(t), cl); err != nil {
		t.Fatalf("CheckShareGroups = %v, want nil", err)
	}
}

// sharePipeline is a share pipeline of a unique name whose topics
// exist, with records on its main topic: n per partition of 3.
func sharePipeline(t *testing.T, c *kafkatest.Cluster, cl *kgo.Client, n int) (name string, p topics.PipelineSpec) {
	t.Helper()
	name = kafkatest.Topic(t, "share")
	p = topics.PipelineSpec{Topic: name + ".requests", Partitions: 3, Tiers: []time.Duration{5 * time.Second}, Share: true}
	if rep, err := topics.Ensure(ctxFor(t), kadm.NewClient(cl), topics.ForPipeline(p)); err != nil {
		t.Fatalf("Ensure: %v\n%s", err, table(rep))
	}
	var rs []*kgo.Record
	for part := range int32(3) {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: p.Topic, Partition: part, Value: []byte{byte('a' + part), byte('0' + i)}})
		}
	}
	pcl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pcl.ProduceSync(ctxFor(t), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return name, p
}

// shareStarts is the share group's start offset per partition of topic.
func shareStarts(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	d, err := adm.DescribeShareGroupOffsets(ctxFor(t), group)
	if err != nil {
		t.Fatalf("describe the start offsets of %s: %v", group, err)
	}
	got := map[int32]int64{}
	for p, o := range d[group].Offsets[topic] {
		if o.Err == nil && o.StartOffset >= 0 {
			got[p] = o.StartOffset
		}
	}
	return got
}

// A pipeline switched from group to share: its new share group starts
// where the consumer group's commits are, a commit past the end (a topic
// created again) at the log start, a partition without a commit at
// earliest. A share consumer then reads exactly what the consumer group
// had not. Once started, the group is never seeded again.
func TestEnsureShareSeedsANewGroupFromTheConsumerGroup(t *testing.T) {
	c, cl := shareCluster(t)
	adm := kadm.NewClient(cl)
	name, p := sharePipeline(t, c, cl, 6)
	group, share := topics.GroupID(name), topics.ShareGroupID(name)

	commits := make(kadm.Offsets)
	commits.Add(kadm.Offset{Topic: p.Topic, Partition: 0, At: 4, LeaderEpoch: -1})
	commits.Add(kadm.Offset{Topic: p.Topic, Partition: 1, At: 1000, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctxFor(t), group, commits); err != nil || resp.Error() != nil {
		t.Fatalf("commit %s: %v %v", group, err, resp.Error())
	}

	st, err := topics.EnsureShare(ctxFor(t), cl, name, p.Topic)
	if err != nil || !st.OK() || !st.Seeded {
		t.Fatalf("EnsureShare = %+v, %v; want seeded and ok", st, err)
	}
	if st.Group != share || st.Configs["share.auto.offset.reset"] != "earliest" || st.Configs["share.isolation.level"] != "read_committed" {
		t.Errorf("EnsureShare = %+v, want %s with earliest, read_committed", st, share)
	}
	want := map[int32]int64{0: 4, 1: 0}
	if got := shareStarts(t, adm, share, p.Topic); !maps.Equal(got, want) {
		t.Errorf("start offsets %v, want %v", got, want)
	}
	if tab := table(topics.Report{Shares: []topics.ShareState{st}}); !strings.Contains(tab, share) || !strings.Contains(tab, "seeded from "+group) {
		t.Errorf("table:\n%s", tab)
	}

	// Once started, its offsets are its own.
	commits.Add(kadm.Offset{Topic: p.Topic, Partition: 0, At: 5, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctxFor(t), group, commits); err != nil {
		t.Fatal(err)
	}
	st, err = topics.EnsureShare(ctxFor(t), cl, name, p.Topic)
	if err != nil || !st.OK() || st.Seeded {
		t.Fatalf("EnsureShare again = %+v, %v; want ok, not seeded", st, err)
	}
	if got := shareStarts(t, adm, share, p.Topic); !maps.Equal(got, want) {
		t.Errorf("start offsets after a second ensure %v, want %v still", got, want)
	}

	// What a share member reads: partition 0 from 4, the others whole.
	sc := c.Client(t, kgo.ShareGroup(share), kgo.ConsumeTopics(p.Topic))
	got := map[int32][]int64{}
	n := 0
	deadline := time.Now().Add(45 * time.Second)
	for n < 2+6+6 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(ctxFor(t), 2*time.Second)
		fs := sc.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], r.Offset)
			n++
			r.Ack(kgo.AckAccept)
		})
	}
	for part, from := range map[int32]int64{0: 4, 1: 0, 2: 0} {
		offs := slices.Clone(got[part])
		slices.Sort(offs)
		offs = slices.Compact(offs) // a record handed out again counts once
		if len(offs) != int(6-from) || offs[0] != from {
			t.Errorf("partition %d: the share member read offsets %v, want %d to 5", part, offs, from)
		}
	}
}

// A share group nobody committed for starts by its config alone: EnsureShare
// sets the configs and seeds nothing.
func TestEnsureShareWithoutCommitsSeedsNothing(t *testing.T) {
	c, cl := shareCluster(t)
	name, p := sharePipeline(t, c, cl, 2)
	seeded, err := topics.SeedShareGroup(ctxFor(t), kadm.NewClient(cl), name, p.Topic)
	if err != nil || seeded {
		t.Fatalf("SeedShareGroup = %v, %v; want false, nil", seeded, err)
	}
	st, err := topics.EnsureShare(ctxFor(t), cl, name, p.Topic)
	if err != nil || !st.OK() || st.Seeded {
		t.Fatalf("EnsureShare = %+v, %v; want ok, not seeded", st, err)
	}
	if got := shareStarts(t, kadm.NewClient(cl), topics.ShareGroupID(name), p.Topic); len(got) != 0 {
		t.Errorf("start offsets %v, want none", got)
	}
}

// CheckShare reports a group at the broker's defaults, and one set to
// something else, with the command that fixes it; EnsureShare fixes both.
func TestCheckShareReportsGroupConfigs(t *testing.T) {
	c, cl := shareCluster(t)
	name, p := sharePipeline(t, c, cl, 1)
	share := topics.ShareGroupID(name)
	fix := "fix: redrive topics ensure, or kafka-configs.sh --bootstrap-server " // then the broker
	cmd := " --alter --entity-type groups --entity-name " + share + " --add-config share.auto.offset.reset=earliest,share.isolation.level=read_committed"

	st, err := topics.CheckShare(ctxFor(t), cl, name, p.Topic)
	if !errors.Is(err, topics.ErrProblems) || len(st.Problems) != 1 {
		t.Fatalf("CheckShare of a new group = %+v, %v; want one problem", st, err)
	}
	pr := st.Problems[0]
	if !strings.HasPrefix(pr, share+" has share.auto.offset.reset") || !strings.Contains(pr, fix) || !strings.HasSuffix(pr, cmd) {
		t.Errorf("problem %q, want %s's defaults and the fix %q...%q", pr, share, fix, cmd)
	}
	if !strings.Contains(pr, "latest") || !strings.Contains(pr, "read_uncommitted") {
		t.Errorf("problem %q does not name the broker's defaults", pr)
	}

	// One set, one wrong.
	if err := topics.SetGroupConfigs(ctxFor(t), cl, share, map[string]string{"share.auto.offset.reset": "earliest", "share.isolation.level": "read_uncommitted"}); err != nil {
		t.Fatal(err)
	}
	st, err = topics.CheckShare(ctxFor(t), cl, name, p.Topic)
	if !errors.Is(err, topics.ErrProblems) || len(st.Problems) != 1 ||
		!strings.HasPrefix(st.Problems[0], share+" has share.isolation.level=read_uncommitted; ") || !strings.HasSuffix(st.Problems[0], cmd) {
		t.Fatalf("CheckShare = %+v, %v; want share.isolation.level=read_uncommitted reported", st, err)
	}
	rep := topics.Report{Shares: []topics.ShareState{st}}
	if rep.OK() || len(rep.Problems()) != 1 || !strings.Contains(table(rep), "PROBLEM "+share) {
		t.Errorf("report OK %v, problems %q, table:\n%s", rep.OK(), rep.Problems(), table(rep))
	}

	if st, err := topics.EnsureShare(ctxFor(t), cl, name, p.Topic); err != nil || !st.OK() {
		t.Fatalf("EnsureShare = %+v, %v; want ok", st, err)
	}
	if st, err := topics.CheckShare(ctxFor(t), cl, name, p.Topic); err != nil || !st.OK() {
		t.Fatalf("CheckShare after EnsureShare = %+v, %v; want ok", st, err)
	}
}

func TestWriteTableShares(t *testing.T) {
	rep := topics.Report{Shares: []topics.ShareState{
		{Pipeline: "orders", Group: "redrive.orders.share", Topic: "orders", Seeded: true,
			Configs: map[string]string{"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}},
		{Pipeline: "hooks", Group: "redrive.hooks.share", Topic: "hooks",
			Problems: []string{"redrive.hooks.share: pipeline hooks has consume: share, but the broker ..."}},
	}}
	want := `SHARE GROUP           TOPIC   AUTO.OFFSET.RESET  ISOLATION       STATE
redrive.orders.share  orders  earliest           read_committed  seeded from redrive.orders
redrive.hooks.share   hooks   -                  -               PROBLEM

1 problem(s):
  PROBLEM redrive.hooks.share: pipeline hooks has consume: share, but the broker ...
`
	if got := table(rep); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}
