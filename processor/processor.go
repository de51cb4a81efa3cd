package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Processor runs one or more pipelines.
type Processor struct {
	cfg       Config
	pipelines []*pipeline
	hist      histWindows   // for Status
	ctl       *controlPlane // nil: Control.Disabled
}

// New builds a processor. h handles the records of every pipeline that has
// no Handler of its own. It connects lazily: New does not reach the broker.
func New(cfg Config, h Handler) (*Processor, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Control.Disabled {
		for i := range cfg.Pipelines {
			cfg.Pipelines[i].Scope = ScopeProcess
		}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("processor metrics: %w", err)
	}
	pr := &Processor{cfg: cfg}
	for _, pc := range cfg.Pipelines {
		ph := pc.Handler
		if ph == nil {
			ph = h
		}
		if ph == nil {
			return nil, fmt.Errorf("%w: pipeline %q has no handler", ErrConfig, pc.Name)
		}
		// One set of client metrics per pipeline's client, told apart by a
		// pipeline label (kprom registers its collectors once per Metrics).
		kp := kprom.NewMetrics("redrive_kafka",
			kprom.Registerer(prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pc.Name}, cfg.Registerer)))
		pl, err := newPipeline(&pr.cfg, pc, ph, m, withHooks(kp))
		if err != nil {
			pr.close()
			return nil, err
		}
		pr.pipelines = append(pr.pipelines, pl)
	}
	if !cfg.Control.Disabled {
		if pr.ctl, err = newControlPlane(&pr.cfg, pr.pipelines); err != nil {
			pr.close()
			return nil, err
		}
	}
	return pr, nil
}

func (pr *Processor) close() {
	for _, p := range pr.pipelines {
		p.cl.Close()
	}
	if pr.ctl != nil {
		pr.ctl.cl.Close()
	}
}

// Run processes until ctx is cancelled, then stops fetching, finishes
// in-flight work within ShutdownGrace, commits and leaves the groups.
// It returns nil after a clean shutdown.
func (pr *Processor) Run(ctx context.Context) error {
	// A pipeline that fails (its client closed, an exactly-once producer
	// fenced) stops the others: the process exits with the error and is
	// restarted, rather than running on with a pipeline missing.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if pr.ctl != nil {
		// The control topic is read before any call: a pipeline paused
		// stays paused when its processes restart. It is followed until
		// the pipelines have stopped, then this process says it left.
		cctx, ccancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { pr.ctl.run(cctx); close(done) }()
		defer func() { ccancel(); <-done; pr.ctl.leave() }()
		pr.ctl.awaitCaughtUp(ctx)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pr.pipelines))
	for i, p := range pr.pipelines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.run(ctx)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lagEvery is how often consumer lag is published: the first value comes
// at start, so the lag panels and alerts have data within seconds.
const lagEvery = 5 * time.Second

// lagLoop publishes consumer lag per topic at start and every lagEvery.
func (p *pipeline) lagLoop(ctx context.Context) {
	adm := kadm.NewClient(p.cl)
	t := time.NewTicker(lagEvery)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if p.share != nil {
			if lag, ok := p.share.shareLag(lctx, adm); ok {
				p.m.shareLag.WithLabelValues(p.cfg.Name).Set(float64(lag))
			}
		}
		lags, err := adm.Lag(lctx, p.cfg.GroupID())
		cancel()
		if err != nil {
			continue
		}
		for _, gl := range lags {
			if gl.Error() != nil {
				continue
			}
			for topic, tl := range gl.Lag.TotalByTopic() {
				if _, ok := p.tierOf[topic]; ok {
					p.m.lag.WithLabelValues(p.cfg.Name, topic).Set(float64(tl.Lag))
				}
			}
		}
	}
}
