package processor

import "time"

// A due time (redrive-due) is a wall-clock time: it is written by one
// process and read by another, or by the same one after a restart, and the
// monotonic clock means nothing across processes. So a due time is
// compared with the wall clock of the process that reads the record, and
// every reading that is compared with one, or that one is computed from,
// comes from the pipeline's clock: the decision's time (a retry's due time
// and its record's timestamp), the fetch's (the wait bound), the waiting
// room's and the screen's before every handler call.
//
// Timers run on the monotonic clock, which a step of the wall clock does
// not move: the waiting room arms its timer for the wall-clock time left,
// and when it fires compares the wall clock with the due times again, so a
// step back re-arms it instead of handing over a record early; after a
// step forward, a record already waiting comes when its timer was armed
// for (later by the wall clock than its due time, by at most the step). And
// the screen runs again before every call that follows a wait (the line's,
// a 429's): a record is called only while the wall clock says it is due.

// clock is where a pipeline reads the wall clock that due times are
// compared with. The processor's is wallClock; a test injects one whose
// wall clock steps (Config.clock).
type clock interface {
	Now() time.Time
}

// wallClock is the system clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
