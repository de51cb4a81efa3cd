package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redrive/redrive/analyzer"
	"github.com/redrive/redrive/processor"
)

// TestDevRunsASharePipeline: `redrive dev -c FILE` runs a pipeline with
// consume: share on the embedded broker (kfake serves share groups): the
// demo traffic is handled through the share group, retries go through
// the tiers, and the processor and the dashboard say it is a share
// pipeline.
func TestDevRunsASharePipeline(t *testing.T) {
	cfg := writeConfig(t, []string{"127.0.0.1:1"}, "sharedev", "", "    consume: share\n")
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	addr, anAddr := free(), free()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out syncBuf
	go func() {
		done <- runCtx(ctx, []string{"dev", "-c", cfg, "--kafka-port", "0", "--http", addr, "--analyzer", anAddr, "--rate", "50", "--duration", "120s"}, &out, &out)
	}()
	defer func() { cancel(); <-done }()
	var ps processor.Status
	var flow analyzer.FlowResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		ps, flow = processor.Status{}, analyzer.FlowResponse{}
		if getJSON("http://"+addr+"/api/pipelines", &ps) && getJSON("http://"+anAddr+"/api/pipelines", &flow) {
			p, f := statusOf(ps, "sharedev"), flowOf(flow, "sharedev")
			if p != nil && p.HandlerCalls > 0 && f != nil && f.Results != nil && f.Results.End > 0 && len(f.Tiers) > 0 && f.Tiers[0].End > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 60s no result and no retry of the share pipeline: %+v %+v\n%s", ps, flow, out.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if p := statusOf(ps, "sharedev"); p.Consume != "share" || p.ShareGroup != "redrive.sharedev.share" {
		t.Errorf("the processor's status: consume %q, share group %q; want share, redrive.sharedev.share", p.Consume, p.ShareGroup)
	}
	if f := flowOf(flow, "sharedev"); !f.Main.Share || f.Main.Group != "redrive.sharedev.share" {
		t.Errorf("the dashboard's flow of the main topic: %+v, want the share group", f.Main)
	}
}
