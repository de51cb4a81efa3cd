package analyzer

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestDecodeProcessorStatus(t *testing.T) {
	good := `{"instance":"p-1","now":"2026-01-01T00:00:00Z","pipelines":[{"name":"solve","inflight":3,"waiting":5,
		"handler_p99_seconds":0.2,"lateness_p99_seconds":0.01,"tiers":[{"name":"1s","topic":"t","waiting":5,"lateness_p99_seconds":0.01}]}]}`
	s, err := decodeProcessorStatus(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Instance != "p-1" || len(s.Pipelines) != 1 || s.Pipelines[0].Inflight != 3 || s.Pipelines[0].Tiers[0].Waiting != 5 {
		t.Errorf("decoded %+v", s)
	}
	for name, body := range map[string]string{
		"not json":          `<html>`,
		"negative inflight": `{"pipelines":[{"name":"a","inflight":-1}]}`,
		"negative p99":      `{"pipelines":[{"name":"a","handler_p99_seconds":-1}]}`,
		"negative tier":     `{"pipelines":[{"name":"a","tiers":[{"name":"1s","waiting":-2}]}]}`,
		"wrong type":        `{"pipelines":{"name":"a"}}`,
		"too large":         `{"instance":"` + strings.Repeat("x", maxStatusBytes) + `"}`,
	} {
		if _, err := decodeProcessorStatus(strings.NewReader(body)); !errors.Is(err, ErrProcessorStatus) {
			t.Errorf("%s: err %v, want ErrProcessorStatus", name, err)
		}
	}
}

func FuzzDecodeProcessorStatus(f *testing.F) {
	f.Add([]byte(`{"instance":"p","pipelines":[{"name":"a","inflight":1,"waiting":2,"handler_p99_seconds":0.5,"tiers":[{"name":"1s","waiting":2}]}]}`))
	f.Add([]byte(`{"pipelines":[{"inflight":-1}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeProcessorStatus(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrProcessorStatus) {
				t.Fatalf("error %v is not ErrProcessorStatus", err)
			}
			return
		}
		// What is accepted is what the flow view can show.
		for _, p := range s.Pipelines {
			if p.Inflight < 0 || p.Waiting < 0 || p.HandlerP99Seconds < 0 || p.LatenessP99Seconds < 0 {
				t.Fatalf("accepted negative numbers: %+v", p)
			}
			for _, tr := range p.Tiers {
				if tr.Waiting < 0 || tr.LatenessP99Seconds < 0 {
					t.Fatalf("accepted negative tier numbers: %+v", tr)
				}
			}
		}
	})
}
