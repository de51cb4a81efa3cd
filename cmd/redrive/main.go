// Command redrive runs tiered-retry Kafka pipelines: `redrive process`,
// `redrive callbacks`, `redrive dev`, `redrive topics ensure|check`, `redrive produce`,
// `redrive pause|resume|status` and more.
// This package only parses flags, loads config and wires packages together.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn"
)

// version is stamped by `make build` (-X main.version=...).
var version = "dev"

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// globals are the flags every command shares.
type globals struct {
	configPath string
	brokers    string
	logLevel   string
	logJSON    bool

	// loaded is the config load gave, so that an error about reaching the
	// cluster can say which brokers were tried and where they came from.
	loaded *config.Config
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return runCtx(ctx, args, os.Stdout, os.Stderr)
}

// runCtx runs the command line args until ctx is done and returns the exit
// code: 0 success, 1 failure or a problem found, 2 bad usage or config.
func runCtx(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "redrive:", err)
	if g.loaded != nil && kafkaconn.Unreachable(err) {
		fmt.Fprintln(stderr, "redrive:", kafkaconn.BrokersHint(g.loaded))
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "flag") {
		return 2 // cobra's usage errors
	}
	return 1
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "redrive",
		Short:         "Kafka stream processor with tiered retry topics and a dead-letter topic",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return setupLog(g)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.configPath, "config", "c", "", "config file (YAML); see redrive.example.yaml")
	pf.StringVar(&g.brokers, "brokers", "", "seed brokers, host:port,host:port (overrides the config and REDRIVE_BROKERS)")
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.BoolVar(&g.logJSON, "log-json", false, "log JSON lines instead of text")
	root.AddCommand(
		newProcessCmd(g),
		newCallbacksCmd(g),
		newDevCmd(g),
		newTopicsCmd(g),
		newProduceCmd(g),
		newDemoSolverCmd(g),
		newInitCmd(g),
		newVersionCmd(),
	)
	root.AddCommand(newAnalyzeCmd(g))
	root.AddCommand(newReplayCmd(g))
	root.AddCommand(newDLQCmd(g))
	root.AddCommand(newTailCmd(g))
	root.AddCommand(newPauseCmd(g), newResumeCmd(g), newStatusCmd(g))
	return root
}

func setupLog(g *globals) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return &exitError{2, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if g.logJSON {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	slog.SetDefault(slog.New(h))
	return nil
}

// load reads the config named by -c, applying REDRIVE_* and --brokers.
func (g *globals) load() (*config.Config, error) {
	if g.configPath == "" {
		return nil, &exitError{2, errors.New("no config: pass -c FILE (see redrive.example.yaml)")}
	}
	getenv := os.Getenv
	if g.brokers != "" {
		// --brokers wins over the file and REDRIVE_BROKERS, and rescues a
		// file without brokers, so it is applied as that variable.
		getenv = func(k string) string {
			if k == config.EnvBrokers {
				return g.brokers
			}
			return os.Getenv(k)
		}
	}
	c, err := config.LoadEnv(g.configPath, getenv)
	if err != nil {
		return nil, &exitError{2, err}
	}
	if g.brokers != "" {
		c.SetBrokers(g.brokers) // the same value, now named by its flag
	}
	g.loaded = c
	return c, nil
}

// loadOrBrokers is load, or without -c a config of --brokers alone (a
// plain connection, no pipelines): enough for a command that reads a
// topic by name, such as tail against `redrive dev`'s broker.
func (g *globals) loadOrBrokers() (*config.Config, error) {
	if g.configPath != "" || g.brokers == "" {
		return g.load()
	}
	c := &config.Config{}
	c.SetBrokers(g.brokers)
	c.SetDefaults()
	g.loaded = c
	return c, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(cmd.OutOrStdout(), "redrive %s\n", v)
		},
	}
}
