package analyzer_test

// Tests of issue 12 (hostile input): the replay body, query parse errors,
// the HTTP server's guards, bounded metric labels, future timestamps and
// undecodable dead letters.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redrive/redrive/analyzer"
)

// endOffset is the sum of topic's end offsets: how many records it holds.
func (e *env) endOffset(topic string) int64 {
	e.t.Helper()
	ends, err := e.c.Admin(e.t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func postReplay(t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/replay", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// Point 5: `null` republished every dead letter, `limit: -1` meant
// 100,000, trailing garbage was accepted. Now the body is one JSON object,
// a negative limit is a 400, and no filter needs "all": true.
func TestReplayBodyStrict(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	for i := range 3 {
		e.deadLetter(fmt.Sprintf("d%d", i), "exhausted", "http_503", 0, now)
	}
	base, _ := e.start(nil, nil, "secret")
	waitStats(t, base, 3)
	for _, tc := range []struct{ body, want string }{
		{`null`, "want one JSON object"},
		{``, "empty"},
		{`[]`, "want one JSON object"},
		{`{}`, `set \"all\": true`},
		{`{"to":"` + e.other + `"}`, `set \"all\": true`},
		{`{"limit":-1}`, "limit -1"},
		{`{"codes":["http_503"],"limit":-1}`, "limit -1"},
		{`{"codes":["http_503"]} trailing`, "something follows"},
		{`{"codes":["http_503"]}{"all":true}`, "something follows"},
		{`{"all":true,"codes":["http_503"]}`, "one or the other"},
	} {
		code, body := postReplay(t, base, "secret", tc.body)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("body %q: %d %s, want 400 saying %q", tc.body, code, body, tc.want)
		}
	}
	if n := e.endOffset(e.main); n != 0 {
		t.Fatalf("%d records republished to %s by refused requests", n, e.main)
	}
	// A dry run with no filter needs no "all".
	code, body := postReplay(t, base, "secret", `{"dry_run":true}`)
	var rr analyzer.ReplayResponse
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Matched != 3 || rr.Republished != 0 {
		t.Errorf("dry run without a filter: %d %s", code, body)
	}
	// Explicitly all: every one, limit 0 meaning the default.
	rr = analyzer.ReplayResponse{}
	code, body = postReplay(t, base, "secret", `{"all":true,"limit":0}`)
	_ = json.Unmarshal([]byte(body), &rr)
	if code != 200 || rr.Republished != 3 {
		t.Errorf(`{"all":true}: %d %s`, code, body)
	}
	if n := e.endOffset(e.main); n != 3 {
		t.Errorf("%s holds %d after an explicit all, want 3", e.main, n)
	}
}

// Point 9: a query string that does not parse (a bad escape, more
// parameters than Go allows) lost its filters and limit silently and
// answered 200, unfiltered. Now it is a 400 on every endpoint.
func TestQueryParseErrorIs400(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	for i := range 3 {
		e.deadLetter(fmt.Sprintf("d%d", i), "exhausted", "http_503", 0, now)
	}
	base, _ := e.start(nil, nil, "secret")
	waitStats(t, base, 3)
	many := strings.Repeat("code=x&", 10001) + "limit=1"
	for _, path := range []string{"/api/deadletters", "/api/stats", "/api/pipelines", "/"} {
		for name, q := range map[string]string{"bad escape": "code=nomatch&limit=1&x=%zz", "too many": many} {
			var body map[string]any
			resp, err := http.Get(base + path + "?" + q)
			if err != nil {
				t.Fatal(err)
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(fmt.Sprint(body["error"]), "query string") {
				t.Errorf("GET %s with %s: %d %v, want 400 naming the query string", path, name, resp.StatusCode, body)
			}
		}
	}
	code, body := postReplay(t, base, "secret", `{"dry_run":true}`)
	if code != 200 {
		t.Fatalf("replay without a query: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", base+"/api/replay?%zz", strings.NewReader(`{"dry_run":true}`))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("POST /api/replay?%%zz: %d, want 400", resp.StatusCode)
	}
}
