package intake

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The result label values of redrive_callback_requests_total.
const (
	ResultAccepted    = "accepted"    // written to the callbacks topic and acknowledged: 200
	ResultInvalid     = "invalid"     // no job id or a bad body: dead letter acknowledged, 200
	ResultForbidden   = "forbidden"   // wrong or missing token: 403
	ResultTooLarge    = "too_large"   // query or body over max_body_bytes, or a result or error over its limit: 413
	ResultUnavailable = "unavailable" // the write failed or was not acknowledged in time: 503
	ResultMethod      = "method"      // neither GET nor POST: 405
)

// Results are the result label values, in the order above.
var Results = []string{ResultAccepted, ResultInvalid, ResultForbidden, ResultTooLarge, ResultUnavailable, ResultMethod}

// metrics are the intake's series; one set per Registerer, shared by the
// pipelines' intakes (a second New with the same Registerer reuses them).
type metrics struct {
	requests *prometheus.CounterVec   // pipeline, result
	ack      *prometheus.HistogramVec // pipeline
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redrive_callback_requests_total",
			Help: "Callback requests by result: accepted, invalid (dead-lettered), forbidden, too_large, unavailable (503), method.",
		}, []string{"pipeline", "result"}),
		ack: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redrive_callback_ack_seconds",
			Help:    "Time from a callback's write (to the callbacks topic or the DLQ) to the broker's acknowledgement.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"pipeline"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.ack, err = register(reg, m.ack); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered in
// its place.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if ex, ok := are.ExistingCollector.(T); ok {
			return ex, nil
		}
	}
	return c, err
}
