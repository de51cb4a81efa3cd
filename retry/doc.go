// Package retry holds the retry schedule (tiers, attempts, jitter, due times)
// and the codec for every redrive-* record header.
//
// It is the one place that reads and writes redrive's own headers: it
// replaces them on every hop, never appends duplicates, and copies every
// other header unchanged. It never touches a record's key or value, and it
// never talks to a broker.
package retry
