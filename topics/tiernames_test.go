package topics_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/topics"
)

// An upgrade: tiers written 64s and 90s were the topics .retry.1m4s and
// .retry.1m30s. Where only the former topic exists the tier keeps it and
// Ensure creates no topic under the written name; where both exist the
// written name wins and the former topic is reported; a tier whose name
// did not change, and a fresh pipeline, get the written names.
func TestFormerTierNames(t *testing.T) {
	c := kafkatest.New(t)
	adm := c.Admin(t)
	old := topics.PipelineSpec{Topic: kafkatest.Topic(t, "upgraded"), Partitions: 2,
		Tiers: []time.Duration{5 * time.Second, 64 * time.Second, 90 * time.Second, 2 * time.Hour}, TierNames: []string{"5s", "64s", "90s", "120m"}}
	fresh := topics.PipelineSpec{Topic: kafkatest.Topic(t, "fresh"), Partitions: 2,
		Tiers: old.Tiers, TierNames: slices.Clone(old.TierNames)}
	c.CreateTopics(t, 2, nil, old.Topic+".retry.5s", old.Topic+".retry.1m4s", old.Topic+".retry.1m30s", old.Topic+".retry.90s")

	cl := c.Client(t)
	found, err := topics.FormerTierNames(ctxFor(t), cl, []topics.PipelineSpec{old, fresh})
	if err != nil {
		t.Fatal(err)
	}
	want := []topics.FormerTier{
		{Pipeline: 0, Tier: 1, Main: old.Topic, Written: "64s", Former: "1m4s", Kept: true},
		{Pipeline: 0, Tier: 2, Main: old.Topic, Written: "90s", Former: "1m30s", Kept: false},
	}
	if !slices.Equal(found, want) {
		t.Fatalf("FormerTierNames = %+v\nwant %+v", found, want)
	}
	if n := found[0].Note(); !strings.HasPrefix(n, "tier 64s uses the existing topic "+old.Topic+".retry.1m4s (its name before tier topics kept the written delay)") {
		t.Errorf("note of a kept tier: %s", n)
	}
	if n := found[1].Note(); !strings.Contains(n, old.Topic+".retry.1m30s, its topic before tier topics kept the written delay, exists too and is not read") {
		t.Errorf("note of a tier with both topics: %s", n)
	}

	// The caller renames the kept tiers; Ensure then uses the former topic.
	for _, f := range found {
		old.TierNames[f.Tier] = f.Name()
	}
	for _, p := range []topics.PipelineSpec{old, fresh} {
		if _, err := topics.Ensure(ctxFor(t), adm, topics.ForPipeline(p)); err != nil {
			t.Fatalf("Ensure %s: %v", p.Topic, err)
		}
	}
	listed, err := adm.ListTopics(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		old.Topic + ".retry.5s", old.Topic + ".retry.1m4s", old.Topic + ".retry.90s", old.Topic + ".retry.120m",
		fresh.Topic + ".retry.5s", fresh.Topic + ".retry.64s", fresh.Topic + ".retry.90s", fresh.Topic + ".retry.120m",
	} {
		if !listed.Has(name) {
			t.Errorf("%s does not exist after Ensure", name)
		}
	}
	for _, name := range []string{old.Topic + ".retry.64s", old.Topic + ".retry.2h", fresh.Topic + ".retry.1m4s", fresh.Topic + ".retry.1m30s"} {
		if listed.Has(name) {
			t.Errorf("Ensure created %s", name)
		}
	}

	// Once ensured, nothing changes at the next start.
	again, err := topics.FormerTierNames(ctxFor(t), cl, []topics.PipelineSpec{
		{Topic: old.Topic, Tiers: old.Tiers, TierNames: []string{"5s", "64s", "90s", "120m"}}, fresh})
	if err != nil || !slices.Equal(again, want) {
		t.Errorf("FormerTierNames again = %+v, %v; want %+v", again, err, want)
	}
}

// Without a tier whose written name differs from its shortest form there
// is nothing to look up: no request is made (a nil client would panic).
func TestFormerTierNamesAsksNothingWithoutRenamedTiers(t *testing.T) {
	ps := []topics.PipelineSpec{
		{Topic: "a", Tiers: []time.Duration{5 * time.Second, 90 * time.Second}, TierNames: []string{"5s", "1m30s"}},
		{Topic: "b", Tiers: []time.Duration{64 * time.Second}},
	}
	found, err := topics.FormerTierNames(ctxFor(t), nil, ps)
	if err != nil || found != nil {
		t.Errorf("FormerTierNames = %+v, %v; want nothing", found, err)
	}
}
