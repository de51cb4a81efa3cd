// Package callbacks holds the end-to-end tests of the callback intake
// with the real `redrive process` binary: callbacks survive a SIGKILL, and
// a flood of callbacks stays within the byte bound (resident memory read
// from /proc).
package callbacks

import (
	"testing"

	"github.com/redrive/redrive/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }
