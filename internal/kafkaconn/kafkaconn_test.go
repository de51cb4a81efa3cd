package kafkaconn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/internal/config"
)

func TestOptsErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"no brokers", config.Config{}, "no brokers"},
		{"bad mechanism", config.Config{Brokers: []string{"127.0.0.1:9092"}, SASL: &config.SASL{Mechanism: "GSSAPI"}}, "sasl.mechanism"},
		{"missing ca", config.Config{Brokers: []string{"127.0.0.1:9092"}, TLS: &config.TLS{Enabled: true, CAFile: filepath.Join(dir, "nope.pem")}}, "tls.ca_file"},
		{"ca not pem", config.Config{Brokers: []string{"127.0.0.1:9092"}, TLS: &config.TLS{Enabled: true, CAFile: notPEM}}, "no PEM"},
		{"cert without key", config.Config{Brokers: []string{"127.0.0.1:9092"}, TLS: &config.TLS{Enabled: true, CertFile: notPEM}}, "go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Opts(&c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestOptsAccepts(t *testing.T) {
	ca := writeCA(t)
	for _, mech := range []string{"PLAIN", "scram-sha-256", "SCRAM-SHA-512"} {
		c := config.Config{Brokers: []string{"127.0.0.1:9092"}, ClientID: "x",
			SASL: &config.SASL{Mechanism: mech, User: "u", Password: "p"},
			TLS:  &config.TLS{Enabled: true, CAFile: ca}}
		opts, err := Opts(&c)
		if err != nil {
			t.Fatalf("%s: %v", mech, err)
		}
		if len(opts) != 4 {
			t.Errorf("%s: %d options, want seed brokers, client id, dialer, sasl", mech, len(opts))
		}
	}
}

func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
