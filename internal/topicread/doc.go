// Package topicread follows one Kafka topic by direct partition
// consumption: from offsets the caller lists, picking up partitions added
// to the topic later, and telling when it has caught up, that is read
// every partition to the end offset listed at start. The processor's
// callbacks reader, the analyzer's statistics reader and dlqread (Scan,
// Follow, Tail) read through it.
//
// Open lists where to start (the caller's Lister, retried when RetryList
// says so) and makes a client of its own from the caller's connection
// options; Poll returns the next records with the fetch errors of the same
// poll, and CaughtUp tells whether the records returned so far reach
// every end. With UpToEnds the Follower is a bounded scan instead: it
// returns no record at or past its partition's end and stops fetching a
// partition once it reached its end.
//
// Where it reads:
//
//   - A partition listed in Start.From is read from that offset; one whose
//     offset is no longer retained, from its earliest retained offset.
//   - A partition that appears later is read from its start; Poll finds it
//     at most CheckEvery after it appeared.
//   - A partition has caught up once Poll read its record just before its
//     end (a transaction's marker counts: it can be a partition's last
//     offset), or once nothing before its end is left to read (a
//     data-loss reset, or a log start at or past it found by the check).
//
// It never commits, joins a consumer group, produces or logs, and never
// decides which fetch error stops a reader: Poll hands them over, and the
// caller (which knows who to tell and how) decides. Control records are
// never returned. A Follower is for one goroutine.
package topicread
