// Package crash holds the end-to-end tests that kill or starve the real
// `redrive` binary and its broker: a processor SIGKILLed mid-stream (at
// least once, nothing lost), request failures with kills at the
// defaults, the analyzer SIGKILLed while it republishes, the broker
// restarted and SIGKILLed (a broker of the test's own), and the fault
// suite (partitions added, DLQ deleted, a hung service, a record over
// max_inflight_bytes).
package crash

import (
	"testing"

	"github.com/redrive/redrive/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }
