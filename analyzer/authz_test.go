package analyzer

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A refused group or DLQ read is fatal (and says which ACL to grant);
// anything a retry may fix is not, nor a refusal the reader has no part in.
func TestFatalFetchErr(t *testing.T) {
	var fatal *fatalError
	err := fatalFetchErr("redrive.orders.analyzer", "", "User:an", &kgo.ErrGroupSession{Err: kerr.GroupAuthorizationFailed})
	if !errors.As(err, &fatal) || !strings.Contains(err.Error(), "consumer group redrive.orders.analyzer: GROUP_AUTHORIZATION_FAILED: grant ACL READ on group redrive.orders.analyzer to User:an (kafka-acls.sh --add --allow-principal User:an ") {
		t.Fatalf("group refused: %v", err)
	}
	err = fatalFetchErr("", "orders.dlq", "", kerr.TopicAuthorizationFailed)
	if !errors.As(err, &fatal) || !strings.Contains(err.Error(), "topic orders.dlq: READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic orders.dlq to the analyzer's principal (kafka-acls.sh --add --allow-principal User:<principal> ") {
		t.Fatalf("DLQ read refused: %v", err)
	}
	for _, tc := range []struct {
		group, topic string
		err          error
	}{
		{"redrive.orders.analyzer", "orders.dlq", kerr.NotLeaderForPartition},
		{"redrive.orders.analyzer", "", &kgo.ErrGroupSession{Err: kerr.RebalanceInProgress}},
		{"", "", kerr.GroupAuthorizationFailed}, // the statistics reader has no group
		{"redrive.orders.analyzer", "", kerr.TopicAuthorizationFailed},
	} {
		if f := fatalFetchErr(tc.group, tc.topic, "", tc.err); f != nil {
			t.Errorf("fatalFetchErr(%q, %q, %v) = %v, want nil (retried)", tc.group, tc.topic, tc.err, f)
		}
	}
}
