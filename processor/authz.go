package processor

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/redrive/redrive/internal/kafkaconn/acl"
)

// writeErr describes a failed outcome write for logs and /readyz. A write
// the broker's authorizer refuses names the topic and the ACL to grant:
// the write keeps retrying (nothing is committed past it) and succeeds once
// the ACL is there.
func writeErr(topic, principal string, err error) error {
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return fmt.Errorf("writing to %s: %s; retrying, nothing committed past this record: %w",
			topic, acl.Topic(aclFor(principal), acl.Write, topic), err)
	}
	return fmt.Errorf("writing to %s: %w", topic, err)
}

// fatalPollErr is a poll error retrying cannot fix: the consumer group is
// not ours to use (GROUP_AUTHORIZATION_FAILED, e.g. its READ ACL was
// removed), or a topic the pipeline consumes may not be read
// (TOPIC_AUTHORIZATION_FAILED on a fetch). The pipeline stops with it and
// the process exits 1, rather than polling on without a group or logging
// the same refusal every fetch; the start-up check of the next start names
// it again until the ACL is granted.
func fatalPollErr(group, topic, principal string, err error) error {
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("%s: %w", acl.Group(aclFor(principal), group), err)
	case errors.Is(err, kerr.TopicAuthorizationFailed) && topic != "":
		return fmt.Errorf("%s: %w", acl.Topic(aclFor(principal), acl.Read, topic), err)
	}
	return nil
}

// aclFor is who an ACL in a message is for: Config.Principal
// ("User:redrive") or, when it is not known (no SASL: a TLS client
// certificate's name, or none), "redrive's principal".
func aclFor(principal string) acl.Principal {
	return acl.Principal{Name: principal, Unknown: "redrive's principal"}
}
