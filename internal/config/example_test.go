package config_test

import (
	"fmt"

	"github.com/redrive/redrive/internal/config"
)

func ExampleParse() {
	file := `
brokers: ["127.0.0.1:9092"]
pipelines:
  - topic: solve.requests
    retry: {tiers: [10s, 1h30m], max_attempts: 3}
    handler:
      http:
        url: http://127.0.0.1:8080/solve
        headers: {Authorization: "Bearer ${SOLVER_TOKEN}"}
`
	getenv := func(name string) string {
		return map[string]string{"SOLVER_TOKEN": "t0ken", "REDRIVE_BROKERS": "127.0.0.1:9093"}[name]
	}
	c, err := config.Parse([]byte(file), getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	p := c.Pipelines[0]
	fmt.Println(c.Brokers, p.Name, p.GroupID())
	fmt.Println(p.TierTopics(), p.DLQTopic())
	fmt.Println(p.Handler.HTTP.Headers["Authorization"], c.Redacted().Pipelines[0].Handler.HTTP.Headers["Authorization"])
	// Output:
	// [127.0.0.1:9093] solve.requests redrive.solve.requests
	// [solve.requests.retry.10s solve.requests.retry.1h30m] solve.requests.dlq
	// Bearer t0ken [redacted]
}

func ExampleParse_errors() {
	_, err := config.Parse([]byte(`brokers: [127.0.0.1:9092]
pipelines:
  - topic: solve.requests
    retry:
      tiers: [30s, 5s]
      tierz: 1
`), nil)
	fmt.Println(err)
	// Output:
	// line 6: pipelines[0].retry.tierz: unknown key (known: tiers, max_attempts, jitter, max_due)
	// line 5: pipelines[0].retry.tiers[1]: 5s after 30s: tiers must strictly increase
}
