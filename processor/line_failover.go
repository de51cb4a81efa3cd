package processor

// failover is what a stopped line still takes in: the records it forwards
// to breaker.failover_to instead of letting them wait, and the topics run
// keeps fetching.
type failover struct {
	to      string // breaker.failover_to; "": records wait
	retries bool   // breaker.failover_retries: tier records are forwarded too
}

// forward reports whether a record that may be forwarded is, at reasons
// (why the line is stopped): only while the service alone stops the line
// (its breaker is open, or it answered a pause code), which another
// pipeline's service need not share. A stop by an operator or the guard is
// a person's to end: the records wait for them.
func (f failover) forward(reasons []string) bool {
	if f.to == "" || len(reasons) == 0 {
		return false
	}
	for _, r := range reasons {
		if r != stopBreaker && r != stopPauseCode {
			return false
		}
	}
	return true
}

// fetchPaused says which of the main topic and the tiers are not fetched
// while the line is stopped for reasons: those whose records are not
// forwarded, except that an open breaker alone keeps the main topic
// fetched (up to max_inflight, the records wait in memory): its half-open
// probes are fresh main-topic records, which must be there when it
// half-opens.
func (f failover) fetchPaused(reasons []string) (main, tiers bool) {
	stopped := len(reasons) > 0
	fwd := f.forward(reasons)
	onlyBreaker := len(reasons) == 1 && reasons[0] == stopBreaker
	return stopped && !fwd && !onlyBreaker, stopped && !(fwd && f.retries)
}
