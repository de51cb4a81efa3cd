// Command kafkaready exits 0 once the broker at the given address answers a
// metadata request that names at least one broker and an active controller:
// readiness, not a TCP connect. On success it prints the broker's version
// as franz-go guesses it from ApiVersions. scripts/kafka.sh runs it.
//
// For the secure broker (scripts/kafka.sh up --secure) it connects over TLS
// trusting --ca and authenticates with SCRAM-SHA-512 as the admin user of
// --credentials (the file kafka.sh writes: KAFKA_ADMIN_USER=...,
// KAFKA_ADMIN_PASSWORD=...).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func main() {
	ca := flag.String("ca", "", "PEM CA bundle to trust: connect over TLS")
	creds := flag.String("credentials", "", "credentials file of scripts/kafka.sh: SCRAM-SHA-512 as its admin user")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kafkaready [--ca FILE] [--credentials FILE] host:port")
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	opts, err := secureOpts(*ca, *creds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkaready:", err)
		os.Exit(2)
	}
	if err := probe(flag.Arg(0), opts); err != nil {
		fmt.Fprintln(os.Stderr, "not ready:", err)
		os.Exit(1)
	}
}

// secureOpts is TLS trusting ca (if set) and SCRAM-SHA-512 as the admin
// user of the credentials file (if set).
func secureOpts(ca, creds string) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", ca)
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		opts = append(opts, kgo.Dialer(d.DialContext))
	}
	if creds != "" {
		kv, err := readCredentials(creds)
		if err != nil {
			return nil, err
		}
		user, pass := kv["KAFKA_ADMIN_USER"], kv["KAFKA_ADMIN_PASSWORD"]
		if user == "" || pass == "" {
			return nil, fmt.Errorf("%s: no KAFKA_ADMIN_USER or KAFKA_ADMIN_PASSWORD", creds)
		}
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	}
	return opts, nil
}

// readCredentials reads the credentials file (parseCredentials).
func readCredentials(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv, err := parseCredentials(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return kv, nil
}

// parseCredentials reads KEY=value lines; # starts a comment line, blank
// lines are skipped.
func parseCredentials(r io.Reader) (map[string]string, error) {
	kv := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=value", n)
		}
		kv[k] = v
	}
	return kv, sc.Err()
}

func probe(addr string, extra []kgo.Opt) error {
	opts := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.DialTimeout(2 * time.Second)}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(m.Brokers) == 0 || m.Controller < 0 {
		return fmt.Errorf("metadata names %d brokers, controller %d", len(m.Brokers), m.Controller)
	}
	version := "version unknown"
	if vs, err := adm.ApiVersions(ctx); err == nil {
		for _, bv := range vs.Sorted() {
			if bv.Err == nil {
				version = "Apache Kafka " + bv.VersionGuess()
				break
			}
		}
	}
	fmt.Printf("ready: %s, cluster %s, controller %d\n", version, m.Cluster, m.Controller)
	return nil
}
