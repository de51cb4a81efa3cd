package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// Parse reads a configuration file's contents: it decodes them strictly,
// expands ${NAME} with getenv, applies the REDRIVE_* overrides from getenv
// (ApplyEnv), fills defaults (SetDefaults) and validates (Validate).
//
// ${NAME} is expanded in every scalar value, before the value is typed
// (so "partitions: ${PARTS}" works), not in keys. NAME is letters, digits
// and _. A variable that getenv reports empty (unset) expands to "", and a
// value that is empty once expanded, quoted or not, is an absent one: it
// gets its default; ${NAME:-default} gives default (literally) when NAME
// is empty or unset. "$${" is a literal "${"; an unterminated "${" is an
// error. Expanded text is not expanded again. Inside a YAML flow
// collection ({...} or [...]) quote the reference, "${NAME}": braces are
// YAML syntax there. A nil getenv is an empty environment.
//
// Every problem found is reported, joined, decoding problems first; each
// is an *Error with the path of the key and its line. A validation problem
// with a key that could not be decoded is left out.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c := &Config{}
	derr := decodeFile(data, getenv, c)
	if errors.Is(derr, ErrSyntax) {
		return nil, join(unjoin(derr)) // not (all) decoded: validating it would only add noise
	}
	c.noteHTTPSecrets(getenv)
	c.ApplyEnv(getenv)
	c.SetDefaults()
	verrs := c.validate()
	if derr == nil && len(verrs) == 0 {
		return c, nil
	}
	return nil, join(append(unjoin(derr), related(verrs, unjoin(derr))...))
}

// related drops the validation errors about a key that already has a
// decoding error, above or below it: a bad "topic: [x]" is not also
// reported as a missing topic.
func related(verrs, derrs []error) []error {
	var out []error
outer:
	for _, v := range verrs {
		var ve *Error
		if errors.As(v, &ve) {
			for _, d := range derrs {
				var de *Error
				if errors.As(d, &de) && (within(ve.Path, de.Path) || within(de.Path, ve.Path)) {
					continue outer
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// within reports whether path p is q or below it.
func within(p, q string) bool {
	return p == q || len(p) > len(q) && p[:len(q)] == q && (p[len(q)] == '.' || p[len(q)] == '[')
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Load reads the file at path with Parse and the process environment
// (os.Getenv). Every error names the file.
func Load(path string) (*Config, error) {
	return LoadEnv(path, os.Getenv)
}

// LoadEnv is Load with getenv in place of os.Getenv: a command can answer
// REDRIVE_BROKERS with its --brokers flag, so that a file without brokers
// loads.
func LoadEnv(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err) // the PathError names the file
	}
	c, err := Parse(data, getenv)
	if err != nil {
		return nil, inFile(path, err)
	}
	c.sources().file = path
	return c, nil
}

// inFile prefixes each of the joined errors with the file's name.
func inFile(path string, err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = fmt.Errorf("%s: %w", path, e)
		}
		return errors.Join(out...)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// noteHTTPSecrets keeps, per pipeline, the values of the ${NAME}s expanded
// anywhere in its handler.http: whatever a variable holds there (a key in
// a URL path, a header, a query field) is kept out of the handler's
// errors.
func (c *Config) noteHTTPSecrets(getenv func(string) string) {
	for i := range c.Pipelines {
		at := index("pipelines", i) + ".handler.http"
		seen := map[string]bool{}
		for path, names := range c.src.vars {
			if !within(path, at) {
				continue
			}
			for _, n := range names {
				if v := getenv(n); v != "" && !seen[v] {
					seen[v] = true
					c.Pipelines[i].httpSecrets = append(c.Pipelines[i].httpSecrets, v)
				}
			}
		}
		slices.Sort(c.Pipelines[i].httpSecrets) // map order: the same options every time
	}
}
