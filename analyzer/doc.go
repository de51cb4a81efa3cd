// Package analyzer is `redrive analyze`: for each pipeline it reads the
// dead-letter topic twice.
//
//   - A statistics reader (no consumer group) reads every partition from the
//     earliest retained offset and follows it, rebuilding dlq.Stats and a
//     bounded list of recent dead letters on every start, so the analyzer
//     keeps nothing on disk and replicas agree.
//   - A rule worker in the consumer group redrive.<pipeline>.analyzer takes
//     each dead letter once, in partition order, decides with the rules
//     (republish, keep, drop; park past max_redrives), waits for a rule's
//     `after` by pausing the partition (never sleeping in the poll loop),
//     republishes at least once (the offset is committed only after the
//     republished record is acknowledged) and commits. For an exactly-once
//     pipeline (Pipeline.ExactlyOnce) the republishes and the offset commit
//     are one Kafka transaction (txn.go).
//
// It also follows the processors' control topic (control.go: every
// replica's status, the operator's pause, the line's stops), which it needs
// for nothing else: a control topic it cannot read is reported, never a
// reason to stop.
//
// It serves the JSON API, the dashboard and the alerts on top. It must never
// delete or rewrite a dead letter, never commit past one it has not
// finished, and never write to the control topic but an operator's pause
// or resume asked for with analyzer.token.
package analyzer
