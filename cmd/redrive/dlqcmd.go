package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/dlqread"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
)

// filterFlags are the flags that choose a pipeline's dead letters, shared by
// replay and the dlq commands.
type filterFlags struct {
	pipeline string
	codes    []string
	reasons  []string
	classes  []string
	origins  []string
	since    string
	until    string
	key      string
	headers  []string
}

func (f *filterFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.pipeline, "pipeline", "", "pipeline whose DLQ to read (default: the config's only pipeline)")
	fl.StringArrayVar(&f.codes, "code", nil, "error code (repeatable; any matches; a trailing * matches by prefix: http_5*)")
	fl.StringArrayVar(&f.reasons, "reason", nil, "reason: exhausted, permanent, invalid, expired or crashed (repeatable)")
	fl.StringArrayVar(&f.classes, "class", nil, "error class: transient, not-ready, permanent, invalid or expired (repeatable)")
	fl.StringArrayVar(&f.origins, "origin", nil, "origin topic (repeatable; a trailing * matches by prefix)")
	fl.StringVar(&f.since, "since", "", "dead-lettered at or after: how long ago (2h, 30m, 1d, 7d), a date (2024-05-01), RFC 3339 (2024-05-01T10:00:00Z) or now")
	fl.StringVar(&f.until, "until", "", "dead-lettered before: the same forms as --since")
	fl.StringVar(&f.key, "key", "", "record key, exactly (base64:<data> for a binary key, as the tables show it)")
	fl.StringArrayVar(&f.headers, "header", nil, "header name=value, exactly (repeatable; all must match; redrive-* headers too, e.g. redrive-instance=pod-1)")
}

// filter builds the dlq.Filter with dlq.ParseFilter, the parser the
// analyzer's API and rules use too; every error is a usage error, naming
// the flag.
func (f *filterFlags) filter(now time.Time) (dlq.Filter, error) {
	kv := map[string][]string{"--code": f.codes, "--reason": f.reasons, "--class": f.classes, "--origin": f.origins, "--header": f.headers}
	for flag, v := range map[string]string{"--since": f.since, "--until": f.until, "--key": f.key} {
		if v != "" {
			kv[flag] = []string{v}
		}
	}
	return dlq.ParseFilter(kv, now)
}

// pickPipeline is the pipeline named, or the only one.
func pickPipeline(c *config.Config, name string) (config.Pipeline, error) {
	names := make([]string, len(c.Pipelines))
	for i, p := range c.Pipelines {
		if p.Name == name {
			return p, nil
		}
		names[i] = p.Name
	}
	switch {
	case name != "":
		return config.Pipeline{}, fmt.Errorf("--pipeline %q is not in the config (pipelines: %s)", name, strings.Join(names, ", "))
	case len(c.Pipelines) == 1:
		return c.Pipelines[0], nil
	}
	return config.Pipeline{}, fmt.Errorf("the config has %d pipelines (%s): pass --pipeline", len(c.Pipelines), strings.Join(names, ", "))
}

// dlqSetup is what every command reading a DLQ starts with.
type dlqSetup struct {
	pipe   config.Pipeline
	filter dlq.Filter
	cl     *kgo.Client
	// hideValues is analyzer.hide_values (export's --hide-values default).
	hideValues bool
}

// setup loads the config, picks the pipeline, builds the filter (usage
// errors exit 2) and a client with extra options.
func (f *filterFlags) setup(g *globals, extra ...kgo.Opt) (*dlqSetup, error) {
	c, err := g.load()
	if err != nil {
		return nil, err
	}
	p, err := pickPipeline(c, f.pipeline)
	if err != nil {
		return nil, &exitError{2, err}
	}
	flt, err := f.filter(time.Now())
	if err != nil {
		return nil, &exitError{2, err}
	}
	opts, err := kafkaconn.Opts(c)
	if err != nil {
		return nil, &exitError{2, err}
	}
	if err := preflight(context.Background(), c, kafkaconn.Need{Read: []string{p.DLQTopic()}}); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, &exitError{2, err}
	}
	return &dlqSetup{pipe: p, filter: flt, cl: cl, hideValues: c.Analyzer.HideValues}, nil
}

// readErr explains an error reading the DLQ.
func readErr(topic string, err error) error {
	if errors.Is(err, dlqread.ErrNoTopic) {
		return &exitError{1, fmt.Errorf("DLQ %s does not exist; `redrive topics ensure -c FILE` creates it", topic)}
	}
	return &exitError{1, fmt.Errorf("reading DLQ %s: %w", topic, err)}
}

// skips counts DLQ records that are not dead letters and shows the first
// few on w.
type skips struct {
	w io.Writer
	n int
}

const skipsShown = 5

func (s *skips) add(err error) {
	s.n++
	switch {
	case s.w == nil:
	case s.n <= skipsShown:
		fmt.Fprintf(s.w, "skipped %v\n", err)
	case s.n == skipsShown+1:
		fmt.Fprintln(s.w, "skipped more records that are not dead letters; the count follows")
	}
}

// String is "" or the count, to end a summary with.
func (s *skips) String() string {
	if s.n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d skipped: not redrive dead letters", s.n)
}

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "inspect a pipeline's dead-letter topic: stats, export, tail",
		Long: `Reads a pipeline's DLQ directly (no consumer group, nothing committed):
stats and export read what it holds now and stop; tail follows new dead
letters. Filters select dead letters: every flag given must match, a
repeated flag matches any of its values.`,
	}
	cmd.AddCommand(newDLQStatsCmd(g), newDLQExportCmd(g), newDLQTailCmd(g))
	return cmd
}

func newDLQStatsCmd(g *globals) *cobra.Command {
	f := &filterFlags{}
	var asJSON bool
	var top int
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "count the DLQ's dead letters by code and reason (a table, or --json)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.setup(g)
			if err != nil {
				return err
			}
			defer s.cl.Close()
			topic := s.pipe.DLQTopic()
			stats := dlq.NewStats(0)
			var scanned int
			sk := skips{w: cmd.ErrOrStderr()}
			err = dlqread.Scan(cmd.Context(), s.cl, topic, func(r *kgo.Record) error {
				scanned++
				d, err := dlq.Decode(r)
				if err != nil {
					sk.add(err)
					stats.Undecodable() // as the analyzer counts them
					return nil
				}
				if s.filter.Match(d) {
					stats.Add(d)
				}
				return nil
			})
			if err != nil {
				return readErr(topic, err)
			}
			snap := stats.Snapshot(time.Now(), top)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(snap)
			} else {
				err = snap.Table(out)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d records scanned, %d matched%s\n", topic, scanned, snap.Total, sk.String())
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON (the analyzer's /api/stats shape)")
	cmd.Flags().IntVar(&top, "top", dlq.DefaultTopKeys, "how many of the most frequent keys --json lists")
	return cmd
}

func newDLQExportCmd(g *globals) *cobra.Command {
	f := &filterFlags{}
	var format, outPath string
	var limit int
	var hide bool
	cmd := &cobra.Command{
		Use:   "export",
		Short: "write the matching dead letters as JSON lines or CSV (headers decoded, keys and values as text or base64)",
		Long: `Writes one row per matching dead letter. jsonl: one JSON object per line
(the shape of the analyzer's /api/deadletters and replay --json). csv: a
header row, then the same fields in fixed columns, the user headers as a
JSON array in the last column. Keys, values and header values are text
when they are UTF-8 without control characters, else base64 (the
*_encoding field says which). A CSV cell starting with =, +, -, @, a tab
or a carriage return gets a leading ' so that a spreadsheet takes it as
text, not a formula. With -o the file appears only when the export is
complete.

--hide-values (the default when the config sets analyzer.hide_values:
true; --hide-values=false shows them) writes each value as its size and
SHA-256 only, never its bytes: value null (an empty CSV cell),
value_encoding "hidden", and the fields value_size and value_sha256
("sha256:<hex>"; in CSV two more columns at the end). Keys, headers and
error texts are written as they are.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "jsonl" && format != "csv" {
				return &exitError{2, fmt.Errorf("--format %q: want jsonl or csv", format)}
			}
			if limit < 0 {
				return &exitError{2, fmt.Errorf("--limit %d: want 0 (no limit) or more", limit)}
			}
			s, err := f.setup(g)
			if err != nil {
				return err
			}
			defer s.cl.Close()
			if !cmd.Flags().Changed("hide-values") {
				hide = s.hideValues
			}
			out, commit, err := openOutput(outPath, cmd.OutOrStdout())
			if err != nil {
				return &exitError{1, err}
			}
			defer commit(false) // removes an unfinished file
			w := newRowWriter(format, out, hide)
			topic := s.pipe.DLQTopic()
			var scanned, written int
			sk := skips{w: cmd.ErrOrStderr()}
			errLimit := errors.New("limit reached")
			err = dlqread.Scan(cmd.Context(), s.cl, topic, func(r *kgo.Record) error {
				scanned++
				d, err := dlq.Decode(r)
				if err != nil {
					sk.add(err)
					return nil
				}
				if !s.filter.Match(d) {
					return nil
				}
				if err := w.write(dlq.NewView(d), r.Value); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				written++
				if limit > 0 && written >= limit {
					return errLimit
				}
				return nil
			})
			if err != nil && !errors.Is(err, errLimit) {
				return readErr(topic, err)
			}
			if err := w.flush(); err != nil {
				return &exitError{1, fmt.Errorf("write: %w", err)}
			}
			if err := commit(true); err != nil {
				return &exitError{1, err}
			}
			dest := "standard output"
			if outPath != "" && outPath != "-" {
				dest = outPath
			}
			more := ""
			if errors.Is(err, errLimit) {
				more = fmt.Sprintf("; stopped at --limit %d", limit)
			}
			hidden := ""
			if hide {
				hidden = ", values hidden"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %s of %s to %s (%d records scanned%s%s%s)\n", deadLetters(written), topic, dest, scanned, more, hidden, sk.String())
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl or csv")
	cmd.Flags().StringVarP(&outPath, "output", "o", "", "file to write (default: standard output)")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after this many dead letters (0: all)")
	cmd.Flags().BoolVar(&hide, "hide-values", false, "write each value's size and SHA-256 instead of its bytes (default: analyzer.hide_values)")
	return cmd
}

// openOutput is path (written to a temporary file beside it, renamed into
// place by commit(true)), or stdout for "" and "-".
func openOutput(path string, stdout io.Writer) (io.Writer, func(ok bool) error, error) {
	if path == "" || path == "-" {
		return stdout, func(bool) error { return nil }, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, nil, fmt.Errorf("-o %s: %w", path, err)
	}
	done := false
	return tmp, func(ok bool) error {
		if done {
			return nil
		}
		done = true
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
			return nil
		}
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("-o %s: %w", path, err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("-o %s: %w", path, err)
		}
		return nil
	}, nil
}

// rowWriter writes Views as JSON lines or CSV rows; with hide, each
// value as its size and hash (hiddenView).
type rowWriter struct {
	bw   *bufio.Writer
	enc  *json.Encoder
	csv  *csv.Writer
	hide bool
}

// hiddenView is a View whose value is shown as its size and
// analyzer.ValueHash, as the analyzer's API shows it with hide_values.
type hiddenView struct {
	dlq.View
	ValueSize   int    `json:"value_size"`
	ValueSHA256 string `json:"value_sha256,omitempty"` // absent for a null value
}

func newRowWriter(format string, w io.Writer, hide bool) *rowWriter {
	rw := &rowWriter{bw: bufio.NewWriterSize(w, 64<<10), hide: hide}
	if format == "csv" {
		rw.csv = csv.NewWriter(rw.bw)
		head := dlq.CSVHeader()
		if hide {
			head = append(head, "value_size", "value_sha256")
		}
		_ = rw.csv.Write(head) // errors resurface in flush
	} else {
		rw.enc = json.NewEncoder(rw.bw)
		rw.enc.SetEscapeHTML(false)
	}
	return rw
}

// write writes v; value is the record's value (v's, as bytes).
func (rw *rowWriter) write(v dlq.View, value []byte) error {
	if !rw.hide {
		if rw.csv != nil {
			return rw.csv.Write(v.CSVRecord())
		}
		return rw.enc.Encode(v)
	}
	h := hiddenView{View: v, ValueSize: len(value)}
	if value != nil {
		h.Value, h.ValueEncoding, h.ValueSHA256 = nil, analyzer.EncodingHidden, analyzer.ValueHash(value)
	}
	if rw.csv != nil {
		return rw.csv.Write(append(h.CSVRecord(), strconv.Itoa(h.ValueSize), h.ValueSHA256))
	}
	return rw.enc.Encode(h)
}

func (rw *rowWriter) flush() error {
	if rw.csv != nil {
		rw.csv.Flush()
		if err := rw.csv.Error(); err != nil {
			return err
		}
	}
	return rw.bw.Flush()
}

func newDLQTailCmd(g *globals) *cobra.Command {
	f := &filterFlags{}
	var fromStart, asJSON bool
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "follow new dead letters, one line each (time, reason, code, attempts, key, error) or --json",
		Long: `Prints each matching dead letter written after tail starts (with
--from-start, every retained one first) until interrupted, then exits 0.
A line: time, reason, code, attempts, key (base64:<data> when binary) and
the error; --json prints the export's JSON lines instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.setup(g)
			if err != nil {
				return err
			}
			defer s.cl.Close()
			ctx, topic := cmd.Context(), s.pipe.DLQTopic()
			bounds, err := dlqread.Offsets(ctx, s.cl, topic)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return readErr(topic, err)
			}
			from := make(map[int32]int64, len(bounds))
			for p, b := range bounds {
				from[p] = b.End
				if fromStart {
					from[p] = b.Start
				}
			}
			where := "new dead letters"
			if fromStart {
				where = "every retained dead letter, then new ones"
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			fmt.Fprintf(errw, "following %s (%d partitions): %s; interrupt to stop\n", topic, len(bounds), where)
			var enc *json.Encoder
			if asJSON {
				enc = json.NewEncoder(out)
				enc.SetEscapeHTML(false)
			} else {
				fmt.Fprintln(out, tailHeader)
			}
			var shown int
			err = dlqread.Follow(ctx, s.cl, topic, from, func(r *kgo.Record) error {
				d, err := dlq.Decode(r)
				if err != nil {
					fmt.Fprintf(errw, "skipped %s/%d/%d: %v\n", r.Topic, r.Partition, r.Offset, err)
					return nil
				}
				if !s.filter.Match(d) {
					return nil
				}
				shown++
				if enc != nil {
					return enc.Encode(dlq.NewView(d))
				}
				_, err = fmt.Fprintln(out, tailLine(d))
				return err
			})
			if err != nil {
				return readErr(topic, err)
			}
			fmt.Fprintf(errw, "stopped: %s shown\n", deadLetters(shown))
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&fromStart, "from-start", false, "print every retained dead letter first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines (as dlq export) instead of lines")
	return cmd
}

var tailHeader = fmt.Sprintf("%-24s  %-9s  %-28s  %8s  %-32s  %s", "TIME", "REASON", "CODE", "ATTEMPTS", "KEY", "ERROR")

func tailLine(d *dlq.DeadLetter) string {
	return fmt.Sprintf("%-24s  %-9s  %-28s  %8d  %-32s  %s",
		dlq.ViewTime{Time: d.Timestamp}.String(), cell(string(d.Reason), 9), cell(orDash(d.Code), 28), d.Attempt,
		cell(keyCell(d.Key), 32), cell(d.Error, 200))
}

// keyCell shows a key as --key reads it back: text, or base64:<data>.
func keyCell(k []byte) string {
	if k == nil {
		return "-"
	}
	s, b64 := dlq.DisplayBytes(k)
	if b64 {
		return dlq.Base64Prefix + s
	}
	return s
}

func deadLetters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return fmt.Sprintf("%d dead letters", n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cell puts s on one line of at most n runes: control characters become
// spaces and a longer s ends in "…".
func cell(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	rs := []rune(s)
	return string(rs[:n-1]) + "…"
}
