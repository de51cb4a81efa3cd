package interop_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/internal/kafkatest"
)

// Install hints, as .ci/run installs the tools on Debian.
const (
	hintKcat   = "apt-get install -y kcat"
	hintPython = "apt-get install -y python3-confluent-kafka (Debian's), or pip install confluent-kafka==2.16.1; REDRIVE_PYTHON names the interpreter"
	hintJava   = "apt-get install -y openjdk-17-jdk-headless maven (javac and mvn; kafka-clients comes from Maven Central)"
)

// missing fails the test under CI=true and skips it elsewhere.
func missing(t *testing.T, what, hint string) {
	t.Helper()
	kafkatest.Missing(t, "interop: "+what+"; install: "+hint)
}

// run runs name with args and stdin, and returns stdout; a failure or a
// timeout is fatal with stderr shown.
func run(t *testing.T, timeout time.Duration, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	out, err := runErr(timeout, stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(short(args), " "), err)
	}
	return out
}

func runErr(timeout time.Duration, stdin []byte, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: timed out after %s", err, timeout)
		}
		return stdout.Bytes(), fmt.Errorf("%w (ran %s)\n%s", err, time.Since(began).Round(time.Millisecond), tail(stderr.String(), 3000))
	}
	return stdout.Bytes(), nil
}

func short(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = fmt.Sprintf("%.60q", a)
		if len(a) < 40 && !strings.ContainsAny(a, " \t\"\\") {
			out[i] = a
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ---- kcat ----

func kcatPath(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"kcat", "kafkacat"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	missing(t, "kcat is not installed", hintKcat)
	return ""
}

// kcatRecord is one line of `kcat -C -J`, with key, payload and header
// values as the bytes the broker holds (nil: null).
type kcatRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []kgo.RecordHeader
}

// parseKcatJSON decodes a line of `kcat -J`. kcat writes the bytes of
// keys, values and headers into its JSON strings as they are, escaping
// only quotes, backslashes and control characters, so a non-UTF-8 value
// is not valid JSON: each byte from 0x80 up is turned into a \u00XX escape
// first, and every decoded rune (all below 0x100) is one byte again.
func parseKcatJSON(line []byte) (kcatRecord, error) {
	var b bytes.Buffer
	for _, c := range line {
		if c >= 0x80 {
			fmt.Fprintf(&b, `\u%04x`, c)
			continue
		}
		b.WriteByte(c)
	}
	var raw struct {
		Topic     string    `json:"topic"`
		Partition int32     `json:"partition"`
		Offset    int64     `json:"offset"`
		Ts        int64     `json:"ts"`
		Headers   []*string `json:"headers"`
		Key       *string   `json:"key"`
		Payload   *string   `json:"payload"`
	}
	if err := json.Unmarshal(b.Bytes(), &raw); err != nil {
		return kcatRecord{}, fmt.Errorf("kcat -J line %.200q: %w", line, err)
	}
	var err error
	bytesOf := func(s *string) []byte {
		if s == nil {
			return nil
		}
		out := make([]byte, 0, len(*s))
		for _, r := range *s {
			if r > 0xff {
				err = fmt.Errorf("kcat -J line %.200q: rune %U above one byte", line, r)
			}
			out = append(out, byte(r))
		}
		return out
	}
	r := kcatRecord{Topic: raw.Topic, Partition: raw.Partition, Offset: raw.Offset, Timestamp: raw.Ts,
		Key: bytesOf(raw.Key), Value: bytesOf(raw.Payload)}
	if len(raw.Headers)%2 != 0 {
		return r, fmt.Errorf("kcat -J line %.200q: odd headers array", line)
	}
	for i := 0; i < len(raw.Headers); i += 2 {
		if raw.Headers[i] == nil {
			return r, fmt.Errorf("kcat -J line %.200q: null header name", line)
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(bytesOf(raw.Headers[i])), Value: bytesOf(raw.Headers[i+1])})
	}
	return r, err
}

// kcatRead reads topic from the beginning to its end with
// `kcat -C -J -e -o beginning`.
func kcatRead(t *testing.T, kcat, brokers, topic string) []kcatRecord {
	t.Helper()
	out := run(t, 60*time.Second, nil, kcat, "-b", brokers, "-C", "-J", "-e", "-q", "-o", "beginning", "-t", topic)
	var recs []kcatRecord
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := parseKcatJSON(line)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// kcatWait reads topic with kcat until it holds at least n records.
func kcatWait(t *testing.T, kcat, brokers, topic string, n int, timeout time.Duration) []kcatRecord {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		recs := kcatRead(t, kcat, brokers, topic)
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ---- Python confluent-kafka ----

// pythonPath finds an interpreter that imports confluent_kafka:
// $REDRIVE_PYTHON, python3 on PATH, then /usr/bin/python3 (Debian's
// python3-confluent-kafka is installed for the system interpreter, which a
// pyenv or venv python3 on PATH does not see).
func pythonPath(t *testing.T) string {
	t.Helper()
	var cands []string
	if p := os.Getenv("REDRIVE_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	var tried []string
	for _, p := range cands {
		out, err := runErr(30*time.Second, nil, p, "-c", "import confluent_kafka as c; v, l = c.version(), c.libversion(); print('confluent-kafka', v[0] if isinstance(v, tuple) else v, 'librdkafka', l[0] if isinstance(l, tuple) else l)")
		if err == nil {
			t.Logf("python: %s with %s", p, strings.TrimSpace(string(out)))
			return p
		}
		tried = append(tried, p)
	}
	missing(t, fmt.Sprintf("no Python with confluent_kafka (tried %s)", strings.Join(tried, ", ")), hintPython)
	return ""
}

func clientsDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("clients")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ---- Java kafka-clients ----

// kafkaVersion is the broker's (scripts/kafka.sh), and so the Java
// client's: KAFKA_VERSION, else the default kafka.sh pins, read from the
// script so that the two cannot drift apart.
func kafkaVersion(t *testing.T) string {
	t.Helper()
	if v := os.Getenv("KAFKA_VERSION"); v != "" {
		return v
	}
	script, err := os.ReadFile(filepath.Join("..", "scripts", "kafka.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KAFKA_VERSION="\$\{KAFKA_VERSION:-([0-9.]+)\}"$`).FindSubmatch(script)
	if m == nil {
		t.Fatal(`scripts/kafka.sh has no KAFKA_VERSION="${KAFKA_VERSION:-<default>}" line`)
	}
	return string(m[1])
}

var resolveMu sync.Mutex

// kafkaClientsJars resolves org.apache.kafka:kafka-clients and its runtime
// dependencies (compression codecs, slf4j) with Maven into
// $REDRIVE_CACHE/kafka-clients-<version> (default ~/.cache/redrive), once.
func kafkaClientsJars(t *testing.T, mvn string) string {
	t.Helper()
	resolveMu.Lock()
	defer resolveMu.Unlock()
	cache := os.Getenv("REDRIVE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "redrive")
	}
	v := kafkaVersion(t)
	dir := filepath.Join(cache, "kafka-clients-"+v)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir
	}
	work := t.TempDir()
	pom := fmt.Sprintf(`<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>redrive.local</groupId><artifactId>kafka-clients-classpath</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>%s</version></dependency>
  </dependencies>
</project>
`, v)
	if err := os.WriteFile(filepath.Join(work, "pom.xml"), []byte(pom), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, ".kafka-clients-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	t.Logf("resolving org.apache.kafka:kafka-clients:%s from Maven Central into %s", v, dir)
	if _, err := runErr(5*time.Minute, nil, mvn, "-B", "-q", "-f", filepath.Join(work, "pom.xml"),
		"org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+tmp); err != nil {
		t.Fatalf("mvn could not resolve org.apache.kafka:kafka-clients:%s (network, proxy or ~/.m2/settings.xml?): %v", v, err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "kafka-clients-"+v+".jar")); err != nil {
		t.Fatalf("mvn finished but resolved no kafka-clients-%s.jar", v)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// javaProducer compiles clients/Produce.java against kafka-clients and
// returns the java command line that runs it.
func javaProducer(t *testing.T) []string {
	t.Helper()
	var tools []string
	for _, n := range []string{"java", "javac", "mvn"} {
		p, err := exec.LookPath(n)
		if err != nil {
			missing(t, n+" is not installed", hintJava)
		}
		tools = append(tools, p)
	}
	java, javac, mvn := tools[0], tools[1], tools[2]
	jars := kafkaClientsJars(t, mvn)
	classes := t.TempDir()
	cp := filepath.Join(jars, "*")
	run(t, 2*time.Minute, nil, javac, "-d", classes, "-cp", cp, filepath.Join(clientsDir(t), "Produce.java"))
	return []string{java, "-cp", cp + string(os.PathListSeparator) + classes, "Produce"}
}

// specLine is one record for Produce.java and redrive_interop.py.
func specLine(r *request) string {
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	key := "-"
	if r.key != nil {
		key = b64(r.key)
	}
	value := "-"
	if r.value != nil {
		value = b64(r.value)
	}
	ts := "-"
	if r.timestamp != 0 {
		ts = fmt.Sprint(r.timestamp)
	}
	var hs []string
	for _, h := range r.headers {
		v := "-"
		if h.Value != nil {
			v = b64(h.Value)
		}
		hs = append(hs, b64([]byte(h.Key))+":"+v)
	}
	return strings.Join([]string{r.topic, r.compression, key, value, ts, strings.Join(hs, ",")}, "\t") + "\n"
}
