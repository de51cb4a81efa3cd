package processor

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// writeErr describes a failed outcome write for logs and /readyz. A write
// the broker's authorizer refuses names the topic and the ACL to grant:
// the write keeps retrying (nothing is committed past it) and succeeds once
// the ACL is there.
func writeErr(topic string, err error) error {
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return fmt.Errorf("writing to %s: topic %s: WRITE denied (TOPIC_AUTHORIZATION_FAILED): grant ACL WRITE on topic %s to redrive's principal "+
			"(kafka-acls.sh --add --allow-principal User:SASL_USER --operation Write --topic %s); retrying, nothing committed past this record: %w",
			topic, topic, topic, topic, err)
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
func fatalPollErr(group, topic string, err error) error {
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("consumer group %s: GROUP_AUTHORIZATION_FAILED: grant ACL READ on group %s to redrive's principal "+
			"(kafka-acls.sh --add --allow-principal User:SASL_USER --operation Read --group %s): %w", group, group, group, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed) && topic != "":
		return fmt.Errorf("topic %s: READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic %s to redrive's principal "+
			"(kafka-acls.sh --add --allow-principal User:SASL_USER --operation Read --topic %s): %w", topic, topic, topic, err)
	}
	return nil
}
