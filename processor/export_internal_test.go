package processor

import (
	"testing"
	"time"
)

// SlowBuild holds every pipeline's construction for d once its Kafka
// client exists, until t ends: the group may assign partitions meanwhile.
// Not for parallel tests.
func SlowBuild(t testing.TB, d time.Duration) {
	testHookBuilding = func() { time.Sleep(d) }
	t.Cleanup(func() { testHookBuilding = nil })
}
