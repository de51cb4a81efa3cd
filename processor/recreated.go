package processor

import (
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// recreatedTopics remembers when each output topic was last purged from
// the producer because it was deleted and recreated.
type recreatedTopics struct {
	mu     sync.Mutex
	purged map[string]time.Time
}

// purgeEvery bounds how often one topic is purged: every write to it that
// was buffered when franz-go noticed the new topic id fails with the same
// error at about the same moment, and one purge serves them all.
const purgeEvery = 2 * time.Second

// forgetRecreated handles an outcome topic (the DLQ, a tier, the results
// topic) that was deleted and created again while the pipeline runs.
// franz-go never adopts the new topic id of a topic it already produced
// to: every write fails with UNKNOWN_TOPIC_ID until the topic is purged
// from the client, so without this the writes (and the partitions'
// commits) would stay blocked until a restart. On that error the topic is
// purged from producing: records buffered for it fail (each write retries
// its own), and the next write loads the new topic's metadata.
func (p *pipeline) forgetRecreated(topic string, err error) {
	if !errors.Is(err, kerr.UnknownTopicID) {
		return
	}
	r := &p.recreated
	r.mu.Lock()
	if time.Since(r.purged[topic]) < purgeEvery {
		r.mu.Unlock()
		return
	}
	if r.purged == nil {
		r.purged = map[string]time.Time{}
	}
	r.purged[topic] = time.Now()
	r.mu.Unlock()
	p.log.Warn("output topic was deleted and created again: writing to the new one", "topic", topic)
	p.cl.PurgeTopicsFromProducing(topic)
}
