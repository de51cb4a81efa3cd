// Package eos holds the end-to-end tests of the processor's exactly-once
// delivery: the real `redrive process` binary SIGKILLed again and again,
// members joining and leaving, a zombie fenced. It is a package of its own
// because its SIGKILL test alone runs for minutes: apart, it runs beside
// the other suites instead of adding to one package's time.
package eos

import (
	"testing"

	"github.com/redrive/redrive/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }
