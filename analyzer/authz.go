package analyzer

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/redrive/redrive/internal/kafkaconn/acl"
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
	p := acl.Principal{Name: principal, Unknown: "the analyzer's principal"}
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed) && group != "":
		return &fatalError{fmt.Errorf("%s: %w", acl.Group(p, group), err)}
	case errors.Is(err, kerr.TopicAuthorizationFailed) && topic != "":
		return &fatalError{fmt.Errorf("%s: %w", acl.Topic(p, acl.Read, topic), err)}
	}
	return nil
}
