// Package flowcheck is the randomized checker of the processor's
// invariants: a seeded generator draws a whole scenario (settings, load,
// the service's failures, replicas, kills), a scripted service logs every
// call it gets, and Check judges a run by that log and the outcome
// records: nothing lost, nothing written twice where that is promised, no
// retry before its tier delay or Retry-After, no dead letter the service
// did not earn, healthy requests finished within the bound, and no calls
// beyond those some answer explains.
//
// It knows nothing of Kafka or of the processor: processor/flowcheck_test.go
// runs the scenarios (make flowcheck). Everything here is pure or
// in-memory, so the checker itself has unit tests.
//
// It is imported only by tests.
package flowcheck
