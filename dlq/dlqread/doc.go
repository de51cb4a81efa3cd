// Package dlqread reads a dead-letter topic: Scan reads what it holds now
// and returns, Tail follows what arrives. `redrive replay`, `redrive dlq
// stats|export|tail` and the analyzer's replay read the DLQ through it;
// `redrive tail` reads any topic with it (nothing here is DLQ-specific).
//
// Reading is direct partition consumption at exact offsets, without a
// consumer group: nothing is committed and no group member joins or
// leaves, so reading a DLQ never disturbs the analyzer or anyone else. Each
// call consumes with a client of its own, made from the caller's client's
// options; the caller's client is used only for the admin requests that
// list the offsets. The reading itself (offsets, partitions added later,
// where a scan ends) is internal/topicread's.
//
// The package reads records; it never produces, commits or decodes them
// (dlq.Decode does).
package dlqread
