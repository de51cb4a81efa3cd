package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/dlq/replay"
)

// replayDeliveryTimeout bounds how long one republished record may take to
// be acknowledged before replay gives up on it.
const replayDeliveryTimeout = time.Minute

type replayFlags struct {
	filterFlags
	limit  int
	to     string
	rate   string
	dryRun bool
	json   bool
	all    bool
}

func newReplayCmd(g *globals) *cobra.Command {
	f := &replayFlags{}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "republish dead letters that match the filters to the main topic (or --to)",
		Long: `Reads the pipeline's DLQ as it is now (no consumer group, nothing
committed), lists the dead letters that match (a table, or JSON lines with
--json) and, unless --dry-run, republishes each: the original key, value
and user headers, the same redrive-id and origin, redrive-redrives + 1 and
no attempt count, so it gets the full retry schedule again. Writes are
idempotent with acks=all and counted only once acknowledged. Progress goes
to standard error every second, then the final count.

A dead letter whose value was cut to fit the DLQ (redrive-truncated) is
never republished; records that are not redrive dead letters are skipped.
The DLQ is left as it is: running replay twice republishes twice (the
handler dedupes by Idempotency-Key = redrive-id).

With no filter flag, replay republishes every dead letter only when given
--all (a dry run needs no --all).

--limit N takes the first N to republish (truncated ones do not count) in
the order read (offset order within a partition, partitions interleaved)
and stops reading.

Exit codes: 0 done, 1 a write failed or replay was interrupted (the count
says how many were written), 2 bad flags or config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplay(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.IntVar(&f.limit, "limit", 0, "republish at most this many (0: all that match)")
	fl.StringVar(&f.to, "to", "", "topic to republish to (default: the pipeline's main topic)")
	fl.StringVar(&f.rate, "rate", "", "at most this many per second: N or N/s, N/m, N/h (default: no limit)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list what would be republished; write nothing")
	fl.BoolVar(&f.json, "json", false, "list as JSON lines (as dlq export) instead of a table")
	fl.BoolVar(&f.all, "all", false, "with no filter flag: republish every dead letter (required then, unless --dry-run)")
	return cmd
}

// parseRate reads --rate: "N", "N/s", "N/m" or "N/h", N > 0 (a decimal
// fraction is fine). "" is no limit. The result is records per second.
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	num, unit, _ := strings.Cut(s, "/")
	per := map[string]float64{"": 1, "s": 1, "m": 60, "h": 3600}[unit]
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || per == 0 || !(n > 0) || n > 1e9 {
		return 0, fmt.Errorf("--rate %q: want records per second, N or N/s (or N/m, N/h), N > 0", s)
	}
	return n / per, nil
}

func runReplay(cmd *cobra.Command, g *globals, f *replayFlags) error {
	if f.limit < 0 {
		return &exitError{2, fmt.Errorf("--limit %d: want 0 (no limit) or more", f.limit)}
	}
	rate, err := parseRate(f.rate)
	if err != nil {
		return &exitError{2, err}
	}
	s, err := f.setup(g,
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent writes (kgo's default) need acks=all
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordDeliveryTimeout(replayDeliveryTimeout),
	)
	if err != nil {
		return err
	}
	defer s.cl.Close()
	to := f.to
	if to == "" {
		to = s.pipe.Topic
	}
	if to == s.pipe.DLQTopic() {
		return &exitError{2, fmt.Errorf("--to %s is the DLQ replay reads: pick the main topic or another one", to)}
	}
	switch {
	case s.filter.IsZero() && !f.all && !f.dryRun:
		return &exitError{2, errors.New("no filter flag: this would republish every dead letter; pass --all to mean it, or a filter (--code, --reason, --class, --origin, --since, --until, --key, --header)")}
	case !s.filter.IsZero() && f.all:
		return &exitError{2, errors.New("--all and a filter flag: give one or the other")}
	}
	ctx := cmd.Context()
	if err := topicExists(ctx, s.cl, to); err != nil {
		return &exitError{1, err}
	}
	r := &replayer{
		to: to, limit: f.limit, dryRun: f.dryRun, out: cmd.OutOrStdout(), errw: cmd.ErrOrStderr(),
		skipped: skips{w: cmd.ErrOrStderr()},
	}
	if f.json {
		r.enc = json.NewEncoder(r.out)
		r.enc.SetEscapeHTML(false)
	}
	rp, err := replay.New(replay.Options{
		Client: s.cl, DLQ: s.pipe.DLQTopic(), To: to, Filter: s.filter, Limit: f.limit,
		DryRun: f.dryRun, Rate: rate, Report: r.report,
	})
	if err != nil {
		return &exitError{2, err}
	}
	r.rp = rp
	return r.run(ctx, s.pipe.DLQTopic())
}

// topicExists checks the topic to write to, so that a typo in --to fails
// before anything is written.
func topicExists(ctx context.Context, cl *kgo.Client, topic string) error {
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("looking up topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("topic %s, to republish to, does not exist", topic)
	case td.Err != nil:
		return fmt.Errorf("topic %s: %w", topic, td.Err)
	}
	return nil
}

// replayer shows one replay.Replay: the table or JSON lines of what it
// selects, its refusals and skips on stderr, progress and the final count.
type replayer struct {
	rp      *replay.Replay
	to      string
	limit   int
	dryRun  bool
	out     io.Writer
	errw    io.Writer
	enc     *json.Encoder // --json
	headed  bool          // the table's header is out
	skipped skips         // Run's goroutine only
}

func (r *replayer) run(ctx context.Context, dlqTopic string) error {
	stopProgress := r.progress()
	c, err := r.rp.Run(ctx)
	stopProgress()
	sum := r.summary(c)
	switch {
	case ctx.Err() != nil:
		return &exitError{1, fmt.Errorf("interrupted: %s so far: %w", sum, ctx.Err())}
	case errors.Is(err, replay.ErrWrite) || c.Failed > 0:
		return &exitError{1, fmt.Errorf("%s; %d writes failed, stopped at the first failure: %w", sum, c.Failed, err)}
	case err != nil:
		if c.Scanned > 0 {
			fmt.Fprintln(r.errw, sum)
		}
		return readErr(dlqTopic, err)
	}
	fmt.Fprintln(r.errw, sum)
	return nil
}

// report shows one record replay decided about.
func (r *replayer) report(res replay.Result) error {
	d := res.DeadLetter
	switch {
	case errors.Is(res.Err, dlq.ErrTruncated):
		// The error says what was cut: the value, the key or headers.
		fmt.Fprintf(r.errw, "not republishing %s/%d/%d: %v\n", d.Topic, d.Partition, d.Offset, res.Err)
		return nil
	case res.Err != nil:
		r.skipped.add(res.Err)
		return nil
	}
	return r.show(d)
}

var replayHeader = fmt.Sprintf("%9s  %10s  %-24s  %-9s  %-28s  %8s  %8s  %s",
	"PARTITION", "OFFSET", "TIME", "REASON", "CODE", "ATTEMPTS", "REDRIVES", "KEY")

func (r *replayer) show(d *dlq.DeadLetter) error {
	if r.enc != nil {
		return r.enc.Encode(dlq.NewView(d))
	}
	if !r.headed {
		r.headed = true
		fmt.Fprintln(r.out, replayHeader)
	}
	_, err := fmt.Fprintf(r.out, "%9d  %10d  %-24s  %-9s  %-28s  %8d  %8d  %s\n",
		d.Partition, d.Offset, dlq.ViewTime{Time: d.Timestamp}.String(), cell(string(d.Reason), 9), cell(orDash(d.Code), 28),
		d.Attempt, d.Redrives, cell(keyCell(d.Key), 64))
	return err
}

// progress prints the counts to stderr every second until stopped.
func (r *replayer) progress() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c := r.rp.Counts()
				line := fmt.Sprintf("replay: %d scanned, %d matching", c.Scanned, c.Matched)
				if !r.dryRun {
					line += fmt.Sprintf(", %d republished, %d in flight", c.Republished, c.InFlight())
				}
				fmt.Fprintln(r.errw, line)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// summary is the final count.
func (r *replayer) summary(c replay.Counts) string {
	var b strings.Builder
	if r.dryRun {
		fmt.Fprintf(&b, "dry run: would republish %d of %d matching to %s (%d scanned", c.Selected, c.Matched, r.to, c.Scanned)
	} else {
		fmt.Fprintf(&b, "republished %d of %d matching to %s (%d scanned", c.Republished, c.Matched, r.to, c.Scanned)
	}
	if c.Limited {
		fmt.Fprintf(&b, "; stopped at --limit %d", r.limit)
	}
	if c.Truncated > 0 {
		fmt.Fprintf(&b, "; %d truncated, not republished", c.Truncated)
	}
	b.WriteString(r.skipped.String())
	b.WriteString(")")
	if r.dryRun {
		b.WriteString("; nothing written")
	}
	return b.String()
}
