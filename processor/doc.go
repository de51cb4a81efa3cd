// Package processor consumes a pipeline's main topic and retry tiers, hands
// each record to a Handler, and writes the outcome: a results record, a
// retry record on the next tier, or a dead letter.
//
// It must never commit an offset before the outcome of that record (and of
// every record before it in the partition) is acknowledged by the broker,
// never sleep in the poll loop, and never commit for a partition it no
// longer owns. See ARCHITECTURE.md for the flow and the concurrency rules.
package processor
