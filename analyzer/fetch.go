package analyzer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/dlqread"
)

// ReadTimeout bounds reading one dead letter by offset.
const ReadTimeout = 10 * time.Second

// readOverhead is what a fetch response holds besides its record batch.
const readOverhead = 64 << 10

// DeadLetterResponse is GET /api/deadletters/{partition}/{offset}: one
// dead letter read from the DLQ, its value whole.
type DeadLetterResponse struct {
	Pipeline   string         `json:"pipeline"`
	DeadLetter DeadLetterView `json:"dead_letter"`
}

// Errors of readRecord, as HTTP answers.
var (
	errNoRecord = errors.New("no such dead letter")    // 404
	errTooLarge = errors.New("record batch too large") // 413
	errReadSlow = errors.New("no record read in time") // 504
)

// serveDeadLetter answers one dead letter of a pipeline's DLQ by partition
// and offset, read from Kafka (the recent list keeps only a prefix of each
// value).
func (a *Analyzer) serveDeadLetter(w http.ResponseWriter, r *http.Request) {
	qs, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		httpError(w, http.StatusBadRequest, "query: "+err.Error())
		return
	}
	for k := range qs {
		if k != "pipeline" {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q (known: pipeline)", k))
			return
		}
	}
	part, err := strconv.ParseInt(r.PathValue("partition"), 10, 32)
	if err != nil || part < 0 {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("partition %q: want a whole number from 0", r.PathValue("partition")))
		return
	}
	off, err := strconv.ParseInt(r.PathValue("offset"), 10, 64)
	if err != nil || off < 0 {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("offset %q: want a whole number from 0", r.PathValue("offset")))
		return
	}
	p, err := a.pipeParam(qs.Get("pipeline"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !a.enter(w) {
		return
	}
	defer a.leave()
	rec, err := a.readRecord(r.Context(), p.cfg.DLQ, int32(part), off)
	switch {
	case errors.Is(err, errNoRecord):
		httpError(w, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, errTooLarge):
		httpError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	case errors.Is(err, errReadSlow):
		httpError(w, http.StatusGatewayTimeout, err.Error())
		return
	case err != nil:
		httpError(w, http.StatusBadGateway, err.Error())
		return
	}
	d, _ := dlq.Decode(rec) // an undecodable one is shown as far as it decodes, as in the listing
	v := DeadLetterView{View: dlq.NewView(d), ValueSize: len(rec.Value)}
	if a.o.HideValues && rec.Value != nil {
		v.hide(ValueHash(rec.Value))
	}
	writeJSON(w, DeadLetterResponse{Pipeline: p.cfg.Name, DeadLetter: v})
}

// readRecord reads the record at topic/part/off with a client of its own,
// started at that offset and closed after: at most ReadTimeout, and a
// record batch (compressed and decompressed) of at most
// Limits.ResponseBytes.
func (a *Analyzer) readRecord(ctx context.Context, topic string, part int32, off int64) (*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	bounds, err := dlqread.Offsets(ctx, a.admin, topic)
	if err != nil {
		return nil, err
	}
	b, ok := bounds[part]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s has no partition %d", errNoRecord, topic, part)
	case off < b.Start || off >= b.End:
		return nil, fmt.Errorf("%w: %s partition %d holds offsets %d to %d, not %d", errNoRecord, topic, part, b.Start, b.End-1, off)
	}
	max := int32(a.o.ResponseBytes)
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, a.o.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(off)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(max), kgo.FetchMaxPartitionBytes(max),
		kgo.BrokerMaxReadBytes(max+readOverhead), kgo.MaxDecompressBatchBytes(int(max)),
		kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	tooLarge := fmt.Errorf("%w: the batch holding %s/%d/%d is larger than analyzer.response_bytes (%d)", errTooLarge, topic, part, off, max)
	var last error
	for {
		fs := cl.PollRecords(ctx, 1)
		if ctx.Err() != nil {
			if last != nil {
				return nil, fmt.Errorf("reading %s/%d/%d: %w", topic, part, off, last)
			}
			return nil, fmt.Errorf("%w: %s/%d/%d within %v (an aborted write or a transaction marker?)", errReadSlow, topic, part, off, ReadTimeout)
		}
		var fatal error
		fs.EachError(func(_ string, _ int32, err error) {
			var big *kgo.ErrDecompressTooLarge
			switch {
			case errors.As(err, &big), strings.Contains(err.Error(), "BrokerMaxReadBytes"):
				fatal = tooLarge
			case !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
				last = err
			}
		})
		if fatal != nil {
			return nil, fatal
		}
		if rs := fs.Records(); len(rs) > 0 {
			if rs[0].Offset != off {
				return nil, fmt.Errorf("%w: %s/%d/%d is not a record (an aborted write or a transaction marker); the next one is at %d", errNoRecord, topic, part, off, rs[0].Offset)
			}
			return rs[0], nil
		}
	}
}
