package topicread

import (
	"context"
	"time"
)

// Opt is an option of Open. An option not given leaves the setting of the
// connection options (or kgo's default) alone where it says so.
type Opt func(*config)

type config struct {
	pollWait    time.Duration
	maxRecords  int
	checkEvery  time.Duration
	fetchBytes  int32
	fetchWait   time.Duration
	committed   bool
	upToEnds    bool
	retryPause  time.Duration
	retryReport func(error)
}

func defaults() config {
	return config{pollWait: time.Second, maxRecords: 1000, checkEvery: 30 * time.Second}
}

// PollWait bounds how long Poll waits for records before it returns an
// empty batch, so that a caller can beat or sweep between polls. Default
// 1s.
func PollWait(d time.Duration) Opt { return func(c *config) { c.pollWait = d } }

// MaxRecords bounds the records one Poll returns; 0 or less returns every
// record buffered. Default 1000.
func MaxRecords(n int) Opt { return func(c *config) { c.maxRecords = n } }

// CheckEvery is how often Poll lists the topic's partitions: one that
// appeared is read from its start, and one whose records before its end
// are gone has caught up. 0 or less never looks. Default 30s.
func CheckEvery(d time.Duration) Opt { return func(c *config) { c.checkEvery = d } }

// FetchMaxBytes bounds one fetch response (kgo.FetchMaxBytes; a larger
// record still comes, alone): what a fetch buffers counts beside what the
// caller holds. Default: the connection options', else kgo's (50 MiB).
func FetchMaxBytes(n int32) Opt { return func(c *config) { c.fetchBytes = n } }

// FetchMaxWait is how long the broker holds a fetch that has no new
// records (kgo.FetchMaxWait). Default: the connection options', else kgo's
// (5s).
func FetchMaxWait(d time.Duration) Opt { return func(c *config) { c.fetchWait = d } }

// ReadCommitted reads only committed transactional records; end offsets
// for it are best listed as last stable offsets (kadm's
// ListCommittedOffsets). Default: the connection options', else
// read_uncommitted.
func ReadCommitted() Opt { return func(c *config) { c.committed = true } }

// UpToEnds makes the Follower a bounded scan: only the partitions with
// records before their end are read, no record at or past its partition's
// end is returned, a partition stops being fetched once it reached its end,
// and no partition is added. Stop polling once CaughtUp. Default: follow
// every partition without end.
func UpToEnds() Opt { return func(c *config) { c.upToEnds = true } }

// RetryList makes Open list again, pause (positive) after each failure,
// until the Lister succeeds or ctx ends; report (if not nil) is told each
// error first. Default: Open returns the Lister's error.
func RetryList(pause time.Duration, report func(error)) Opt {
	return func(c *config) { c.retryPause, c.retryReport = pause, report }
}

// listStart calls list until it succeeds, or once without RetryList.
func (c *config) listStart(ctx context.Context, list Lister) (Start, error) {
	for {
		s, err := list(ctx)
		if err == nil || c.retryPause <= 0 {
			return s, err
		}
		if c.retryReport != nil {
			c.retryReport(err)
		}
		select {
		case <-ctx.Done():
			return Start{}, ctx.Err()
		case <-time.After(c.retryPause):
		}
	}
}
