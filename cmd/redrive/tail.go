package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/dlqread"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
)

func newTailCmd(g *globals) *cobra.Command {
	var pipeline string
	var fromStart, follow, asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "tail TOPIC",
		Short: "print a topic's records (results, a tier, main, the DLQ): time, partition, offset, key, value, headers",
		Long: `Reads TOPIC directly (no consumer group, nothing committed) and prints
each record: time, partition, offset, key, value and headers, one line
each, or --json. Without --from-start only records written after tail
starts are read; without --follow it stops at the end offsets listed at
start, with --follow it waits for new records until interrupted.

With --pipeline, TOPIC may name one of that pipeline's topics: main,
results, dlq, callbacks, or a tier as retry.<delay> (retry.30s).

With analyzer.hide_values: true in the config every value is shown as its
size and SHA-256 only, never its bytes; no flag shows them.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{2, fmt.Errorf("tail takes one TOPIC, got %d arguments: redrive tail -c FILE TOPIC", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return &exitError{2, fmt.Errorf("--max %d: want 0 (no limit) or more", limit)}
			}
			c, err := g.loadOrBrokers()
			if err != nil {
				return err
			}
			topic, err := tailTopic(c, pipeline, args[0])
			if err != nil {
				return &exitError{2, err}
			}
			opts, err := kafkaconn.Opts(c)
			if err != nil {
				return &exitError{2, err}
			}
			ctx := cmd.Context()
			if err := preflight(ctx, c, kafkaconn.Need{Read: []string{topic}}); err != nil {
				return err
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				return &exitError{2, err}
			}
			defer cl.Close()
			bounds, err := dlqread.Offsets(ctx, cl, topic)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, dlqread.ErrNoTopic) {
					return &exitError{1, fmt.Errorf("topic %s does not exist", topic)}
				}
				return &exitError{1, fmt.Errorf("reading %s: %w", topic, err)}
			}
			if !fromStart {
				for p, b := range bounds {
					bounds[p] = dlqread.Bounds{Start: b.End, End: b.End}
				}
			}

			errw := cmd.ErrOrStderr()
			hidden := ""
			if c.Analyzer.HideValues {
				hidden = "; values hidden (analyzer.hide_values)"
			}
			switch {
			case follow && fromStart:
				fmt.Fprintf(errw, "following %s (%d partitions): every retained record, then new ones%s; interrupt to stop\n", topic, len(bounds), hidden)
			case follow:
				fmt.Fprintf(errw, "following %s (%d partitions): new records%s; interrupt to stop\n", topic, len(bounds), hidden)
			case fromStart:
				fmt.Fprintf(errw, "reading %s (%d partitions): every retained record up to the end offsets listed now%s\n", topic, len(bounds), hidden)
			default:
				fmt.Fprintf(errw, "%s: nothing to read: without --from-start only records written from now on are read, and without --follow tail does not wait for them\n", topic)
			}

			pr := newTailPrinter(cmd.OutOrStdout(), asJSON, c.Analyzer.HideValues)
			var shown int
			errEnough := errors.New("--max reached")
			fn := func(r *kgo.Record) error {
				if err := pr.print(r); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				shown++
				if limit > 0 && shown >= limit {
					return errEnough
				}
				return nil
			}
			if follow {
				from := make(map[int32]int64, len(bounds))
				for p, b := range bounds {
					from[p] = b.Start
				}
				err = dlqread.Follow(ctx, cl, topic, from, fn)
			} else {
				err = dlqread.ScanBounds(ctx, cl, topic, bounds, fn)
			}
			switch {
			case errors.Is(err, errEnough):
				fmt.Fprintf(errw, "stopped at --max %d: %s shown\n", limit, records(shown))
			case ctx.Err() != nil:
				fmt.Fprintf(errw, "stopped: %s shown\n", records(shown))
			case err != nil:
				return &exitError{1, fmt.Errorf("reading %s: %w", topic, err)}
			default:
				fmt.Fprintf(errw, "done: %s shown\n", records(shown))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pipeline, "pipeline", "", "resolve TOPIC among this pipeline's topics: main, results, dlq, callbacks, retry.<delay>")
	fl.BoolVar(&fromStart, "from-start", false, "read every retained record first (default: only records written after start)")
	fl.BoolVar(&follow, "follow", false, "wait for new records until interrupted (default: stop at the end offsets listed at start)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per record instead of lines")
	fl.IntVarP(&limit, "max", "n", 0, "stop after this many records (0: no limit)")
	return cmd
}

// tailTopic is the topic tail reads: arg as it is, or with a pipeline
// arg may be one of pipelineTopics' names or any of its topics.
func tailTopic(c *config.Config, pipeline, arg string) (string, error) {
	if pipeline == "" {
		return arg, nil
	}
	p, err := pickPipeline(c, pipeline)
	if err != nil {
		return "", err
	}
	byName := pipelineTopics(p)
	if t, ok := byName[arg]; ok {
		return t, nil
	}
	names := make([]string, 0, len(byName))
	for n, t := range byName {
		if t == arg {
			return t, nil
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return "", fmt.Errorf("pipeline %s has no topic %q: want one of %s, or one of their topic names", p.Name, arg, strings.Join(names, ", "))
}

// pipelineTopics are p's topics by the short names tail takes: main,
// results, dlq, callbacks and each tier's name after "<topic>."
// (retry.30s).
func pipelineTopics(p config.Pipeline) map[string]string {
	m := map[string]string{"main": p.Topic, "dlq": p.DLQTopic()}
	if p.Results != "" {
		m["results"] = p.Results
	}
	if cb := p.CallbacksTopic(); cb != "" {
		m["callbacks"] = cb
	}
	for _, t := range p.TierTopics() {
		m[strings.TrimPrefix(t, p.Topic+".")] = t
	}
	return m
}

// tailRecord is a record as `tail --json` prints it: key, value and
// header values in dlq.View's encodings, and with hide_values the value
// as the analyzer's API shows a hidden one (value null, value_encoding
// "hidden", value_sha256).
type tailRecord struct {
	Topic         string       `json:"topic"`
	Partition     int32        `json:"partition"`
	Offset        int64        `json:"offset"`
	Timestamp     dlq.ViewTime `json:"timestamp"`
	Key           *string      `json:"key"` // null: no key
	KeyEncoding   string       `json:"key_encoding"`
	Value         *string      `json:"value"` // null: no value, or hidden
	ValueEncoding string       `json:"value_encoding"`
	ValueSize     int          `json:"value_size"`
	ValueSHA256   string       `json:"value_sha256,omitempty"` // only when hidden; absent for a null value
	// Headers are every header in record order, redrive-* ones included.
	Headers []dlq.ViewHeader `json:"headers"`
}

func newTailRecord(r *kgo.Record, hide bool) tailRecord {
	// dlq.NewView decides text or base64 for the DLQ's tools; a record
	// of any topic is shown the same way through it.
	v := dlq.NewView(&dlq.DeadLetter{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
		Key: r.Key, Value: r.Value, UserHeaders: r.Headers})
	t := tailRecord{Topic: v.Topic, Partition: v.Partition, Offset: v.Offset, Timestamp: v.Timestamp,
		Key: v.Key, KeyEncoding: v.KeyEncoding, Value: v.Value, ValueEncoding: v.ValueEncoding,
		ValueSize: len(r.Value), Headers: v.Headers}
	if hide && r.Value != nil {
		t.Value, t.ValueEncoding, t.ValueSHA256 = nil, analyzer.EncodingHidden, analyzer.ValueHash(r.Value)
	}
	return t
}

// tailPrinter prints records as JSON lines or as a table's lines.
type tailPrinter struct {
	w       io.Writer
	enc     *json.Encoder // nil: lines
	hide    bool
	started bool // the table's header is printed
}

func newTailPrinter(w io.Writer, asJSON, hide bool) *tailPrinter {
	p := &tailPrinter{w: w, hide: hide}
	if asJSON {
		p.enc = json.NewEncoder(w)
		p.enc.SetEscapeHTML(false)
	}
	return p
}

var recordHeader = fmt.Sprintf("%-24s  %9s  %10s  %-32s  %s", "TIME", "PARTITION", "OFFSET", "KEY", "VALUE  [HEADERS]")

func (p *tailPrinter) print(r *kgo.Record) error {
	t := newTailRecord(r, p.hide)
	if p.enc != nil {
		return p.enc.Encode(t)
	}
	if !p.started {
		p.started = true
		if _, err := fmt.Fprintln(p.w, recordHeader); err != nil {
			return err
		}
	}
	line := fmt.Sprintf("%-24s  %9d  %10d  %-32s  %s", t.Timestamp.String(), t.Partition, t.Offset,
		cell(keyCell(r.Key), 32), cell(valueCell(t), 200))
	if len(t.Headers) > 0 {
		hs := make([]string, len(t.Headers))
		for i, h := range t.Headers {
			v := h.Value
			if h.Encoding == dlq.EncodingBase64 {
				v = dlq.Base64Prefix + v
			}
			hs[i] = h.Key + "=" + v
		}
		line += "  [" + cell(strings.Join(hs, ", "), 400) + "]"
	}
	_, err := fmt.Fprintln(p.w, line)
	return err
}

// valueCell shows t's value as keyCell shows a key, or, hidden, as its
// size and hash.
func valueCell(t tailRecord) string {
	switch {
	case t.ValueEncoding == analyzer.EncodingHidden:
		return fmt.Sprintf("hidden: %d bytes, %s", t.ValueSize, t.ValueSHA256)
	case t.Value == nil:
		return "-"
	case t.ValueEncoding == dlq.EncodingBase64:
		return dlq.Base64Prefix + *t.Value
	}
	return *t.Value
}

func records(n int) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}
