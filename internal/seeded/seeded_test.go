package seeded

import "testing"

// The draws are the fakes' contract with their tests: fixed values, and
// spread over [0, 1).
func TestDraws(t *testing.T) {
	if got := Hash(""); got != 14695981039346656037 {
		t.Errorf("Hash(\"\") = %d, want the FNV-1a offset basis", got)
	}
	if Hash("a") == Hash("b") || Mix(1) == Mix(2) {
		t.Error("different inputs drew the same value")
	}
	var low, high int
	for i := uint64(0); i < 10000; i++ {
		u := Unit(Mix(i))
		if u < 0 || u >= 1 {
			t.Fatalf("Unit(Mix(%d)) = %v, not in [0, 1)", i, u)
		}
		if u < 0.5 {
			low++
		} else {
			high++
		}
	}
	if low < 4500 || high < 4500 {
		t.Errorf("10000 draws: %d below 0.5, %d above; want about half each", low, high)
	}
}
