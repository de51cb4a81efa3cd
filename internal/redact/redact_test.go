package redact

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestSecretName(t *testing.T) {
	for _, n := range []string{"key", "KEY", "api_key", "apikey", "API-Key", "X-Api-Key", "token", "access_token", "Access-Token", "secret", "client_secret", "password", "Password", "pass", "pwd", "auth", "Authorization", "signature", "sig", "X-Amz-Signature", "cookie", "sessionid", "private_key", "aws.secret.key",
		"hash", "api_hash", "apiHash", "X-Content-Hash", "hmac", "X-Hmac-Sha256", "hmac_signature", "passphrase", "otp", "TOTP"} {
		if !SecretName(n) {
			t.Errorf("SecretName(%q) = false, want true", n)
		}
	}
	for _, n := range []string{"", "q", "page", "limit", "user", "design", "topic", "keys_total", "code", "sort",
		"hashtag", "hashtags", "hash_type", "nonce", "hotpath", "footprint"} {
		if SecretName(n) {
			t.Errorf("SecretName(%q) = true, want false", n)
		}
	}
}

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://user:s3cret@host/x?api_key=K3Y", "https://user:xxxxx@host/x?api_key=xxxxx"},
		{"https://host/x?q=1&Token=abc;sig=zz&page=2", "https://host/x?q=1&Token=xxxxx;sig=xxxxx&page=2"},
		{"https://host/x?API%5FKEY=abc", "https://host/x?API%5FKEY=xxxxx"},
		{"https://user@host/x", "https://user@host/x"},
		{"http://127.0.0.1:8080/solve", "http://127.0.0.1:8080/solve"},
		{"https://host/cb#access_token=abc&state=1", "https://host/cb#access_token=xxxxx&state=1"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// Not a URL (a control character): scrubbed as text.
	got := URL("https://user:s3cret@host/x?api_key=K3Y\x7f")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "K3Y") {
		t.Errorf("URL of an unparsable URL = %q: shows a secret", got)
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`parse "https://user:s3cret@host/x?api_key=K3Y": net/url: invalid control character in URL`,
			`parse "https://user:xxxxx@host/x?api_key=xxxxx": net/url: invalid control character in URL`},
		{`Post "http://a:b@c:1/p?password=p&x=1": dial tcp`, `Post "http://a:xxxxx@c:1/p?password=xxxxx&x=1": dial tcp`},
		{"want a whole number, got \"token=abc\"", "want a whole number, got \"token=xxxxx\""},
		{"limit=5 page=2", "limit=5 page=2"},
		{"a@b.c", "a@b.c"},
		{"api_hash=0123abcd&hashtag=go", "api_hash=xxxxx&hashtag=go"},
		{`400: {"error":"bad key","key":"K3Y-abc","api_key" : "x\"y","pin":1234,"page":2}`,
			`400: {"error":"bad key","key":"xxxxx","api_key" : "xxxxx","pin":1234,"page":2}`},
		{`{"hmac": 123456, "token":null, "q":"key"}`, `{"hmac": "xxxxx", "token":null, "q":"key"}`},
		{`{"body":"{\"clientKey\":\"ck-123\",\"type\":\"t\"}"}`, `{"body":"{\"clientKey\":\"xxxxx\",\"type\":\"t\"}"}`},
		{`"key" is required`, `"key" is required`},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q) =\n  %q\nwant\n  %q", c.in, got, c.want)
		}
	}
}

// withoutPassword is raw with the password written in its authority
// replaced by Mask, or ok false when raw shows none.
func withoutPassword(raw string) (string, bool) {
	i := strings.Index(raw, "//")
	if i < 0 {
		return "", false
	}
	auth := raw[i+2:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return "", false
	}
	user, _, ok := strings.Cut(auth[:at], ":")
	if !ok {
		return "", false
	}
	return raw[:i+2] + user + ":" + Mask + auth[at:] + raw[i+2+len(auth):], true
}

func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"https://user:s3cret@host/x?api_key=K3Y",
		"http://u:p%40ss@h:1/a?token=t&x=1#access_token=a",
		"//u:pw@h/x", "mailto:a@b?password=x", "https://h/x?key=%zz", "https://:pw@h",
		"https://u:pw@h/x?a=1;b=2&&=&pass", "not a url", "http://[::1]:80/?sig=1",
		"http://u:p@ss@h/", "https://user:s3cret@host/x?api_key=K3Y\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out := URL(raw) // never panics
		_ = Text(raw)
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return
		}
		pw, has := u.User.Password()
		if !has {
			return
		}
		// The output depends on the password only through the mask: the
		// same URL with another password gives the same text, so the
		// password shows only where raw has it elsewhere too.
		if masked, ok := withoutPassword(raw); ok {
			if _, err := url.Parse(masked); err == nil {
				want := URL(masked)
				if out != want {
					t.Fatalf("URL(%q) = %q, but with the password masked %q", raw, out, want)
				}
				if pw != "" && strings.Contains(out, pw) && !strings.Contains(want, pw) {
					t.Fatalf("URL(%q) = %q shows the password %q", raw, out, pw)
				}
			}
		}
		if back, err := url.Parse(out); err == nil && back.User != nil {
			if p, has := back.User.Password(); has && p != Mask {
				t.Fatalf("URL(%q) = %q has the password %q", raw, out, p)
			}
		}
	})
}

func FuzzText(f *testing.F) {
	for _, c := range [][3]string{
		{"key", "K3Y-abc", "400 Bad Request: "},
		{"api_hash", `a"b\c`, `{"x":"`},
		{"Authorization", "Bearer abc", "\\"},
		{"token", "", ""},
		{"page", "2", "key=1"},
	} {
		f.Add(c[0], c[1], c[2])
	}
	f.Fuzz(func(t *testing.T, name, value, ctx string) {
		for _, s := range []string{ctx, ctx + name + "=" + value, ctx + value} {
			_ = Text(s) // never panics
		}
		v, err := json.Marshal(value)
		if err != nil || !SecretName(name) || !memberName.MatchString(name) || len(v) < 6 {
			return
		}
		member := `"` + name + `": ` + string(v)
		// A secret-named member's value is gone from the text, wherever
		// the member stands, unless the text shows it elsewhere too.
		for _, s := range []string{ctx + " " + member, "{" + member + "}" + ctx, "[" + member + ", 1]"} {
			got := Text(s)
			if strings.Contains(got, string(v)) && !strings.Contains(Text(ctx), string(v)) && !strings.Contains(string(v), Mask) {
				t.Fatalf("Text(%q) = %q shows the value %s", s, got, v)
			}
		}
	})
}

var memberName = regexp.MustCompile(`^[A-Za-z0-9_.\-]+$`)
