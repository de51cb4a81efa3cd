package topics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

const week = 7 * 24 * time.Hour

func ms(d time.Duration) string { return fmt.Sprint(d.Milliseconds()) }

func TestForPipeline(t *testing.T) {
	type want struct {
		name      string
		role      topics.Role
		delay     time.Duration
		retention string // "" = no retention.ms override
	}
	cases := []struct {
		name        string
		p           topics.PipelineSpec
		partitions  int32
		replication int16
		want        []want
	}{
		{
			name: "tiers in shortest form, default DLQ, no results",
			p: topics.PipelineSpec{Topic: "solve.requests", Partitions: 12, Replication: 3,
				Tiers: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute, 90 * time.Minute}},
			partitions: 12, replication: 3,
			want: []want{
				{"solve.requests", topics.RoleMain, 0, ""},
				{"solve.requests.retry.5s", topics.RoleRetry, 5 * time.Second, ms(week)},
				{"solve.requests.retry.30s", topics.RoleRetry, 30 * time.Second, ms(week)},
				{"solve.requests.retry.5m", topics.RoleRetry, 5 * time.Minute, ms(week)},
				{"solve.requests.retry.1h30m", topics.RoleRetry, 90 * time.Minute, ms(week)},
				{"solve.requests.dlq", topics.RoleDLQ, 0, ms(week)},
			},
		},
		{
			name: "configured DLQ and retention, results, defaults for the rest",
			p: topics.PipelineSpec{Topic: "orders", Results: "orders.done",
				Tiers: []time.Duration{time.Hour, 3 * 24 * time.Hour},
				DLQ:   "orders-dead", DLQRetention: 48 * time.Hour},
			partitions: 6, replication: 1,
			want: []want{
				{"orders", topics.RoleMain, 0, ""},
				{"orders.retry.1h", topics.RoleRetry, time.Hour, ms(week)},
				// a long tier keeps four times its delay
				{"orders.retry.72h", topics.RoleRetry, 3 * 24 * time.Hour, ms(12 * 24 * time.Hour)},
				{"orders-dead", topics.RoleDLQ, 0, ms(48 * time.Hour)},
				{"orders.done", topics.RoleResults, 0, ""},
			},
		},
		{
			name: "tiers named as written",
			p: topics.PipelineSpec{Topic: "jobs",
				Tiers:     []time.Duration{5 * time.Second, 64 * time.Second, 90 * time.Second, 90 * time.Minute},
				TierNames: []string{"5s", "64s", "", "90m"}},
			partitions: 6, replication: 1,
			want: []want{
				{"jobs", topics.RoleMain, 0, ""},
				{"jobs.retry.5s", topics.RoleRetry, 5 * time.Second, ms(week)},
				{"jobs.retry.64s", topics.RoleRetry, 64 * time.Second, ms(week)},
				{"jobs.retry.1m30s", topics.RoleRetry, 90 * time.Second, ms(week)},
				{"jobs.retry.90m", topics.RoleRetry, 90 * time.Minute, ms(week)},
				{"jobs.dlq", topics.RoleDLQ, 0, ms(week)},
			},
		},
		{
			name:       "no tiers listed: the default tiers",
			p:          topics.PipelineSpec{Topic: "hooks"},
			partitions: 6, replication: 1,
			want: []want{
				{"hooks", topics.RoleMain, 0, ""},
				{"hooks.retry.5s", topics.RoleRetry, 5 * time.Second, ms(week)},
				{"hooks.retry.30s", topics.RoleRetry, 30 * time.Second, ms(week)},
				{"hooks.retry.5m", topics.RoleRetry, 5 * time.Minute, ms(week)},
				{"hooks.dlq", topics.RoleDLQ, 0, ms(week)},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			specs := topics.ForPipeline(c.p)
			if len(specs) != len(c.want) {
				t.Fatalf("got %d specs %v, want %d", len(specs), specNames(specs), len(c.want))
			}
			for i, w := range c.want {
				s := specs[i]
				if s.Name != w.name || s.Role != w.role || s.Delay != w.delay {
					t.Errorf("spec %d = %s/%s/%s, want %s/%s/%s", i, s.Name, s.Role, s.Delay, w.name, w.role, w.delay)
				}
				if s.Partitions != c.partitions || s.Replication != c.replication {
					t.Errorf("%s: partitions %d replication %d, want %d %d", s.Name, s.Partitions, s.Replication, c.partitions, c.replication)
				}
				if got := s.Configs["cleanup.policy"]; got != "delete" {
					t.Errorf("%s: cleanup.policy %q, want delete", s.Name, got)
				}
				if got := s.Configs["retention.ms"]; got != w.retention {
					t.Errorf("%s: retention.ms %q, want %q", s.Name, got, w.retention)
				}
				wantMain := c.p.Topic
				if s.Role == topics.RoleMain {
					wantMain = ""
				}
				if s.Main != wantMain {
					t.Errorf("%s: Main %q, want %q", s.Name, s.Main, wantMain)
				}
			}
		})
	}
}

func TestForPipelineCallbacks(t *testing.T) {
	for _, tc := range []struct {
		keep      time.Duration
		retention string
	}{
		{0, ms(week)},
		{7 * time.Minute, ms(week)},
		{10 * 24 * time.Hour, ms(10 * 24 * time.Hour)}, // a wait longer than the default retention
	} {
		specs := topics.ForPipeline(topics.PipelineSpec{Topic: "captcha.requests", Partitions: 4, Callbacks: "captcha.requests.callbacks", CallbacksKeep: tc.keep})
		s := specs[len(specs)-1]
		if s.Name != "captcha.requests.callbacks" || s.Role != topics.RoleCallbacks || s.Partitions != 4 || s.Main != "captcha.requests" {
			t.Errorf("keep %s: spec %+v", tc.keep, s)
		}
		if s.Configs["cleanup.policy"] != "delete" || s.Configs["retention.ms"] != tc.retention || s.MinRetention != tc.keep {
			t.Errorf("keep %s: configs %v, min retention %s; want retention.ms %s", tc.keep, s.Configs, s.MinRetention, tc.retention)
		}
	}
	if specs := topics.ForPipeline(topics.PipelineSpec{Topic: "t"}); specs[len(specs)-1].Role == topics.RoleCallbacks {
		t.Error("a callbacks topic without Callbacks")
	}
	if got := topics.CallbacksTopic("captcha.requests"); got != "captcha.requests.callbacks" {
		t.Errorf("CallbacksTopic = %q", got)
	}
}

// A callbacks topic that compacts or keeps callbacks for less than they
// are needed is a problem; fewer partitions than the main topic is not
// (every processor reads all of it).
func TestCallbacksTopicChecked(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	check := func(p topics.PipelineSpec) topics.TopicState {
		t.Helper()
		specs := topics.ForPipeline(p)
		c.CreateTopic(t, p.Topic, 4, nil)
		rep, _ := topics.Ensure(ctxFor(t), adm, specs)
		return state(t, rep, p.Callbacks)
	}
	withCallbacks := func() topics.PipelineSpec {
		p := pipeline(t, 4)
		p.Callbacks, p.CallbacksKeep = topics.CallbacksTopic(p.Topic), 7*time.Minute
		return p
	}

	p := withCallbacks()
	c.CreateTopic(t, p.Callbacks, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")})
	s := check(p)
	if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "callbacks topic") || !strings.Contains(s.Problems[0], "--add-config cleanup.policy=delete") {
		t.Errorf("compacted callbacks topic: problems %q", s.Problems)
	}

	p = withCallbacks()
	c.CreateTopic(t, p.Callbacks, 1, map[string]*string{"retention.ms": kadm.StringPtr("60000")})
	s = check(p)
	if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "less than the 7m") || !strings.Contains(s.Problems[0], "--add-config retention.ms="+ms(week)) {
		t.Errorf("short callbacks retention: problems %q", s.Problems)
	}

	p = withCallbacks()
	c.CreateTopic(t, p.Callbacks, 1, map[string]*string{"retention.ms": kadm.StringPtr(ms(time.Hour))})
	if s := check(p); !s.OK() {
		t.Errorf("one partition, 1h retention for a 7m keep: %+v, want ok", s)
	}
}

func ExampleForPipeline() {
	p := topics.PipelineSpec{
		Topic:   "solve.requests",
		Results: "solve.results",
		Tiers:   []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute},
	}
	for _, s := range topics.ForPipeline(p) {
		line := fmt.Sprintf("%-7s %-26s partitions=%d", s.Role, s.Name, s.Partitions)
		if r, ok := s.Configs["retention.ms"]; ok {
			line += " retention.ms=" + r
		}
		fmt.Println(line)
	}
	// Output:
	// main    solve.requests             partitions=6
	// retry   solve.requests.retry.5s    partitions=6 retention.ms=604800000
	// retry   solve.requests.retry.30s   partitions=6 retention.ms=604800000
	// retry   solve.requests.retry.5m    partitions=6 retention.ms=604800000
	// dlq     solve.requests.dlq         partitions=6 retention.ms=604800000
	// results solve.results              partitions=6
}

func specNames(specs []topics.Spec) []string {
	var ns []string
	for _, s := range specs {
		ns = append(ns, s.Name)
	}
	return ns
}

// pipeline is a pipeline with topic names unique to this run.
func pipeline(t *testing.T, partitions int32) topics.PipelineSpec {
	return topics.PipelineSpec{
		Topic:        kafkatest.Topic(t, "topics"),
		Partitions:   partitions,
		Tiers:        []time.Duration{5 * time.Second, time.Hour},
		DLQRetention: 48 * time.Hour,
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// topicConfig is a topic's config as the broker describes it.
func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctxFor(t), topic)
	if err != nil {
		t.Fatalf("describe configs of %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("describe configs of %s: %v", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("%s: no %s in its configs", topic, key)
	return kadm.Config{}
}

func state(t *testing.T, rep topics.Report, name string) topics.TopicState {
	t.Helper()
	for _, s := range rep.Topics {
		if s.Spec.Name == name {
			return s
		}
	}
	t.Fatalf("no %s in the report", name)
	return topics.TopicState{}
}

func table(rep topics.Report) string {
	var b bytes.Buffer
	rep.WriteTable(&b)
	return b.String()
}

func TestEnsureCreatesAllThenNothing(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	p := pipeline(t, 3)
	p.Results = p.Topic + ".results"
	p.Callbacks, p.CallbacksKeep = topics.CallbacksTopic(p.Topic), 7*time.Minute
	specs := topics.ForPipeline(p)
	if last := specs[len(specs)-1]; last.Role != topics.RoleCallbacks || last.Name != p.Topic+".callbacks" {
		t.Fatalf("last spec %s (%s), want the callbacks topic", last.Name, last.Role)
	}

	rep, err := topics.Ensure(ctxFor(t), adm, specs)
	if err != nil || !rep.OK() {
		t.Fatalf("Ensure: %v\n%s", err, table(rep))
	}
	if len(rep.Topics) != len(specs) {
		t.Fatalf("report has %d topics, want %d", len(rep.Topics), len(specs))
	}
	for _, s := range rep.Topics {
		if !s.Exists || !s.Created {
			t.Errorf("%s: exists=%v created=%v, want both", s.Spec.Name, s.Exists, s.Created)
		}
		if s.Partitions != 3 || s.Replication != 1 {
			t.Errorf("%s: %d partitions, replication %d; want 3, 1", s.Spec.Name, s.Partitions, s.Replication)
		}
	}

	// What the broker has, asked independently of the report.
	listed, err := adm.ListTopics(ctxFor(t), specNames(specs)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		td := listed[s.Name]
		if td.Err != nil || len(td.Partitions) != 3 {
			t.Errorf("%s: listed err=%v partitions=%d, want 3", s.Name, td.Err, len(td.Partitions))
		}
		if v := topicConfig(t, adm, s.Name, "cleanup.policy"); v.MaybeValue() != "delete" {
			t.Errorf("%s: cleanup.policy %q, want delete", s.Name, v.MaybeValue())
		}
		ret := topicConfig(t, adm, s.Name, "retention.ms")
		switch s.Role {
		case topics.RoleRetry:
			if ret.MaybeValue() != ms(week) || ret.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: retention.ms %s (source %v), want %s set on the topic", s.Name, ret.MaybeValue(), ret.Source, ms(week))
			}
		case topics.RoleCallbacks:
			if ret.MaybeValue() != ms(week) || ret.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: retention.ms %s (source %v), want %s set on the topic", s.Name, ret.MaybeValue(), ret.Source, ms(week))
			}
		case topics.RoleDLQ:
			if ret.MaybeValue() != ms(48*time.Hour) || ret.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: retention.ms %s (source %v), want %s set on the topic", s.Name, ret.MaybeValue(), ret.Source, ms(48*time.Hour))
			}
		default:
			if ret.Source == kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: retention.ms overridden to %s; main and results topics keep the broker's", s.Name, ret.MaybeValue())
			}
		}
	}
	if out := table(rep); !strings.Contains(out, "created") || strings.Contains(out, "PROBLEM") {
		t.Errorf("table after creating:\n%s", out)
	}

	// Again, with a fresh client and with the same one: all there, nothing created.
	for _, a := range []*kadm.Client{adm, c.Admin(t)} {
		rep, err = topics.Ensure(ctxFor(t), a, specs)
		if err != nil || !rep.OK() {
			t.Fatalf("second Ensure: %v\n%s", err, table(rep))
		}
		for _, s := range rep.Topics {
			if s.Created {
				t.Errorf("second Ensure created %s again", s.Spec.Name)
			}
		}
		if out := table(rep); strings.Contains(out, "created") || strings.Count(out, " ok\n") != len(specs) {
			t.Errorf("table after the second Ensure:\n%s", out)
		}
	}
	if rep, err := topics.Check(ctxFor(t), adm, specs); err != nil || !rep.OK() {
		t.Fatalf("Check after Ensure: %v\n%s", err, table(rep))
	}
}

func TestCheckReportsMissing(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	specs := topics.ForPipeline(pipeline(t, 4))

	rep, err := topics.Check(ctxFor(t), adm, specs)
	if !errors.Is(err, topics.ErrProblems) || rep.OK() {
		t.Fatalf("Check of missing topics: err %v, ok %v", err, rep.OK())
	}
	for _, s := range rep.Topics {
		if s.Exists || len(s.Problems) != 1 {
			t.Fatalf("%s: exists=%v problems=%q", s.Spec.Name, s.Exists, s.Problems)
		}
		p := s.Problems[0]
		if !strings.HasPrefix(p, s.Spec.Name+" does not exist") || !strings.Contains(p, "--create --topic "+s.Spec.Name+" --partitions 4") {
			t.Errorf("problem %q does not name the topic and its fix", p)
		}
	}
	// Nothing was created by looking.
	listed, err := adm.ListTopics(ctxFor(t), specNames(specs)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if listed.Has(s.Name) {
			t.Errorf("Check created %s", s.Name)
		}
	}
	out := table(rep)
	if strings.Count(out, "PROBLEM") < 2*len(specs) {
		t.Errorf("table does not mark every missing topic:\n%s", out)
	}

	// One topic created behind the report's back: only the rest are missing.
	c.CreateTopic(t, specs[0].Name, 4, nil)
	rep, _ = topics.Check(ctxFor(t), adm, specs)
	if s := state(t, rep, specs[0].Name); !s.OK() || s.Partitions != 4 {
		t.Errorf("main topic after creating it: %+v", s)
	}
	if state(t, rep, specs[1].Name).Exists {
		t.Errorf("%s reported as existing", specs[1].Name)
	}
}

func TestDLQWithFewerPartitionsThanMain(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	specs := topics.ForPipeline(pipeline(t, 4))
	dlq := specs[len(specs)-1]
	if dlq.Role != topics.RoleDLQ {
		t.Fatalf("last spec is %s, want the DLQ", dlq.Role)
	}
	c.CreateTopic(t, dlq.Name, 2, nil)

	rep, err := topics.Ensure(ctxFor(t), adm, specs)
	if !errors.Is(err, topics.ErrProblems) || rep.OK() {
		t.Fatalf("Ensure with a narrow DLQ: err %v\n%s", err, table(rep))
	}
	s := state(t, rep, dlq.Name)
	if s.Created || s.Partitions != 2 {
		t.Errorf("DLQ state %+v: want the existing 2-partition topic, untouched", s)
	}
	wantFix := "--alter --topic " + dlq.Name + " --partitions 4"
	if len(s.Problems) != 1 || !strings.HasPrefix(s.Problems[0], dlq.Name) || !strings.Contains(s.Problems[0], wantFix) {
		t.Fatalf("DLQ problems %q, want one naming it with %q", s.Problems, wantFix)
	}
	for _, o := range rep.Topics {
		if o.Spec.Name != dlq.Name && !o.OK() {
			t.Errorf("%s: %q", o.Spec.Name, o.Problems)
		}
	}
	// Ensure never alters an existing topic.
	listed, err := adm.ListTopics(ctxFor(t), dlq.Name)
	if err != nil || len(listed[dlq.Name].Partitions) != 2 {
		t.Fatalf("DLQ after Ensure: %v, %d partitions; want 2", err, len(listed[dlq.Name].Partitions))
	}
	out := table(rep)
	if !strings.Contains(out, "PROBLEM "+dlq.Name) || !strings.Contains(out, wantFix) {
		t.Errorf("table does not show the DLQ problem and fix:\n%s", out)
	}
}

func TestTierCreatedLaterWithMainsPartitions(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	specs := topics.ForPipeline(pipeline(t, 2))
	// The main topic already exists, wider than configured.
	c.CreateTopic(t, specs[0].Name, 5, nil)

	rep, err := topics.Ensure(ctxFor(t), adm, specs)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, table(rep))
	}
	for _, s := range rep.Topics {
		if s.Partitions != 5 {
			t.Errorf("%s: %d partitions, want the main topic's 5", s.Spec.Name, s.Partitions)
		}
	}
}

func TestCompactedTierReported(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	specs := topics.ForPipeline(pipeline(t, 2))
	tier := specs[1]
	c.CreateTopic(t, tier.Name, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")})

	rep, err := topics.Ensure(ctxFor(t), adm, specs)
	if !errors.Is(err, topics.ErrProblems) {
		t.Fatalf("Ensure with a compacted tier: err %v\n%s", err, table(rep))
	}
	s := state(t, rep, tier.Name)
	wantFix := "--entity-name " + tier.Name + " --add-config cleanup.policy=delete"
	if s.CleanupPolicy != "compact" || len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "cleanup.policy=compact") || !strings.Contains(s.Problems[0], wantFix) {
		t.Fatalf("tier state %+v, want one compaction problem with %q", s, wantFix)
	}
	if v := topicConfig(t, adm, tier.Name, "cleanup.policy"); v.MaybeValue() != "compact" {
		t.Errorf("Ensure changed the tier's cleanup.policy to %q", v.MaybeValue())
	}

	// compact,delete still compacts.
	other := topics.ForPipeline(pipeline(t, 2))
	c.CreateTopic(t, other[1].Name, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")})
	rep, _ = topics.Ensure(ctxFor(t), adm, other)
	if s := state(t, rep, other[1].Name); len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "cleanup.policy=compact,delete") {
		t.Errorf("compact,delete tier: problems %q", s.Problems)
	}
}

func TestShortRetentionReported(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	specs := topics.ForPipeline(pipeline(t, 2))
	hour := specs[2] // the 1h tier
	if hour.Delay != time.Hour {
		t.Fatalf("spec 2 is %s, want the 1h tier", hour.Name)
	}
	dlq := specs[3]
	c.CreateTopic(t, hour.Name, 2, map[string]*string{"retention.ms": kadm.StringPtr("60000")})
	c.CreateTopic(t, dlq.Name, 2, map[string]*string{"retention.ms": kadm.StringPtr(ms(24 * time.Hour))})
	// A tier that keeps records forever is fine.
	c.CreateTopic(t, specs[1].Name, 2, map[string]*string{"retention.ms": kadm.StringPtr("-1")})

	rep, err := topics.Check(ctxFor(t), adm, specs)
	if !errors.Is(err, topics.ErrProblems) {
		t.Fatalf("Check: err %v\n%s", err, table(rep))
	}
	s := state(t, rep, hour.Name)
	wantFix := "--entity-name " + hour.Name + " --add-config retention.ms=" + ms(week)
	if s.RetentionMs != 60000 || len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "less than its delay of 1h") || !strings.Contains(s.Problems[0], wantFix) {
		t.Errorf("1h tier state %+v, want one retention problem with %q", s, wantFix)
	}
	s = state(t, rep, dlq.Name)
	wantFix = "--entity-name " + dlq.Name + " --add-config retention.ms=" + ms(48*time.Hour)
	if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "less than the configured 2d") || !strings.Contains(s.Problems[0], wantFix) {
		t.Errorf("DLQ state %+v, want one retention problem with %q", s, wantFix)
	}
	if s := state(t, rep, specs[1].Name); !s.OK() || s.RetentionMs != -1 {
		t.Errorf("infinite tier: %+v, want ok", s)
	}
	if out := table(rep); !strings.Contains(out, "infinite") {
		t.Errorf("table does not show infinite retention:\n%s", out)
	}
}

func TestConcurrentEnsures(t *testing.T) {
	c := kafkatest.New(t)
	specs := topics.ForPipeline(pipeline(t, 3))
	const n = 3
	adms := make([]*kadm.Client, n)
	for i := range adms {
		adms[i] = c.Admin(t)
		// Connected before the start, so that all list the topics as
		// missing at about the same moment and race to create them.
		if _, err := adms[i].ListBrokers(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
	}
	reps := make([]topics.Report, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			reps[i], errs[i] = topics.Ensure(ctxFor(t), adms[i], specs)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !reps[i].OK() {
			t.Errorf("Ensure %d: %v\n%s", i, errs[i], table(reps[i]))
		}
	}
	// Each topic was created by exactly one of them.
	for _, s := range specs {
		var by []int
		for i := range n {
			if state(t, reps[i], s.Name).Created {
				by = append(by, i)
			}
		}
		if len(by) != 1 {
			t.Errorf("%s created by %v, want exactly one", s.Name, by)
		}
	}
}

func TestWriteTable(t *testing.T) {
	rep := topics.Report{Topics: []topics.TopicState{
		{Spec: topics.Spec{Name: "solve.requests", Role: topics.RoleMain}, Exists: true, Partitions: 6, Replication: 3, CleanupPolicy: "delete", RetentionMs: 604800000},
		{Spec: topics.Spec{Name: "solve.requests.retry.5s", Role: topics.RoleRetry}, Exists: true, Created: true, Partitions: 6, Replication: 3, CleanupPolicy: "delete", RetentionMs: 604800000},
		{Spec: topics.Spec{Name: "solve.requests.retry.1h30m", Role: topics.RoleRetry}, Exists: true, Partitions: 6, Replication: 3, CleanupPolicy: "compact", RetentionMs: -1,
			Problems: []string{"solve.requests.retry.1h30m has cleanup.policy=compact; fix: X"}},
		{Spec: topics.Spec{Name: "solve.requests.dlq", Role: topics.RoleDLQ}, Problems: []string{"solve.requests.dlq does not exist; fix: Y"}},
	}}
	want := `TOPIC                       ROLE   PARTITIONS  REPLICATION  RETENTION  CLEANUP  STATE
solve.requests              main   6           3            7d         delete   ok
solve.requests.retry.5s     retry  6           3            7d         delete   created
solve.requests.retry.1h30m  retry  6           3            infinite   compact  PROBLEM
solve.requests.dlq          dlq    -           -            -          -        PROBLEM

2 problem(s):
  PROBLEM solve.requests.retry.1h30m has cleanup.policy=compact; fix: X
  PROBLEM solve.requests.dlq does not exist; fix: Y
`
	if got := table(rep); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if rep.OK() {
		t.Error("a report with problems is OK")
	}
	rep.Notes = []string{"tier 64s uses the existing topic solve.requests.retry.1m4s"}
	if got, wantNote := table(rep), "solve.requests.dlq          dlq    -           -            -          -        PROBLEM\n\nnote: tier 64s uses the existing topic solve.requests.retry.1m4s\n\n2 problem(s):\n"; !strings.Contains(got, wantNote) {
		t.Errorf("table with a note:\n%s\nwant it to contain:\n%s", got, wantNote)
	}
	if got := table(topics.Report{}); got != "" {
		t.Errorf("empty report wrote %q", got)
	}
}

func TestWriteTableFromBroker(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	specs := topics.ForPipeline(pipeline(t, 2))
	c.CreateTopic(t, specs[1].Name, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")})

	rep, err := topics.Ensure(ctxFor(t), adm, specs)
	if err == nil {
		t.Fatal("Ensure with a bad tier: no error")
	}
	out := table(rep)
	for _, s := range specs {
		if !strings.Contains(out, s.Name) {
			t.Errorf("table lacks %s:\n%s", s.Name, out)
		}
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "TOPIC") || !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, specs[1].Name+" ") && strings.HasSuffix(l, "PROBLEM")
	}) {
		t.Errorf("no PROBLEM row for %s:\n%s", specs[1].Name, out)
	}
	// Two problems: narrower than main, and compacted; both with fixes.
	if strings.Count(out, "  PROBLEM "+specs[1].Name) != 2 || !strings.Contains(out, "--partitions 2") || !strings.Contains(out, "cleanup.policy=delete") {
		t.Errorf("problem lines:\n%s", out)
	}
	t.Logf("\n%s", out)
}

func TestEnsureRejectsNamelessSpec(t *testing.T) {
	_, err := topics.Check(context.Background(), nil, []topics.Spec{{Role: topics.RoleDLQ}})
	if !errors.Is(err, topics.ErrBadSpec) {
		t.Fatalf("err %v, want ErrBadSpec", err)
	}
}

// The names every package uses for a pipeline's groups and default DLQ.
func TestNames(t *testing.T) {
	if g := topics.GroupID("solve"); g != "redrive.solve" {
		t.Errorf("GroupID = %q", g)
	}
	if g := topics.AnalyzerGroupID("solve"); g != "redrive.solve.analyzer" {
		t.Errorf("AnalyzerGroupID = %q", g)
	}
	if d := topics.DefaultDLQ("solve.requests"); d != "solve.requests.dlq" {
		t.Errorf("DefaultDLQ = %q", d)
	}
	for name, want := range map[string]string{
		"solve.requests_v2-a":    "",
		"":                       "required",
		".":                      `"." is not a legal topic name`,
		"..":                     `".." is not a legal topic name`,
		"a/b":                    `"a/b": a topic name uses only letters, digits, '.', '_' and '-'`,
		strings.Repeat("a", 249): "",
		strings.Repeat("a", 250): "is longer than 249 characters",
	} {
		err := topics.ValidateName(name)
		if want == "" {
			if err != nil {
				t.Errorf("ValidateName(%q) = %v", name, err)
			}
			continue
		}
		if !errors.Is(err, topics.ErrBadName) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateName(%q) = %v, want %q", name, err, want)
		}
	}
}

// The tiers topics are created for are bounded by
// retry.MaxTiers, the bound Schedule.Validate holds the config to.
func TestEnsureBoundsTiers(t *testing.T) {
	tiers := func(n int) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = time.Duration(i+1) * time.Second
		}
		return ds
	}
	c := kafkatest.New(t)
	adm := c.Admin(t)
	ctx := context.Background()
	over := kafkatest.Topic(t, "tiers-over")
	for _, run := range []func(context.Context, *kadm.Client, []topics.Spec) (topics.Report, error){topics.Ensure, topics.Check} {
		_, err := run(ctx, adm, topics.ForPipeline(topics.PipelineSpec{Topic: over, Tiers: tiers(retry.MaxTiers + 1), Partitions: 1}))
		if !errors.Is(err, topics.ErrBadSpec) {
			t.Fatalf("%d tiers: err %v, want ErrBadSpec", retry.MaxTiers+1, err)
		}
	}
	if md, err := adm.Metadata(ctx); err == nil && md.Topics.Has(over) {
		t.Errorf("Ensure created %s for a spec it refused", over)
	}
	at := kafkatest.Topic(t, "tiers-at")
	if _, err := topics.Ensure(ctx, adm, topics.ForPipeline(topics.PipelineSpec{Topic: at, Tiers: tiers(retry.MaxTiers), Partitions: 1})); err != nil {
		t.Fatalf("%d tiers: %v", retry.MaxTiers, err)
	}
}

// The control topic is created compacted, with one partition, and checked
// to stay compacted: a topic that deletes would end a pause by itself.
func TestControlTopic(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	spec := topics.ForControl(kafkatest.Topic(t, "control"), 0)
	if spec.Role != topics.RoleControl || spec.Partitions != 1 || spec.Replication != topics.DefaultReplication {
		t.Fatalf("ForControl = %+v", spec)
	}

	rep, err := topics.Check(ctxFor(t), adm, []topics.Spec{spec})
	if s := state(t, rep, spec.Name); !errors.Is(err, topics.ErrProblems) || s.Exists || len(s.Problems) != 1 ||
		!strings.Contains(s.Problems[0], "fix: redrive topics ensure") || !strings.Contains(s.Problems[0], "--partitions 1 --replication-factor 1 --config cleanup.policy=compact --config segment.ms=3600000") {
		t.Fatalf("Check before it exists: %v %+v", err, s)
	}
	rep, err = topics.Ensure(ctxFor(t), adm, []topics.Spec{spec})
	if err != nil || !rep.OK() {
		t.Fatalf("Ensure: %v\n%s", err, table(rep))
	}
	if s := state(t, rep, spec.Name); !s.Created || s.Partitions != 1 || s.CleanupPolicy != "compact" {
		t.Errorf("created %+v, want one compacted partition", s)
	}
	if v := topicConfig(t, adm, spec.Name, "segment.ms"); v.MaybeValue() != ms(topics.ControlSegment) {
		t.Errorf("segment.ms = %q, want %s", v.MaybeValue(), ms(topics.ControlSegment))
	}
	if rep, err := topics.Check(ctxFor(t), adm, []topics.Spec{spec}); err != nil || !rep.OK() {
		t.Errorf("Check after Ensure: %v\n%s", err, table(rep))
	}

	for _, policy := range []string{"delete", "compact,delete"} {
		other := topics.ForControl(kafkatest.Topic(t, "control"), 1)
		c.CreateTopic(t, other.Name, 1, map[string]*string{"cleanup.policy": kadm.StringPtr(policy)})
		rep, err := topics.Ensure(ctxFor(t), adm, []topics.Spec{other})
		s := state(t, rep, other.Name)
		wantFix := "--entity-name " + other.Name + " --add-config cleanup.policy=compact"
		if !errors.Is(err, topics.ErrProblems) || len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "cleanup.policy="+policy+";") ||
			!strings.Contains(s.Problems[0], wantFix) {
			t.Errorf("a control topic with cleanup.policy=%s: %v, problems %q; want one with %q", policy, err, s.Problems, wantFix)
		}
		if v := topicConfig(t, adm, other.Name, "cleanup.policy"); v.MaybeValue() != policy {
			t.Errorf("Ensure changed cleanup.policy %s to %q", policy, v.MaybeValue())
		}
	}
}
