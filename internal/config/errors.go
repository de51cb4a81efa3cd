package config

import (
	"errors"
	"strconv"
	"strings"
)

// The kinds of problem an [*Error] wraps; test them with errors.Is.
var (
	// ErrSyntax: the file is not YAML (or holds more than one document).
	ErrSyntax = errors.New("not valid YAML")
	// ErrUnknownKey: a key that is not part of the configuration.
	ErrUnknownKey = errors.New("unknown key")
	// ErrDuplicateKey: a key given twice in one mapping.
	ErrDuplicateKey = errors.New("duplicate key")
	// ErrType: a value of the wrong type (a list where a string belongs,
	// "abc" for a number, a bad duration).
	ErrType = errors.New("wrong type")
	// ErrExpand: a bad ${NAME} reference.
	ErrExpand = errors.New("bad ${} reference")
	// ErrInvalid: a value that is well typed but not allowed.
	ErrInvalid = errors.New("invalid value")
)

// Error is one problem with the configuration and where it is.
type Error struct {
	// Line in the file, 1-based: the key's, or for a default the nearest
	// enclosing key's. 0 when the value came from an override (see
	// Source) or the Config was not parsed from a file.
	Line int
	// Column in the line, 1-based, counting characters, when the problem
	// is a single character (a NUL byte, a byte that is not UTF-8); else 0.
	Column int
	// Path is the key's path: "pipelines[0].retry.tiers[1]".
	Path string
	// Source names where the value came from when it was not the file:
	// "REDRIVE_BROKERS", "--brokers".
	Source string
	// Msg says what is wrong.
	Msg string
	// Err is the kind: ErrUnknownKey, ErrType, ErrInvalid, ...
	Err error
	// Cause is the error of the package validator that found an invalid
	// value (a *processor.FieldError, a *retry.ScheduleError), or nil.
	// errors.Is and errors.As look into it too.
	Cause error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		b.WriteString("line " + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(", column " + strconv.Itoa(e.Column))
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		if e.Source != "" {
			b.WriteString(" (from " + e.Source + ")")
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap gives the kind.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether the cause, if any, is target (errors.Is).
func (e *Error) Is(target error) bool { return e.Cause != nil && errors.Is(e.Cause, target) }

// As finds target in the cause, if any (errors.As).
func (e *Error) As(target any) bool { return e.Cause != nil && errors.As(e.Cause, target) }

// maxErrors bounds the problems reported at once; a file that is wrong
// everywhere is not worth a thousand lines.
const maxErrors = 50

// join is errors.Join, capped at maxErrors.
func join(errs []error) error {
	if len(errs) > maxErrors {
		more := len(errs) - maxErrors
		errs = append(errs[:maxErrors:maxErrors], errors.New("and "+strconv.Itoa(more)+" more problems"))
	}
	return errors.Join(errs...)
}

// sources records where values came from: the file's lines by path, and
// the paths that environment variables or flags overrode.
type sources struct {
	lines map[string]int
	from  map[string]string
	vars  map[string][]string // path → the ${NAME}s its value was expanded from
	file  string              // the file's name, when it was loaded from one
}

// at finds where path (or its nearest ancestor that is known) came from.
func (s *sources) at(path string) (line int, from string) {
	if s == nil {
		return 0, ""
	}
	for p := path; p != ""; p = parent(p) {
		if f, ok := s.from[p]; ok {
			return 0, f
		}
		if l, ok := s.lines[p]; ok {
			return l, ""
		}
	}
	return 0, ""
}

// override marks path (and everything below it) as set by from.
func (s *sources) override(path, from string) {
	for p := range s.lines {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			delete(s.lines, p)
		}
	}
	s.from[path] = from
}

// parent cuts the last element off a path: a.b[2] → a.b → a → "".
func parent(p string) string {
	if i := strings.LastIndexAny(p, ".["); i >= 0 {
		return p[:i]
	}
	return ""
}

// Origin says where the value at path (a key's path, as in errors:
// "analyzer.token", "sasl.password") came from, never what it is: "the
// environment (REDRIVE_ANALYZER_TOKEN)", "${NAME} on line 12 of the file",
// "line 12 of the file", or "" when the file did not set it (a default, or
// a Config built in Go).
func (c *Config) Origin(path string) string {
	s := c.src
	if s == nil {
		return ""
	}
	if f, ok := s.from[path]; ok {
		if strings.HasPrefix(f, "REDRIVE_") {
			return "the environment (" + f + ")"
		}
		return f
	}
	l, ok := s.lines[path]
	if !ok {
		return ""
	}
	if vs := s.vars[path]; len(vs) > 0 {
		refs := make([]string, len(vs))
		for i, v := range vs {
			refs[i] = "${" + v + "}"
		}
		return strings.Join(refs, ", ") + " on line " + strconv.Itoa(l) + " of the file"
	}
	return "line " + strconv.Itoa(l) + " of the file"
}
