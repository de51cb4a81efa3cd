package topics

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redrive/redrive/retry"
)

// Report is what Ensure or Check found, one TopicState per spec.
type Report struct {
	Topics []TopicState
	// Shares are the share groups of pipelines with consume: share
	// (EnsureShare, CheckShare), added by the caller.
	Shares []ShareState
	// Notes are what the caller adds for the reader, not problems: a tier
	// that keeps its former topic (FormerTier.Note).
	Notes []string
}

// TopicState is one topic as the broker has it.
type TopicState struct {
	Spec    Spec
	Exists  bool
	Created bool // by this Ensure call
	// GrownFrom is the partition count Grow widened the topic from; 0
	// when it did not.
	GrownFrom int32
	// Partitions and Replication are the topic's actual partition count
	// and the smallest replica count of its partitions.
	Partitions  int32
	Replication int
	// CleanupPolicy and RetentionMs are the topic's effective configs;
	// RetentionMs -1 keeps records forever.
	CleanupPolicy string
	RetentionMs   int64
	// Problems say what is wrong, each starting with the topic's name and
	// ending with the fix.
	Problems []string
}

// OK reports whether the topic exists and has no problem.
func (s TopicState) OK() bool { return s.Exists && len(s.Problems) == 0 }

// OK reports whether every topic exists and none has a problem, nor has
// a share group.
func (r Report) OK() bool {
	for _, t := range r.Topics {
		if !t.OK() {
			return false
		}
	}
	for _, s := range r.Shares {
		if !s.OK() {
			return false
		}
	}
	return true
}

// Problems are all topics' problems, in report order, then the share
// groups'.
func (r Report) Problems() []string {
	var ps []string
	for _, t := range r.Topics {
		ps = append(ps, t.Problems...)
	}
	for _, s := range r.Shares {
		ps = append(ps, s.Problems...)
	}
	return ps
}

// WriteTable writes the report as an aligned table, one row per topic
// with its state (ok, created, grown from N or PROBLEM), then one row per
// share group (ok, seeded or PROBLEM), followed by the notes and every
// problem and its fix. An empty report writes nothing.
func (r Report) WriteTable(w io.Writer) {
	if len(r.Topics) == 0 && len(r.Shares) == 0 {
		return
	}
	if len(r.Topics) > 0 {
		r.writeTopics(w)
	}
	if len(r.Shares) > 0 {
		if len(r.Topics) > 0 {
			fmt.Fprintln(w)
		}
		r.writeShares(w)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
	}
	if ps := r.Problems(); len(ps) > 0 {
		fmt.Fprintf(w, "\n%d problem(s):\n", len(ps))
		for _, p := range ps {
			fmt.Fprintf(w, "  PROBLEM %s\n", p)
		}
	}
}

func (r Report) writeTopics(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tROLE\tPARTITIONS\tREPLICATION\tRETENTION\tCLEANUP\tSTATE")
	for _, t := range r.Topics {
		state := "ok"
		switch {
		case !t.OK():
			state = "PROBLEM"
		case t.Created:
			state = "created"
		case t.GrownFrom > 0:
			state = fmt.Sprintf("grown from %d", t.GrownFrom)
		}
		if !t.Exists {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t%s\n", t.Spec.Name, t.Spec.Role, state)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n",
			t.Spec.Name, t.Spec.Role, t.Partitions, t.Replication, formatMs(t.RetentionMs), orDash(t.CleanupPolicy), state)
	}
	tw.Flush()
}

func (r Report) writeShares(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARE GROUP\tTOPIC\tAUTO.OFFSET.RESET\tISOLATION\tSTATE")
	for _, s := range r.Shares {
		state := "ok"
		switch {
		case !s.OK():
			state = "PROBLEM"
		case s.Seeded:
			state = "seeded from " + GroupID(s.Pipeline)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Group, s.Topic,
			orDash(s.Configs["share.auto.offset.reset"]), orDash(s.Configs["share.isolation.level"]), state)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatMs writes a retention for people: "infinite" for a negative one,
// whole days as "7d", else the shortest duration ("6h", "1h30m"), else
// milliseconds. 0 is unknown: "-".
func formatMs(ms int64) string {
	const day = 24 * time.Hour
	d := time.Duration(ms) * time.Millisecond
	switch {
	case ms < 0:
		return "infinite"
	case ms == 0:
		return "-"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d%time.Second == 0:
		return retry.FormatDelay(d)
	default:
		return strconv.FormatInt(ms, 10) + "ms"
	}
}
