package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrive/redrive/internal/bearer"
)

// tokenDoc is a file with every bearer token there is, each set from a
// variable: processor.token, analyzer.token, analyzer.read_token and a
// pipeline's handler.callback.token.
const tokenDoc = `brokers: ["127.0.0.1:9092"]
callback_addr: 127.0.0.1:8443
pipelines:
  - topic: solve.requests
    handler:
      http:
        url: http://127.0.0.1:8080/in
        poll: {url: 'http://127.0.0.1:8080/res?id={state}', state_field: request}
      callback: {path: /cb, token: "${CB}"}
processor:
  token: "${PT}"
analyzer:
  token: "${AT}"
  read_token: "${RT}"
`

// tokenKeys are tokenDoc's token keys, with their variable and line.
var tokenKeys = []struct{ path, variable, line string }{
	{"processor.token", "PT", "line 11: "},
	{"analyzer.token", "AT", "line 13: "},
	{"analyzer.read_token", "RT", "line 14: "},
	{"pipelines[0].handler.callback.token", "CB", "line 9: "},
}

// A configured token must pass bearer.Check: a short one or one with a
// space is refused at its key and line, saying what is wrong and how to
// make a good one without quoting it; a good one, or none, is taken.
func TestTokenRule(t *testing.T) {
	const good = "6f1d0c3b9a8e7d2c5b4a39281706f5e4" // as `openssl rand -hex 16` makes
	for _, k := range tokenKeys {
		for _, tt := range []struct {
			name, token, says string
		}{
			{"short", "s3cret", "too short (6 bytes, at least 16 needed)"},
			{"one character", "x", "too short (1 bytes"},
			{"a space", "correct horse battery staple", "has a space at byte 8"},
			{"only spaces", "                ", "has a space at byte 1"},
			{"a line break at the end", good + "\n", "ends with a line break"},
		} {
			t.Run(k.path+"/"+tt.name, func(t *testing.T) {
				err := parseErr(t, tokenDoc, env(k.variable, tt.token))
				want := k.line + k.path + ": weak token: " + tt.says
				if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "openssl rand -hex 32") {
					t.Errorf("error:\n%v\nwant it to contain %q and how to make a token", err, want)
				}
				if strings.Count(err.Error(), "\n") != 0 {
					t.Errorf("more than the one problem:\n%v", err)
				}
				var ce *Error
				if !errors.As(err, &ce) || ce.Path != k.path || !errors.Is(err, ErrInvalid) || !errors.Is(err, bearer.ErrWeak) {
					t.Errorf("error %#v: want an *Error at %s wrapping ErrInvalid, caused by bearer.ErrWeak", ce, k.path)
				}
				if s := strings.TrimSpace(tt.token); len(s) > 1 && strings.Contains(err.Error(), s) {
					t.Errorf("the error quotes the token: %v", err)
				}
			})
		}
		t.Run(k.path+"/good", func(t *testing.T) {
			c := mustParse(t, tokenDoc, env(k.variable, good))
			got := map[string]string{"processor.token": c.Processor.Token, "analyzer.token": c.Analyzer.Token,
				"analyzer.read_token": c.Analyzer.ReadToken, "pipelines[0].handler.callback.token": c.Pipelines[0].Handler.Callback.Token}
			if got[k.path] != good {
				t.Errorf("%s = %q, want the token", k.path, got[k.path])
			}
		})
	}
	// Unset variables: no token at all, which each key allows (its
	// endpoints are then off, or open on loopback).
	mustParse(t, tokenDoc, env())

	// Every key at once: one error each.
	err := parseErr(t, tokenDoc, env("PT", "a", "AT", "b", "RT", "c", "CB", "d d"))
	for _, k := range tokenKeys {
		if !strings.Contains(err.Error(), k.line+k.path+": weak token") {
			t.Errorf("no error at %s:\n%v", k.path, err)
		}
	}
}

// A token from the environment is refused naming the variable, not a
// line of the file.
func TestTokenRuleFromEnvironment(t *testing.T) {
	doc := "brokers: [\"127.0.0.1:9092\"]\npipelines:\n  - topic: t\n"
	for _, v := range []struct{ name, path string }{
		{EnvProcessorToken, "processor.token"},
		{EnvAnalyzerToken, "analyzer.token"},
		{EnvAnalyzerReadToken, "analyzer.read_token"},
	} {
		err := parseErr(t, doc, env(v.name, "dev"))
		if want := v.path + " (from " + v.name + "): weak token: too short (3 bytes"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s=dev: %v, want %q", v.name, err, want)
		}
		mustParse(t, doc, env(v.name, "0123456789abcdef"))
	}
}
