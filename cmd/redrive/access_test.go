package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/retry"
)

// `redrive analyze` without a token refuses an address that is
// not loopback (exit 2, naming the keys), before it connects to anything.
func TestAnalyzeRefusesPublicAddressWithoutToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9091", ":9091", "[::]:9091", "10.0.0.1:9091", "analyzer.example.com:9091"} {
		cfg := writeConfig(t, []string{"127.0.0.1:1"}, "pub", "", fmt.Sprintf("analyzer: {http_addr: %q}\n", addr))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, out, errs := runSplit(ctx, "analyze", "-c", cfg)
		cancel()
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s%s", addr, code, out, errs)
		}
		for _, s := range []string{"analyzer.http_addr", "line 12", "analyzer.token", "REDRIVE_ANALYZER_TOKEN", "analyzer.read_token", "analyzer.insecure_public: true"} {
			if !strings.Contains(errs, s) {
				t.Errorf("%s: the error does not say %q:\n%s", addr, s, errs)
			}
		}
	}
}

// With analyzer.insecure_public: true it serves on 0.0.0.0 open; with a
// token it serves there and the API asks for it.
func TestAnalyzePublicAddress(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "pubaddr")
	for _, tt := range []struct {
		name, extra string
		env         map[string]string
		noAuth      int
	}{
		{"insecure_public", "  insecure_public: true\n", nil, 200},
		{"token from the environment", "", map[string]string{"REDRIVE_ANALYZER_TOKEN": "pub-tok-0123456789abcdef"}, 401},
		{"read token from the environment", "", map[string]string{"REDRIVE_ANALYZER_READ_TOKEN": "pub-tok-0123456789abcdef"}, 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, port, _ := net.SplitHostPort(freeAddr(t))
			cfg := writeConfig(t, c.Brokers, topic, "", fmt.Sprintf("analyzer:\n  http_addr: \"0.0.0.0:%s\"\n%s", port, tt.extra))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			var errs string
			go func() {
				code, _, e := runSplit(ctx, "analyze", "-c", cfg)
				errs = e
				done <- code
			}()
			base := "http://127.0.0.1:" + port
			deadline := time.Now().Add(30 * time.Second)
			var code int
			for {
				if code, _ = probe(base + "/api/stats"); code != 0 {
					break
				}
				select {
				case c := <-done:
					t.Fatalf("analyze exited %d before serving: %s", c, errs)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("analyze did not serve within 30s")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if code != tt.noAuth {
				t.Errorf("GET /api/stats without a token: %d, want %d", code, tt.noAuth)
			}
			if tt.noAuth == 401 {
				req, _ := http.NewRequest("GET", base+"/api/stats", nil)
				req.Header.Set("Authorization", "Bearer pub-tok-0123456789abcdef")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("GET /api/stats with the token: %d, want 200", resp.StatusCode)
				}
			}
			if code, _ := probe(base + "/metrics"); code != 200 {
				t.Errorf("GET /metrics: %d, want 200 (open for Prometheus)", code)
			}
			cancel()
			if c := <-done; c != 0 {
				t.Errorf("analyze exited %d after its context ended: %s", c, errs)
			}
		})
	}
}

// `dlq export --hide-values` (and analyzer.hide_values, unless
// --hide-values=false) writes sizes and hashes, never a value's bytes.
func TestDLQExportHideValues(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Topic(t, "hidevals")
	cfg := writeConfig(t, c.Brokers, topic, "", "")
	cfgHide := writeConfig(t, c.Brokers, topic, "", "analyzer: {hide_values: true}\n")
	if code, out := runOut(context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: %s", out)
	}
	values := map[string][]byte{"a": []byte(`{"iban":"TR330006100519786457841326"}`), "b": {0xff, 0x00, 'P', 'I', 'I'}, "c": nil}
	now := time.Now()
	var rs []*kgo.Record
	for _, id := range []string{"a", "b", "c"} {
		m := retry.Meta{ID: id, Attempt: 1, Error: "refused " + id, ErrorCode: "E", ErrorClass: retry.ClassPermanent,
			Reason: string(dlq.ReasonPermanent), HasOrigin: true, OriginTopic: topic, OriginTimestamp: now, FirstErrorAt: now, LastErrorAt: now}
		r := dlq.Build(&kgo.Record{Key: []byte("key-" + id), Value: values[id]}, m, []kgo.RecordHeader{{Key: "h", Value: []byte("hv-" + id)}},
			dlq.BuildOptions{Topic: topic + ".dlq", Group: "redrive." + topic, Instance: "test"})
		rs = append(rs, r)
	}
	if err := c.Client(t).ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	leak := func(t *testing.T, out string) {
		t.Helper()
		for _, s := range []string{"TR3300061005", "iban", "/wBQSUk" /* base64 of b */, "PII"} {
			if strings.Contains(out, s) {
				t.Errorf("the export shows %q of a hidden value:\n%s", s, out)
			}
		}
	}

	for _, args := range [][]string{{"-c", cfg, "--hide-values"}, {"-c", cfgHide}} {
		name := "jsonl, analyzer.hide_values"
		if len(args) > 2 {
			name = "jsonl " + args[2]
		}
		t.Run(name, func(t *testing.T) {
			code, out, errs := runSplit(context.Background(), append([]string{"dlq", "export"}, args...)...)
			if code != 0 || !strings.Contains(errs, "values hidden") {
				t.Fatalf("export: exit %d: %s", code, errs)
			}
			leak(t, out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines, want 3:\n%s", len(lines), out)
			}
			for _, l := range lines {
				var v struct {
					ID            string           `json:"id"`
					Key           *string          `json:"key"`
					Value         *string          `json:"value"`
					ValueEncoding string           `json:"value_encoding"`
					ValueSize     *int             `json:"value_size"`
					ValueSHA256   string           `json:"value_sha256"`
					Headers       []dlq.ViewHeader `json:"headers"`
					Error         string           `json:"error"`
				}
				if err := json.Unmarshal([]byte(l), &v); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				want := values[v.ID]
				if v.Value != nil || v.ValueSize == nil || *v.ValueSize != len(want) {
					t.Errorf("%s: value %v size %v, want null and %d", v.ID, v.Value, v.ValueSize, len(want))
				}
				if want != nil && (v.ValueEncoding != analyzer.EncodingHidden || v.ValueSHA256 != analyzer.ValueHash(want)) {
					t.Errorf("%s: %q %q, want hidden %s", v.ID, v.ValueEncoding, v.ValueSHA256, analyzer.ValueHash(want))
				}
				if want == nil && v.ValueSHA256 != "" {
					t.Errorf("%s: a null value hashed: %s", v.ID, v.ValueSHA256)
				}
				if v.Key == nil || *v.Key != "key-"+v.ID || len(v.Headers) != 1 || v.Headers[0].Value != "hv-"+v.ID || v.Error != "refused "+v.ID {
					t.Errorf("%s: key, headers or error not shown: %s", v.ID, l)
				}
			}
		})
	}

	t.Run("csv", func(t *testing.T) {
		code, out, errs := runSplit(context.Background(), "dlq", "export", "-c", cfg, "--hide-values", "--format", "csv")
		if code != 0 {
			t.Fatalf("export: exit %d: %s", code, errs)
		}
		leak(t, out)
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(rows) != 4 {
			t.Fatalf("%d rows (%v), want a header and 3:\n%s", len(rows), err, out)
		}
		if want := append(dlq.CSVHeader(), "value_size", "value_sha256"); !slices.Equal(rows[0], want) {
			t.Fatalf("header %q, want %q", rows[0], want)
		}
		col := func(r []string, name string) string { return r[slices.Index(rows[0], name)] }
		for _, r := range rows[1:] {
			want := values[col(r, "id")]
			if col(r, "value") != "" || col(r, "value_size") != fmt.Sprint(len(want)) {
				t.Errorf("row %q: value %q size %q", col(r, "id"), col(r, "value"), col(r, "value_size"))
			}
			if want != nil && (col(r, "value_sha256") != analyzer.ValueHash(want) || col(r, "value_encoding") != "hidden") {
				t.Errorf("row %q: %q %q", col(r, "id"), col(r, "value_encoding"), col(r, "value_sha256"))
			}
		}
	})

	t.Run("the config hides, --hide-values=false shows", func(t *testing.T) {
		code, out, errs := runSplit(context.Background(), "dlq", "export", "-c", cfgHide, "--hide-values=false")
		if code != 0 || strings.Contains(errs, "values hidden") || !strings.Contains(out, "TR330006100519786457841326") {
			t.Errorf("exit %d, want the values shown: %s\n%s", code, errs, out)
		}
	})
}

// `redrive dev` with the token it picks (replay only; its dashboard is
// open) refuses an --analyzer address that is not loopback.
func TestDevRefusesPublicAnalyzerWithoutToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, out, errs := runSplit(ctx, "dev", "--kafka-port", "0", "--http", "127.0.0.1:0", "--analyzer", "0.0.0.0:0", "--duration", "5s")
	if code != 2 || !strings.Contains(errs, "--analyzer 0.0.0.0:0 is not a loopback address") || !strings.Contains(errs, "analyzer.token") {
		t.Errorf("dev --analyzer 0.0.0.0:0: exit %d, want 2 naming the flag and the token\n%s%s", code, out, errs)
	}
}
