package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/dlqread"
)

// Errors of Run, for errors.Is.
var (
	// ErrNoTarget: Options.To is empty.
	ErrNoTarget = errors.New("no topic to republish to")
	// ErrLoop: Options.To is the DLQ read; every republished record would
	// come straight back.
	ErrLoop = errors.New("republishing into the DLQ it reads would loop")
	// ErrWrite: a republished record was not acknowledged; Run stops at
	// the first failed batch.
	ErrWrite = errors.New("a write failed")
)

// BatchSize is how many records Run hands to one ProduceSync at most.
const BatchSize = 500

// Options are one replay.
type Options struct {
	// Client lists the DLQ's offsets, is the model of the scanning
	// client (dlqread.Scan), and writes (ProduceSync): give it acks=all
	// and a delivery timeout, as a republish must be acknowledged to
	// count.
	Client *kgo.Client
	// DLQ is the topic read.
	DLQ string
	// To is the topic written to; required, and not DLQ. The caller
	// picks the default (the pipeline's main topic).
	To string
	// Filter selects the dead letters (the zero Filter: all).
	Filter dlq.Filter
	// Limit stops after this many dead letters selected for republishing
	// (in a dry run: that would be); 0 is no limit. Truncated dead letters
	// do not count against it.
	Limit int
	// DryRun selects and reports but writes nothing.
	DryRun bool
	// Rate is at most this many writes per second; 0 is no limit. The
	// n-th record is written no sooner than (n-1)/Rate seconds after Run
	// starts.
	Rate float64
	// Report, when set, is called on Run's goroutine for every record
	// that matched the filter and every record that does not decode, in
	// the order read, before the record is written (see Result). An error
	// from it stops Run, which returns it.
	Report func(Result) error
}

// Result is what Run decided about one DLQ record.
type Result struct {
	// Record is the DLQ record.
	Record *kgo.Record
	// DeadLetter is the record decoded (as far as it decodes).
	DeadLetter *dlq.DeadLetter
	// Err is nil for a dead letter selected for republishing; wraps
	// dlq.ErrTruncated for one that matched but is never republished;
	// is Decode's error (wrapping dlq.ErrNotDeadLetter or
	// retry.ErrBadHeader) for a record that is not a dead letter, which is
	// not matched against the filter at all.
	Err error
}

// Counts are a replay's numbers so far.
type Counts struct {
	Scanned     int // DLQ records read
	Undecodable int // of those, not redrive dead letters: skipped, never matched
	Matched     int // dead letters the filter matched, truncated ones included
	Truncated   int // matched, but cut to fit the DLQ: never republished
	Selected    int // matched and not truncated: to republish (in a dry run: would be)
	Sent        int // handed to ProduceSync
	Republished int // acknowledged by the broker
	Failed      int // not acknowledged
	Limited     bool
}

// InFlight is how many records are written but not yet answered.
func (c Counts) InFlight() int { return c.Sent - c.Republished - c.Failed }

// Replay is one run; Counts may be read while Run runs (for progress).
type Replay struct {
	o Options

	mu sync.Mutex
	c  Counts
}

// New checks o and returns the replay, not yet started.
func New(o Options) (*Replay, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("replay: no client")
	case o.To == "":
		return nil, ErrNoTarget
	case o.To == o.DLQ:
		return nil, fmt.Errorf("%w: %s", ErrLoop, o.To)
	case o.Limit < 0:
		return nil, fmt.Errorf("replay: limit %d: want 0 (no limit) or more", o.Limit)
	case o.Rate < 0:
		return nil, fmt.Errorf("replay: rate %v: want 0 (no limit) or more", o.Rate)
	}
	if err := o.Filter.Validate(); err != nil {
		return nil, err
	}
	return &Replay{o: o}, nil
}

// Run runs a replay with o (New, then Replay.Run).
func Run(ctx context.Context, o Options) (Counts, error) {
	r, err := New(o)
	if err != nil {
		return Counts{}, err
	}
	return r.Run(ctx)
}

// Counts are the numbers so far.
func (r *Replay) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

func (r *Replay) count(f func(*Counts)) {
	r.mu.Lock()
	f(&r.c)
	r.mu.Unlock()
}

var errLimit = errors.New("limit reached")

// Run scans the DLQ as it is when Run starts (dlqread.Scan), decodes each
// record, matches the filter, refuses truncated dead letters
// (dlq.Republish) and republishes the rest in batches, each written with
// ProduceSync and counted once acknowledged. A batch is written when it
// is full and before every wait for the rate. It stops at the limit, at
// the first failed batch (an error wrapping ErrWrite, naming the first
// record that failed), at a scan error (wrapping dlqread.ErrNoTopic for a
// missing DLQ) or when ctx ends (ctx's error). Writes already begun finish
// even then, so the counts say what was written. Hitting the limit is not
// an error: Counts.Limited says so.
func (r *Replay) Run(ctx context.Context) (Counts, error) {
	o := r.o
	start := time.Now()
	var gap time.Duration
	if o.Rate > 0 {
		gap = time.Duration(float64(time.Second) / o.Rate)
	}
	var batch []*kgo.Record
	var batchDL []*dlq.DeadLetter
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r.count(func(c *Counts) { c.Sent += len(batch) })
		// Not cancelled with ctx: a record the broker may already hold
		// must get its answer, or the count would lie.
		res := o.Client.ProduceSync(context.WithoutCancel(ctx), batch...)
		var first error
		ok := 0
		for i, pr := range res {
			if pr.Err == nil {
				ok++
				continue
			}
			if first == nil {
				d := batchDL[i]
				first = fmt.Errorf("%w: republish %s/%d/%d to %s: %w", ErrWrite, d.Topic, d.Partition, d.Offset, o.To, pr.Err)
			}
		}
		r.count(func(c *Counts) { c.Republished += ok; c.Failed += len(res) - ok })
		batch, batchDL = batch[:0], batchDL[:0]
		return first
	}
	err := dlqread.Scan(ctx, o.Client, o.DLQ, func(rec *kgo.Record) error {
		r.count(func(c *Counts) { c.Scanned++ })
		d, err := dlq.Decode(rec)
		if err != nil {
			r.count(func(c *Counts) { c.Undecodable++ })
			return r.report(Result{Record: rec, DeadLetter: d, Err: err})
		}
		if !o.Filter.Match(d) {
			return nil
		}
		out, err := dlq.Republish(d, o.To)
		if err != nil {
			r.count(func(c *Counts) { c.Matched++; c.Truncated++ })
			return r.report(Result{Record: rec, DeadLetter: d, Err: err})
		}
		var n int
		r.count(func(c *Counts) { c.Matched++; c.Selected++; n = c.Selected })
		if err := r.report(Result{Record: rec, DeadLetter: d}); err != nil {
			return err
		}
		if !o.DryRun {
			if gap > 0 {
				if wait := time.Until(start.Add(time.Duration(n-1) * gap)); wait > 0 {
					if err := flush(); err != nil {
						return err
					}
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return ctx.Err()
					}
				}
			}
			batch, batchDL = append(batch, out), append(batchDL, d)
			if len(batch) >= BatchSize || gap > 0 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if o.Limit > 0 && n >= o.Limit {
			return errLimit
		}
		return nil
	})
	if errors.Is(err, errLimit) {
		err = nil
		r.count(func(c *Counts) { c.Limited = true })
	}
	if err == nil || !errors.Is(err, ErrWrite) {
		// What was selected before a scan error or an interrupt is
		// still written: it was reported as selected.
		if ferr := flush(); ferr != nil && err == nil {
			err = ferr
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return r.Counts(), err
}

func (r *Replay) report(res Result) error {
	if r.o.Report != nil {
		return r.o.Report(res)
	}
	return nil
}
