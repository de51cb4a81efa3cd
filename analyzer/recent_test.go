package analyzer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/retry"
)

// newTestAnalyzer is an analyzer of one pipeline that never connects
// (nothing here runs Run): for the recent list and the API over it.
func newTestAnalyzer(t *testing.T, recent int, l Limits) (*Analyzer, *pipe) {
	t.Helper()
	a, err := New(Options{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")},
		Pipelines:  []Pipeline{{Name: "p", Topic: "p", DLQ: "p.dlq"}},
		Registerer: prometheus.NewRegistry(),
		Recent:     recent,
		Limits:     l,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.admin.Close)
	return a, a.pipes[0]
}

// deadLetterRecord is a DLQ record at offset off with the given key, value
// and user headers, dead-lettered at ts.
func deadLetterRecord(off int64, key, value []byte, user []kgo.RecordHeader, ts time.Time) *kgo.Record {
	src := &kgo.Record{Topic: "p", Partition: 0, Offset: off, Key: key, Value: value}
	m := retry.Meta{ID: fmt.Sprintf("id-%d", off), Attempt: 3, HasOrigin: true, OriginTopic: "p", OriginOffset: off, OriginTimestamp: ts,
		ErrorClass: retry.ClassTransient, ErrorCode: "http_503", Error: "failed", Reason: "exhausted"}
	r := dlq.Build(src, m, user, dlq.BuildOptions{Topic: "p.dlq", Group: "g", Instance: "i"})
	r.Partition, r.Offset, r.Timestamp = 0, off, ts
	return r
}

// TestRecentListNeverExceedsItsByteBudget: dead letters of random sizes
// (values up to 64 KiB, keys and headers up to 4 KiB) go through a list of
// a 256 KiB budget and 1 KiB value prefixes: after every one the list
// costs at most the budget, its count is its entries' costs, and the
// newest dead letter is always kept (the oldest leave first).
func TestRecentListNeverExceedsItsByteBudget(t *testing.T) {
	const budget = 256 << 10
	a, p := newTestAnalyzer(t, 10000, Limits{RecentValueBytes: 1 << 10, RecentBytes: budget})
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().Truncate(time.Millisecond)
	for i := range 3000 {
		key := bytes.Repeat([]byte("k"), rng.IntN(4<<10))
		value := bytes.Repeat([]byte("v"), rng.IntN(64<<10))
		var user []kgo.RecordHeader
		for range rng.IntN(4) {
			user = append(user, kgo.RecordHeader{Key: "h", Value: bytes.Repeat([]byte("x"), rng.IntN(1<<10))})
		}
		a.add(p, deadLetterRecord(int64(i), key, value, user, now.Add(time.Duration(i)*time.Millisecond)))
		p.mu.Lock()
		var sum int64
		for j := 1; j <= p.n; j++ {
			sum += p.recent[(p.head-j+len(p.recent))%len(p.recent)].cost
		}
		bytesNow, n := p.bytes, p.n
		newest := p.recent[(p.head-1+len(p.recent))%len(p.recent)]
		p.mu.Unlock()
		if bytesNow > budget || sum != bytesNow {
			t.Fatalf("after %d dead letters the list counts %d bytes (its entries %d), budget %d", i+1, bytesNow, sum, budget)
		}
		if newest.d.Offset != int64(i) {
			t.Fatalf("after offset %d the newest kept is %d", i, newest.d.Offset)
		}
		if i == 2999 && n >= 3000 {
			t.Errorf("%d of 3000 dead letters kept within %d bytes: nothing was evicted", n, budget)
		}
	}
	// The list keeps the newest: what find returns is a contiguous run
	// ending at the last offset.
	got := p.find(dlq.Filter{}, 10000)
	for i, k := range got {
		if want := int64(2999 - i); k.d.Offset != want {
			t.Fatalf("find[%d] is offset %d, want %d: not the newest, in order", i, k.d.Offset, want)
		}
	}
}

// TestRecentCountBound: at most Recent entries, however small.
func TestRecentCountBound(t *testing.T) {
	a, p := newTestAnalyzer(t, 5, Limits{})
	for i := range 12 {
		a.add(p, deadLetterRecord(int64(i), []byte("k"), []byte("v"), nil, time.Now()))
	}
	if got := p.find(dlq.Filter{}, 100); len(got) != 5 || got[0].d.Offset != 11 || got[4].d.Offset != 7 {
		t.Errorf("kept %d, want the newest 5 (11..7)", len(got))
	}
}

// TestRecentValueCutAndMarked: a value longer than the prefix is kept as
// its first RecentValueBytes (at a UTF-8 boundary), marked cut, with its
// full size; a short one is whole; a null one stays null; nothing of the
// record's buffers is shared.
func TestRecentValueCutAndMarked(t *testing.T) {
	a, p := newTestAnalyzer(t, 100, Limits{RecentValueBytes: 10})
	long := []byte("abcdefghé-and-more") // é is two bytes at 8..9: the cut at 10 stays
	euro := []byte("abcdefghi€€")        // € is three bytes at 9..11: the cut at 10 moves to 9
	now := time.Now()
	recs := []*kgo.Record{
		deadLetterRecord(0, []byte("k0"), long, nil, now),
		deadLetterRecord(1, []byte("k1"), euro, nil, now.Add(time.Millisecond)),
		deadLetterRecord(2, []byte("k2"), []byte("short"), nil, now.Add(2*time.Millisecond)),
		deadLetterRecord(3, nil, nil, []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}, now.Add(3*time.Millisecond)),
	}
	for _, r := range recs {
		a.add(p, r)
	}
	got := map[int64]*kept{}
	for _, k := range p.find(dlq.Filter{}, 100) {
		got[k.d.Offset] = k
	}
	check := func(off int64, value string, size int, cut bool) {
		t.Helper()
		k := got[off]
		if k == nil {
			t.Fatalf("offset %d not kept", off)
		}
		if string(k.d.Value) != value || k.valueSize != size || k.cut != cut {
			t.Errorf("offset %d: value %q, size %d, cut %v; want %q, %d, %v", off, k.d.Value, k.valueSize, k.cut, value, size, cut)
		}
		if !utf8.Valid(k.d.Value) {
			t.Errorf("offset %d: the kept prefix %q is not valid UTF-8", off, k.d.Value)
		}
	}
	check(0, "abcdefghé", len(long), true)
	check(1, "abcdefghi", len(euro), true)
	check(2, "short", 5, false)
	check(3, "", 0, false)
	if got[3].d.Value != nil || got[3].d.Key != nil {
		t.Errorf("a null key and value must stay null: %q %q", got[3].d.Key, got[3].d.Value)
	}
	// Copies: overwriting the records' bytes changes nothing kept.
	for _, r := range recs {
		for i := range r.Value {
			r.Value[i] = 'X'
		}
		for i := range r.Key {
			r.Key[i] = 'X'
		}
		for _, h := range r.Headers {
			for i := range h.Value {
				h.Value[i] = 'X'
			}
		}
	}
	if string(got[0].d.Value) != "abcdefghé" || string(got[0].d.Key) != "k0" || string(got[3].d.UserHeaders[0].Value) != "t" {
		t.Errorf("the kept dead letter shares the record's buffers: %q %q %q", got[0].d.Value, got[0].d.Key, got[3].d.UserHeaders[0].Value)
	}

	// The API shows the prefix with value_size and value_cut.
	srv := httptest.NewServer(a.Handler(""))
	defer srv.Close()
	var resp DeadLettersResponse
	getJSON(t, srv.URL+"/api/deadletters?key=k0", &resp)
	if len(resp.DeadLetters) != 1 {
		t.Fatalf("key=k0: %d dead letters", len(resp.DeadLetters))
	}
	v := resp.DeadLetters[0]
	if v.Value == nil || *v.Value != "abcdefghé" || v.ValueSize != len(long) || !v.ValueCut || v.ValueEncoding != dlq.EncodingText {
		t.Errorf("key=k0: value %v (%s), value_size %d, value_cut %v", v.Value, v.ValueEncoding, v.ValueSize, v.ValueCut)
	}
}

func getJSON(t *testing.T, url string, v any) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode == 200 && v != nil {
		if err := json.Unmarshal(b.Bytes(), v); err != nil {
			t.Fatalf("%s: %v: %.300s", url, err, b.Bytes())
		}
	}
	return resp.StatusCode, b.Bytes()
}

// TestDeadLettersResponseBoundedByBytes: 200 dead letters of ~1 KiB in
// the view each, a 16 KiB response bound: the answer stays under it, says
// truncated and how many matched, and holds the newest ones in order;
// with room for all, it is not truncated.
func TestDeadLettersResponseBoundedByBytes(t *testing.T) {
	const bound = 16 << 10
	a, p := newTestAnalyzer(t, 1000, Limits{RecentValueBytes: 800, ResponseBytes: bound})
	now := time.Now().Truncate(time.Millisecond)
	for i := range 200 {
		a.add(p, deadLetterRecord(int64(i), []byte(fmt.Sprintf("k%d", i)), bytes.Repeat([]byte("v"), 5000), nil, now.Add(time.Duration(i)*time.Millisecond)))
	}
	srv := httptest.NewServer(a.Handler(""))
	defer srv.Close()
	var resp DeadLettersResponse
	code, body := getJSON(t, srv.URL+"/api/deadletters?limit=10000", &resp)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if len(body) > bound {
		t.Errorf("the answer is %d bytes, over the bound of %d", len(body), bound)
	}
	if !resp.Truncated || resp.Matched != 200 || len(resp.DeadLetters) == 0 || len(resp.DeadLetters) >= 200 {
		t.Errorf("truncated %v, matched %d, returned %d: want truncated, 200 matched, some returned", resp.Truncated, resp.Matched, len(resp.DeadLetters))
	}
	for i, v := range resp.DeadLetters {
		if v.Offset != int64(199-i) {
			t.Fatalf("item %d is offset %d, want %d (newest first)", i, v.Offset, 199-i)
		}
	}
	// A limit that fits is answered whole.
	resp = DeadLettersResponse{}
	getJSON(t, srv.URL+"/api/deadletters?limit=3", &resp)
	if resp.Truncated || resp.Matched != 3 || len(resp.DeadLetters) != 3 {
		t.Errorf("limit=3: truncated %v, matched %d, returned %d", resp.Truncated, resp.Matched, len(resp.DeadLetters))
	}
	// An empty answer is valid JSON with an empty list.
	code, body = getJSON(t, srv.URL+"/api/deadletters?code=nothing", &resp)
	if code != 200 || !strings.Contains(string(body), `"dead_letters":[]`) {
		t.Errorf("no match: %d %s", code, body)
	}
}

// TestBusyAnswers503: with every place taken, a request for dead letters
// (listing or by offset) is answered 503 with Retry-After at once; once a
// place is free it is answered.
func TestBusyAnswers503(t *testing.T) {
	a, p := newTestAnalyzer(t, 100, Limits{MaxRequests: 2})
	a.add(p, deadLetterRecord(0, []byte("k"), []byte("v"), nil, time.Now()))
	srv := httptest.NewServer(a.Handler(""))
	defer srv.Close()
	a.busy <- struct{}{}
	a.busy <- struct{}{} // two expensive requests under way
	for _, path := range []string{"/api/deadletters", "/api/deadletters/0/0"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s while busy: %d, Retry-After %q; want 503, 1", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// Cheap endpoints are not limited.
	if code, _ := getJSON(t, srv.URL+"/api/stats", nil); code != 200 {
		t.Errorf("/api/stats while busy: %d", code)
	}
	a.leave()
	var resp DeadLettersResponse
	if code, body := getJSON(t, srv.URL+"/api/deadletters", &resp); code != 200 || len(resp.DeadLetters) != 1 {
		t.Errorf("with a place free: %d %s", code, body)
	}
	if len(a.busy) != 1 {
		t.Errorf("%d places taken after the request, want 1 (it must leave)", len(a.busy))
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, c := range []struct {
		l    Limits
		want string
	}{
		{Limits{}, ""},
		{Limits{RecentValueBytes: -1}, "RecentValueBytes: -1: must not be negative"},
		{Limits{MaxRequests: -2}, "MaxRequests: -2: must not be negative"},
		{Limits{ResponseBytes: 100}, "ResponseBytes: 100: want 4096"},
		{Limits{ResponseBytes: 1 << 30}, "ResponseBytes: 1073741824: want 4096"},
		{Limits{RecentValueBytes: 2 << 20, RecentBytes: 1 << 20}, "RecentValueBytes: 2097152: more than the whole recent list may hold (1048576)"},
	} {
		err := c.l.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.l, err, c.want)
		}
	}
}

// FuzzKeep drives record bytes from anywhere through keep: the kept value
// is a prefix of the value, at most prefix bytes, cut exactly when the
// value is longer, valid UTF-8 when the value is, and the key and headers
// are whole; the cost counts at least the bytes kept.
func FuzzKeep(f *testing.F) {
	f.Add([]byte("key"), []byte("abcdefghé-and-more"), []byte("t"), uint16(10))
	f.Add([]byte(nil), []byte("€€€€"), []byte(nil), uint16(4))
	f.Add([]byte{0xff}, []byte{0xe2, 0x82, 0xac, 0x80, 0x80}, []byte{0}, uint16(1))
	f.Fuzz(func(t *testing.T, key, value, header []byte, prefix uint16) {
		r := deadLetterRecord(7, key, value, []kgo.RecordHeader{{Key: "h", Value: header}}, time.UnixMilli(1))
		d, _ := dlq.Decode(r)
		k := keep(d, int64(prefix), false)
		got := k.d.Value
		if !bytes.HasPrefix(value, got) || len(got) > int(prefix) || k.cut != (len(value) > int(prefix)) || k.valueSize != len(value) {
			t.Fatalf("value %q, prefix %d: kept %q, cut %v, size %d", value, prefix, got, k.cut, k.valueSize)
		}
		if k.cut && len(got) < int(prefix)-(utf8.UTFMax-1) {
			t.Fatalf("value %q, prefix %d: kept only %d bytes", value, prefix, len(got))
		}
		if utf8.Valid(value) && !utf8.Valid(got) {
			t.Fatalf("text value %q, prefix %d: kept %q is not valid UTF-8", value, prefix, got)
		}
		if !bytes.Equal(k.d.Key, d.Key) || (k.d.Key == nil) != (d.Key == nil) || len(k.d.UserHeaders) != len(d.UserHeaders) {
			t.Fatalf("key or headers changed: %q → %q, %v → %v", d.Key, k.d.Key, d.UserHeaders, k.d.UserHeaders)
		}
		if k.cost < int64(len(got)+len(key)+len(header)) {
			t.Fatalf("cost %d below the %d bytes kept", k.cost, len(got)+len(key)+len(header))
		}
	})
}
