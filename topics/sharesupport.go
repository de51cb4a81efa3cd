package topics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// ErrNoShareGroups is wrapped by the error of a broker that cannot serve
// a share group (a *NoShareGroupsError).
var ErrNoShareGroups = errors.New("share groups not supported")

// FeatureShareVersion is the cluster feature that turns share groups on.
// Kafka 4.1 has the share APIs as a preview with the feature at 0; 4.2
// formats new clusters at 1.
const FeatureShareVersion = "share.version"

// The share group requests a member sends: without any of them a share
// consumer cannot join, fetch or acknowledge.
var shareKeys = []struct {
	key  int16
	name string
}{
	{76, "ShareGroupHeartbeat"},
	{78, "ShareFetch"},
	{79, "ShareAcknowledge"},
}

// NoShareGroupsError is a broker that cannot serve a share group, and why.
type NoShareGroupsError struct {
	// Broker is the broker's host:port.
	Broker string
	// Version is franz-go's guess of the broker's Kafka version from its
	// ApiVersions answer ("v4.1", "between v3.9 and v4.0").
	Version string
	// Reason is what is missing: "feature share.version is 0", "no
	// ShareFetch (API key 78)".
	Reason string
	// Fix is the command that turns the feature on, when the broker
	// supports it and only the feature is off; "" otherwise.
	Fix string
}

func (e *NoShareGroupsError) Error() string {
	msg := fmt.Sprintf("the broker at %s (Apache Kafka %s, guessed from its API versions) does not support share groups (%s; share groups need Apache Kafka 4.2 or newer with %s=1)",
		e.Broker, e.Version, e.Reason, FeatureShareVersion)
	if e.Fix != "" {
		msg += "; fix: " + e.Fix
	}
	return msg
}

func (e *NoShareGroupsError) Unwrap() error { return ErrNoShareGroups }

// ShareGroupsSupport decides from one broker's ApiVersions answer whether
// it serves share groups: it has ShareGroupHeartbeat (API key 76),
// ShareFetch (78) and ShareAcknowledge (79), and the cluster's finalized
// share.version is 1 or more. The keys alone are not enough: Kafka 4.1
// lists them with the feature off, and refuses every share request.
// addr names the broker in the error, a *NoShareGroupsError; nil when
// it does.
func ShareGroupsSupport(addr string, resp *kmsg.ApiVersionsResponse) error {
	vs := kversion.FromApiVersionsResponse(resp)
	fail := func(reason, fix string) error {
		return &NoShareGroupsError{Broker: addr, Version: vs.VersionGuess(), Reason: reason, Fix: fix}
	}
	var missing []string
	for _, k := range shareKeys {
		if !vs.HasKey(k.key) {
			missing = append(missing, fmt.Sprintf("%s (API key %d)", k.name, k.key))
		}
	}
	if len(missing) > 0 {
		return fail("it has no "+strings.Join(missing, ", "), "")
	}
	var level int16
	if resp.FinalizedFeaturesEpoch >= 0 {
		for _, f := range resp.FinalizedFeatures {
			if f.Name == FeatureShareVersion {
				level = f.MaxVersionLevel
			}
		}
	}
	if level >= 1 {
		return nil
	}
	fix := ""
	for _, f := range resp.SupportedFeatures {
		if f.Name == FeatureShareVersion && f.MaxVersion >= 1 {
			fix = fmt.Sprintf("kafka-features.sh --bootstrap-server %s upgrade --feature %s=1", addr, FeatureShareVersion)
		}
	}
	return fail(fmt.Sprintf("feature %s is %d", FeatureShareVersion, level), fix)
}

// CheckShareGroups asks every broker of cl's cluster for its API
// versions and returns the first one's ShareGroupsSupport error (a
// *NoShareGroupsError), or the error of a request that failed. Every
// broker is asked because a share consumer talks to the leader of each
// partition it reads, and a cluster half way through an upgrade has
// brokers of both versions.
func CheckShareGroups(ctx context.Context, cl *kgo.Client) error {
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("share groups: list the brokers: %w", err)
	}
	brokers := slices.Clone(md.Brokers)
	slices.SortFunc(brokers, func(a, b kadm.BrokerDetail) int { return int(a.NodeID - b.NodeID) })
	for _, b := range brokers {
		addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName = "redrive"
		req.ClientSoftwareVersion = "0"
		resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("share groups: the API versions of the broker at %s: %w", addr, err)
		}
		if err := ShareGroupsSupport(addr, resp); err != nil {
			return err
		}
	}
	return nil
}
