package fakeapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func startSMM(t *testing.T, o SMMOptions, seed uint64) (*SMMPanel, string) {
	t.Helper()
	s := NewSMMPanel(o, seed)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL + "/api/v2"
}

// smm posts a form to the panel and decodes its JSON answer into a map.
func smm(t *testing.T, api string, fields ...string) map[string]any {
	t.Helper()
	f := url.Values{"key": {DefaultSMMKey}}
	for i := 0; i+1 < len(fields); i += 2 {
		f.Set(fields[i], fields[i+1])
	}
	var m map[string]any
	body := postForm(t, api, f)
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return m
}

func TestSMMFormats(t *testing.T) {
	s, api := startSMM(t, SMMOptions{}, 1)

	// add → increasing order ids, as JSON numbers.
	a := smm(t, api, "action", "add", "service", "1", "link", "https://social.example/p/1", "quantity", "1000")
	b := smm(t, api, "action", "add", "service", "1", "link", "https://social.example/p/2", "quantity", "309")
	if a["order"] != float64(DefaultFirstOrder) || b["order"] != float64(DefaultFirstOrder+1) || len(a) != 1 {
		t.Fatalf("add: %v, %v", a, b)
	}

	// status: In progress twice, then Completed for good; strings throughout.
	id := strconv.Itoa(DefaultFirstOrder + 1)
	for i, want := range []string{SMMInProgress, SMMInProgress, SMMCompleted, SMMCompleted} {
		st := smm(t, api, "action", "status", "order", id)
		if st["status"] != want || st["currency"] != "USD" || st["charge"] != "0.27810" || len(st) != 5 {
			t.Errorf("status %d: %v, want %s", i+1, st, want)
		}
		for _, k := range []string{"charge", "start_count", "remains"} {
			if _, ok := st[k].(string); !ok {
				t.Errorf("status %d: %s is %T, want a string", i+1, k, st[k])
			}
		}
		if rem, _ := strconv.Atoi(st["remains"].(string)); (want == SMMCompleted) != (rem == 0) || rem > 309 {
			t.Errorf("status %d: remains %v", i+1, st["remains"])
		}
	}
	if o, ok := s.Order(DefaultFirstOrder + 1); !ok || o.Polls != 4 || o.Status != SMMCompleted || o.Quantity != 309 || o.Adds != 1 {
		t.Errorf("Order = %+v, %v", o, ok)
	}

	// Several orders at once, one unknown.
	multi := smm(t, api, "action", "status", "orders", strconv.Itoa(DefaultFirstOrder)+",999")
	if first, ok := multi[strconv.Itoa(DefaultFirstOrder)].(map[string]any); !ok || first["status"] != SMMInProgress {
		t.Errorf("orders: %v", multi)
	}
	if unknown, ok := multi["999"].(map[string]any); !ok || unknown["error"] != SMMIncorrectOrderID {
		t.Errorf("orders: %v", multi)
	}

	// balance, and the errors.
	if bal := smm(t, api, "action", "balance"); bal["balance"] != DefaultSMMBalance || bal["currency"] != "USD" {
		t.Errorf("balance: %v", bal)
	}
	for name, tc := range map[string]struct {
		fields []string
		want   string
	}{
		"wrong key":         {[]string{"key", "nope", "action", "balance"}, SMMInvalidKey},
		"no action":         {nil, SMMIncorrectRequest},
		"unknown action":    {[]string{"action", "dance"}, SMMIncorrectRequest},
		"add no link":       {[]string{"action", "add", "service", "1", "quantity", "10"}, SMMIncorrectRequest},
		"add bad quantity":  {[]string{"action", "add", "service", "1", "link", "l", "quantity", "-3"}, SMMIncorrectRequest},
		"status unknown":    {[]string{"action", "status", "order", "1"}, SMMIncorrectOrderID},
		"status not number": {[]string{"action", "status", "order", "abc"}, SMMIncorrectOrderID},
		"status no order":   {[]string{"action", "status"}, SMMIncorrectOrderID},
	} {
		if got := smm(t, api, tc.fields...); got["error"] != tc.want || len(got) != 1 {
			t.Errorf("%s: %v, want {\"error\": %q}", name, got, tc.want)
		}
	}
	s.SetNoFunds(true)
	if got := smm(t, api, "action", "add", "service", "1", "link", "l", "quantity", "10"); got["error"] != SMMNoFunds {
		t.Errorf("no funds: %v", got)
	}
	if bal := smm(t, api, "action", "balance"); bal["balance"] != "0.00" {
		t.Errorf("no-funds balance: %v", bal)
	}
	s.SetNoFunds(false)

	// GET works too; other methods and paths do not.
	var got map[string]any
	_ = json.Unmarshal([]byte(get(t, api+"?key="+DefaultSMMKey+"&action=balance")), &got)
	if got["balance"] != DefaultSMMBalance {
		t.Errorf("GET balance: %v", got)
	}
	req, _ := http.NewRequest(http.MethodPut, api, nil)
	if code, _ := do(t, req); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", code)
	}
	req, _ = http.NewRequest(http.MethodGet, strings.TrimSuffix(api, "/v2")+"/v1", nil)
	if code, _ := do(t, req); code != http.StatusNotFound {
		t.Errorf("/api/v1: %d", code)
	}
	var st SMMStats
	_ = json.Unmarshal([]byte(get(t, strings.TrimSuffix(api, "/api/v2")+"/stats")), &st)
	if st != s.Stats() || st.Adds != 2 || st.StatusPolls != 8 || st.Completed != 2 || st.InvalidKey != 1 || st.NoFunds != 1 || st.UnknownOrder != 4 || st.BadRequests != 4 {
		t.Errorf("/stats %+v, Stats %+v", st, s.Stats())
	}
}

// Terminal statuses other than Completed: by option and per order.
func TestSMMTerminal(t *testing.T) {
	_, api := startSMM(t, SMMOptions{Progress: []string{SMMPending}, Terminal: SMMPartial,
		TerminalFor: func(_, link string) string {
			if strings.Contains(link, "gone") {
				return SMMCanceled
			}
			return ""
		}}, 1)
	partial := smm(t, api, "action", "add", "service", "2", "link", "https://social.example/a", "quantity", "100")["order"].(float64)
	canceled := smm(t, api, "action", "add", "service", "2", "link", "https://social.example/gone", "quantity", "100")["order"].(float64)
	id := func(f float64) string { return strconv.Itoa(int(f)) }
	if st := smm(t, api, "action", "status", "order", id(partial)); st["status"] != SMMPending {
		t.Errorf("first: %v", st)
	}
	if st := smm(t, api, "action", "status", "order", id(partial)); st["status"] != SMMPartial || st["remains"] != "10" || st["charge"] != "0.08100" {
		t.Errorf("partial: %v", st)
	}
	smm(t, api, "action", "status", "order", id(canceled))
	if st := smm(t, api, "action", "status", "order", id(canceled)); st["status"] != SMMCanceled || st["charge"] != "0.00000" {
		t.Errorf("canceled: %v", st)
	}

	// No progress at all: terminal on the first poll.
	_, api2 := startSMM(t, SMMOptions{Progress: []string{}}, 1)
	o := smm(t, api2, "action", "add", "service", "1", "link", "l", "quantity", "5")["order"].(float64)
	if st := smm(t, api2, "action", "status", "order", id(o)); st["status"] != SMMCompleted {
		t.Errorf("no progress: %v", st)
	}
}

func TestSMMDeterministicAndBounded(t *testing.T) {
	starts := func(seed uint64) []int64 {
		s := NewSMMPanel(SMMOptions{MaxOrders: 4}, seed)
		for i := range 6 {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/api/v2", strings.NewReader(url.Values{"key": {DefaultSMMKey}, "action": {"add"},
				"service": {"1"}, "link": {"l" + strconv.Itoa(i%2)}, "quantity": {"10"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			s.ServeHTTP(rec, req)
		}
		var out []int64
		for _, o := range s.Orders() {
			out = append(out, o.StartCount)
		}
		if len(out) != 4 {
			t.Fatalf("%d orders held, want 4", len(out))
		}
		if _, ok := s.Order(DefaultFirstOrder); ok {
			t.Errorf("the oldest order is still held")
		}
		if o, _ := s.Order(DefaultFirstOrder + 5); o.Adds != 2 {
			t.Errorf("Adds %d, want 2 (orders 3 and 5 held)", o.Adds)
		}
		return out
	}
	a, b, c := starts(1), starts(1), starts(2)
	if !slicesEqual(a, b) || slicesEqual(a, c) {
		t.Errorf("start counts %v %v %v: want the same for one seed, not for another", a, b, c)
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSMMConcurrent(t *testing.T) {
	s, api := startSMM(t, SMMOptions{}, 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[float64]bool{}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				resp, err := http.PostForm(api, url.Values{"key": {DefaultSMMKey}, "action": {"add"}, "service": {"1"},
					"link": {"https://social.example/" + strconv.Itoa(w*100+i)}, "quantity": {"100"}})
				if err != nil {
					t.Error(err)
					return
				}
				var m map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&m)
				resp.Body.Close()
				id, _ := m["order"].(float64)
				mu.Lock()
				seen[id] = true
				mu.Unlock()
				for range 3 {
					r, err := http.PostForm(api, url.Values{"key": {DefaultSMMKey}, "action": {"status"}, "order": {strconv.Itoa(int(id))}})
					if err == nil {
						r.Body.Close()
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != 200 || seen[0] {
		t.Errorf("%d distinct order ids for 200 adds", len(seen))
	}
	if st := s.Stats(); st.Adds != 200 || st.StatusPolls != 600 || st.Completed != 200 {
		t.Errorf("stats %+v", st)
	}
}
