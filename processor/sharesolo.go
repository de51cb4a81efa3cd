package processor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redrive/redrive/processor/control"
)

// soloLog is the evidence max_deliveries goes by. A share group counts a
// delivery for every record a member acquired when it dies, those it
// never started too: while a record delivered again runs alone, the
// suspects after it are acquired and wait (shareHold keeps anything else
// from being held then), and each death counts one more delivery of them.
// The delivery count alone cannot tell the record that killed the process
// from those acquired with it. So before a record delivered again
// runs alone, the reader writes an alone record to the control topic and
// waits for the broker's ack; a record is dead-lettered "crashed" past
// max_deliveries only if its delivery before this one ran alone, or once
// it is past max_deliveries+1 (the evidence could not be written or read:
// no control topic, or it was unreachable).
type soloLog struct {
	mu sync.Mutex
	// ran: partition and offset → the delivery it was about to run alone
	// at, as the control topic says.
	ran map[soloKey]int
	// write publishes an alone record and waits for the broker's ack; drop
	// queues a tombstone. Both nil without a control topic.
	write func(ctx context.Context, r control.Record) error
	drop  func(r control.Record)
	// writer is the control records' writer (the instance).
	writer string
}

type soloKey struct {
	part int32
	off  int64
}

// soloWriteWait bounds how long a record delivered again waits for its
// alone record to be written before it runs anyway.
const soloWriteWait = 5 * time.Second

var errNoControl = errors.New("no control topic (control disabled)")

func newSoloLog() *soloLog { return &soloLog{ran: map[soloKey]int{}} }

// attach gives the log the control topic's writer.
func (l *soloLog) attach(writer string, write func(context.Context, control.Record) error, drop func(control.Record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writer, l.write, l.drop = writer, write, drop
}

// note applies an alone record read from the control topic.
func (l *soloLog) note(r control.Record) {
	if r.Alone == nil {
		return
	}
	k := soloKey{r.Alone.Partition, r.Alone.Offset}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Tombstone {
		delete(l.ran, k)
		return
	}
	l.ran[k] = r.Alone.Delivery
}

// ranAlone reports whether the record at part, off ran alone at
// delivery.
func (l *soloLog) ranAlone(part int32, off int64, delivery int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.ran[soloKey{part, off}]
	return ok && d == delivery
}

// record writes that w is about to run alone at its delivery, and waits
// for it (at most soloWriteWait). An error says it was not written:
// without it, a death now cannot be told from any other.
func (l *soloLog) record(ctx context.Context, pipeline string, w *work) error {
	l.mu.Lock()
	write, writer := l.write, l.writer
	l.mu.Unlock()
	if write == nil {
		return errNoControl
	}
	r := control.Record{Kind: control.KindAlone, Pipeline: pipeline, Instance: writer, At: time.Now(),
		Alone: &control.Alone{Partition: w.rec.Partition, Offset: w.rec.Offset, Delivery: w.deliveries}}
	wctx, cancel := context.WithTimeout(ctx, soloWriteWait)
	defer cancel()
	if err := write(wctx, r); err != nil {
		return err
	}
	l.note(r)
	return nil
}

// forget ends w's alone record once w has its outcome.
func (l *soloLog) forget(pipeline string, w *work) {
	k := soloKey{w.rec.Partition, w.rec.Offset}
	l.mu.Lock()
	delete(l.ran, k)
	drop, writer := l.drop, l.writer
	l.mu.Unlock()
	if drop != nil {
		drop(control.Record{Kind: control.KindAlone, Pipeline: pipeline, Instance: writer, Tombstone: true,
			Alone: &control.Alone{Partition: k.part, Offset: k.off}})
	}
}
