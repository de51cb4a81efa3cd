package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrive/redrive/processor"
)

// Without consume or max_deliveries a pipeline reads its main topic in the
// consumer group, and a share group would dead-letter at the 4th delivery.
func TestConsumeDefaults(t *testing.T) {
	for _, doc := range []string{pipe(), pipe("max_deliveries: 0"), pipe("consume: null")} {
		c := mustParse(t, doc, nil)
		p := c.Pipelines[0]
		if p.Consume != "group" || p.MaxDeliveries != 3 {
			t.Errorf("consume, max_deliveries = %q, %d; want group, 3\n--- file:\n%s", p.Consume, p.MaxDeliveries, doc)
		}
		pp := p.ProcessorPipeline(nil)
		if pp.Consume != processor.ConsumeGroup || pp.MaxDeliveries != processor.DefaultMaxDeliveries {
			t.Errorf("processor Consume, MaxDeliveries = %q, %d; want %q, %d", pp.Consume, pp.MaxDeliveries, processor.ConsumeGroup, processor.DefaultMaxDeliveries)
		}
		// What the processor fills in is what the file's view says.
		if d := pp.WithDefaults(); string(d.Consume) != p.Consume || d.MaxDeliveries != p.MaxDeliveries {
			t.Errorf("processor defaults %q, %d differ from the file's %q, %d", d.Consume, d.MaxDeliveries, p.Consume, p.MaxDeliveries)
		}
	}
}

// The keys reach processor.Pipeline as written.
func TestConsumeKeys(t *testing.T) {
	c := mustParse(t, pipe("consume: share", "max_deliveries: 5")+"  - {topic: other, consume: group}\n", nil)
	if pp := c.Pipelines[0].ProcessorPipeline(nil); pp.Consume != processor.ConsumeShare || pp.MaxDeliveries != 5 {
		t.Errorf("Consume, MaxDeliveries = %q, %d; want share, 5", pp.Consume, pp.MaxDeliveries)
	}
	if pp := c.Pipelines[1].ProcessorPipeline(nil); pp.Consume != processor.ConsumeGroup || pp.MaxDeliveries != processor.DefaultMaxDeliveries {
		t.Errorf("other pipeline: Consume, MaxDeliveries = %q, %d; want group, 3", pp.Consume, pp.MaxDeliveries)
	}
	// Share works with what it does not refuse: the default delivery and
	// no ordering, said out loud.
	mustParse(t, pipe("consume: share", "delivery: at-least-once", "ordering: ''", "max_deliveries: 1"), nil)
	mustParse(t, pipe("consume: share", "max_deliveries: 9"), nil)
	// max_deliveries has no effect with group, but is still checked.
	mustParse(t, pipe("consume: group", "max_deliveries: 2", "delivery: exactly-once", "ordering: key"), nil)
}

// What share cannot do is refused at Load, at the consume key's line
// whatever the order of the keys; a bad max_deliveries at its own.
func TestConsumeKeyErrors(t *testing.T) {
	const noTxn = "share cannot be used with delivery exactly-once: Kafka's share groups have no transactions (use consume: group)"
	const noOrder = "share cannot keep key order (ordering: key): a share group hands records of one key to several replicas at once (use consume: group)"
	const rangeMsg = ": must be 1 to 9 (below the broker's group.share.delivery.count.limit, at most 10)"
	for _, tt := range []struct {
		name  string
		doc   string
		want  []string // exactly these errors, in order
		kind  error
		field string // the processor's FieldError.Field, if any
	}{
		{"exactly-once", pipe("consume: share", "delivery: exactly-once"),
			[]string{"line 4: pipelines[0].consume: " + noTxn}, ErrInvalid, "Pipelines[0].Consume"},
		{"exactly-once written first", pipe("delivery: exactly-once", "consume: share"),
			[]string{"line 5: pipelines[0].consume: " + noTxn}, ErrInvalid, "Pipelines[0].Consume"},
		{"ordering key", pipe("ordering: key", "consume: share"),
			[]string{"line 5: pipelines[0].consume: " + noOrder}, ErrInvalid, "Pipelines[0].Consume"},
		{"both", pipe("consume: share", "ordering: key", "delivery: exactly-once"),
			[]string{"line 4: pipelines[0].consume: " + noTxn, "line 4: pipelines[0].consume: " + noOrder}, ErrInvalid, "Pipelines[0].Consume"},
		{"second pipeline", pipe() + "  - topic: other\n    delivery: exactly-once\n\n    consume: share\n",
			[]string{"line 7: pipelines[1].consume: " + noTxn}, ErrInvalid, "Pipelines[1].Consume"},
		{"unknown value", pipe("consume: shared"),
			[]string{`line 4: pipelines[0].consume: "shared": want "group" or "share"`}, ErrInvalid, "Pipelines[0].Consume"},
		{"values are lower case", pipe("consume: Share"),
			[]string{`line 4: pipelines[0].consume: "Share": want "group" or "share"`}, ErrInvalid, "Pipelines[0].Consume"},
		{"max_deliveries above 9", pipe("consume: share", "max_deliveries: 10"),
			[]string{"line 5: pipelines[0].max_deliveries: 10" + rangeMsg}, ErrInvalid, "Pipelines[0].MaxDeliveries"},
		{"max_deliveries negative", pipe("max_deliveries: -1"),
			[]string{"line 4: pipelines[0].max_deliveries: -1" + rangeMsg}, ErrInvalid, "Pipelines[0].MaxDeliveries"},
		{"max_deliveries not a number", pipe("max_deliveries: three"),
			[]string{`line 4: pipelines[0].max_deliveries: want a whole number, got "three"`}, ErrType, ""},
		{"consume not a string", pipe("consume: [share]"),
			nil, ErrType, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseErr(t, tt.doc, nil)
			if tt.want != nil {
				var got []string
				for _, e := range unjoin(err) {
					got = append(got, e.Error())
				}
				if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
					t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
				}
			} else if !strings.Contains(err.Error(), "pipelines[0].consume") {
				t.Errorf("error %q does not name pipelines[0].consume", err)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error is not %v: %v", tt.kind, err)
			}
			var fe *processor.FieldError
			if tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field) {
				t.Errorf("cause: %#v, want a FieldError of %s", fe, tt.field)
			}
		})
	}
}

// Load, as `redrive process` calls it, names the file, the line and the key.
func TestLoadRefusesShareWithExactlyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.yaml")
	if err := os.WriteFile(path, []byte(pipe("delivery: exactly-once", "consume: share")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadEnv(path, func(string) string { return "" })
	want := path + ": line 5: pipelines[0].consume: share cannot be used with delivery exactly-once"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load: %v\nwant an error starting %q", err, want)
	}
}
