package analyzer

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// A processor's URL or an alert's webhook with a
// password or a token shows neither in the flow view nor in errors (logs).
func TestProcessorAndWebhookURLsShowNoSecrets(t *testing.T) {
	const u = "http://user:s3cret@127.0.0.1:1/?token=T0KEN"
	ans := fetchProcessor(context.Background(), http.DefaultClient, u) // nothing listens on port 1
	if ans.err == nil || strings.Contains(ans.err.Error(), "s3cret") || strings.Contains(ans.err.Error(), "T0KEN") {
		t.Errorf("fetch error %v: want an error without the secrets", ans.err)
	}
	a := &Analyzer{o: Options{Processors: []string{u}}}
	a.procs.last = map[string]processorAnswer{u: ans}
	var f Flow
	a.addProcessors(&f)
	if len(f.Processors) != 1 || strings.Contains(f.Processors[0].URL+f.Processors[0].Error, "s3cret") || strings.Contains(f.Processors[0].URL+f.Processors[0].Error, "T0KEN") {
		t.Errorf("flow shows %+v", f.Processors)
	}
	if err := post(context.Background(), http.DefaultClient, "http://user:s3cret@h/T0KEN\x7f", &Message{}); err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "T0KEN") {
		t.Errorf("post error %v: want an error without the webhook URL", err)
	}
}
