// Package share holds the end-to-end tests of consume: share, the main
// topic read by a Kafka share group: replicas SIGKILLed again and again
// mid-stream in share and in group mode side by side (nothing lost, the
// duplicates no more than the kills left Kafka to deliver again), a record
// whose handling ends the process dead-lettered "crashed" after
// max_deliveries deaths while the records acquired with it are handled,
// and share replicas scaling past the partition count where group
// replicas cannot (a test of the untimed properties, and
// BenchmarkShareScaling: `go run ./bench -only share`).
//
// The processors run through the Go API, not the redrive binary: a test
// that kills one re-executes this test binary, whose TestMain runs a
// processor as a child (child_test.go) when childEnv is set. Every test
// name holds "Share": a CI step on a broker without share groups skips
// them by that name.
package share

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}
