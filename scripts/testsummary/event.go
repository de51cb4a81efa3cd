package main

import (
	"bytes"
	"encoding/json"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, and
// the build events `go test -json` adds: ImportPath with build-output and
// build-fail).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string
}

// decode reads one line as an event. ok is false for anything else (a
// line go or the shell printed, a truncated or malformed line, JSON that
// is not an event): the caller prints such a line as it is.
func decode(line []byte) (e event, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return event{}, false
	}
	if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
		return event{}, false
	}
	if e.Package == "" && e.ImportPath == "" {
		return event{}, false
	}
	return e, true
}
