package kafkatest

import (
	"context"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
)

// Image is the broker image used where Docker exists: the testcontainers
// Kafka module runs Confluent's images only.
const Image = "confluentinc/confluent-local:7.5.0"

var (
	healthOnce sync.Once
	healthy    bool

	ctrOnce    sync.Once
	ctrBrokers []string
	ctrErr     error
)

// dockerHealthy reports, once per test binary, whether a Docker provider
// answers. It never skips: without Docker the next source is used.
func dockerHealthy() bool {
	healthOnce.Do(func() {
		// testcontainers panics when it finds no Docker host at all.
		defer func() {
			if recover() != nil {
				healthy = false
			}
		}()
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			return
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		healthy = p.Health(ctx) == nil
	})
	return healthy
}

// container starts one broker per test binary; the testcontainers reaper
// removes it when the binary exits.
func container() ([]string, error) {
	ctrOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, err := tckafka.Run(ctx, Image, tckafka.WithClusterID("redrive-test"))
		if err != nil {
			ctrErr = err
			return
		}
		ctrBrokers, ctrErr = c.Brokers(ctx)
	})
	return ctrBrokers, ctrErr
}
