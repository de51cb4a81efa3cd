package processor_test

import (
	"testing"
	"time"

	"github.com/redrive/redrive/internal/pipetest"
	"github.com/redrive/redrive/retry"
)

// newEnv is the processor tests' pipeline: tiers, 3 attempts, partitions
// per topic (the helpers are internal/pipetest's).
func newEnv(t testing.TB, tiers []time.Duration, partitions int32) *pipetest.Env {
	t.Helper()
	return pipetest.New(t, "solve", partitions, retry.Schedule{Tiers: tiers, MaxAttempts: 3})
}
