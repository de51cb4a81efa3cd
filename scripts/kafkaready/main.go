// Command kafkaready exits 0 once the broker at the given address answers
// a metadata request with at least one broker and a controller — a real
// readiness check, not a TCP connect. It prints the broker's version guess.
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(os.Args[1]), kgo.RequestRetries(0), kgo.DialTimeout(2*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	m, err := adm.BrokerMetadata(ctx)
	if err != nil || len(m.Brokers) == 0 || m.Controller < 0 {
		fmt.Fprintln(os.Stderr, "not ready:", err)
		os.Exit(1)
	}
	v, err := adm.ApiVersions(ctx)
	if err == nil {
		for _, bv := range v.Sorted() {
			fmt.Println("ready:", bv.VersionGuess())
			return
		}
	}
	fmt.Println("ready")
}
