// Package config is redrive's YAML configuration: the types, the loader
// (strict: unknown keys, bad durations and bad tier lists are errors that
// name the key's path and line), ${ENV} expansion and REDRIVE_* overrides.
//
// It only describes and validates; it never connects to anything.
package config

import "time"

// Config is the whole file.
type Config struct {
	Brokers   []string   `yaml:"brokers"`
	HTTPAddr  string     `yaml:"http_addr"`
	ClientID  string     `yaml:"client_id"`
	Instance  string     `yaml:"instance"` // written to redrive-instance; default hostname
	SASL      *SASL      `yaml:"sasl"`
	TLS       *TLS       `yaml:"tls"`
	Pipelines []Pipeline `yaml:"pipelines"`
	Analyzer  Analyzer   `yaml:"analyzer"`
	// SessionTimeout is the consumer group session timeout (default 45s).
	SessionTimeout Duration `yaml:"session_timeout"`
	// ShutdownGrace bounds how long SIGTERM waits for in-flight work (default 30s).
	ShutdownGrace Duration `yaml:"shutdown_grace"`
}

// SASL authenticates to the brokers.
type SASL struct {
	Mechanism string `yaml:"mechanism"` // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
}

// TLS encrypts broker connections.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	ServerName         string `yaml:"server_name"`
}

// Pipeline is one main topic with its tiers, DLQ and results topic.
type Pipeline struct {
	Name             string   `yaml:"name"`
	Topic            string   `yaml:"topic"`
	Results          string   `yaml:"results"`
	Partitions       int32    `yaml:"partitions"`  // default 6
	Replication      int16    `yaml:"replication"` // default 1
	Retry            Retry    `yaml:"retry"`
	DLQ              DLQ      `yaml:"dlq"`
	TTL              Duration `yaml:"ttl"`
	NotReadyDeadline Duration `yaml:"not_ready_deadline"` // default 10m
	Concurrency      int      `yaml:"concurrency"`        // default 64
	MaxInflight      int      `yaml:"max_inflight"`       // records polled but unfinished; default 4*concurrency
	MaxInflightBytes int64    `yaml:"max_inflight_bytes"` // default 64 MiB
	Ordering         string   `yaml:"ordering"`           // "" (none) or "key"
	Handler          Handler  `yaml:"handler"`
}

// Retry is the tier schedule.
type Retry struct {
	Tiers       []Duration `yaml:"tiers"`        // strictly increasing, default [5s, 30s, 5m]
	MaxAttempts int        `yaml:"max_attempts"` // default 4
	Jitter      float64    `yaml:"jitter"`       // default 0.1
}

// DLQ is the dead-letter topic.
type DLQ struct {
	Topic         string   `yaml:"topic"`     // default <topic>.dlq
	Retention     Duration `yaml:"retention"` // default 168h
	RedactHeaders []string `yaml:"redact_headers"`
	HeaderStyle   string   `yaml:"header_style"` // "", "spring", "connect"
}

// Handler says how records are handled.
type Handler struct {
	HTTP  *HTTPHandler `yaml:"http"`
	Codes Codes        `yaml:"codes"`
}

// HTTPHandler is the built-in HTTP handler.
type HTTPHandler struct {
	URL          string            `yaml:"url"`
	Timeout      Duration          `yaml:"timeout"` // default 30s
	Headers      map[string]string `yaml:"headers"`
	JSON         *JSONMode         `yaml:"json"`
	MaxBodyBytes int64             `yaml:"max_body_bytes"` // default 1 MiB
}

// JSONMode reads the ok flag and the code from a JSON body (2captcha style).
type JSONMode struct {
	OKField   string `yaml:"ok_field"`
	OKValue   any    `yaml:"ok_value"`
	CodeField string `yaml:"code_field"`
}

// Codes override the class of an outcome by its error code.
type Codes struct {
	Transient []string            `yaml:"transient"`
	NotReady  []string            `yaml:"not_ready"`
	Permanent []string            `yaml:"permanent"`
	MinDelay  map[string]Duration `yaml:"min_delay"`
}

// Analyzer is the DLQ analyzer's settings.
type Analyzer struct {
	HTTPAddr string `yaml:"http_addr"`
	Token    string `yaml:"token"`
	Rules    []any  `yaml:"rules"`  // typed by the analyzer issue
	Alerts   []any  `yaml:"alerts"` // typed by the analyzer issue
}

// Duration is a time.Duration written as "5s", "1h30m".
type Duration time.Duration

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
