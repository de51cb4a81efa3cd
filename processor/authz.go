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
func writeErr(topic, principal string, err error) error {
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return fmt.Errorf("writing to %s: topic %s: WRITE denied (TOPIC_AUTHORIZATION_FAILED): grant ACL WRITE on topic %s to %s "+
			"(kafka-acls.sh --add --allow-principal %s --operation Write --topic %s); retrying, nothing committed past this record: %w",
			topic, topic, topic, who(principal), principalArg(principal), topic, err)
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
		return fmt.Errorf("consumer group %s: GROUP_AUTHORIZATION_FAILED: grant ACL READ on group %s to %s "+
			"(kafka-acls.sh --add --allow-principal %s --operation Read --group %s): %w", group, group, who(principal), principalArg(principal), group, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed) && topic != "":
		return fmt.Errorf("topic %s: READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic %s to %s "+
			"(kafka-acls.sh --add --allow-principal %s --operation Read --topic %s): %w", topic, topic, who(principal), principalArg(principal), topic, err)
	}
	return nil
}

// who names the principal an ACL is for in a message: Config.Principal
// ("User:redrive") or, when it is not known (no SASL: a TLS client
// certificate's name, or none), "redrive's principal".
func who(principal string) string {
	if principal == "" {
		return "redrive's principal"
	}
	return principal
}

// principalArg is the --allow-principal argument of the kafka-acls.sh
// command in a message: the principal, or a placeholder to fill in.
func principalArg(principal string) string {
	if principal == "" {
		return "User:<principal>"
	}
	return principal
}
