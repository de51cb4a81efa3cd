package config

import (
	"fmt"
	"strings"
)

// The environment variables ApplyEnv reads. Each overrides its key in the
// file when set to a non-empty value.
const (
	EnvBrokers           = "REDRIVE_BROKERS"             // brokers, comma-separated
	EnvHTTPAddr          = "REDRIVE_HTTP_ADDR"           // http_addr
	EnvCallbackAddr      = "REDRIVE_CALLBACK_ADDR"       // callback_addr
	EnvInstance          = "REDRIVE_INSTANCE"            // instance
	EnvClientID          = "REDRIVE_CLIENT_ID"           // client_id
	EnvSASLMechanism     = "REDRIVE_SASL_MECHANISM"      // sasl.mechanism
	EnvSASLUser          = "REDRIVE_SASL_USER"           // sasl.user
	EnvSASLPassword      = "REDRIVE_SASL_PASSWORD"       // sasl.password
	EnvAnalyzerToken     = "REDRIVE_ANALYZER_TOKEN"      // analyzer.token
	EnvAnalyzerReadToken = "REDRIVE_ANALYZER_READ_TOKEN" // analyzer.read_token
	EnvProcessorToken    = "REDRIVE_PROCESSOR_TOKEN"     // processor.token
)

// ApplyEnv overrides the file with the REDRIVE_* variables (the Env*
// constants) that getenv reports non-empty. A SASL variable creates the
// sasl section when the file has none. Parse calls it; call Validate again
// after calling it yourself.
func (c *Config) ApplyEnv(getenv func(string) string) {
	if getenv == nil {
		return
	}
	set := func(name, path string, apply func(string)) {
		if v := getenv(name); v != "" {
			apply(v)
			c.sources().override(path, name)
		}
	}
	sasl := func() *SASL {
		if c.SASL == nil {
			c.SASL = &SASL{}
		}
		return c.SASL
	}
	set(EnvBrokers, "brokers", func(v string) { c.Brokers = splitCSV(v) })
	set(EnvHTTPAddr, "http_addr", func(v string) { c.HTTPAddr = strings.TrimSpace(v) })
	set(EnvCallbackAddr, "callback_addr", func(v string) { c.CallbackAddr = strings.TrimSpace(v) })
	set(EnvInstance, "instance", func(v string) { c.Instance = strings.TrimSpace(v) })
	set(EnvClientID, "client_id", func(v string) { c.ClientID = strings.TrimSpace(v) })
	set(EnvSASLMechanism, "sasl.mechanism", func(v string) { sasl().Mechanism = strings.TrimSpace(v) })
	set(EnvSASLUser, "sasl.user", func(v string) { sasl().User = v })
	set(EnvSASLPassword, "sasl.password", func(v string) { sasl().Password = v })
	set(EnvAnalyzerToken, "analyzer.token", func(v string) { c.Analyzer.Token = v })
	set(EnvAnalyzerReadToken, "analyzer.read_token", func(v string) { c.Analyzer.ReadToken = v })
	set(EnvProcessorToken, "processor.token", func(v string) { c.Processor.Token = v })
}

// SetBrokers replaces the brokers with the comma-separated list csv
// (spaces trimmed, empty entries dropped), as the --brokers flag does;
// errors about the brokers then name "--brokers" as their source. Call
// Validate after it.
func (c *Config) SetBrokers(csv string) {
	c.Brokers = splitCSV(csv)
	c.sources().override("brokers", "--brokers")
}

func (c *Config) sources() *sources {
	if c.src == nil {
		c.src = &sources{lines: map[string]int{}, from: map[string]string{}, vars: map[string][]string{}}
	}
	return c.src
}

func splitCSV(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// BrokersFrom says where the brokers came from, for a message about them:
// "from --brokers", "from REDRIVE_BROKERS", or "from brokers: in FILE,
// line N" (FILE as Load was given it).
func (c *Config) BrokersFrom() string {
	line, from := c.src.at("brokers")
	path := ""
	if c.src != nil {
		path = c.src.file
	}
	switch {
	case from != "":
		return "from " + from
	case line > 0 && path != "":
		return fmt.Sprintf("from brokers: in %s, line %d", path, line)
	case line > 0:
		return fmt.Sprintf("from brokers:, line %d", line)
	}
	return "from the configuration"
}
