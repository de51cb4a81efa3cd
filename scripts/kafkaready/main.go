// Command kafkaready exits 0 once the broker at the given address answers a
// metadata request that names at least one broker and an active controller:
// readiness, not a TCP connect. On success it prints the broker's version
// as franz-go guesses it from ApiVersions. scripts/kafka.sh runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kafkaready host:port")
		os.Exit(2)
	}
	if err := probe(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "not ready:", err)
		os.Exit(1)
	}
}

func probe(addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.DialTimeout(2*time.Second))
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
