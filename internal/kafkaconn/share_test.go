package kafkaconn

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/topics"
)

// kafka41 is the ApiVersions answer of an Apache Kafka 4.1 broker: the
// share requests as a preview, share.version supported up to 1 and
// finalized at 0 (so not listed).
func kafka41() *kmsg.ApiVersionsResponse {
	vs := kversion.V4_1_0()
	resp := kmsg.NewPtrApiVersionsResponse()
	vs.EachMaxKeyVersion(func(k, v int16) {
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MaxVersion = k, v
		resp.ApiKeys = append(resp.ApiKeys, ak)
	})
	sf := kmsg.NewApiVersionsResponseSupportedFeature()
	sf.Name, sf.MaxVersion = topics.FeatureShareVersion, 1
	resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
	ff := kmsg.NewApiVersionsResponseFinalizedFeature()
	ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = "metadata.version", 27, 27
	resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
	resp.FinalizedFeaturesEpoch = 3
	return resp
}

func TestNoShareGroupsNamesPipelinesBrokerAndFeature(t *testing.T) {
	err := topics.ShareGroupsSupport("127.0.0.1:9092", kafka41())
	var no *topics.NoShareGroupsError
	if !errors.As(err, &no) {
		t.Fatalf("ShareGroupsSupport(Kafka 4.1) = %v, want a *NoShareGroupsError", err)
	}
	want := "pipeline orders has consume: share, but the broker at 127.0.0.1:9092 (Apache Kafka v4.1, guessed from its API versions) does not support share groups " +
		"(feature share.version is 0; share groups need Apache Kafka 4.2 or newer with share.version=1); fix: kafka-features.sh --bootstrap-server 127.0.0.1:9092 upgrade --feature share.version=1"
	if got := noShareGroups([]Share{{"orders", "redrive.orders.share"}}, no); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	two := noShareGroups([]Share{{"orders", "redrive.orders.share"}, {"hooks", "redrive.hooks.share"}}, no)
	if !strings.HasPrefix(two, "pipelines orders, hooks have consume: share, but the broker at 127.0.0.1:9092 ") {
		t.Errorf("two pipelines: %q", two)
	}
}

// The start-up check of a share pipeline: a broker without share groups
// is fatal, its version named; one with them passes, and the share
// group's coordinator is found.
func TestCheckShares(t *testing.T) {
	need := Need{Groups: []string{"redrive.orders"}, Shares: []Share{{"orders", "redrive.orders.share"}}, Read: []string{"orders"}}
	for _, tc := range []struct {
		name    string
		max     *kversion.Versions
		wantErr string // "": passes
	}{
		{"kfake", nil, ""},
		{"kfake as Kafka 4.1", kversion.V4_1_0(), "pipeline orders has consume: share, but the broker at "},
		{"kfake as Kafka 4.0", kversion.V4_0_0(), "does not support share groups (it has no ShareGroupHeartbeat (API key 76)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "orders")}
			if tc.max != nil {
				opts = append(opts, kfake.MaxVersions(tc.max))
			}
			kc, err := kfake.NewCluster(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer kc.Close()
			_, err = Check(context.Background(), &config.Config{Brokers: kc.ListenAddrs()}, need)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var f *FatalError
			if !errors.As(err, &f) || !errors.Is(err, topics.ErrNoShareGroups) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Check = %v, want a fatal error containing %q", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "guessed from its API versions") || !strings.Contains(err.Error(), kc.ListenAddrs()[0]) {
				t.Errorf("Check = %q, want the broker's address and version named", err)
			}
		})
	}
}

// The test broker (a real Kafka with REDRIVE_TEST_BROKERS) passes the
// check of a share pipeline.
func TestCheckSharesOnTheTestBroker(t *testing.T) {
	c := kafkatest.New(t)
	_, err := Check(context.Background(), &config.Config{Brokers: c.Brokers}, Need{Shares: []Share{{"orders", "redrive.orders.share"}}})
	if errors.Is(err, topics.ErrNoShareGroups) {
		kafkatest.Missing(t, "share groups: "+err.Error())
	}
	if err != nil {
		t.Fatalf("Check = %v, want nil", err)
	}
}

func TestShareGroupDenied(t *testing.T) {
	c := &config.Config{Brokers: []string{"127.0.0.1:9092"}, SASL: &config.SASL{Mechanism: "plain", User: "app", Password: "secret"}}
	want := "share group redrive.orders.share: GROUP_AUTHORIZATION_FAILED: user app may not use it; grant ACL READ on group redrive.orders.share to User:app (kafka-acls.sh --add --allow-principal User:app --operation Read --group redrive.orders.share)"
	if d := ShareGroupDenied(c, "redrive.orders.share", kerr.GroupAuthorizationFailed); d.Error() != want || !errors.Is(d, kerr.GroupAuthorizationFailed) {
		t.Errorf("ShareGroupDenied: %q\nwant %q", d, want)
	}
}
