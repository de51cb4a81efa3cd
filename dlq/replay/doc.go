// Package replay republishes the dead letters of a DLQ that match a
// filter: `redrive replay` and the analyzer's POST /api/replay both run
// Run, so they select, refuse and count the same way.
//
// It is a package of its own, not part of dlq or dlq/dlqread, because it
// does what those two promise never to do: dlq builds and decodes records
// but never produces or consumes, and dlqread reads records but never
// decodes or produces. replay joins them: it scans with dlqread.Scan,
// decodes with dlq.Decode, matches a dlq.Filter, builds the record with
// dlq.Republish (the one place that refuses a truncated dead letter) and
// writes it with ProduceSync.
//
// The analyzer's rule worker does not scan (it consumes in a group and
// commits), but it builds its records with the same dlq.Republish.
package replay
