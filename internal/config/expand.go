package config

import (
	"errors"
	"fmt"
	"strings"
)

// expand replaces each ${NAME} in s by getenv(NAME); an unset variable
// gives "". ${NAME:-default} gives default (taken literally) when NAME is
// unset or empty, as in a shell. "$${" is a literal "${". Values are not
// expanded again, so a variable holding "${X}" stays "${X}".
func expand(s string, getenv func(string) string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", errors.New(`unterminated "${" (no closing "}"); write "$${" for a literal "${"`)
			}
			name, def, _ := strings.Cut(s[i+2:i+2+end], ":-")
			if !envName(name) {
				return "", badNameError(name)
			}
			v := getenv(name)
			if v == "" {
				v = def
			}
			b.WriteString(v)
			i += 2 + end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// badNameError is a ${NAME} whose NAME is not a variable's name.
type badNameError string

func (e badNameError) Error() string {
	return fmt.Sprintf("bad variable name %q in ${%s}: want letters, digits and _, not starting with a digit", string(e), string(e))
}

func envName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// refs lists the names of the ${NAME} references in s, in order.
func refs(s string) []string {
	var names []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return names
			}
			if name, _, _ := strings.Cut(s[i+2:i+2+end], ":-"); envName(name) {
				names = append(names, name)
			}
			i += 2 + end + 1
		default:
			i++
		}
	}
	return names
}
