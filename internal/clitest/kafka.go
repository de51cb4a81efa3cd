package clitest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// CommittedOffsets is the group's committed offset per partition of topic
// (-1 where none).
func CommittedOffsets(t testing.TB, adm *kadm.Client, group, topic string, parts int32) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for p := range parts {
		out[p] = -1
		if o, ok := os.Lookup(topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}
