// Package txnoffsets makes a transaction commit the offsets its caller
// finished, not the ones franz-go polled. The processor and the analyzer
// both end their transactions with kgo.GroupTransactSession.End, which
// commits the polled head; both replace it with CommitExactly in a
// kgo.PreTxnCommitFnContext function.
//
// It is a leaf package (franz-go only) so that processor and analyzer can
// use it: internal/kafkaconn imports internal/config, which imports them.
//
// It must never commit an offset it was not given, nor drop a topic id
// franz-go resolved: a v6 TxnOffsetCommit matches topics by id.
package txnoffsets
