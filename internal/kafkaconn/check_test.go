package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/internal/config"
)

func TestFatalClassifies(t *testing.T) {
	c := &config.Config{Brokers: []string{"127.0.0.1:9094"}, SASL: &config.SASL{Mechanism: "scram-sha-512", User: "app", Password: "secret"}}
	wrap := func(err error) error { return fmt.Errorf("unable to dial: %w", err) }
	cases := []struct {
		name string
		err  error
		want []string // nil: not fatal
	}{
		{"unknown CA", wrap(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), []string{"TLS: the certificate of broker 127.0.0.1:9094 is not trusted", "set tls.ca_file"}},
		{"wrong host", wrap(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kafka"}), []string{"is not for that name", "tls.server_name"}},
		{"expired", wrap(x509.CertificateInvalidError{Reason: x509.Expired}), []string{"does not verify"}},
		{"not TLS", wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), []string{"does not speak TLS", "unset tls.enabled"}},
		{"sasl", fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), []string{"SASL authentication failed for user app (SCRAM-SHA-512)", "check sasl.user and sasl.password"}},
		{"mechanism", kerr.UnsupportedSaslMechanism, []string{"does not enable mechanism SCRAM-SHA-512"}},
		{"group", kerr.GroupAuthorizationFailed, []string{"GROUP_AUTHORIZATION_FAILED", "User:app"}},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, nil},
		{"deadline", context.DeadlineExceeded, nil},
		{"topic", kerr.TopicAuthorizationFailed, nil},
		{"nil", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := Fatal(c, tc.err)
			if tc.want == nil {
				if f != nil {
					t.Fatalf("Fatal(%v) = %q, want nil: clients retry it", tc.err, f)
				}
				return
			}
			if f == nil {
				t.Fatalf("Fatal(%v) = nil, want fatal", tc.err)
			}
			for _, w := range tc.want {
				if !strings.Contains(f.Error(), w) {
					t.Errorf("%q lacks %q", f.Error(), w)
				}
			}
			if !errors.Is(f, tc.err) {
				t.Errorf("%q does not wrap %v", f, tc.err)
			}
		})
	}
	if g := GroupDenied(c, "redrive.p", kerr.GroupAuthorizationFailed); !strings.Contains(g.Error(), "grant ACL READ on group redrive.p to User:app") {
		t.Errorf("GroupDenied: %q", g)
	}
	if d := TopicDenied(c, "orders", "READ"); !strings.Contains(d.Error(), "topic orders: READ denied (TOPIC_AUTHORIZATION_FAILED): user app may not read it; grant ACL READ on topic orders to User:app (kafka-acls.sh --add --allow-principal User:app --operation Read --topic orders)") {
		t.Errorf("TopicDenied: %q", d)
	}
}

// Without SASL the principal is not known here: the hint says so and its
// command has a placeholder, as the processor's and the analyzer's do.
func TestDeniedWithoutSASL(t *testing.T) {
	c := &config.Config{Brokers: []string{"127.0.0.1:9092"}}
	want := "topic orders.dlq: WRITE denied (TOPIC_AUTHORIZATION_FAILED): redrive's principal may not write it; grant ACL WRITE on topic orders.dlq to redrive's principal " +
		"(kafka-acls.sh --add --allow-principal User:<principal> --operation Write --topic orders.dlq)"
	if d := TopicDenied(c, "orders.dlq", "WRITE"); d.Error() != want || !errors.Is(d, kerr.TopicAuthorizationFailed) {
		t.Errorf("TopicDenied: %q, want %q", d, want)
	}
	if g := GroupDenied(c, "redrive.p", kerr.GroupAuthorizationFailed); !strings.Contains(g.Error(), "--allow-principal User:<principal> --operation Read --group redrive.p)") {
		t.Errorf("GroupDenied: %q", g)
	}
}

func TestAllowed(t *testing.T) {
	cases := []struct {
		name string
		a    topicAccess
		want bool
	}{
		{"denied", topicAccess{err: kerr.TopicAuthorizationFailed}, false},
		{"missing", topicAccess{err: kerr.UnknownTopicOrPartition}, true},
		{"not in the answer", topicAccess{}, true},
		{"ops omitted", topicAccess{ops: kadm.DecodeACLOperations(math.MinInt32)}, true},
		{"describe only", topicAccess{ops: []kadm.ACLOperation{kadm.OpDescribe}}, false},
		{"read", topicAccess{ops: []kadm.ACLOperation{kadm.OpDescribe, kadm.OpRead}}, true},
		{"all", topicAccess{ops: []kadm.ACLOperation{kadm.OpAll}}, true},
	}
	for _, tc := range cases {
		if got := tc.a.allowed(kadm.OpRead); got != tc.want {
			t.Errorf("%s: allowed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckNotListening: nothing listens: an error, not fatal (the
// clients retry it).
func TestCheckNotListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Check(context.Background(), &config.Config{Brokers: []string{addr}}, Need{Groups: []string{"g"}, Read: []string{"t"}})
	var f *FatalError
	if err == nil || errors.As(err, &f) {
		t.Fatalf("Check = %v, want a plain error", err)
	}
}

// TestCheckTLSAgainstPlain: a TLS client against a listener that is not
// TLS is told so at once.
func TestCheckTLSAgainstPlain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 512)
				_, _ = cn.Read(buf)
				_, _ = cn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
				cn.Close()
			}()
		}
	}()
	_, err = Check(context.Background(), &config.Config{Brokers: []string{ln.Addr().String()}, TLS: &config.TLS{Enabled: true}}, Need{})
	var f *FatalError
	if !errors.As(err, &f) || !strings.Contains(err.Error(), "does not speak TLS") {
		t.Fatalf("Check = %v, want a fatal error saying the port does not speak TLS", err)
	}
}

// TestCheckWaitsForALoadingCoordinator: a fresh broker answers
// COORDINATOR_NOT_AVAILABLE for a few seconds while it creates the offsets
// topic; the check asks again rather than report a healthy cluster as not
// answering. A coordinator that stays unavailable is still reported.
func TestCheckWaitsForALoadingCoordinator(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  int // FindCoordinator answers refused before the real one
		wantErr bool
	}{
		{"loads", 3, false},
		{"never loads", 1 << 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var mu sync.Mutex
			refused := 0
			cl.ControlKey(int16(kmsg.FindCoordinator), func(req kmsg.Request) (kmsg.Response, error, bool) {
				cl.KeepControl()
				mu.Lock()
				defer mu.Unlock()
				if refused >= tc.refuse {
					return nil, nil, false
				}
				refused++
				r := req.(*kmsg.FindCoordinatorRequest)
				resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
				for _, k := range r.CoordinatorKeys {
					c := kmsg.NewFindCoordinatorResponseCoordinator()
					c.Key = k
					c.ErrorCode = kerr.CoordinatorNotAvailable.Code
					resp.Coordinators = append(resp.Coordinators, c)
				}
				return resp, nil, true
			})
			start := time.Now()
			_, err = Check(context.Background(), &config.Config{Brokers: cl.ListenAddrs()}, Need{Groups: []string{"g1", "g2"}})
			if tc.wantErr != (err != nil) {
				t.Fatalf("Check = %v after %d refusals, want error %v", err, refused, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, kerr.CoordinatorNotAvailable) {
				t.Fatalf("Check = %v, want COORDINATOR_NOT_AVAILABLE named", err)
			}
			if took := time.Since(start); tc.wantErr && took > CheckTimeout {
				t.Fatalf("Check took %v, over its bound %v", took, CheckTimeout)
			}
		})
	}
}

// TestUnreachableHint: a refused dial is told apart from a broker's answer,
// and the hint names the brokers tried and each way to change them.
func TestUnreachableHint(t *testing.T) {
	refused := fmt.Errorf("unable to dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	if !Unreachable(refused) || !Unreachable(&net.DNSError{Err: "no such host", Name: "kafka"}) {
		t.Fatal("a refused dial or an unknown host is not reported as unreachable")
	}
	if Unreachable(kerr.CoordinatorNotAvailable) || Unreachable(nil) {
		t.Fatal("a broker's error answer is reported as unreachable")
	}
	c, err := config.Parse([]byte("brokers: [\"127.0.0.1:9092\"]\npipelines: [{name: a, topic: a}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := BrokersHint(c)
	for _, want := range []string{"127.0.0.1:9092", "line 1", "--brokers", "REDRIVE_BROKERS", "brokers: in the config file"} {
		if !strings.Contains(h, want) {
			t.Errorf("hint %q lacks %q", h, want)
		}
	}
	c.SetBrokers("10.0.0.1:9092")
	if h := BrokersHint(c); !strings.Contains(h, "10.0.0.1:9092 (from --brokers)") {
		t.Errorf("hint after --brokers: %q", h)
	}
}
