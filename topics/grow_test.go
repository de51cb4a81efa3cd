package topics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/topics"
)

// TestGrowWidensNarrowTiersAndDLQ: after partitions were added to the main
// topic, Check reports each tier and the DLQ with `ensure --grow` as the
// fix; Grow adds partitions to exactly those (not to the results topic,
// which is the user's), and Check is then clean. A second Grow changes
// nothing.
func TestGrowWidensNarrowTiersAndDLQ(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	ps := pipeline(t, 2)
	ps.Results = ps.Topic + ".results"
	specs := topics.ForPipeline(ps)
	if _, err := topics.Ensure(ctxFor(t), adm, specs); err != nil {
		t.Fatalf("ensure: %v", err)
	}
	if _, err := adm.UpdatePartitions(ctxFor(t), 5, ps.Topic); err != nil {
		t.Fatalf("add partitions to %s: %v", ps.Topic, err)
	}
	widths := func() map[string]int {
		t.Helper()
		td, err := adm.ListTopics(ctxFor(t), specNames(specs)...)
		if err != nil {
			t.Fatal(err)
		}
		w := map[string]int{}
		for n, d := range td {
			w[n] = len(d.Partitions)
		}
		return w
	}
	if !kafkatest.Eventually(30*time.Second, func() bool { return widths()[ps.Topic] == 5 }) {
		t.Fatalf("%s does not show 5 partitions", ps.Topic)
	}

	rep, err := topics.Check(ctxFor(t), adm, specs)
	if !errors.Is(err, topics.ErrProblems) {
		t.Fatalf("check with a wider main topic: %v, want ErrProblems\n%s", err, table(rep))
	}
	narrow := 0
	for _, s := range specs {
		st := state(t, rep, s.Name)
		switch s.Role {
		case topics.RoleRetry, topics.RoleDLQ:
			narrow++
			if len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "fewer than its main topic") || !strings.Contains(st.Problems[0], "fix: redrive topics ensure --grow, or kafka-topics.sh") {
				t.Errorf("%s: problems %q, want one with the --grow fix", s.Name, st.Problems)
			}
		default:
			if !st.OK() {
				t.Errorf("%s: %q", s.Name, st.Problems)
			}
		}
	}

	grown, err := topics.Grow(ctxFor(t), adm, specs)
	if err != nil {
		t.Fatalf("grow: %v", err)
	}
	if len(grown) != narrow {
		t.Errorf("grown %+v, want the %d tiers and DLQ", grown, narrow)
	}
	w := widths()
	for _, s := range specs {
		want := 2
		switch s.Role {
		case topics.RoleRetry, topics.RoleDLQ, topics.RoleMain:
			want = 5
		}
		if w[s.Name] != want {
			t.Errorf("%s (%s) has %d partitions after Grow, want %d", s.Name, s.Role, w[s.Name], want)
		}
	}
	rep, err = topics.Ensure(ctxFor(t), adm, specs)
	rep.MarkGrown(grown)
	if err != nil {
		t.Fatalf("ensure after grow: %v\n%s", err, table(rep))
	}
	if out := table(rep); strings.Count(out, "grown from 2") != narrow {
		t.Errorf("table does not say grown from 2 for the %d topics:\n%s", narrow, out)
	}
	if again, err := topics.Grow(ctxFor(t), adm, specs); err != nil || len(again) != 0 {
		t.Errorf("second Grow: %+v, %v; want nothing", again, err)
	}
}
