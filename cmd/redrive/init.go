package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/examples"
	"github.com/redrive/redrive/internal/config"
)

// presetEnv is what each preset reads from the environment that has no
// working default: init names it so the next command does not fail on it.
var presetEnv = map[string]string{
	"captchaai": "CAPTCHA_API_KEY (and CALLBACK_URL, CALLBACK_TOKEN once the service calls back from outside)",
	"smm-panel": "SMM_API_URL and SMM_API_KEY",
	"webhook":   "WEBHOOK_URL and WEBHOOK_TOKEN",
}

func newInitCmd(g *globals) *cobra.Command {
	var preset, out string
	var force bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "write a starter config (redrive.yaml) from a preset",
		Long: `Writes a small working configuration to redrive.yaml (-o to choose the
file, - for standard output), from one of the presets in examples/:
` + strings.Join(examples.Names(), ", ") + `. Without --preset: ` + examples.Default + `, one
pipeline whose service is the demo solver (redrive demo-solver). --brokers
writes those brokers into the file; otherwise it names 127.0.0.1:9092 and
REDRIVE_BROKERS, when set, replaces it at run time. An existing file is
kept unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, ok := examples.File(preset)
			if !ok {
				return &exitError{2, fmt.Errorf("--preset %q: want one of %s", preset, strings.Join(examples.Names(), ", "))}
			}
			if g.brokers != "" {
				data = withBrokers(data, g.brokers)
			}
			// The file as written must load: a bad --brokers is found now,
			// not at the first command that reads it.
			if _, err := config.Parse(data, func(k string) string { return os.Getenv(k) }); err != nil && !onlyMissingEnv(err) {
				return &exitError{2, err}
			}
			if out == "-" {
				_, err := cmd.OutOrStdout().Write(data)
				return err
			}
			flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(out, flag, 0o644)
			if errors.Is(err, fs.ErrExist) {
				return &exitError{1, fmt.Errorf("%s exists: keeping it (--force to replace it, -o to write elsewhere)", out)}
			}
			if err != nil {
				return &exitError{1, err}
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return &exitError{1, err}
			}
			if err := f.Close(); err != nil {
				return &exitError{1, err}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s (preset %s)\n", out, preset)
			if env, ok := presetEnv[preset]; ok {
				fmt.Fprintf(w, "set %s in the environment first\n", env)
			}
			if preset == examples.Default || preset == "exactly-once" {
				fmt.Fprintln(w, "no service yet? redrive demo-solver answers like one on 127.0.0.1:8080")
			}
			fmt.Fprintf(w, "next: redrive topics ensure -c %s && redrive process -c %s\n", out, out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&preset, "preset", examples.Default, "starter config: "+strings.Join(examples.Names(), ", "))
	fl.StringVarP(&out, "output", "o", "redrive.yaml", "file to write, - for standard output")
	fl.BoolVar(&force, "force", false, "replace the file if it exists")
	return cmd
}

var brokersLine = regexp.MustCompile(`(?m)^brokers: .*$`)

// withBrokers puts csv in the preset's brokers line.
func withBrokers(data []byte, csv string) []byte {
	var quoted []string
	for _, b := range strings.Split(csv, ",") {
		if b = strings.TrimSpace(b); b != "" {
			quoted = append(quoted, strconv.Quote(b))
		}
	}
	return brokersLine.ReplaceAll(data, []byte("brokers: ["+strings.Join(quoted, ", ")+"]"))
}

// onlyMissingEnv: every problem is a required value left empty, which a
// preset's variables fill at run time (SMM_API_URL unset while init runs).
func onlyMissingEnv(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return missing(err)
	}
	for _, e := range j.Unwrap() {
		if !missing(e) {
			return false
		}
	}
	return true
}

func missing(err error) bool {
	var ce *config.Error
	return errors.As(err, &ce) && ce.Msg == "required"
}
