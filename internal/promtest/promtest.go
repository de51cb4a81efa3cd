// Package promtest reads metric values out of a Prometheus registry in
// tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sum is the sum of the counter and gauge values of the series of name in
// reg whose labels include labels (nil: every series of name); 0 when
// there is none. It fails t when reg cannot be gathered.
func Sum(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("promtest: gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
