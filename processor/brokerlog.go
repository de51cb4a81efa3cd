package processor

import (
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerLogEvery bounds how often an unreachable broker is logged: the
// client dials again and again (fetches, heartbeats, writes) while it is
// down.
const brokerLogEvery = 10 * time.Second

// brokerLog is a kgo hook that tells the operator when the pipeline's
// client cannot reach a broker (a crashed or restarting broker, a network
// cut), at most every brokerLogEvery per broker, and when it can again.
// franz-go retries by itself; without this the processor said nothing
// until a commit or a write failed, and maybe not even then.
type brokerLog struct {
	log *slog.Logger

	mu   sync.Mutex
	down map[string]brokerDown // by host:port
}

type brokerDown struct {
	since, logged time.Time
	fails         int
}

var _ kgo.HookBrokerConnect = (*brokerLog)(nil)

func (b *brokerLog) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	now := time.Now()
	b.mu.Lock()
	if b.down == nil {
		b.down = map[string]brokerDown{}
	}
	d, wasDown := b.down[addr]
	if err == nil {
		delete(b.down, addr)
		b.mu.Unlock()
		if wasDown {
			b.log.Info("broker reachable again", "broker", addr, "down_for", now.Sub(d.since).Round(time.Millisecond), "failed_dials", d.fails)
		}
		return
	}
	if !wasDown {
		d.since = now
	}
	d.fails++
	logNow := now.Sub(d.logged) >= brokerLogEvery
	if logNow {
		d.logged = now
	}
	b.down[addr] = d
	b.mu.Unlock()
	if logNow {
		b.log.Warn("cannot reach the broker; the client retries, nothing is committed past unwritten outcomes", "broker", addr, "down_for", now.Sub(d.since).Round(time.Millisecond), "failed_dials", d.fails, "err", err)
	}
}
