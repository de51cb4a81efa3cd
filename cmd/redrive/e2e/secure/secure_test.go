package secure

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/dlq"
	"github.com/redrive/redrive/internal/clitest"
	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkatest"
	"github.com/redrive/redrive/processor/control"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/topics"
)

// The secure broker: one per test binary run (scripts/kafka.sh up
// --secure), started by the first test that asks for it and stopped by
// TestMain after all tests ran.
var secure struct {
	once sync.Once
	b    *secBroker
	err  error // why it could not start
	dir  string
}

// secBroker is the running secure broker: its address, CA and users.
type secBroker struct {
	addr, ca             string
	admin, adminPassword string
	user, password       string
}

func TestMain(m *testing.M) { clitest.Main(m, stopSecureBroker) }

// secureBroker returns the package's secure broker, starting it on first
// use; a machine without Java, Maven or openssl fails the test under CI.
func secureBroker(t *testing.T) *secBroker {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the secure broker takes a JVM start")
	}
	for _, tool := range []string{"java", "mvn", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			kafkatest.Missing(t, tool+" not found: the secure-broker tests need Java 17, Maven and openssl (apt-get install openjdk-17-jre-headless maven openssl)")
		}
	}
	secure.once.Do(func() {
		dir, err := os.MkdirTemp("", "redrive-kafka-secure-")
		if err != nil {
			secure.err = err
			return
		}
		secure.dir = filepath.Join(dir, "kafka")
		out, err := kafkaScript(secure.dir, "up")
		if err != nil {
			secure.err = err
			return
		}
		secure.b, secure.err = parseSecureLine(out)
	})
	if secure.err != nil {
		t.Fatalf("secure broker: %v", secure.err)
	}
	return secure.b
}

func stopSecureBroker() {
	if secure.dir == "" {
		return
	}
	if _, err := kafkaScript(secure.dir, "down"); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the secure broker:", err)
	}
	_ = os.RemoveAll(filepath.Dir(secure.dir))
}

// kafkaScript runs scripts/kafka.sh cmd --secure on state dir and returns
// its last line of output.
func kafkaScript(dir, cmd string) (string, error) {
	script := clitest.RepoPath("scripts/kafka.sh")
	c := exec.Command("bash", script, cmd, "--secure")
	c.Env = append(os.Environ(), "REDRIVE_KAFKA_DIR="+dir)
	out, err := c.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return "", fmt.Errorf("kafka.sh %s --secure: %v\n%s", cmd, err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// parseSecureLine reads `KAFKA_BROKERS=... KAFKA_CA=... KAFKA_CREDENTIALS=...`
// and the credentials file it names.
func parseSecureLine(line string) (*secBroker, error) {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	b := &secBroker{addr: kv["KAFKA_BROKERS"], ca: kv["KAFKA_CA"]}
	if b.addr == "" || b.ca == "" || kv["KAFKA_CREDENTIALS"] == "" {
		return nil, fmt.Errorf("kafka.sh up --secure printed %q", line)
	}
	fi, err := os.Stat(kv["KAFKA_CREDENTIALS"])
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm() != 0o600 {
		return nil, fmt.Errorf("credentials file mode %v, want 0600", fi.Mode().Perm())
	}
	f, err := os.Open(kv["KAFKA_CREDENTIALS"])
	if err != nil {
		return nil, err
	}
	defer f.Close()
	creds := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			creds[k] = v
		}
	}
	b.admin, b.adminPassword = creds["KAFKA_ADMIN_USER"], creds["KAFKA_ADMIN_PASSWORD"]
	b.user, b.password = creds["KAFKA_USER"], creds["KAFKA_PASSWORD"]
	if b.admin == "" || b.adminPassword == "" || b.user == "" || b.password == "" || creds["KAFKA_SASL_MECHANISM"] != "SCRAM-SHA-512" {
		return nil, fmt.Errorf("credentials file %s lacks a user or password", kv["KAFKA_CREDENTIALS"])
	}
	return b, sc.Err()
}

// adminClient is a client of the super user, over TLS with SCRAM.
func (b *secBroker) adminClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	pem, err := os.ReadFile(b.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addr), kgo.Dialer(d.DialContext),
		kgo.SASL(scram.Auth{User: b.admin, Pass: b.adminPassword}.AsSha512Mechanism())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (b *secBroker) adm(t *testing.T) *kadm.Client {
	t.Helper()
	return kadm.NewClient(b.adminClient(t))
}

// config writes a one-pipeline config for the redrive user over TLS (CA
// ca) with SCRAM-SHA-512; pipeline adds pipeline keys, top top-level ones.
func (b *secBroker) config(t *testing.T, topic, solverURL, ca, pipeline, top string) (string, config.Pipeline) {
	t.Helper()
	return b.userConfig(t, b.user, b.password, topic, solverURL, ca, pipeline, top)
}

// userConfig is config for another user.
func (b *secBroker) userConfig(t *testing.T, user, password, topic, solverURL, ca, pipeline, top string) (string, config.Pipeline) {
	t.Helper()
	path := clitest.WriteConfig(t, []string{b.addr}, topic, solverURL, pipeline+fmt.Sprintf(`sasl: {mechanism: SCRAM-SHA-512, user: %q, password: %q}
tls: {enabled: true, ca_file: %q}
%s`, user, password, ca, top))
	c, err := config.LoadEnv(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return path, c.Pipelines[0]
}

// newUser adds a SCRAM-SHA-512 user with a random password and no ACL.
func (b *secBroker) newUser(t *testing.T, name string) (password string) {
	t.Helper()
	raw := make([]byte, 12)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	password = fmt.Sprintf("%x", raw)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := b.adm(t).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: name, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("adding SCRAM user %s: %v", name, err)
	}
	return password
}

// acl is one ACL for the redrive user (or user, when set).
type acl struct {
	user     string
	op       kadm.ACLOperation
	topic    string // or
	group    string
	prefixed bool
}

func (b *secBroker) grant(t *testing.T, acls ...acl) {
	t.Helper()
	b.acls(t, true, acls)
}

func (b *secBroker) revoke(t *testing.T, acls ...acl) {
	t.Helper()
	b.acls(t, false, acls)
}

func (b *secBroker) acls(t *testing.T, create bool, acls []acl) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	adm := b.adm(t)
	for _, a := range acls {
		user := b.user
		if a.user != "" {
			user = a.user
		}
		bld := kadm.NewACLs().Allow("User:" + user).AllowHosts("*").Operations(a.op)
		if a.topic != "" {
			bld.Topics(a.topic)
		} else {
			bld.Groups(a.group)
		}
		if a.prefixed {
			bld.ResourcePatternType(kadm.ACLPatternPrefixed)
		} else {
			bld.ResourcePatternType(kadm.ACLPatternLiteral)
		}
		if create {
			res, err := adm.CreateACLs(ctx, bld)
			if err == nil {
				for _, r := range res {
					if r.Err != nil {
						err = r.Err
					}
				}
			}
			if err != nil {
				t.Fatalf("create ACL %v: %v", a, err)
			}
			continue
		}
		res, err := adm.DeleteACLs(ctx, bld)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("delete ACL %v: %v", a, err)
		}
	}
}

// The ACLs each command needs (docs/operations.md lists the same).

func processACLs(p config.Pipeline) []acl {
	as := []acl{{op: kadm.OpRead, topic: p.Topic}, {op: kadm.OpRead, group: p.GroupID()}, {op: kadm.OpWrite, topic: p.DLQTopic()},
		{op: kadm.OpRead, topic: control.DefaultTopic}, {op: kadm.OpWrite, topic: control.DefaultTopic}}
	if p.Results != "" {
		as = append(as, acl{op: kadm.OpWrite, topic: p.Results})
	}
	for _, tier := range p.TierTopics() {
		as = append(as, acl{op: kadm.OpRead, topic: tier}, acl{op: kadm.OpWrite, topic: tier})
	}
	return as
}

func analyzeACLs(p config.Pipeline) []acl {
	as := []acl{{op: kadm.OpRead, topic: p.DLQTopic()}, {op: kadm.OpRead, group: p.AnalyzerGroupID()},
		{op: kadm.OpWrite, topic: p.Topic}, {op: kadm.OpDescribe, group: p.GroupID()},
		// the replicas view reads the control topic; its pause buttons write it
		{op: kadm.OpRead, topic: control.DefaultTopic}, {op: kadm.OpWrite, topic: control.DefaultTopic}}
	if p.Results != "" {
		as = append(as, acl{op: kadm.OpDescribe, topic: p.Results})
	}
	for _, tier := range p.TierTopics() {
		as = append(as, acl{op: kadm.OpDescribe, topic: tier})
	}
	return as
}

func ensureACLs(p config.Pipeline) []acl {
	var as []acl
	for _, s := range append(topics.ForPipeline(p.TopicSpec()), topics.ForControl(control.DefaultTopic, 1)) {
		as = append(as, acl{op: kadm.OpCreate, topic: s.Name}, acl{op: kadm.OpDescribeConfigs, topic: s.Name}, acl{op: kadm.OpDescribe, topic: s.Name})
	}
	return as
}

// pauseACLs are what `redrive pause` and `redrive resume` need; statusACLs
// what `redrive status` needs.
func pauseACLs() []acl  { return []acl{{op: kadm.OpWrite, topic: control.DefaultTopic}} }
func statusACLs() []acl { return []acl{{op: kadm.OpRead, topic: control.DefaultTopic}} }

func replayACLs(p config.Pipeline) []acl {
	return []acl{{op: kadm.OpRead, topic: p.DLQTopic()}, {op: kadm.OpWrite, topic: p.Topic}}
}

func dlqACLs(p config.Pipeline) []acl {
	return []acl{{op: kadm.OpRead, topic: p.DLQTopic()}}
}

// collect reads topics from the start with the admin user until enough
// says it has enough (or timeout) and returns the records per topic.
func (b *secBroker) collect(t *testing.T, tps []string, enough func(map[string][]*kgo.Record) bool, timeout time.Duration) map[string][]*kgo.Record {
	t.Helper()
	cl := b.adminClient(t, kgo.ConsumeTopics(tps...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	got := map[string][]*kgo.Record{}
	deadline := time.Now().Add(timeout)
	for !enough(got) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { got[r.Topic] = append(got[r.Topic], r) })
	}
	return got
}

// committedAt is the group's committed offset on topic/part, -1 if none.
func (b *secBroker) committedAt(t *testing.T, group, topic string, part int32) int64 {
	t.Helper()
	return clitest.CommittedOffsets(t, b.adm(t), group, topic, part+1)[part]
}

// TestSecureCommands: over TLS with SCRAM-SHA-512 and only the ACLs
// docs/operations.md lists, `topics ensure`, `process` (results, a retry
// tier, the DLQ), `analyze`, `replay`, `dlq stats|export`, `pause`,
// `resume` and `status` work.
func TestSecureCommands(t *testing.T) {
	b := secureBroker(t)
	bin := clitest.Binary(t)
	s := &clitest.Solver{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	anAddr := clitest.FreeAddr(t)
	// Each command as a user of its own with only its ACLs: the sets
	// docs/operations.md lists are enough.
	topic := kafkatest.Topic(t, "secflow")
	_, p := b.config(t, topic, srv.URL+"/solve", b.ca, "", "")
	cfgs := map[string]string{}
	for cmd, acls := range map[string][]acl{"ensure": ensureACLs(p), "process": processACLs(p), "analyze": analyzeACLs(p), "replay": replayACLs(p), "dlq": dlqACLs(p),
		"pause": pauseACLs(), "status": statusACLs()} {
		user := "secflow-" + cmd
		cfgs[cmd], _ = b.userConfig(t, user, b.newUser(t, user), topic, srv.URL+"/solve", b.ca, "", fmt.Sprintf("analyzer: {http_addr: %q}\n", anAddr))
		for i := range acls {
			acls[i].user = user
		}
		b.grant(t, acls...)
	}
	ctx := context.Background()
	if code, out := clitest.RunOut(t, ctx, "topics", "ensure", "-c", cfgs["ensure"]); code != 0 {
		t.Fatalf("topics ensure: exit %d:\n%s", code, out)
	}

	// process: 20 answered at once, 5 after one 503 (the 1s tier), 5 refused (the DLQ).
	var recs []*kgo.Record
	for i := range 30 {
		v := "easy"
		switch {
		case i%6 == 1:
			v = "flaky"
		case i%6 == 2:
			v = "wrong-key"
		}
		id := fmt.Sprintf("s-%d", i)
		recs = append(recs, &kgo.Record{Topic: p.Topic, Key: []byte(id), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}})
	}
	if err := b.adminClient(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	proc := clitest.StartProcess(t, bin, cfgs["process"], "REDRIVE_HTTP_ADDR="+clitest.FreeAddr(t))
	got := b.collect(t, []string{p.Results, p.DLQTopic(), p.TierTopics()[0]}, func(g map[string][]*kgo.Record) bool {
		return len(g[p.Results]) >= 25 && len(g[p.DLQTopic()]) >= 5
	}, 60*time.Second)
	if len(got[p.Results]) != 25 || len(got[p.DLQTopic()]) != 5 || len(got[p.TierTopics()[0]]) != 5 {
		t.Fatalf("results %d (want 25), DLQ %d (want 5), tier %d (want 5):\n%s",
			len(got[p.Results]), len(got[p.DLQTopic()]), len(got[p.TierTopics()[0]]), proc.Log.String())
	}
	for _, r := range got[p.DLQTopic()] {
		if clitest.Header(r, retry.HeaderErrorCode) != "ERROR_WRONG_USER_KEY" {
			t.Errorf("dead letter with code %q, want ERROR_WRONG_USER_KEY", clitest.Header(r, retry.HeaderErrorCode))
		}
	}
	proc.Sigterm(t, 30*time.Second)
	noAuthzErrors(t, "process", proc.Log.String())
	for part := range int32(3) {
		// Everything committed: the committed offset is the end.
		if lag := kafkaLag(t, b, p.GroupID(), p.Topic, part); lag != 0 {
			t.Errorf("lag %d on %s/%d after SIGTERM", lag, p.Topic, part)
		}
	}

	// analyze: ready, and counts the 5 dead letters.
	an := clitest.Start(t, bin, nil, "analyze", "-c", cfgs["analyze"])
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st analyzer.StatsResponse
		if clitest.GetJSON("http://"+anAddr+"/api/stats", &st) && len(st.Pipelines) == 1 && st.Pipelines[0].Ready && st.Pipelines[0].Stats.Total == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("analyzer not ready with 5 dead letters within 30s: %+v\n%s", st, an.Log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var ready struct{ OK bool }
	if !clitest.GetJSON("http://"+anAddr+"/readyz", &ready) || !ready.OK {
		t.Errorf("analyzer /readyz not ok:\n%s", an.Log.String())
	}
	// The flow view reads end offsets and the processors' group: its
	// DESCRIBE ACLs suffice.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var fr analyzer.FlowResponse
		if clitest.GetJSON("http://"+anAddr+"/api/pipelines", &fr) && len(fr.Pipelines) == 1 && (fr.Pipelines[0].SampledAt != "" || fr.Pipelines[0].Error != "") {
			if e := fr.Pipelines[0].Error; e != "" {
				t.Errorf("analyzer flow view: %s", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("analyzer flow view not sampled within 30s: %+v", fr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	an.Sigterm(t, 30*time.Second)
	noAuthzErrors(t, "analyze", an.Log.String())

	// dlq stats and export.
	code, out, errs := clitest.RunSplit(t, ctx, "dlq", "stats", "-c", cfgs["dlq"], "--json")
	noAuthzErrors(t, "dlq stats", errs)
	var snap dlq.StatsSnapshot
	if err := json.Unmarshal([]byte(out), &snap); code != 0 || err != nil || snap.Total != 5 || snap.ByCode["ERROR_WRONG_USER_KEY"] != 5 {
		t.Errorf("dlq stats: exit %d, %v, %+v:\n%s%s", code, err, snap, out, errs)
	}
	code, out, errs = clitest.RunSplit(t, ctx, "dlq", "export", "-c", cfgs["dlq"])
	if code != 0 || strings.Count(out, "\n") != 5 {
		t.Errorf("dlq export: exit %d, %d lines, want 5:\n%s%s", code, strings.Count(out, "\n"), out, errs)
	}

	// replay: the 5 dead letters back to the main topic.
	code, out, errs = clitest.RunSplit(t, ctx, "replay", "-c", cfgs["replay"], "--code", "ERROR_WRONG_USER_KEY")
	if code != 0 {
		t.Fatalf("replay: exit %d:\n%s%s", code, out, errs)
	}
	main := b.collect(t, []string{p.Topic}, func(g map[string][]*kgo.Record) bool { return len(g[p.Topic]) >= 35 }, 30*time.Second)
	if n := len(main[p.Topic]); n != 35 {
		t.Errorf("main topic has %d records after replay, want 30 + 5 republished", n)
	}

	// pause and resume write the control topic; status reads it.
	paused := func() bool {
		t.Helper()
		code, out, errs := clitest.RunSplit(t, ctx, "status", "-c", cfgs["status"], "--json")
		noAuthzErrors(t, "status", errs)
		var st struct {
			Pipelines []struct {
				Paused *struct{ Reason string } `json:"paused"`
			} `json:"pipelines"`
		}
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Pipelines) != 1 {
			t.Fatalf("status: exit %d, %v:\n%s%s", code, err, out, errs)
		}
		return st.Pipelines[0].Paused != nil && st.Pipelines[0].Paused.Reason == "secure"
	}
	for _, tc := range []struct {
		verb string
		args []string
		want bool
	}{{"pause", []string{"--reason", "secure"}, true}, {"resume", nil, false}} {
		code, out, errs := clitest.RunSplit(t, ctx, append([]string{tc.verb, "-c", cfgs["pause"], p.Name}, tc.args...)...)
		noAuthzErrors(t, tc.verb, errs)
		if code != 0 {
			t.Fatalf("%s: exit %d:\n%s%s", tc.verb, code, out, errs)
		}
		if got := paused(); got != tc.want {
			t.Errorf("after %s: paused %v, want %v", tc.verb, got, tc.want)
		}
	}
}

// noAuthzErrors fails t if a command's log shows an authorization error:
// the ACLs granted were not all it needs.
func noAuthzErrors(t *testing.T, cmd, log string) {
	t.Helper()
	if strings.Contains(log, "AUTHORIZATION_FAILED") {
		t.Errorf("%s logged an authorization error with the documented ACLs:\n%s", cmd, log)
	}
}

// kafkaLag is end offset minus committed offset of group on topic/part.
func kafkaLag(t *testing.T, b *secBroker, group, topic string, part int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := b.adm(t).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, part)
	at := b.committedAt(t, group, topic, part)
	if at < 0 {
		at = 0
	}
	return end.Offset - at
}

// exitsWithin runs the binary with args and env and waits for it to exit;
// it fails t unless it exits 1 within 15 s with every one of want in its
// output.
func exitsWithin(t *testing.T, bin string, env []string, args []string, want ...string) {
	t.Helper()
	start := time.Now()
	p := clitest.Start(t, bin, env, args...)
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%v: %v after %v, want exit 1:\n%s", args, err, time.Since(start).Round(time.Millisecond), p.Log.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%v: still running after 15s (want exit 1 naming the cause):\n%s", args, p.Log.String())
	}
	out := p.Log.String()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%v: output lacks %q:\n%s", args, w, out)
		}
	}
	t.Logf("%v: exit 1 after %v: %s", args[0], time.Since(start).Round(time.Millisecond), lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestSecureClearErrors: a wrong password, an untrusted CA and a missing
// group ACL each end every command with exit 1 and a message naming the
// cause within 15 s, never a hang.
func TestSecureClearErrors(t *testing.T) {
	b := secureBroker(t)
	bin := clitest.Binary(t)
	anAddr := clitest.FreeAddr(t)
	top := fmt.Sprintf("analyzer: {http_addr: %q}\n", anAddr)
	topic := kafkatest.Topic(t, "secerr")
	cfg, p := b.config(t, topic, "http://127.0.0.1:1/solve", b.ca, "", top)
	// Every topic ACL, so that only what a case removes is missing.
	for _, as := range [][]acl{ensureACLs(p), processACLs(p), analyzeACLs(p)} {
		b.grant(t, as...)
	}
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: exit %d:\n%s", code, out)
	}
	httpEnv := "REDRIVE_HTTP_ADDR=" + clitest.FreeAddr(t)
	commands := [][]string{
		{"process", "-c", cfg},
		{"analyze", "-c", cfg},
		{"topics", "ensure", "-c", cfg},
		{"replay", "-c", cfg, "--all"},
		{"dlq", "stats", "-c", cfg},
	}

	t.Run("wrong password", func(t *testing.T) {
		for _, args := range commands {
			exitsWithin(t, bin, []string{httpEnv, "REDRIVE_SASL_PASSWORD=not-the-password"}, args,
				"SASL authentication failed for user redrive (SCRAM-SHA-512)", "check sasl.user and sasl.password")
		}
	})

	t.Run("untrusted CA", func(t *testing.T) {
		other, _ := b.config(t, topic, "http://127.0.0.1:1/solve", otherCA(t), "", top)
		for _, args := range commands {
			args = append([]string(nil), args...)
			for i := range args {
				if args[i] == cfg {
					args[i] = other
				}
			}
			exitsWithin(t, bin, []string{httpEnv}, args,
				"TLS: the certificate of broker "+b.addr+" is not trusted", "set tls.ca_file to the CA that signed it")
		}
	})

	t.Run("missing READ ACL on a topic read", func(t *testing.T) {
		revoked := []acl{{op: kadm.OpRead, topic: p.Topic}, {op: kadm.OpRead, topic: p.DLQTopic()}}
		b.revoke(t, revoked...) // DESCRIBE stays (ensureACLs)
		defer b.grant(t, revoked...)
		exitsWithin(t, bin, []string{httpEnv}, commands[0],
			"topic "+p.Topic+": READ denied (TOPIC_AUTHORIZATION_FAILED): user redrive may not read it; grant ACL READ on topic "+p.Topic+" to User:redrive")
		for _, args := range [][]string{commands[1], commands[3], commands[4]} {
			exitsWithin(t, bin, nil, args,
				"topic "+p.DLQTopic()+": READ denied (TOPIC_AUTHORIZATION_FAILED)", "grant ACL READ on topic "+p.DLQTopic()+" to User:redrive")
		}
	})

	t.Run("no ACL at all on the topics", func(t *testing.T) {
		bare, bp := b.config(t, kafkatest.Topic(t, "secnoacl"), "http://127.0.0.1:1/solve", b.ca, "", top)
		exitsWithin(t, bin, []string{httpEnv}, []string{"process", "-c", bare},
			"topic "+bp.Topic+": READ denied (TOPIC_AUTHORIZATION_FAILED)", "grant ACL READ on topic "+bp.Topic+" to User:redrive")
		exitsWithin(t, bin, nil, []string{"dlq", "stats", "-c", bare},
			"topic "+bp.DLQTopic()+": READ denied (TOPIC_AUTHORIZATION_FAILED)")
	})

	// An ACL revoked while a command runs ends it with exit 1 and the ACL
	// to grant, rather than fetching on and logging the refusal.
	revokedWhileRunning := []struct {
		name, readyURL string
		args, env      []string
		revoke         acl
		want           string
	}{
		{"process: group READ", "", []string{"process", "-c", cfg}, nil, acl{op: kadm.OpRead, group: p.GroupID()},
			"consumer group " + p.GroupID() + ": GROUP_AUTHORIZATION_FAILED: grant ACL READ on group " + p.GroupID() + " to User:redrive"},
		{"process: READ on a tier", "", []string{"process", "-c", cfg}, nil, acl{op: kadm.OpRead, topic: p.TierTopics()[0]},
			"topic " + p.TierTopics()[0] + ": READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic " + p.TierTopics()[0] + " to User:redrive"},
		{"analyze: group READ", "http://" + anAddr + "/readyz", []string{"analyze", "-c", cfg}, nil, acl{op: kadm.OpRead, group: p.AnalyzerGroupID()},
			"consumer group " + p.AnalyzerGroupID() + ": GROUP_AUTHORIZATION_FAILED: grant ACL READ on group " + p.AnalyzerGroupID() + " to User:redrive"},
		{"analyze: READ on the DLQ", "http://" + anAddr + "/readyz", []string{"analyze", "-c", cfg}, nil, acl{op: kadm.OpRead, topic: p.DLQTopic()},
			"topic " + p.DLQTopic() + ": READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic " + p.DLQTopic() + " to User:redrive"},
	}
	for _, tc := range revokedWhileRunning {
		t.Run(tc.name+" removed while running", func(t *testing.T) {
			readyURL, env := tc.readyURL, tc.env
			if readyURL == "" {
				httpAddr := clitest.FreeAddr(t)
				readyURL, env = "http://"+httpAddr+"/readyz", []string{"REDRIVE_HTTP_ADDR=" + httpAddr}
			}
			proc := clitest.Start(t, bin, env, tc.args...)
			deadline := time.Now().Add(30 * time.Second)
			for {
				if code, _ := clitest.Probe(readyURL); code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s not ready within 30s:\n%s", tc.args[0], proc.Log.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			b.revoke(t, tc.revoke)
			defer b.grant(t, tc.revoke)
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- proc.Cmd.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("%s: %v, want exit 1:\n%s", tc.args[0], err, proc.Log.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s still running 30s after the ACL was removed:\n%s", tc.args[0], proc.Log.String())
			}
			out := proc.Log.String()
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			t.Logf("exit 1 %v after the ACL was removed: %s", time.Since(start).Round(time.Millisecond), lastLine(out))
		})
	}

	t.Run("missing group ACL", func(t *testing.T) {
		b.revoke(t, acl{op: kadm.OpRead, group: p.GroupID()}, acl{op: kadm.OpRead, group: p.AnalyzerGroupID()}, acl{op: kadm.OpDescribe, group: p.GroupID()})
		exitsWithin(t, bin, []string{httpEnv}, commands[0],
			"consumer group "+p.GroupID()+": GROUP_AUTHORIZATION_FAILED", "grant ACL READ on group "+p.GroupID()+" to User:redrive")
		exitsWithin(t, bin, nil, commands[1],
			"consumer group "+p.AnalyzerGroupID()+": GROUP_AUTHORIZATION_FAILED", "grant ACL READ on group "+p.AnalyzerGroupID()+" to User:redrive")
	})
}

// otherCA writes a CA the broker's certificate was not signed by.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "some other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecureDLQWriteDenied: without the WRITE ACL on the DLQ the processor
// blocks on the dead letter: /readyz is false naming the topic and the ACL,
// nothing is committed past the record (though the one after it
// succeeded), and once the ACL is granted the dead letter is written and
// the offsets committed.
func TestSecureDLQWriteDenied(t *testing.T) {
	b := secureBroker(t)
	bin := clitest.Binary(t)
	s := &clitest.Solver{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cfg, p := b.config(t, kafkatest.Topic(t, "secnowrite"), srv.URL+"/solve", b.ca, "", "")
	b.grant(t, ensureACLs(p)...)
	if code, out := clitest.RunOut(t, context.Background(), "topics", "ensure", "-c", cfg); code != 0 {
		t.Fatalf("topics ensure: exit %d:\n%s", code, out)
	}
	dlqWrite := acl{op: kadm.OpWrite, topic: p.DLQTopic()}
	var grants []acl
	for _, a := range processACLs(p) {
		if a != dlqWrite {
			grants = append(grants, a)
		}
	}
	b.grant(t, grants...) // DESCRIBE on the DLQ (ensureACLs) but no WRITE

	// Same key: same partition; the refused one first.
	rec := func(id, v string) *kgo.Record {
		return &kgo.Record{Topic: p.Topic, Key: []byte("k"), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}
	}
	res := b.adminClient(t).ProduceSync(context.Background(), rec("bad", "wrong-key"), rec("good", "easy"))
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	part, first := res[0].Record.Partition, res[0].Record.Offset
	httpAddr := clitest.FreeAddr(t)
	proc := clitest.StartProcess(t, bin, cfg, "REDRIVE_HTTP_ADDR="+httpAddr)

	var last string
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := clitest.Probe("http://" + httpAddr + "/readyz")
		last = body
		if code == http.StatusServiceUnavailable && strings.Contains(body, "topic "+p.DLQTopic()+": WRITE denied (TOPIC_AUTHORIZATION_FAILED)") &&
			strings.Contains(body, "grant ACL WRITE on topic "+p.DLQTopic()+" to User:redrive") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never named the denied DLQ write; last %d %s\n%s", code, body, proc.Log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("/readyz while the DLQ write is denied: %s", strings.TrimSpace(last))
	if w := "start-up check: topic " + p.DLQTopic() + ": WRITE denied (TOPIC_AUTHORIZATION_FAILED)"; !strings.Contains(proc.Log.String(), w) {
		t.Errorf("the log lacks the start-up warning %q:\n%s", w, proc.Log.String())
	}
	// The record after it got its result...
	b.collect(t, []string{p.Results}, func(g map[string][]*kgo.Record) bool { return len(g[p.Results]) >= 1 }, 30*time.Second)
	// ...and still nothing is committed past the refused one.
	time.Sleep(time.Second) // two commit intervals
	if at := b.committedAt(t, p.GroupID(), p.Topic, part); at > first {
		t.Fatalf("committed offset %d on %s/%d past the record (offset %d) whose dead letter was refused", at, p.Topic, part, first)
	}

	b.grant(t, dlqWrite)
	dead := b.collect(t, []string{p.DLQTopic()}, func(g map[string][]*kgo.Record) bool { return len(g[p.DLQTopic()]) >= 1 }, 60*time.Second)
	if len(dead[p.DLQTopic()]) != 1 {
		t.Fatalf("%d dead letters after WRITE was granted, want 1:\n%s", len(dead[p.DLQTopic()]), proc.Log.String())
	}
	deadline = time.Now().Add(30 * time.Second)
	for b.committedAt(t, p.GroupID(), p.Topic, part) != first+2 {
		if time.Now().After(deadline) {
			t.Fatalf("offset not committed to %d after the grant (at %d)", first+2, b.committedAt(t, p.GroupID(), p.Topic, part))
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, body := clitest.Probe("http://" + httpAddr + "/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after the write went through: %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	proc.Sigterm(t, 30*time.Second)
}
