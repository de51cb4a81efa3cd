// Package clitest runs the real `redrive` binary for end-to-end tests: it
// builds cmd/redrive once per test package (Binary, cleaned up by Main),
// starts and stops commands (Start, StartProcess, Proc: SIGKILL, SIGTERM,
// the log), runs one command to its exit (RunOut, RunSplit), and holds the
// one copy of the helpers those tests share with cmd/redrive's in-process
// tests: a one-pipeline config (WriteConfig), a scripted solver (Solver),
// probes and JSON reads of the HTTP endpoints, a free address.
//
// The end-to-end suites live in packages of their own under
// cmd/redrive/e2e so that `go test ./...` runs them beside each other and
// no package nears its timeout; this package is what they share.
//
// It is imported only by tests; it must never import cmd/redrive (a
// command is not importable) nor be imported by shipped code.
package clitest
