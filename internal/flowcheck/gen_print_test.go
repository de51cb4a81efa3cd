package flowcheck

import "testing"

func TestPrintScenarios(t *testing.T) {
	for s := uint64(1); s <= 30; s++ {
		sc := Generate(s)
		t.Logf("%d: n=%d %s", s, len(sc.Requests), sc)
	}
}
