package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// MinLen is the fewest bytes a configured token may have: 16 random
// characters are out of reach of guessing over HTTP.
const MinLen = 16

// ErrWeak: a configured token fails Check.
var ErrWeak = errors.New("weak token")

// Equal reports whether got is want, in time that depends on neither
// (both are hashed first, so their lengths do not show); never with want
// empty, which means "no token configured".
func Equal(got, want string) bool {
	if want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// FromHeader is the token of an Authorization header value
// "Bearer <token>": the scheme in any case (RFC 9110), the spaces after
// it skipped. ok is false for another scheme or no space after it.
func FromHeader(auth string) (token string, ok bool) {
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// Valid reports whether the Authorization header value auth carries want
// (FromHeader, then Equal); never with want empty.
func Valid(auth, want string) bool {
	got, ok := FromHeader(auth)
	// Equal runs either way, so a malformed header takes as long as a
	// wrong token.
	eq := Equal(got, want)
	return ok && eq
}

// Check says what is wrong with a token to configure, or nil: at least
// MinLen bytes, each printable ASCII other than space (0x21–0x7e), so
// that it survives a header, a query string and a shell unchanged. The
// error wraps ErrWeak and never quotes the token.
func Check(token string) error {
	const how = "make one with `openssl rand -hex 32`"
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			what := "a character that is not printable ASCII"
			switch c {
			case ' ':
				what = "a space"
			case '\t':
				what = "a tab"
			case '\n', '\r':
				what = "a line break"
				if i >= len(token)-2 {
					what = "a line break at its end (a secret written with echo?)"
				}
			}
			return fmt.Errorf("%w: has %s at byte %d; a token is printable ASCII without spaces: %s", ErrWeak, what, i+1, how)
		}
	}
	if len(token) < MinLen {
		return fmt.Errorf("%w: %d bytes, fewer than %d; %s", ErrWeak, len(token), MinLen, how)
	}
	return nil
}
