package processor

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

func withHooks(kp *kprom.Metrics) kgo.Opt { return kgo.WithHooks(kp) }
