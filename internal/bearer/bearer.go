package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// MinLen is the fewest bytes a configured token may have: 16 random hex
// digits, the least dense a generator gives, are 64 bits, beyond guessing
// over HTTP; a word or a name is refused for its length alone.
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
// that it goes into a header as it is and a stray space or newline from
// a secret file is caught at start, not as a 401 later. The error wraps
// ErrWeak and never quotes the token.
func Check(token string) error {
	const how = "make one with `openssl rand -hex 32`"
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			what := fmt.Sprintf("has a character that is not printable ASCII at byte %d", i+1)
			switch {
			case c == ' ':
				what = fmt.Sprintf("has a space at byte %d", i+1)
			case c == '\t':
				what = fmt.Sprintf("has a tab at byte %d", i+1)
			case strings.Trim(token[i:], "\r\n") == "":
				what = "ends with a line break (a secret written with echo?)"
			case c == '\n' || c == '\r':
				what = fmt.Sprintf("has a line break at byte %d", i+1)
			}
			return fmt.Errorf("%w: %s; a token is printable ASCII without spaces: %s", ErrWeak, what, how)
		}
	}
	if len(token) < MinLen {
		return fmt.Errorf("%w: too short (%d bytes, at least %d needed); %s", ErrWeak, len(token), MinLen, how)
	}
	return nil
}
