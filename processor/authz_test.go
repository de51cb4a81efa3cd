package processor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestWriteErrNamesTopicAndACL(t *testing.T) {
	err := writeErr("orders.dlq", "User:redrive", fmt.Errorf("produce: %w", kerr.TopicAuthorizationFailed))
	for _, w := range []string{"topic orders.dlq: WRITE denied (TOPIC_AUTHORIZATION_FAILED)", "grant ACL WRITE on topic orders.dlq to User:redrive",
		"--allow-principal User:redrive --operation Write --topic orders.dlq", "nothing committed past this record"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("%v does not wrap the broker's error", err)
	}
	// Without a known principal (no SASL) the command has a placeholder.
	if got := writeErr("orders.dlq", "", kerr.TopicAuthorizationFailed).Error(); !strings.Contains(got, "to redrive's principal (kafka-acls.sh --add --allow-principal User:<principal> ") {
		t.Errorf("no principal: %q", got)
	}
	if got := writeErr("orders.dlq", "", kerr.UnknownTopicOrPartition).Error(); got != "writing to orders.dlq: "+kerr.UnknownTopicOrPartition.Error() {
		t.Errorf("other errors: %q", got)
	}
}

func TestFatalPollErrOnlyForAuthorization(t *testing.T) {
	err := fatalPollErr("redrive.orders", "", "User:redrive", &kgo.ErrGroupSession{Err: kerr.GroupAuthorizationFailed})
	if err == nil || !strings.Contains(err.Error(), "consumer group redrive.orders: GROUP_AUTHORIZATION_FAILED: grant ACL READ on group redrive.orders to User:redrive") {
		t.Fatalf("fatalPollErr(group) = %v", err)
	}
	err = fatalPollErr("redrive.orders", "orders.retry.5s", "", kerr.TopicAuthorizationFailed)
	if err == nil || !strings.Contains(err.Error(), "topic orders.retry.5s: READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic orders.retry.5s") {
		t.Fatalf("fatalPollErr(topic) = %v", err)
	}
	for _, e := range []error{kerr.NotLeaderForPartition, &kgo.ErrGroupSession{Err: kerr.RebalanceInProgress}, kerr.UnknownTopicOrPartition} {
		if f := fatalPollErr("redrive.orders", "orders", "", e); f != nil {
			t.Errorf("fatalPollErr(%v) = %v, want nil (retried)", e, f)
		}
	}
	// A topic refusal with no topic named (not a fetch of ours) is retried.
	if f := fatalPollErr("redrive.orders", "", "", kerr.TopicAuthorizationFailed); f != nil {
		t.Errorf("fatalPollErr without a topic = %v, want nil", f)
	}
}
