package fakeapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func get(t *testing.T, u string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	code, body := do(t, req)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, code, body)
	}
	return body
}

func postForm(t *testing.T, u string, form url.Values) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code, body := do(t, req)
	if code != http.StatusOK {
		t.Fatalf("POST %s: %d %s", u, code, body)
	}
	return body
}

// cbody decodes a JSON answer of in.php or res.php.
func cbody(t *testing.T, s string) captchaBody {
	t.Helper()
	var b captchaBody
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("answer %q: %v", s, err)
	}
	return b
}

func startCaptcha(t *testing.T, o CaptchaOptions, seed uint64) (*CaptchaAI, string) {
	t.Helper()
	c := NewCaptchaAI(o, seed)
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return c, srv.URL
}

func task(n int) url.Values {
	return url.Values{"method": {"userrecaptcha"}, "googlekey": {"6Le-site-key"}, "pageurl": {"https://shop.example/login?n=" + strconv.Itoa(n)}}
}

func withKey(v url.Values, extra ...string) url.Values {
	out := cloneValues(v)
	out.Set("key", DefaultCaptchaKey)
	out.Set("json", "1")
	for i := 0; i+1 < len(extra); i += 2 {
		out.Set(extra[i], extra[i+1])
	}
	return out
}

func TestDefaultCaptchaKeyIsWellFormed(t *testing.T) {
	if len(DefaultCaptchaKey) != captchaKeyLen {
		t.Fatalf("DefaultCaptchaKey has %d characters, want %d", len(DefaultCaptchaKey), captchaKeyLen)
	}
}

func TestCaptchaFormats(t *testing.T) {
	c, base := startCaptcha(t, CaptchaOptions{SolveMin: 150 * time.Millisecond, SolveMax: 150 * time.Millisecond}, 1)
	in, res := base+"/in.php", base+"/res.php"

	// Keys, balance, parameters.
	for _, tc := range []struct {
		name string
		q    url.Values
		want string
	}{
		{"no key", url.Values{"method": {"post"}, "json": {"1"}}, CaptchaWrongUserKey},
		{"short key", url.Values{"key": {"abc"}, "method": {"post"}, "json": {"1"}}, CaptchaWrongUserKey},
		{"unknown key", url.Values{"key": {strings.Repeat("a", 32)}, "method": {"post"}, "json": {"1"}}, CaptchaKeyDoesNotExist},
		{"no method", withKey(url.Values{"body": {"x"}}), CaptchaBadParameters},
		{"remote pingback", withKey(task(0), "pingback", "http://203.0.113.7/cb"), CaptchaBadParameters},
		{"named pingback", withKey(task(0), "pingback", "https://callbacks.example/cb"), CaptchaBadParameters},
		{"pingback with user info", withKey(task(0), "pingback", "http://u:p@127.0.0.1:1/cb"), CaptchaBadParameters},
	} {
		if b := cbody(t, get(t, in+"?"+tc.q.Encode())); b.Status != 0 || b.Request != tc.want {
			t.Errorf("%s: %+v, want status 0 %s", tc.name, b, tc.want)
		}
	}
	if s := c.Stats(); s.PingbacksRefused != 3 || s.WrongKey != 3 || s.Accepted != 0 {
		t.Errorf("stats %+v: want 3 refused pingbacks, 3 wrong keys, no task", s)
	}
	if got := get(t, in+"?key=abc&method=post"); got != CaptchaWrongUserKey {
		t.Errorf("plain wrong key: %q", got)
	}
	c.SetZeroBalance(true)
	if b := cbody(t, get(t, in+"?"+withKey(task(0)).Encode())); b.Request != CaptchaZeroBalance {
		t.Errorf("zero balance: %+v", b)
	}
	if b := cbody(t, get(t, res+"?"+withKey(nil, "action", "getbalance").Encode())); b.Status != 1 || b.Request != "0.00" {
		t.Errorf("zero balance getbalance: %+v", b)
	}
	c.SetZeroBalance(false)
	if b := cbody(t, get(t, res+"?"+withKey(nil, "action", "getbalance").Encode())); b.Status != 1 || b.Request != DefaultCaptchaBalance {
		t.Errorf("getbalance: %+v", b)
	}
	if got := get(t, res+"?key="+DefaultCaptchaKey+"&action=getbalance"); got != DefaultCaptchaBalance {
		t.Errorf("plain getbalance: %q", got)
	}

	// A task by GET query, one by POST form, one by multipart, one plain.
	submitted := time.Now()
	ids := map[string]url.Values{}
	b := cbody(t, get(t, in+"?"+withKey(task(1)).Encode()))
	ids[b.Request] = task(1)
	b = cbody(t, postForm(t, in, withKey(task(2))))
	ids[b.Request] = task(2)
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("key", DefaultCaptchaKey)
	_ = mw.WriteField("method", "post")
	_ = mw.WriteField("json", "1")
	fw, _ := mw.CreateFormFile("file", "captcha.png")
	_, _ = fw.Write([]byte("\x89PNG image bytes"))
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, in, &mp)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	_, body := do(t, req)
	b = cbody(t, body)
	ids[b.Request] = url.Values{"method": {"post"}, "file": {"\x89PNG image bytes"}}
	plain := get(t, in+"?key="+DefaultCaptchaKey+"&"+task(3).Encode())
	id, ok := strings.CutPrefix(plain, "OK|")
	if !ok {
		t.Fatalf("plain submit: %q", plain)
	}
	ids[id] = task(3)
	if len(ids) != 4 {
		t.Fatalf("task ids %v: want 4 different", ids)
	}
	for id := range ids {
		if n, err := strconv.ParseUint(id, 10, 64); err != nil || n < DefaultFirstTaskID {
			t.Errorf("task id %q is not a number from %d", id, uint64(DefaultFirstTaskID))
		}
	}

	// Not ready, then the token of the task's fields; never before SolvedAt.
	for id, fields := range ids {
		q := withKey(nil, "action", "get", "id", id)
		var got captchaBody
		waitFor(t, 10*time.Second, "task "+id+" solved", func() bool {
			got = cbody(t, get(t, res+"?"+q.Encode()))
			if got.Status == 0 && got.Request != CaptchaNotReady {
				t.Fatalf("task %s: %+v", id, got)
			}
			return got.Status == 1
		})
		if got.Request != CaptchaToken(fields) {
			t.Errorf("task %s: token %q, want CaptchaToken(%v) = %q", id, got.Request, fields, CaptchaToken(fields))
		}
		if time.Since(submitted) < 150*time.Millisecond {
			t.Errorf("task %s solved before its 150ms", id)
		}
		tk, ok := c.Task(id)
		if !ok || tk.Polls == 0 || tk.Result != got.Request || tk.FirstPoll.IsZero() || tk.Submits != 1 {
			t.Errorf("Task(%s) = %+v, %v", id, tk, ok)
		}
	}
	if got := get(t, res+"?key="+DefaultCaptchaKey+"&action=get&id="+id); got != "OK|"+CaptchaToken(task(3)) {
		t.Errorf("plain res.php: %q", got)
	}
	if c.SubmitsOf(withKey(task(1), "pingback", "http://127.0.0.1:1/")) != 1 || c.SubmitsOf(task(99)) != 0 {
		t.Errorf("SubmitsOf counts transport fields, or unknown tasks")
	}

	// Ids it does not know, actions it does not know.
	for q, want := range map[string]string{
		"action=get&id=1":          CaptchaWrongID,
		"action=get&id=abc":        CaptchaWrongIDFormat,
		"action=get":               CaptchaWrongIDFormat,
		"action=nothing":           CaptchaEmptyAction,
		"":                         CaptchaEmptyAction,
		"action=get&id=1&key=nope": CaptchaWrongUserKey,
	} {
		u := res + "?json=1&key=" + DefaultCaptchaKey + "&" + q
		if strings.Contains(q, "key=") {
			u = res + "?json=1&" + q
		}
		if b := cbody(t, get(t, u)); b.Status != 0 || b.Request != want {
			t.Errorf("res.php?%s: %+v, want %s", q, b, want)
		}
	}
	if b := cbody(t, get(t, res+"?"+withKey(nil, "action", "reportbad", "id", id).Encode())); b.Status != 1 || b.Request != CaptchaReportRecorded {
		t.Errorf("reportbad: %+v", b)
	}

	// Methods and paths; the counters as JSON.
	req, _ = http.NewRequest(http.MethodDelete, in, nil)
	if code, _ := do(t, req); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE in.php: %d", code)
	}
	req, _ = http.NewRequest(http.MethodGet, base+"/other.php", nil)
	if code, _ := do(t, req); code != http.StatusNotFound {
		t.Errorf("GET other.php: %d", code)
	}
	var st CaptchaStats
	if err := json.Unmarshal([]byte(get(t, base+"/stats")), &st); err != nil {
		t.Fatal(err)
	}
	if st != c.Stats() || st.Accepted != 4 || st.Answers < 5 || st.UnknownID != 3 || st.ZeroBalance != 1 || st.BadParameters != 4 {
		t.Errorf("/stats %+v, Stats %+v", st, c.Stats())
	}
}

func TestCaptchaBodyLimit(t *testing.T) {
	_, base := startCaptcha(t, CaptchaOptions{MaxBodyBytes: 1024}, 1)
	form := withKey(task(1), "body", strings.Repeat("x", 2048))
	if b := cbody(t, postForm(t, base+"/in.php?json=1", form)); b.Request != CaptchaTooBig {
		t.Errorf("too big: %+v", b)
	}
}

func TestCaptchaNoSlotAndUnsolvable(t *testing.T) {
	c, base := startCaptcha(t, CaptchaOptions{NoSlotRatio: 0.5, UnsolvableRatio: 1, SolveMin: time.Millisecond, SolveMax: time.Millisecond}, 7)
	noSlot, accepted := 0, []string{}
	for i := range 200 {
		b := cbody(t, get(t, base+"/in.php?"+withKey(task(i)).Encode()))
		switch {
		case b.Status == 0 && b.Request == CaptchaNoSlot:
			noSlot++
		case b.Status == 1:
			accepted = append(accepted, b.Request)
		default:
			t.Fatalf("submit %d: %+v", i, b)
		}
	}
	if noSlot < 60 || noSlot > 140 {
		t.Errorf("%d of 200 no slot at a ratio of 0.5", noSlot)
	}
	if s := c.Stats(); s.NoSlot != int64(noSlot) || s.Accepted != int64(len(accepted)) {
		t.Errorf("stats %+v", s)
	}
	for _, id := range accepted[:5] {
		waitFor(t, 5*time.Second, "unsolvable", func() bool {
			b := cbody(t, get(t, base+"/res.php?"+withKey(nil, "action", "get", "id", id).Encode()))
			return b.Status == 0 && b.Request == CaptchaUnsolvable
		})
	}
}

// receiver is a pingback endpoint that records what it got.
type receiver struct {
	mu     sync.Mutex
	got    map[string][]url.Values // by id: the parameters of each call
	method map[string]bool
	fail   func(id string, n int) int // the status for the n-th call (from 1) for id; nil: 200
	srv    *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{got: map[string][]url.Values{}, method: map[string]bool{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			http.Error(w, "not a form", http.StatusBadRequest)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p := cloneValues(r.Form)
		if r.Method == http.MethodPost {
			p = cloneValues(r.PostForm)
			for k, v := range r.URL.Query() {
				p["query:"+k] = v
			}
		}
		id := p.Get("id")
		rc.mu.Lock()
		rc.got[id] = append(rc.got[id], p)
		rc.method[r.Method] = true
		n := len(rc.got[id])
		rc.mu.Unlock()
		if rc.fail != nil {
			if code := rc.fail(id, n); code != http.StatusOK {
				w.WriteHeader(code)
				return
			}
		}
		_, _ = io.WriteString(w, "OK")
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) calls(id string) []url.Values {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]url.Values(nil), rc.got[id]...)
}

func (rc *receiver) total() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, v := range rc.got {
		n += len(v)
	}
	return n
}

// The pingback's drop, duplicate and early draws, each as the fake says
// it drew them, GET style with the receiver's own query kept.
func TestCaptchaPingbackGET(t *testing.T) {
	rc := newReceiver(t)
	c, base := startCaptcha(t, CaptchaOptions{
		SolveMin: 10 * time.Millisecond, SolveMax: 60 * time.Millisecond,
		Pingback: PingbackOptions{DropRatio: 0.3, DuplicateRatio: 0.2, EarlyRatio: 0.2},
	}, 42)
	pingback := rc.srv.URL + "/cb/captcha?token=s3cret"
	const n = 300
	fields := map[string]url.Values{}
	seenAtAnswer := map[string]int{}
	for i := range n {
		b := cbody(t, postForm(t, base+"/in.php", withKey(task(i), "pingback", pingback)))
		if b.Status != 1 {
			t.Fatalf("submit %d: %+v", i, b)
		}
		fields[b.Request] = task(i)
		seenAtAnswer[b.Request] = len(rc.calls(b.Request))
	}
	waitFor(t, 30*time.Second, "every pingback delivered", func() bool { return c.Stats().PingbacksPending == 0 })

	var dropped, duplicated, early int
	for id, f := range fields {
		tk, ok := c.Task(id)
		if !ok || !tk.PingbackDone || tk.Pingback != pingback {
			t.Fatalf("Task(%s) = %+v, %v", id, tk, ok)
		}
		want := 1
		switch {
		case tk.Dropped:
			dropped++
			want = 0
			if tk.Duplicated || tk.Early {
				t.Errorf("task %s dropped and duplicated or early", id)
			}
		case tk.Duplicated:
			duplicated++
			want = 2
		}
		calls := rc.calls(id)
		if len(calls) != want || tk.PingbacksSent != want || tk.PingbacksOK != want || tk.PingbackRetries != 0 {
			t.Errorf("task %s (%+v): %d pingbacks received, want %d", id, tk, len(calls), want)
		}
		for _, p := range calls {
			if p.Get("code") != CaptchaToken(f) || p.Get("token") != "s3cret" || len(p) != 3 {
				t.Errorf("task %s: pingback %v, want id, code %s and the receiver's token", id, p, CaptchaToken(f))
			}
		}
		if tk.Early {
			early++
			// Delivered, duplicate included, before in.php answered.
			if seenAtAnswer[id] != want {
				t.Errorf("early task %s: %d of %d pingbacks had arrived when in.php answered", id, seenAtAnswer[id], want)
			}
		}
	}
	s := c.Stats()
	if dropped == 0 || duplicated == 0 || early == 0 || int64(dropped) != s.PingbacksDropped || int64(duplicated) != s.PingbacksDuplicated || int64(early) != s.PingbacksEarly {
		t.Errorf("dropped %d, duplicated %d, early %d of %d; stats %+v", dropped, duplicated, early, n, s)
	}
	if dropped < n/10 || dropped > n/2 {
		t.Errorf("%d of %d dropped at a ratio of 0.3", dropped, n)
	}
	if int(s.PingbacksSent) != rc.total() || s.PingbacksSent != s.PingbacksOK || s.PingbacksFailed != 0 || s.Polls != 0 {
		t.Errorf("stats %+v; the receiver got %d", s, rc.total())
	}
	if !rc.method[http.MethodGet] || rc.method[http.MethodPost] {
		t.Errorf("methods %v, want GET only", rc.method)
	}
}

// 2captcha's style: a POST form with id and code; the URL's query kept.
func TestCaptchaPingbackPOST(t *testing.T) {
	rc := newReceiver(t)
	c, base := startCaptcha(t, CaptchaOptions{SolveMin: time.Millisecond, SolveMax: 5 * time.Millisecond, UnsolvableRatio: 0.5,
		Pingback: PingbackOptions{Style: PingbackPOST}}, 3)
	ids := map[string]url.Values{}
	for i := range 20 {
		b := cbody(t, get(t, base+"/in.php?"+withKey(task(i), "pingback", rc.srv.URL+"/cb?token=t").Encode()))
		ids[b.Request] = task(i)
	}
	waitFor(t, 10*time.Second, "pingbacks", func() bool { return c.Stats().PingbacksPending == 0 })
	unsolvable := 0
	for id, f := range ids {
		calls := rc.calls(id)
		if len(calls) != 1 {
			t.Fatalf("task %s: %d pingbacks", id, len(calls))
		}
		p := calls[0]
		tk, _ := c.Task(id)
		want := CaptchaToken(f)
		if tk.Unsolvable {
			want = CaptchaUnsolvable
			unsolvable++
		}
		if p.Get("id") != id || p.Get("code") != want || p.Get("query:token") != "t" || len(p) != 3 {
			t.Errorf("task %s: POST %v, want id, code %s, ?token=t", id, p, want)
		}
	}
	if unsolvable == 0 || unsolvable == len(ids) {
		t.Errorf("%d of %d unsolvable at a ratio of 0.5", unsolvable, len(ids))
	}
	if !rc.method[http.MethodPost] || rc.method[http.MethodGet] {
		t.Errorf("methods %v, want POST only", rc.method)
	}
}

// A pingback answered other than 200 is retried, up to Retries times.
func TestCaptchaPingbackRetries(t *testing.T) {
	rc := newReceiver(t)
	rc.fail = func(id string, n int) int {
		switch {
		case strings.HasSuffix(id, "1"): // never accepted
			return http.StatusServiceUnavailable
		case n <= 2:
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	c, base := startCaptcha(t, CaptchaOptions{SolveMin: time.Millisecond, SolveMax: time.Millisecond,
		Pingback: PingbackOptions{Retries: 3, RetryDelay: 5 * time.Millisecond}}, 1)
	var ids []string
	for i := range 10 {
		ids = append(ids, cbody(t, get(t, base+"/in.php?"+withKey(task(i), "pingback", rc.srv.URL+"/cb").Encode())).Request)
	}
	waitFor(t, 10*time.Second, "pingbacks", func() bool { return c.Stats().PingbacksPending == 0 })
	failed := 0
	for _, id := range ids {
		tk, _ := c.Task(id)
		if strings.HasSuffix(id, "1") {
			failed++
			if tk.PingbacksSent != 4 || tk.PingbackRetries != 3 || tk.PingbacksOK != 0 || !tk.PingbackFailed {
				t.Errorf("never accepted %s: %+v", id, tk)
			}
			continue
		}
		if tk.PingbacksSent != 3 || tk.PingbackRetries != 2 || tk.PingbacksOK != 1 || tk.PingbackFailed {
			t.Errorf("accepted on the third try %s: %+v", id, tk)
		}
	}
	s := c.Stats()
	if failed != 1 || s.PingbacksFailed != 1 || s.PingbackRetries != 3+9*2 || s.PingbacksSent != 4+9*3 || s.PingbacksOK != 9 {
		t.Errorf("stats %+v (%d failed)", s, failed)
	}

	// Retries < 0: none.
	rc2 := newReceiver(t)
	rc2.fail = func(string, int) int { return http.StatusBadGateway }
	c2, base2 := startCaptcha(t, CaptchaOptions{SolveMin: time.Millisecond, SolveMax: time.Millisecond, Pingback: PingbackOptions{Retries: -1}}, 1)
	get(t, base2+"/in.php?"+withKey(task(1), "pingback", rc2.srv.URL+"/").Encode())
	waitFor(t, 10*time.Second, "pingback", func() bool { return c2.Stats().PingbacksPending == 0 })
	if s := c2.Stats(); s.PingbacksSent != 1 || s.PingbacksFailed != 1 || s.PingbackRetries != 0 {
		t.Errorf("no retries: %+v", s)
	}
}

// Close stops pingbacks not yet due; nothing is sent after it.
func TestCaptchaClose(t *testing.T) {
	rc := newReceiver(t)
	c := NewCaptchaAI(CaptchaOptions{SolveMin: time.Hour, SolveMax: time.Hour}, 1)
	srv := httptest.NewServer(c)
	defer srv.Close()
	for i := range 5 {
		get(t, srv.URL+"/in.php?"+withKey(task(i), "pingback", rc.srv.URL+"/").Encode())
	}
	if s := c.Stats(); s.PingbacksPending != 5 {
		t.Fatalf("pending %d", s.PingbacksPending)
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	if s := c.Stats(); s.PingbacksPending != 0 || s.PingbacksSent != 0 || rc.total() != 0 {
		t.Errorf("after Close: %+v, %d received", s, rc.total())
	}
	// Still answering, no pingback scheduled.
	b := cbody(t, get(t, srv.URL+"/in.php?"+withKey(task(9), "pingback", rc.srv.URL+"/").Encode()))
	if tk, _ := c.Task(b.Request); b.Status != 1 || !tk.PingbackDone || c.Stats().PingbacksPending != 0 {
		t.Errorf("submit after Close: %+v %+v", b, tk)
	}
}

// The same seed draws the same for the same submits; another seed does not.
func TestCaptchaDeterministic(t *testing.T) {
	draws := func(seed uint64) string {
		c := NewCaptchaAI(CaptchaOptions{NoSlotRatio: 0.2, UnsolvableRatio: 0.2, SolveMin: time.Hour, SolveMax: 2 * time.Hour,
			Pingback: PingbackOptions{DropRatio: 0.3, DuplicateRatio: 0.3, EarlyRatio: 0}}, seed)
		defer c.Close()
		var b strings.Builder
		for i := range 100 {
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/in.php?"+withKey(task(i), "pingback", "http://127.0.0.1:1/").Encode(), nil))
			r := cbody(t, rec.Body.String())
			fmt.Fprintf(&b, "%d %s", r.Status, r.Request)
			if tk, ok := c.Task(r.Request); ok {
				fmt.Fprintf(&b, " %v %v %v %s %s", tk.Dropped, tk.Duplicated, tk.Unsolvable, tk.SolvedAt.Sub(tk.Submitted).Round(time.Second), tk.Result)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	a, b := draws(5), draws(5)
	if a != b {
		t.Errorf("the same seed drew differently:\n%s\n---\n%s", a, b)
	}
	if a == draws(6) {
		t.Errorf("another seed drew the same")
	}
	if CaptchaToken(task(1)) != CaptchaToken(withKey(task(1), "pingback", "x", "soft_id", "1")) || CaptchaToken(task(1)) == CaptchaToken(task(2)) {
		t.Errorf("CaptchaToken depends on transport fields, or not on the task")
	}
	if CaptchaToken(url.Values{"a": {"bc"}}) == CaptchaToken(url.Values{"ab": {"c"}}) {
		t.Errorf("CaptchaToken is ambiguous")
	}
}

// Many submitters at once, each task's pingback exactly once, the right
// token; run with -race.
func TestCaptchaConcurrent(t *testing.T) {
	rc := newReceiver(t)
	c, base := startCaptcha(t, CaptchaOptions{SolveMin: time.Millisecond, SolveMax: 20 * time.Millisecond}, 9)
	const workers, each = 16, 64
	var mu sync.Mutex
	ids := map[string]url.Values{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				f := task(w*each + i)
				resp, err := http.PostForm(base+"/in.php", withKey(f, "pingback", rc.srv.URL+"/cb"))
				if err != nil {
					t.Error(err)
					return
				}
				var b captchaBody
				err = json.NewDecoder(resp.Body).Decode(&b)
				resp.Body.Close()
				if err != nil || b.Status != 1 {
					t.Errorf("submit: %+v %v", b, err)
					return
				}
				mu.Lock()
				ids[b.Request] = f
				mu.Unlock()
				// A poll now and then, racing the solver.
				if i%8 == 0 {
					r, err := http.Get(base + "/res.php?" + withKey(nil, "action", "get", "id", b.Request).Encode())
					if err == nil {
						r.Body.Close()
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(ids) != workers*each {
		t.Fatalf("%d distinct task ids for %d submits", len(ids), workers*each)
	}
	waitFor(t, 30*time.Second, "every pingback", func() bool { return c.Stats().PingbacksPending == 0 })
	for id, f := range ids {
		calls := rc.calls(id)
		if len(calls) != 1 || calls[0].Get("code") != CaptchaToken(f) {
			t.Fatalf("task %s: pingbacks %v, want one with %s", id, calls, CaptchaToken(f))
		}
	}
	if s := c.Stats(); s.PingbacksOK != workers*each || s.Accepted != workers*each || len(c.Tasks()) != workers*each {
		t.Errorf("stats %+v", s)
	}
}

// The oldest tasks are forgotten past MaxTasks.
func TestCaptchaMaxTasks(t *testing.T) {
	c, base := startCaptcha(t, CaptchaOptions{MaxTasks: 3}, 1)
	var ids []string
	for i := range 5 {
		ids = append(ids, cbody(t, get(t, base+"/in.php?"+withKey(task(i%2)).Encode())).Request)
	}
	if ts := c.Tasks(); len(ts) != 3 || ts[0].ID != ids[2] {
		t.Fatalf("tasks %+v", ts)
	}
	if _, ok := c.Task(ids[0]); ok {
		t.Error("the oldest task is still known")
	}
	if b := cbody(t, get(t, base+"/res.php?"+withKey(nil, "action", "get", "id", ids[0]).Encode())); b.Request != CaptchaWrongID {
		t.Errorf("a forgotten task: %+v", b)
	}
	if c.SubmitsOf(task(0)) != 2 || c.SubmitsOf(task(1)) != 1 {
		t.Errorf("SubmitsOf %d %d, want 2 1 (tasks 2, 4 and 3 held)", c.SubmitsOf(task(0)), c.SubmitsOf(task(1)))
	}
}

func TestLocalURL(t *testing.T) {
	for u, want := range map[string]bool{
		"http://127.0.0.1:9092/cb?token=x": true,
		"https://127.0.0.1/cb":             true,
		"http://127.8.9.10:1/":             true,
		"http://[::1]:8080/cb":             true,
		"http://localhost:1/cb":            true,
		"http://localhost.example/cb":      false,
		"http://10.0.0.1/cb":               false,
		"http://[::ffff:10.0.0.1]/":        false,
		"ftp://127.0.0.1/":                 false,
		"//127.0.0.1/":                     false,
		"http://u:p@127.0.0.1/":            false,
		"http://0.0.0.0:1/":                false,
		"not a url":                        false,
	} {
		if got := localURL(u); got != want {
			t.Errorf("localURL(%q) = %v, want %v", u, got, want)
		}
	}
}
