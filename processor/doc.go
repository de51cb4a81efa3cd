// Package processor consumes a pipeline's main topic and retry tiers, hands
// each record to a Handler, and writes the outcome: a results record, a
// retry record on the next tier, or a dead letter.
//
// It must never commit an offset before the outcome of that record (and of
// every record before it in the partition) is acknowledged by the broker,
// never sleep in the poll loop, and never commit for a partition it no
// longer owns. See ARCHITECTURE.md for the flow and the concurrency rules.
//
// # Where things are
//
// A pipeline (pipeline.go) wires parts, each in its own file:
//
//	to change ...                                   open
//	New, Run, the lag loop                           processor.go
//	what a handler returns, the Outcome constructors handler.go
//	a pipeline's settings, defaults and checks       config.go
//	how records are polled, the in-flight bound      poll.go
//	how a retry is scheduled (tier, due time)        decide.go, then retry/schedule.go
//	how a tier record waits until it is due          waitroom.go
//	which clock a due time is compared with          clock.go
//	how due tier records are fetched ahead of fresh  fetchorder.go
//	which queued record a worker takes next          runqueue.go
//	workers, key lanes, the end of a record          dispatch.go
//	one record: screen, the line, call, decide       process.go
//	what happens after a call (retry, DLQ, results)  decide.go (pure, table-tested)
//	how the line is composed, in what order          line.go
//	how the breaker decides                          line_breaker.go
//	how a 429 is waited out (off the workers)        throttle.go
//	the rate learned from 429s (AIMD)                line_learn.go
//	the rate limit, pause codes, guard, manual pause line_rate.go, line_pausecode.go, line_guard.go, line_manual.go
//	what is forwarded to failover_to                 line_failover.go
//	the line shared with the pipeline's other processes line_shared.go
//	each process's share of the budgets              share.go
//	the main topic read by a share group (consume: share) sharegroup.go
//	which records of a share group ran alone (crashes) sharesolo.go
//	nothing else held while a share group's suspects run  sharehold.go
//	the control topic: read, followed, written       controlplane.go, control/
//	how an outcome record is built and sized         deadletter.go
//	how an outcome is written and retried            write.go
//	how offsets are committed (at-least-once)        commit.go, offsets.go
//	how exactly-once commits                         txn.go
//	partitions assigned, revoked, lost               rebalance.go
//	the callbacks contract (records, decoding)       callback.go
//	how callbacks are read from their topic          callback_reader.go
//	how callbacks are kept, bounded                  callback_store.go
//	how a callback is matched with its record        callback_match.go
//	GET /api/pipelines, pause and resume by hand     status.go
//	metrics                                          metrics.go
//	output topics' size limits at start              probe.go
//	ACL hints for denied writes and reads            authz.go
//	faults: a recreated topic, a broker unreachable  recreated.go, brokerlog.go
//	the kafka client's metrics hook                  hooks.go
//
// The callback intake (the HTTP side) is package processor/intake; the
// built-in HTTP handler is processor/httphandler.
package processor
