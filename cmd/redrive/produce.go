package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
)

type produceFlags struct {
	pipeline string
	topic    string
	key      string
	headers  []string
	count    int
	rate     float64
}

func newProduceCmd(g *globals) *cobra.Command {
	f := &produceFlags{}
	cmd := &cobra.Command{
		Use:   "produce [VALUE]",
		Short: "produce solve requests to a pipeline's main topic (VALUE, or one record per stdin line)",
		Long: `Produces to the main topic of --pipeline (default: the only or first
pipeline) or to --topic. With VALUE, --count copies of it ({n} in VALUE or
--key is replaced by the record's number); without VALUE, one record per
line of standard input. Waits until every record is acknowledged.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			topic, err := f.target(c)
			if err != nil {
				return &exitError{2, err}
			}
			hs, err := parseHeaders(f.headers)
			if err != nil {
				return &exitError{2, err}
			}
			opts, err := kafkaconn.Opts(c)
			if err != nil {
				return &exitError{2, err}
			}
			cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))...)
			if err != nil {
				return err
			}
			defer cl.Close()
			var next func() (string, bool)
			if len(args) == 1 {
				n := 0
				next = func() (string, bool) {
					if n >= f.count {
						return "", false
					}
					n++
					return args[0], true
				}
			} else {
				sc := bufio.NewScanner(cmd.InOrStdin())
				sc.Buffer(make([]byte, 1<<20), 16<<20)
				next = func() (string, bool) {
					if !sc.Scan() {
						return "", false
					}
					return sc.Text(), true
				}
			}
			n, err := produceAll(cmd.Context(), cl, f, hs, next)
			fmt.Fprintf(cmd.ErrOrStderr(), "produced %d records to %s\n", n, topic)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.pipeline, "pipeline", "", "pipeline whose main topic to produce to")
	fl.StringVar(&f.topic, "topic", "", "topic to produce to (instead of a pipeline's)")
	fl.StringVar(&f.key, "key", "", "record key ({n}: the record's number)")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, "header k=v (repeatable)")
	fl.IntVarP(&f.count, "count", "n", 1, "copies of VALUE to produce")
	fl.Float64Var(&f.rate, "rate", 0, "records per second (0: as fast as possible)")
	return cmd
}

func (f *produceFlags) target(c *config.Config) (string, error) {
	if f.topic != "" {
		return f.topic, nil
	}
	if f.pipeline == "" {
		return c.Pipelines[0].Topic, nil
	}
	for _, p := range c.Pipelines {
		if p.Name == f.pipeline {
			return p.Topic, nil
		}
	}
	return "", fmt.Errorf("--pipeline %q is not in the config", f.pipeline)
}

func parseHeaders(kvs []string) ([]kgo.RecordHeader, error) {
	var hs []kgo.RecordHeader
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--header %q: want key=value", kv)
		}
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return hs, nil
}

func produceAll(ctx context.Context, cl *kgo.Client, f *produceFlags, hs []kgo.RecordHeader, next func() (string, bool)) (int, error) {
	var gap time.Duration
	if f.rate > 0 {
		gap = time.Duration(float64(time.Second) / f.rate)
	}
	var failed atomic.Int64
	var mu sync.Mutex
	var first error
	sent := 0
	start := time.Now()
	for ctx.Err() == nil {
		v, ok := next()
		if !ok {
			break
		}
		sent++
		num := strconv.Itoa(sent)
		r := &kgo.Record{Value: []byte(strings.ReplaceAll(v, "{n}", num)), Headers: hs}
		if f.key != "" {
			r.Key = []byte(strings.ReplaceAll(f.key, "{n}", num))
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
		if gap > 0 {
			if d := time.Until(start.Add(time.Duration(sent) * gap)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
	}
	if err := cl.Flush(context.WithoutCancel(ctx)); err != nil {
		return 0, err
	}
	acked := sent - int(failed.Load())
	if failed.Load() > 0 {
		return acked, fmt.Errorf("%d of %d records not written: %w", failed.Load(), sent, first)
	}
	return acked, nil
}
