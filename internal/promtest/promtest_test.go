package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"pipeline", "result"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	reg.MustRegister(c, g)
	c.WithLabelValues("a", "committed").Add(3)
	c.WithLabelValues("a", "aborted").Add(1)
	c.WithLabelValues("b", "committed").Add(5)
	g.Set(7)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"c_total", map[string]string{"pipeline": "a", "result": "committed"}, 3},
		{"c_total", map[string]string{"result": "committed"}, 8},
		{"c_total", nil, 9},
		{"c_total", map[string]string{"pipeline": "z"}, 0},
		{"g", nil, 7},
		{"missing", nil, 0},
	} {
		if got := Sum(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}
