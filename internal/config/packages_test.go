package config

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// A static header the handler sets itself used to pass Load and fail only
// when `redrive process` built the handler, without a line. Load rejects
// it now, at its key and line, with the handler's own validator.
func TestLoadRejectsReservedHeaders(t *testing.T) {
	for _, h := range []string{"Idempotency-Key", "idempotency-key", "Redrive-Foo", "redrive-attempt", "Host", "Content-Length"} {
		t.Run(h, func(t *testing.T) {
			doc := pipe("handler:", "  http:", "    url: http://127.0.0.1:1/solve", "    headers:", "      X-Fine: ok", "      "+h+": v")
			path := filepath.Join(t.TempDir(), "redrive.yaml")
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadEnv(path, func(string) string { return "" })
			if err == nil {
				t.Fatalf("Load accepted header %s:\n%s", h, dump(c))
			}
			want := fmt.Sprintf("%s: line 9: pipelines[0].handler.http.headers.%s: %s is set by the handler and cannot be configured",
				path, h, http.CanonicalHeaderKey(h))
			if err.Error() != want {
				t.Errorf("error:\n%v\nwant:\n%s", err, want)
			}
			var fe *processor.FieldError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "Headers" || fe.Key != h {
				t.Errorf("error is not ErrInvalid with the handler's FieldError: %#v", err)
			}
			// The same rule as the handler's: New refuses the header too.
			if _, err := httphandler.New(httphandler.Options{URL: "http://127.0.0.1:1/", Headers: map[string]string{h: "v"}}); !errors.Is(err, httphandler.ErrOptions) {
				t.Errorf("httphandler.New accepted %s: %v", h, err)
			}
		})
	}
	// Content-Type is allowed: it is the default for records without one.
	mustParse(t, pipe("handler: {http: {url: 'http://h/', headers: {Content-Type: text/plain}}}"), nil)
}

// The file's defaults are the packages' defaults.
func TestDefaultsAreThePackages(t *testing.T) {
	c := mustParse(t, pipe("handler: {http: {url: 'http://h/'}}"), nil)
	p := c.Pipelines[0]
	pp := processor.Pipeline{Name: p.Name, Topic: p.Topic, Schedule: retry.Schedule{Tiers: retry.DefaultTiers()}}.WithDefaults()
	o := httphandler.Options{}.WithDefaults()
	for _, x := range []struct {
		name      string
		got, want any
	}{
		{"session_timeout", c.SessionTimeout.D(), processor.DefaultSessionTimeout},
		{"shutdown_grace", c.ShutdownGrace.D(), processor.DefaultShutdownGrace},
		{"partitions", p.Partitions, topics.DefaultPartitions},
		{"replication", p.Replication, topics.DefaultReplication},
		{"dlq.retention", p.DLQ.Retention.D(), topics.DefaultDLQRetention},
		{"dlq.topic", p.DLQ.Topic, pp.DLQ},
		{"dlq.topic is topics.DefaultDLQ", p.DLQ.Topic, topics.DefaultDLQ(p.Topic)},
		{"retry.tiers", p.TierDelays(), retry.DefaultTiers()},
		{"retry.max_attempts", p.Retry.MaxAttempts, retry.DefaultMaxAttempts},
		{"retry.jitter", p.Retry.Jitter, retry.DefaultJitter},
		{"not_ready_deadline", p.NotReadyDeadline.D(), pp.NotReadyDeadline},
		{"concurrency", p.Concurrency, pp.Concurrency},
		{"max_inflight", p.MaxInflight, pp.MaxInflight},
		{"max_inflight_bytes", p.MaxInflightBytes, pp.MaxInflightBytes},
		{"handler.http.timeout", p.Handler.HTTP.Timeout.D(), o.Timeout},
		{"handler.http.max_body_bytes", p.Handler.HTTP.MaxBodyBytes, o.MaxBodyBytes},
		{"group", p.GroupID(), topics.GroupID(p.Name)},
		{"analyzer group", p.AnalyzerGroupID(), topics.AnalyzerGroupID(p.Name)},
	} {
		if !reflect.DeepEqual(x.got, x.want) {
			t.Errorf("%s = %v, want %v", x.name, x.got, x.want)
		}
	}
	// What the file gives the processor passes the processor's own check.
	if err := (processor.Config{Brokers: c.Brokers, Pipelines: []processor.Pipeline{p.ProcessorPipeline(nil)}}).WithDefaults().Validate(); err != nil {
		t.Errorf("processor.Config.Validate: %v", err)
	}
	if _, err := httphandler.New(p.HTTPOptions()); err != nil {
		t.Errorf("httphandler.New: %v", err)
	}
}

// Every pipeline problem is found by the package's validator and reported
// at the file's key: the cause is the package's error.
func TestValidationCauses(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		path string
		is   error
	}{
		{pipe("retry: {tiers: [5m, 30s]}"), "pipelines[0].retry.tiers[1]", retry.ErrBadSchedule},
		{pipe("results: 'a b'"), "pipelines[0].results", topics.ErrBadName},
	} {
		err := parseErr(t, tt.doc, nil)
		var e *Error
		if !errors.As(err, &e) || e.Path != tt.path || !errors.Is(err, tt.is) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %#v", tt.path, err)
		}
	}
	err := parseErr(t, pipe("concurrency: -3"), nil)
	var fe *processor.FieldError
	if !errors.As(err, &fe) || fe.Field != "Pipelines[0].Concurrency" {
		t.Errorf("concurrency: %#v", err)
	}
}
