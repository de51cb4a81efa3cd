package config

import (
	"errors"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/redrive/redrive/retry"
)

// Tier is one entry of retry.tiers: its delay and its name, the suffix of
// its topic (<topic>.retry.<name>), of its redrive-tier header and of its
// metrics label.
type Tier struct {
	Delay Duration
	// Name is the delay as the file wrote it when that is only digits and
	// letters ("64s", "90s", "1h30m"; retry.NameAsWritten), so that the
	// topic is the one the user expects. Empty ("1.5m" was written, or a
	// Config built in Go): the delay's shortest form (retry.FormatDelay).
	// A tier whose topic under its shortest form exists and under the
	// written name does not keeps the shortest form: the commands that use
	// tiers set Name so at start (topics.FormerTierNames).
	Name string
}

// D is the delay as a time.Duration.
func (t Tier) D() time.Duration { return t.Delay.D() }

// ParseTier reads a tier as the file does: a duration (ParseDuration),
// named as written when retry.NameAsWritten keeps it.
func ParseTier(s string) (Tier, error) {
	d, err := ParseDuration(s)
	if err != nil {
		return Tier{}, err
	}
	return Tier{Delay: d, Name: retry.NameAsWritten(s)}, nil
}

// String is the tier's name, else its delay's shortest form: it parses
// back to a tier of the same delay and topic.
func (t Tier) String() string {
	if t.Name != "" {
		return t.Name
	}
	return t.Delay.String()
}

// MarshalText writes String.
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads with ParseTier.
func (t *Tier) UnmarshalText(b []byte) error {
	v, err := ParseTier(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// MarshalYAML writes String.
func (t Tier) MarshalYAML() (any, error) { return t.String(), nil }

// UnmarshalYAML reads a scalar with ParseTier; null leaves t alone. (The
// loader decodes tiers itself, as it does durations.)
func (t *Tier) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("bad tier: want a scalar such as 30s")
	}
	if n.ShortTag() == "!!null" {
		return nil
	}
	return t.UnmarshalText([]byte(n.Value))
}

// tiersOf is ds as tiers named by their shortest form.
func tiersOf(ds []time.Duration) []Tier {
	out := make([]Tier, len(ds))
	for i, d := range ds {
		out[i] = Tier{Delay: Duration(d), Name: retry.FormatDelay(d)}
	}
	return out
}
