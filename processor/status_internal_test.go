package processor

import (
	"math"
	"testing"
	"time"
)

func TestHistQuantileAndWindow(t *testing.T) {
	up := []float64{0.1, 1, math.Inf(1)}
	h := hist{upper: up, cum: []uint64{90, 100, 100}, count: 100}
	if q := h.quantile(0.5); math.Abs(q-0.1*50/90) > 1e-9 {
		t.Errorf("p50 = %v, want %v (interpolated in the first bucket)", q, 0.1*50/90)
	}
	if q := h.quantile(0.99); math.Abs(q-(0.1+0.9*9/10)) > 1e-9 {
		t.Errorf("p99 = %v, want %v", q, 0.1+0.9*9/10)
	}
	if q := (hist{upper: up, cum: []uint64{0, 0, 5}, count: 5}).quantile(0.99); q != 1 {
		t.Errorf("p99 past the last bucket = %v, want its bound 1", q)
	}
	if q := (hist{}).quantile(0.99); q != 0 {
		t.Errorf("p99 of nothing = %v, want 0", q)
	}

	// The window: an old slow minute no longer counts once a minute passed.
	var hw histWindows
	t0 := time.Now()
	slow := hist{upper: up, cum: []uint64{0, 0, 10}, count: 10}
	if d := hw.delta("k", slow, t0); d.count != 10 {
		t.Errorf("first delta counts %d, want all 10 since start", d.count)
	}
	fast := hist{upper: up, cum: []uint64{20, 20, 30}, count: 30}
	if d := hw.delta("k", fast, t0.Add(30*time.Second)); d.count != 20 || d.quantile(0.99) > 0.1 {
		t.Errorf("delta after 30 s counts %d with p99 %v, want the 20 fast ones since the first snapshot", d.count, d.quantile(0.99))
	}
	if d := hw.delta("k", fast, t0.Add(100*time.Second)); d.count != 0 {
		t.Errorf("delta after 100 s with nothing new since 30 s counts %d, want 0", d.count)
	}
}
