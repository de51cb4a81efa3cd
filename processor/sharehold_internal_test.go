package processor

import "testing"

// TestUnrunDeliveriesNotCharged: the deliveries a share reader released
// unrun just before a record's next one are not counted against it;
// earlier ones, or a release followed by a delivery elsewhere, are.
func TestUnrunDeliveriesNotCharged(t *testing.T) {
	releases := func(ds ...int) unrunMark {
		var m unrunMark
		for _, d := range ds {
			m = markUnrun(m, d)
		}
		return m
	}
	for _, c := range []struct {
		name     string
		released unrunMark
		next     int
		want     int
	}{
		{"released at its first delivery, taken at the second", releases(1), 2, 1},
		{"released twice in a row", releases(2, 3), 4, 2},
		{"released at 1, then delivered elsewhere (2)", releases(1), 3, 0},
		{"a gap breaks the run", releases(1, 3), 4, 1},
		{"never more than the deliveries before", unrunMark{last: 2, n: 5}, 3, 2},
	} {
		if got := unrunBefore(c.released, c.next); got != c.want {
			t.Errorf("%s: %d deliveries not charged, want %d", c.name, got, c.want)
		}
	}
}
