package httphandler

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
)

// pollTemplates are the URL templates FuzzPollURL expands: the query
// parameter that holds {state}, and whether the last path segment does.
var pollTemplates = []struct {
	tpl, param string
	inPath     bool
}{
	{"https://ocr.captchaai.com/res.php?key=K3y&action=get&json=1&id={state}", "id", false},
	{"http://127.0.0.1:8080/res.php?id={state}&key=k", "id", false},
	{"http://127.0.0.1:8080/jobs/{state}?again={state}", "again", true},
	{"https://u:p@api.example/v2/{state}?x={state}#frag", "x", true},
	{"http://[::1]:9/a?json=%7B%22a%22%3A1%7D&id={state}", "id", false},
}

// For any job id, the expanded poll URL parses, keeps the template's
// scheme and host, and the parameter (and path segment) that held {state}
// decodes back to exactly the job id.
func FuzzPollURL(f *testing.F) {
	for _, s := range []string{"", "2122988149", "23501", "a b", "a+b", "a&b=c", "x#y", "?", "/", "%", "%zz", "ü", "\x00\xff", "{state}", "..", "a/../b", "\r\n", strings.Repeat("é", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, state string) {
		for _, tt := range pollTemplates {
			if err := checkURLTemplate(tt.tpl); err != nil {
				t.Fatalf("%s: %v", tt.tpl, err)
			}
			tpl, _ := url.Parse(expandTemplate(tt.tpl, "x", true))
			raw := expandTemplate(tt.tpl, state, true)
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("%q → %q does not parse: %v", state, raw, err)
			}
			if u.Scheme != tpl.Scheme || u.Host != tpl.Host || u.User.String() != tpl.User.String() || u.Fragment != tpl.Fragment {
				t.Fatalf("%q → %q: scheme, user, host or fragment changed (%s, %s)", state, raw, u.Scheme, u.Host)
			}
			q, err := url.ParseQuery(u.RawQuery)
			if err != nil {
				t.Fatalf("%q → query %q does not parse: %v", state, u.RawQuery, err)
			}
			if got := q[tt.param]; len(got) != 1 || got[0] != state {
				t.Fatalf("%q → %s = %q, want exactly the job id", state, tt.param, got)
			}
			if tt.inPath {
				seg := strings.TrimPrefix(u.EscapedPath(), strings.TrimSuffix(tpl.EscapedPath(), "x"))
				if got, err := url.PathUnescape(seg); err != nil || got != state {
					t.Fatalf("%q → path segment %q = %q (%v), want the job id", state, seg, got, err)
				}
			}
		}
		// A form body template: its field decodes back too.
		body := expandTemplate("key=k&action=status&order={state}", state, false)
		q, err := url.ParseQuery(body)
		if err != nil || len(q["order"]) != 1 || q["order"][0] != state || q.Get("action") != "status" {
			t.Fatalf("%q → body %q: %v, %v", state, body, q, err)
		}
	})
}

func TestCheckURLTemplate(t *testing.T) {
	for tpl, want := range map[string]string{
		"":                                        "required",
		"https://h.example/res.php?id={state}":    "",
		"https://h.example/jobs/{state}":          "",
		"https://h.example/{state}/x?a=b":         "",
		"https://{state}.example/res.php":         "may not be in the host",
		"https://h.example:{state}/res.php":       "", // not a port: parse error below
		"https://u:{state}@h.example/res.php":     "may not be in the host, port or user info",
		"https://h.example/res.php#{state}":       "in the fragment is never sent",
		"{state}://h.example/":                    "",
		"https://h.example/res.php?id={id}":       "unknown {id}: the only placeholder is {state}",
		"https://h.example/res.php?id={STATE}":    "unknown {STATE}: the placeholder is {state}, in lower case",
		"/res.php?id={state}":                     "want an absolute http:// or https:// URL",
		"ftp://h.example/{state}":                 "want an absolute http:// or https:// URL",
		"https://h.example/?key=s3cret&x={y}":     "unknown {y}",
		"https://h.example/?json={\"a\":{state}}": "",
	} {
		err := checkURLTemplate(tpl)
		switch {
		case tpl == "https://h.example:{state}/res.php", tpl == "{state}://h.example/":
			if err == nil {
				t.Errorf("%q accepted", tpl)
			}
		case want == "" && err != nil:
			t.Errorf("%q: %v", tpl, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want %q", tpl, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the secret shows: %v", tpl, err)
		}
	}
	if got := expandTemplate("http://h/jobs/{state}?id={state}", "a b/c", true); got != "http://h/jobs/a%20b%2Fc?id=a+b%2Fc" {
		t.Errorf("expand: %s", got)
	}
	if got := expandTemplate("order={state}&x=1", "a b&c", false); got != "order=a+b%26c&x=1" {
		t.Errorf("expand body: %s", got)
	}
}

// fieldErrors is err's FieldErrors by Field (and Index when not -1).
func fieldErrors(t *testing.T, err error) map[string]string {
	t.Helper()
	got := map[string]string{}
	if err == nil {
		return got
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *processor.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("not a FieldError: %v", e)
		}
		k := fe.Field
		if fe.Index >= 0 {
			k += "[" + string(rune('0'+fe.Index)) + "]"
		}
		if fe.Key != "" {
			k += "." + fe.Key
		}
		got[k] = fe.Msg
	}
	return got
}

func TestValidatePoll(t *testing.T) {
	good := Poll{URL: "https://h.example/res.php?id={state}", StateField: "request"}
	for _, tt := range []struct {
		name string
		o    Options
		want map[string]string // field → a piece of its message; exactly these fields
	}{
		{"good", Options{Poll: &good}, nil},
		{"post with the id in the body", Options{Poll: &Poll{URL: "https://h.example/api/v2", Method: "post", Body: "key=k&action=status&order={state}", StateField: "order"}}, nil},
		{"nothing", Options{Poll: &Poll{}}, map[string]string{"Poll.URL": "required", "Poll.StateField": "required with poll"}},
		{"bad everything", Options{Poll: &Poll{URL: "https://{state}/x", Method: "PUT", Body: "a={b}", StateField: "a..b", ResultField: ".x",
			FirstAfter: -time.Second, Every: -time.Second}},
			map[string]string{"Poll.URL": "may not be in the host", "Poll.Method": `"PUT": want GET or POST`, "Poll.Body": "unknown {b}",
				"Poll.StateField": "without empty parts", "Poll.ResultField": "without empty parts", "Poll.FirstAfter": "-1s: must be more than 0", "Poll.Every": "-1s: must be more than 0"}},
		{"GET with a body", Options{Poll: &Poll{URL: good.URL, Body: "x={state}", StateField: "s"}}, map[string]string{"Poll.Body": "needs method POST"}},
		{"no state anywhere", Options{Poll: &Poll{URL: "https://h.example/res.php", StateField: "s"}}, map[string]string{"Poll.URL": "no {state}"}},
		{"status", Options{Poll: &Poll{URL: good.URL, StateField: "s", Status: &StatusTable{Pending: []string{"In progress", " "}, Failed: []string{"IN PROGRESS"}}}},
			map[string]string{"Poll.Status.Field": "required with status", "Poll.Status.Done": "required with status", "Poll.Status.Pending[1]": "empty value",
				"Poll.Status.Failed[0]": `"IN PROGRESS" is in pending too`}},
		{"status field", Options{Poll: &Poll{URL: good.URL, StateField: "s", Status: &StatusTable{Field: "a.", Done: []string{"Completed"}}}},
			map[string]string{"Poll.Status.Field": "without empty parts"}},
		{"ok_field optional with code_field", Options{JSON: &JSONRule{CodeField: "error"}}, nil},
		{"json without fields", Options{JSON: &JSONRule{}}, map[string]string{"JSON.OKField": "required with json unless code_field is set"}},
		{"ok_value without ok_field", Options{JSON: &JSONRule{CodeField: "error", OKValue: 1}}, map[string]string{"JSON.OKValue": "needs ok_field"}},
		{"ok_field without ok_value", Options{JSON: &JSONRule{OKField: "status"}}, map[string]string{"JSON.OKValue": "required with ok_field"}},
		{"empty field names", Options{Query: map[string]string{"": "x", "json": "1"}, Form: map[string]string{"": "y"}}, map[string]string{"Query": "empty field name", "Form": "empty field name"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.URL = "https://h.example/in.php"
			got := fieldErrors(t, o.WithDefaults().Validate())
			for f, msg := range tt.want {
				if !strings.Contains(got[f], msg) {
					t.Errorf("%s: %q, want %q", f, got[f], msg)
				}
			}
			for f, msg := range got {
				if _, ok := tt.want[f]; !ok {
					t.Errorf("unexpected %s: %s", f, msg)
				}
			}
			if _, err := New(o); (err == nil) != (len(tt.want) == 0) {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// WithDefaults fills a copy of the Poll, never the caller's.
func TestPollDefaults(t *testing.T) {
	p := &Poll{URL: "https://h.example/?id={state}", StateField: "s", Method: " post "}
	o := Options{Poll: p}.WithDefaults()
	if o.Poll == p || p.Method != " post " || p.Every != 0 {
		t.Fatalf("the caller's Poll changed: %+v", p)
	}
	if o.Poll.Method != "POST" || o.Poll.FirstAfter != DefaultPollFirstAfter || o.Poll.Every != DefaultPollEvery {
		t.Errorf("defaults: %+v", o.Poll)
	}
	if m := (Poll{}).WithDefaults().Method; m != "GET" {
		t.Errorf("default method %q", m)
	}
}
