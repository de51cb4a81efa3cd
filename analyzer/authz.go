package analyzer

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// fatalError is an error no retry fixes: Run stops every loop with it and
// `redrive analyze` exits 1, rather than fetching on and logging the same
// refusal (the start-up check of the next start names it again).
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// fatalFetchErr is a fetch error of the analyzer's that retrying cannot
// fix: its consumer group (group; "" for the statistics reader, which has
// none) is refused, or the DLQ may not be read; principal as in
// Options.Principal. nil for any other error.
func fatalFetchErr(group, topic, principal string, err error) error {
	to, arg := "the analyzer's principal", "User:<principal>"
	if principal != "" {
		to, arg = principal, principal
	}
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed) && group != "":
		return &fatalError{fmt.Errorf("consumer group %s: GROUP_AUTHORIZATION_FAILED: grant ACL READ on group %s to %s "+
			"(kafka-acls.sh --add --allow-principal %s --operation Read --group %s): %w", group, group, to, arg, group, err)}
	case errors.Is(err, kerr.TopicAuthorizationFailed) && topic != "":
		return &fatalError{fmt.Errorf("topic %s: READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic %s to %s "+
			"(kafka-acls.sh --add --allow-principal %s --operation Read --topic %s): %w", topic, topic, to, arg, topic, err)}
	}
	return nil
}
