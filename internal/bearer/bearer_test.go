package bearer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrive/redrive/internal/bearer"
)

const good = "0123456789abcdef0123456789abcdef" // as `openssl rand -hex 16` makes

func TestEqual(t *testing.T) {
	for _, c := range []struct {
		got, want string
		eq        bool
	}{
		{good, good, true},
		{"x", "x", true},
		{"", "", false}, // no token configured: nothing matches
		{"anything", "", false},
		{"", good, false},
		{good[:31], good, false}, // a prefix
		{good + "0", good, false},
		{strings.ToUpper(good), good, false}, // tokens are case-sensitive
	} {
		if got := bearer.Equal(c.got, c.want); got != c.eq {
			t.Errorf("Equal(%q, %q) = %t, want %t", c.got, c.want, got, c.eq)
		}
	}
}

func TestFromHeader(t *testing.T) {
	for _, c := range []struct {
		auth, token string
		ok          bool
	}{
		{"Bearer tok", "tok", true},
		{"bearer tok", "tok", true}, // the scheme in any case (RFC 9110)
		{"BEARER tok", "tok", true},
		{"Bearer   tok", "tok", true}, // spaces after the scheme skipped
		{"Bearer tok ", "tok ", true}, // the token is what follows, as sent
		{"Bearer ", "", true},
		{"Bearer", "", false},
		{"", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"Bearertok", "", false},
		{"tok", "", false},
		{" Bearer tok", "", false},
		{"Bearer\ttok", "", false},
	} {
		token, ok := bearer.FromHeader(c.auth)
		if token != c.token || ok != c.ok {
			t.Errorf("FromHeader(%q) = %q, %t; want %q, %t", c.auth, token, ok, c.token, c.ok)
		}
	}
}

func TestValid(t *testing.T) {
	for _, c := range []struct {
		auth, want string
		ok         bool
	}{
		{"Bearer " + good, good, true},
		{"bearer  " + good, good, true},
		{"Bearer " + good, "", false}, // no token configured
		{"Bearer ", "", false},
		{"Bearer", "", false},
		{"Basic " + good, good, false},
		{good, good, false},
		{"Bearer " + good[:31], good, false},
		{"Bearer " + good + " ", good, false},
	} {
		if got := bearer.Valid(c.auth, c.want); got != c.ok {
			t.Errorf("Valid(%q, %q) = %t, want %t", c.auth, c.want, got, c.ok)
		}
	}
}

// TestCheck: the rule for a configured token, and an error that says what
// to do without showing the token.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name, token string
		ok          bool
		says        string
	}{
		{"openssl rand -hex 32", good + good, true, ""},
		{"exactly MinLen", good[:bearer.MinLen], true, ""},
		{"printable punctuation", "!#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", true, ""},
		{"empty", "", false, "too short (0 bytes, at least 16 needed)"},
		{"one character", "x", false, "too short (1 bytes, at least 16 needed)"},
		{"one short", good[:bearer.MinLen-1], false, "too short (15 bytes"},
		{"spaces", "                    ", false, "a space at byte 1"},
		{"a space inside", "correct horse battery staple", false, "a space at byte 8"},
		{"trailing newline", good + "\n", false, "ends with a line break"},
		{"tab", good + "\tx", false, "a tab"},
		{"non-ASCII", good + "é", false, "not printable ASCII"},
		{"DEL", good + "\x7f", false, "not printable ASCII"},
		{"NUL", good + "\x00", false, "not printable ASCII"},
	} {
		err := bearer.Check(c.token)
		if (err == nil) != c.ok {
			t.Errorf("%s: Check = %v, want ok %t", c.name, err, c.ok)
			continue
		}
		if err == nil {
			continue
		}
		msg := err.Error()
		if !errors.Is(err, bearer.ErrWeak) || !strings.Contains(msg, c.says) || !strings.Contains(msg, "openssl rand -hex 32") {
			t.Errorf("%s: Check = %q, want ErrWeak saying %q and how to make a good one", c.name, msg, c.says)
		}
		if len(strings.TrimSpace(c.token)) > 1 && strings.Contains(msg, strings.TrimSpace(c.token)) {
			t.Errorf("%s: the error %q quotes the token", c.name, msg)
		}
	}
}

// FuzzValid: FromHeader and Valid never panic, and Valid accepts a header
// only when FromHeader reads exactly the configured token from it.
func FuzzValid(f *testing.F) {
	for _, s := range [][2]string{
		{"Bearer " + good, good}, {"bearer  tok", "tok"}, {"Bearer", ""}, {"Bearer ", ""},
		{"Basic tok", "tok"}, {"Bearer tok ", "tok"}, {"BEARER \x00", "\x00"}, {"Bearer \xff\xfe", "\xff\xfe"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, auth, want string) {
		token, ok := bearer.FromHeader(auth)
		if !ok && token != "" {
			t.Errorf("FromHeader(%q) = %q, false: a token without ok", auth, token)
		}
		if ok && strings.HasPrefix(token, " ") {
			t.Errorf("FromHeader(%q) = %q: the spaces after the scheme are not skipped", auth, token)
		}
		got := bearer.Valid(auth, want)
		if wantOK := want != "" && ok && token == want; got != wantOK {
			t.Errorf("Valid(%q, %q) = %t; FromHeader gives %q, %t", auth, want, got, token, ok)
		}
		if eq := bearer.Equal(want, want); eq != (want != "") {
			t.Errorf("Equal(%q, %q) = %t", want, want, eq)
		}
		if want != "" && want[0] != ' ' && !bearer.Valid("Bearer "+want, want) {
			t.Errorf("Valid refuses Bearer %q", want)
		}
	})
}
