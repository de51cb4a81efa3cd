package demosolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type reply struct {
	status int
	header http.Header
	body   body
}

// post sends one /solve request straight to the handler.
func post(t *testing.T, s *Solver, value, key, attempt, state string) reply {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/solve", strings.NewReader(value))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	if attempt != "" {
		r.Header.Set("Redrive-Attempt", attempt)
	}
	if state != "" {
		r.Header.Set("Redrive-State", state)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	var b body
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return reply{w.Code, w.Header(), b}
}

func TestRates(t *testing.T) {
	cfg := Config{FailRate: 0.2, NotReadyRate: 0.3, PermanentRate: 0.05, Seed: 42}
	s := New(cfg)
	const n = 10000
	got := map[int]int{}
	statuses := make([]int, n)
	for i := range n {
		r := post(t, s, "img", "k"+strconv.Itoa(i), "1", "")
		got[r.status]++
		statuses[i] = r.status
	}
	within := func(name string, count int, rate float64) {
		t.Helper()
		want := rate * n
		if d := float64(count) - want; d < -0.1*want-50 || d > 0.1*want+50 {
			t.Errorf("%s: %d of %d, want about %.0f", name, count, n, want)
		}
	}
	within("400", got[400], cfg.PermanentRate)
	within("503", got[503], cfg.FailRate)
	within("202", got[202], cfg.NotReadyRate)
	within("200", got[200], 1-cfg.PermanentRate-cfg.FailRate-cfg.NotReadyRate)

	st := s.Stats()
	if st.Requests != n || st.Permanent != int64(got[400]) || st.NoSlot != int64(got[503]) ||
		st.Accepted != int64(got[202]) || st.Solved != int64(got[200]) || st.Pending != int64(got[202]) {
		t.Errorf("stats %+v do not match answers %v", st, got)
	}

	// The same seed, keys and attempts give the same answers, in any order.
	again := New(cfg)
	for i := n - 1; i >= 0; i-- {
		if r := post(t, again, "img", "k"+strconv.Itoa(i), "1", ""); r.status != statuses[i] {
			t.Fatalf("key %d: %d, then %d with the same seed", i, statuses[i], r.status)
		}
	}
	// Another attempt draws anew (the same answer about a third of the time).
	second := New(cfg)
	same := 0
	for i := range 1000 {
		if post(t, second, "img", "k"+strconv.Itoa(i), "2", "").status == statuses[i] {
			same++
		}
	}
	if same > 500 {
		t.Errorf("attempt 2 answered like attempt 1 for %d of 1000 keys", same)
	}
}

func TestZeroConfigSolves(t *testing.T) {
	s := New(Config{})
	for i := range 100 {
		if r := post(t, s, "x", "", "", ""); r.status != 200 || r.body.Status != 1 || len(r.body.Request) != 6 {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
}

func TestAnswerHeaders(t *testing.T) {
	s := New(Config{FailRate: 1})
	r := post(t, s, "x", "k", "1", "")
	if r.status != 503 || r.header.Get("Redrive-Error-Code") != CodeNoSlot || r.header.Get("Retry-After") != "1" || r.body.Request != CodeNoSlot {
		t.Fatalf("fail: %+v", r)
	}
	r = post(t, New(Config{}), "token with bad-key inside", "k", "1", "")
	if r.status != 400 || r.header.Get("Redrive-Error-Code") != CodeWrongUserKey {
		t.Fatalf("bad-key: %+v", r)
	}
	r = post(t, New(Config{PermanentRate: 1}), "x", "k", "1", "")
	if r.status != 400 || r.header.Get("Redrive-Error-Code") != CodeWrongUserKey {
		t.Fatalf("permanent rate: %+v", r)
	}
	r = post(t, s, "x", "", "", "task-999")
	if r.status != 400 || r.header.Get("Redrive-Error-Code") != CodeWrongID {
		t.Fatalf("unknown task: %+v", r)
	}
}

func TestNotReadyFlow(t *testing.T) {
	for _, polls := range []int{0, 1, 3} {
		t.Run(strconv.Itoa(polls), func(t *testing.T) {
			s := New(Config{NotReadyRate: 1, PollsToReady: polls})
			r := post(t, s, "img", "req-1", "1", "")
			if r.status != 202 || r.header.Get("Retry-After") != "1" || r.header.Get("Redrive-Error-Code") != CodeNotReady {
				t.Fatalf("first answer %+v", r)
			}
			state := r.header.Get("Redrive-State")
			if !strings.HasPrefix(state, "task-") {
				t.Fatalf("state %q", state)
			}
			want := max(polls, 1)
			for p := 1; p <= want; p++ {
				r = post(t, s, "img", "req-1", "1", state)
				if p < want {
					if r.status != 202 || r.header.Get("Redrive-State") != state {
						t.Fatalf("poll %d: %+v", p, r)
					}
					continue
				}
				if r.status != 200 || r.body.Status != 1 {
					t.Fatalf("poll %d (ready): %+v", p, r)
				}
			}
			st := s.Stats()
			if st.Solved != 1 || st.Accepted != 1 || st.Polls != int64(want) || st.NotReady != int64(want) || st.Pending != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestIdempotency(t *testing.T) {
	s := New(Config{})
	first := post(t, s, "img-a", "same", "1", "")
	for i := range 3 {
		r := post(t, s, "img-a", "same", strconv.Itoa(i+2), "")
		if r.status != 200 || r.body.Request != first.body.Request {
			t.Fatalf("duplicate %d: %+v, want %+v", i, r, first)
		}
	}
	if st := s.Stats(); st.Solved != 1 || st.Duplicates != 3 || st.Requests != 4 {
		t.Fatalf("stats %+v", st)
	}

	// A pending task is handed out again, not created twice.
	s = New(Config{NotReadyRate: 1, PollsToReady: 2})
	a := post(t, s, "img", "p", "1", "")
	b := post(t, s, "img", "p", "1", "")
	if a.status != 202 || b.status != 202 || a.header.Get("Redrive-State") != b.header.Get("Redrive-State") {
		t.Fatalf("pending duplicate: %+v then %+v", a, b)
	}
	state := a.header.Get("Redrive-State")
	post(t, s, "img", "p", "1", state)
	done := post(t, s, "img", "p", "1", state)
	// A re-sent poll of a solved task, and a plain re-send, get the answer again.
	dupPoll := post(t, s, "img", "p", "1", state)
	dupPlain := post(t, s, "img", "p", "2", "")
	if done.status != 200 || dupPoll.body != done.body || dupPlain.body != done.body {
		t.Fatalf("solved %+v, re-polled %+v, re-sent %+v", done, dupPoll, dupPlain)
	}
	if st := s.Stats(); st.Solved != 1 || st.Accepted != 1 || st.Duplicates != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEviction(t *testing.T) {
	s := New(Config{})
	for i := range maxTasks + 10 {
		post(t, s, "v", "k"+strconv.Itoa(i), "1", "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tasks) != maxTasks || len(s.byKey) != maxTasks || s.byKey["k0"] != nil || s.byKey["k"+strconv.Itoa(maxTasks+9)] == nil {
		t.Fatalf("tasks %d, keys %d", len(s.tasks), len(s.byKey))
	}
}

func TestHTTP(t *testing.T) {
	s := New(Config{FailRate: 0.5, Seed: 7, Latency: time.Millisecond})
	srv := httptest.NewServer(s)
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/solve", strings.NewReader("v"))
			req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Requests != 50 || st.Solved+st.NoSlot != 50 {
		t.Fatalf("stats %+v", st)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/solve"}, {"POST", "/stats"}, {"GET", "/nope"}} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 && resp.StatusCode != 404 {
			t.Errorf("%s %s: %d", c.method, c.path, resp.StatusCode)
		}
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	s := New(Config{Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/solve", strings.NewReader("v"))
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { s.ServeHTTP(w, r); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the solver slept past the request's context")
	}
}

func TestTooLarge(t *testing.T) {
	s := New(Config{})
	r := httptest.NewRequest(http.MethodPost, "/solve", strings.NewReader(strings.Repeat("x", MaxBodyBytes+1)))
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge || s.Stats().Rejected != 1 {
		t.Fatalf("%d, %+v", w.Code, s.Stats())
	}
}

// FuzzSolve: any request gets one of the protocol's answers, with a JSON body.
func FuzzSolve(f *testing.F) {
	f.Add([]byte("img"), "k1", "1", "")
	f.Add([]byte("bad-key"), "", "", "task-1")
	f.Add([]byte{0xff}, "k", "x", "task-18446744073709551616")
	f.Add([]byte(""), "k", "-1", "task-")
	s := New(Config{FailRate: 0.2, NotReadyRate: 0.3, PermanentRate: 0.1, Seed: 3, PollsToReady: 2})
	f.Fuzz(func(t *testing.T, value []byte, key, attempt, state string) {
		r := httptest.NewRequest(http.MethodPost, "/solve", strings.NewReader(string(value)))
		r.Header["Idempotency-Key"] = []string{key}
		r.Header["Redrive-Attempt"] = []string{attempt}
		r.Header["Redrive-State"] = []string{state}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		var b body
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
			t.Fatalf("body %q: %v", w.Body.String(), err)
		}
		switch w.Code {
		case 200:
			if b.Status != 1 || len(b.Request) != 6 {
				t.Fatalf("answer %+v", b)
			}
		case 202:
			if !strings.HasPrefix(w.Header().Get("Redrive-State"), "task-") {
				t.Fatalf("202 without a task: %v", w.Header())
			}
		case 400, 503:
			if w.Header().Get("Redrive-Error-Code") == "" || b.Request != w.Header().Get("Redrive-Error-Code") {
				t.Fatalf("%d: %v %+v", w.Code, w.Header(), b)
			}
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// call sends one request straight to the handler.
func call(s *Solver, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

func outageOf(t *testing.T, w *httptest.ResponseRecorder) Outage {
	t.Helper()
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	var o Outage
	if err := json.Unmarshal(w.Body.Bytes(), &o); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return o
}

// An outage answers every /solve call 503 ERROR_SERVICE_OUTAGE, new
// requests and polls alike, until its time is up; for=0 ends it early.
func TestOutage(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := New(Config{NotReadyRate: 1, PollsToReady: 2, Now: clock.Now})
	task := post(t, s, "img", "k1", "1", "") // a task pending before the outage
	state := task.header.Get("Redrive-State")
	if task.status != 202 || state == "" {
		t.Fatalf("before the outage: %+v", task)
	}
	if o := outageOf(t, call(s, http.MethodGet, "/outage")); o.Active || o.Until != nil {
		t.Fatalf("GET /outage before any: %+v", o)
	}

	o := outageOf(t, call(s, http.MethodPost, "/outage?for=30s"))
	if want := clock.Now().Add(30 * time.Second); !o.Active || o.Until == nil || !o.Until.Equal(want) {
		t.Fatalf("POST /outage?for=30s: %+v, want active until %s", o, want)
	}
	if g := outageOf(t, call(s, http.MethodGet, "/outage")); !g.Active || !g.Until.Equal(*o.Until) {
		t.Fatalf("GET /outage during it: %+v", g)
	}
	down := func(what string, r reply) {
		t.Helper()
		if r.status != 503 || r.header.Get("Redrive-Error-Code") != CodeOutage || r.body.Request != CodeOutage || r.header.Get("Retry-After") != "" {
			t.Fatalf("%s during the outage: %+v", what, r)
		}
	}
	down("a new request", post(t, s, "img", "k2", "1", ""))
	down("a poll", post(t, s, "img", "k1", "1", state))
	down("a request without a key", post(t, s, "img", "", "", ""))
	clock.Add(29 * time.Second)
	down("a request 29s in", post(t, s, "img", "k3", "1", ""))
	if st := s.Stats(); st.Outage != 4 || st.Requests != 5 || st.Polls != 0 || st.Accepted != 1 {
		t.Fatalf("stats during the outage %+v", st)
	}

	// Its time up, the solver answers as before: the pending task is kept.
	clock.Add(time.Second)
	if g := outageOf(t, call(s, http.MethodGet, "/outage")); g.Active {
		t.Fatalf("GET /outage after it: %+v", g)
	}
	if r := post(t, s, "img", "k1", "1", state); r.status != 202 || r.header.Get("Redrive-State") != state {
		t.Fatalf("the first poll after the outage: %+v", r)
	}
	if r := post(t, s, "img", "k1", "1", state); r.status != 200 {
		t.Fatalf("the second poll after the outage: %+v", r)
	}

	// A new outage replaces the one running; for=0 ends it.
	outageOf(t, call(s, http.MethodPost, "/outage?for=10m"))
	if o := outageOf(t, call(s, http.MethodPost, "/outage?for=1s")); !o.Until.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("a shorter outage does not replace the longer: %+v", o)
	}
	if o := outageOf(t, call(s, http.MethodPost, "/outage?for=0")); o.Active {
		t.Fatalf("for=0: %+v", o)
	}
	if r := post(t, s, "img", "k9", "1", ""); r.status == 503 {
		t.Fatalf("after for=0: %+v", r)
	}
}

func TestOutageBadRequests(t *testing.T) {
	s := New(Config{})
	for target, want := range map[string]string{
		"/outage":               "for: missing",
		"/outage?for=":          "for: missing",
		"/outage?for=soon":      `for "soon": not a duration`,
		"/outage?for=30":        `for "30": not a duration`,
		"/outage?for=-1s":       `for "-1s"`,
		"/outage?for=11m":       `for "11m"`,
		"/outage?for=1h":        `for "1h"`,
		"/outage?for=%zz":       "query string",
		"/outage?for=1s&for=2s": "for: given 2 times",
	} {
		w := call(s, http.MethodPost, target)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) {
			t.Errorf("POST %s: %d %q, want 400 with %q", target, w.Code, w.Body.String(), want)
		}
		if want != "query string" && !strings.Contains(w.Body.String(), "want ?for=<duration> from 0 (ends the outage) to 10m") {
			t.Errorf("POST %s: %q does not say what is wanted", target, w.Body.String())
		}
	}
	if o := s.Outage(); o.Active {
		t.Fatalf("a refused request started an outage: %+v", o)
	}
	if o := outageOf(t, call(s, http.MethodPost, "/outage?for=10m")); !o.Active {
		t.Fatalf("for=10m (the cap) refused: %+v", o)
	}
	if _, err := s.SetOutage(MaxOutage + 1); !errors.Is(err, ErrOutageRange) {
		t.Errorf("SetOutage past the cap: %v", err)
	}
	if _, err := s.SetOutage(-time.Nanosecond); !errors.Is(err, ErrOutageRange) {
		t.Errorf("SetOutage below zero: %v", err)
	}
	if w := call(s, http.MethodDelete, "/outage"); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, POST" {
		t.Errorf("DELETE /outage: %d Allow %q", w.Code, w.Header().Get("Allow"))
	}
}

// Outages are switched while requests are answered (run with -race).
func TestOutageConcurrent(t *testing.T) {
	s := New(Config{FailRate: 0.2, NotReadyRate: 0.2, Seed: 9})
	srv := httptest.NewServer(s)
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 25 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/solve", strings.NewReader("v"))
				req.Header.Set("Idempotency-Key", fmt.Sprint("k", i, "-", j))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 202 && resp.StatusCode != 503 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Go(func() {
		for j := range 50 {
			d := "0"
			if j%2 == 0 {
				d = "1m"
			}
			resp, err := http.Post(srv.URL+"/outage?for="+d, "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			_ = s.Outage()
		}
	})
	wg.Wait()
	if o := s.Outage(); o.Active { // the last switch ended it
		t.Errorf("outage %+v after for=0", o)
	}
	if st := s.Stats(); st.Requests != 200 || st.Solved+st.NoSlot+st.Accepted+st.Outage+st.Permanent != 200 {
		t.Errorf("stats %+v", st)
	}
}
