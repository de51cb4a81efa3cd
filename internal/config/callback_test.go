package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/intake"
	"github.com/redrive/redrive/topics"
)

// cbPipe is a pipeline with a job API (submit + poll) and the given
// handler.callback lines (indented under callback:).
func cbPipe(cb ...string) string {
	doc := pipe(
		"handler:",
		"  http:",
		"    url: http://127.0.0.1:8080/in",
		"    poll: {url: 'http://127.0.0.1:8080/res?id={state}', state_field: request}",
		"  callback:",
	)
	for _, l := range cb {
		doc += "        " + l + "\n"
	}
	return doc
}

func TestCallbackDefaults(t *testing.T) {
	c := mustParse(t, cbPipe("path: /cb", "insecure_public: true"), nil)
	if c.CallbackAddr != DefaultCallbackAddr || DefaultCallbackAddr != "0.0.0.0:8443" {
		t.Errorf("callback_addr = %q, want %q", c.CallbackAddr, DefaultCallbackAddr)
	}
	cb := c.Pipelines[0].Handler.Callback
	want := Callback{Path: "/cb", IDField: "id", ResultField: "code", Wait: Duration(2 * time.Minute), InsecurePublic: true,
		Topic: "solve.requests.callbacks", MaxEntries: 100000, MaxBytes: 16 << 20, MaxBodyBytes: 64 << 10, MaxResultBytes: 32 << 10}
	if *cb != want {
		t.Errorf("callback = %+v, want %+v", *cb, want)
	}
	// The defaults are the packages'.
	if cb.IDField != intake.DefaultIDField || cb.ResultField != intake.DefaultResultField || cb.MaxBodyBytes != intake.DefaultMaxBodyBytes ||
		cb.MaxResultBytes != intake.DefaultMaxResultBytes || cb.MaxBytes != processor.DefaultCallbackBytes ||
		cb.Wait.D() != processor.DefaultCallbackWait || cb.MaxEntries != processor.DefaultCallbackEntries || cb.Topic != topics.CallbacksTopic("solve.requests") {
		t.Errorf("callback defaults differ from the packages': %+v", *cb)
	}

	// No callback: no callback_addr, no Callbacks.
	c = mustParse(t, pipe(), nil)
	if c.CallbackAddr != "" || c.HasCallbacks() {
		t.Errorf("callback_addr %q without a callback", c.CallbackAddr)
	}
	p := c.Pipelines[0]
	if p.ProcessorPipeline(nil).Callbacks != nil || p.TopicSpec().Callbacks != "" || p.CallbacksTopic() != "" || p.CallbackOptions().Path != "" {
		t.Error("a pipeline without handler.callback has callbacks")
	}
}

func TestCallbackConversions(t *testing.T) {
	doc := "callback_addr: 127.0.0.1:0\n" + cbPipe(
		"path: /hooks/captcha",
		"token: ${CB_TOKEN}",
		"id_field: task",
		"result_field: answer",
		"error_field: err",
		"wait: 90s",
		"topic: cb.solve",
		"max_entries: 500",
		"max_body_bytes: 1KiB",
	)
	c := mustParse(t, doc, env("CB_TOKEN", "tok-123-0123456789abcdef"))
	p := c.Pipelines[0]
	if c.CallbackAddr != "127.0.0.1:0" {
		t.Errorf("callback_addr = %q", c.CallbackAddr)
	}
	o := p.CallbackOptions()
	want := intake.Options{Pipeline: "solve.requests", Path: "/hooks/captcha", Token: "tok-123-0123456789abcdef", IDField: "task", ResultField: "answer",
		ErrorField: "err", Topic: "cb.solve", DLQ: "solve.requests.dlq", MaxBodyBytes: 1024, MaxResultBytes: 1024}
	if o != want {
		t.Errorf("CallbackOptions = %+v\nwant %+v", o, want)
	}
	pc := p.ProcessorPipeline(nil).Callbacks
	if pc == nil || *pc != (processor.Callbacks{Topic: "cb.solve", Wait: 90 * time.Second, MaxEntries: 500, MaxBytes: processor.DefaultCallbackBytes}) {
		t.Errorf("processor Callbacks = %+v", pc)
	}
	ts := p.TopicSpec()
	if ts.Callbacks != "cb.solve" || ts.CallbacksKeep != 90*time.Second+processor.CallbackMargin {
		t.Errorf("TopicSpec callbacks %q keep %s", ts.Callbacks, ts.CallbacksKeep)
	}
	if r := c.Redacted(); r.Pipelines[0].Handler.Callback.Token != RedactedValue || c.Pipelines[0].Handler.Callback.Token != "tok-123-0123456789abcdef" {
		t.Errorf("Redacted token %q (original %q)", r.Pipelines[0].Handler.Callback.Token, c.Pipelines[0].Handler.Callback.Token)
	}

	// A Go handler (no handler.http) may have a callback without poll.
	c = mustParse(t, pipe("handler:", "  callback: {path: /cb, insecure_public: true}"), nil)
	if c.Pipelines[0].ProcessorPipeline(nil).Callbacks == nil {
		t.Error("no Callbacks for a Go handler's callback")
	}

	// REDRIVE_CALLBACK_ADDR overrides the file.
	c = mustParse(t, doc, env("REDRIVE_CALLBACK_ADDR", "127.0.0.1:8444"))
	if c.CallbackAddr != "127.0.0.1:8444" {
		t.Errorf("REDRIVE_CALLBACK_ADDR: callback_addr = %q", c.CallbackAddr)
	}
}

func TestCallbackErrors(t *testing.T) {
	two := func(a, b string) string {
		return cbPipe(a) + "  - topic: other\n    handler:\n      callback: {" + b + "}\n"
	}
	for _, tt := range []struct {
		name string
		doc  string
		want []string // exactly these errors, in order
	}{
		{"no path", cbPipe("wait: 1m"),
			[]string{`line 8: pipelines[0].handler.callback.path: required`}},
		{"relative path", cbPipe("path: cb"),
			[]string{`line 9: pipelines[0].handler.callback.path: "cb": must start with /`}},
		{"path with query", cbPipe("path: /cb?x=1"),
			[]string{`line 9: pipelines[0].handler.callback.path: "/cb?x=1": printable ASCII only, without spaces, '%', '?' or '#'`}},
		{"same path twice", two("path: /cb", "path: /cb"),
			[]string{`line 12: pipelines[1].handler.callback.path: "/cb" is also the callback path of pipelines[0]; each pipeline needs its own`}},
		{"without poll", pipe("handler:", "  http: {url: 'http://127.0.0.1:8080/in'}", "  callback: {path: /cb}"),
			[]string{`line 6: pipelines[0].handler.callback: handler.callback needs handler.http.poll: a job whose callback never comes is polled`}},
		{"negative wait", cbPipe("path: /cb", "wait: -1s"),
			[]string{`line 10: pipelines[0].handler.callback.wait: bad duration "-1s": negative`}},
		{"max_entries", cbPipe("path: /cb", "max_entries: -3"),
			[]string{`line 10: pipelines[0].handler.callback.max_entries: -3: must be at least 1`}},
		{"max_body_bytes", cbPipe("path: /cb", "max_body_bytes: 1MiB"),
			[]string{`line 10: pipelines[0].handler.callback.max_body_bytes: 1048576: want 1 to 524288 (512KiB)`}},
		{"id_field token", cbPipe("path: /cb", "id_field: token"),
			[]string{`line 10: pipelines[0].handler.callback.id_field: "token" is the token's parameter, not a field`}},
		{"result_field is id_field", cbPipe("path: /cb", "result_field: id"),
			[]string{`line 10: pipelines[0].handler.callback.result_field: "id" is the id field too`}},
		{"bad topic", cbPipe("path: /cb", "topic: a/b"),
			[]string{`line 10: pipelines[0].handler.callback.topic: "a/b": a topic name uses only letters, digits, '.', '_' and '-'`}},
		{"topic is the DLQ", cbPipe("path: /cb", "topic: solve.requests.dlq"),
			[]string{`line 10: pipelines[0].handler.callback.topic: "solve.requests.dlq" is one of this pipeline's other topics (main, tier, DLQ or results); callbacks need a topic of their own`}},
		{"topic is a tier", cbPipe("path: /cb", "topic: solve.requests.retry.5s"),
			[]string{`line 10: pipelines[0].handler.callback.topic: "solve.requests.retry.5s" is one of this pipeline's other topics (main, tier, DLQ or results); callbacks need a topic of their own`}},
		{"topic of another pipeline", two("path: /a", "path: /b, topic: solve.requests.callbacks"),
			[]string{`line 12: pipelines[1].handler.callback.topic: "solve.requests.callbacks" is also the callbacks topic of pipelines[0]; a topic belongs to one pipeline`}},
		{"default topic too long", "brokers: [h:1]\npipelines:\n  - topic: " + strings.Repeat("t", 240) + "\n    name: long\n    retry: {tiers: [1s]}\n    handler: {callback: {path: /cb}}\n",
			[]string{`line 3: pipelines[0].topic: handler.callback.topic (not in the file; default "<topic>.callbacks"): "` + strings.Repeat("t", 240) + `.callbacks" is longer than 249 characters; set handler.callback.topic`}},
		{"callback_addr", "callback_addr: nowhere\n" + cbPipe("path: /cb"),
			[]string{`line 1: callback_addr: "nowhere": want host:port, e.g. 127.0.0.1:9090`}},
		{"callback_addr is http_addr", "http_addr: 127.0.0.1:9000\ncallback_addr: 127.0.0.1:9000\n" + cbPipe("path: /cb"),
			[]string{`line 2: callback_addr: "127.0.0.1:9000" is http_addr too: callbacks are served apart from /metrics`}},
		{"max_bytes", cbPipe("path: /cb", "max_bytes: 64KiB"),
			[]string{`line 10: pipelines[0].handler.callback.max_bytes: 65536: must be at least 1048576 (1MiB)`}},
		{"max_result_bytes over max_body_bytes", cbPipe("path: /cb", "max_body_bytes: 1KiB", "max_result_bytes: 2KiB"),
			[]string{`line 11: pipelines[0].handler.callback.max_result_bytes: 2048: want 1 to max_body_bytes (1024)`}},
		{"no token on a public address", "callback_addr: 0.0.0.0:8443\n" + cbPipe("path: /cb"),
			[]string{`line 9: pipelines[0].handler.callback.token: required: callback_addr "0.0.0.0:8443" is not a loopback address, and without a token anyone who reaches it can answer any job (job ids are often sequential); ` +
				`set handler.callback.token (e.g. ${CALLBACK_TOKEN}), listen on 127.0.0.1, or set handler.callback.insecure_public: true to serve it open anyway`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Loopback, unless the case says where: a tokenless path is
			// refused on a public address (its own case).
			e := env("REDRIVE_CALLBACK_ADDR", "127.0.0.1:8443")
			if strings.Contains(tt.doc, "callback_addr:") {
				e = nil
			}
			err := parseErr(t, tt.doc, e)
			if got := err.Error(); got != strings.Join(tt.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s\n--- file:\n%s", got, strings.Join(tt.want, "\n"), tt.doc)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrType) {
				t.Errorf("error is neither ErrInvalid nor ErrType: %v", err)
			}
		})
	}
	// The intake's own check is the cause.
	err := parseErr(t, cbPipe("path: cb", "insecure_public: true"), nil)
	var fe *processor.FieldError
	if !errors.As(err, &fe) || fe.Field != "Path" {
		t.Errorf("cause %#v, want intake.Options' FieldError for Path", fe)
	}
}

// A callback path without a token is refused on an address others reach
// (the default 0.0.0.0:8443 included), and taken on loopback or with
// insecure_public; a token makes any address fine.
func TestCallbackTokenRule(t *testing.T) {
	for _, tt := range []struct {
		name, addr string
		lines      []string
		ok         bool
	}{
		{"default address, no token", "", []string{"path: /cb"}, false},
		{"every interface, no token", "[::]:8443", []string{"path: /cb"}, false},
		{"a host name, no token", "callbacks.internal:8443", []string{"path: /cb"}, false},
		{"loopback, no token", "127.0.0.1:8443", []string{"path: /cb"}, true},
		{"localhost, no token", "localhost:8443", []string{"path: /cb"}, true},
		{"insecure_public", "0.0.0.0:8443", []string{"path: /cb", "insecure_public: true"}, true},
		{"token", "0.0.0.0:8443", []string{"path: /cb", "token: 0123456789abcdef0123"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := cbPipe(tt.lines...)
			if tt.addr != "" {
				doc = "callback_addr: \"" + tt.addr + "\"\n" + doc
			}
			_, err := Parse([]byte(doc), env())
			switch {
			case tt.ok && err != nil:
				t.Errorf("refused: %v", err)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), "pipelines[0].handler.callback.token: required")):
				t.Errorf("error %v, want handler.callback.token required", err)
			}
		})
	}
}

// Whatever a ${NAME} puts into handler.http is a secret to the handler,
// wherever it sits: a key in a URL path has no secret-looking name.
func TestHTTPSecretsFromTheEnvironment(t *testing.T) {
	doc := pipe(
		"handler:",
		"  http:",
		"    url: 'http://127.0.0.1:1/bot${BOT_KEY}/send'",
		"    headers: {X-Account: '${ACCOUNT}'}",
		"    poll: {url: 'http://127.0.0.1:1/res/${BOT_KEY}?id={state}', state_field: request}",
	)
	c := mustParse(t, doc, env("BOT_KEY", "123456:AAbbCC", "ACCOUNT", "acct-77", "UNUSED", "nope"))
	got := c.Pipelines[0].HTTPOptions().Secrets
	if !slices.Equal(got, []string{"123456:AAbbCC", "acct-77"}) {
		t.Errorf("HTTPOptions().Secrets = %q, want the two values expanded in handler.http", got)
	}
	if c = mustParse(t, pipe("handler:", "  http: {url: 'http://127.0.0.1:1/in'}"), env("BOT_KEY", "x")); len(c.Pipelines[0].HTTPOptions().Secrets) != 0 {
		t.Errorf("secrets without any ${NAME}: %q", c.Pipelines[0].HTTPOptions().Secrets)
	}
}
