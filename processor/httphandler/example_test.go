package httphandler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrive/redrive/processor"
	"github.com/redrive/redrive/processor/httphandler"
)

func ExampleNew() {
	// A 2captcha-style service: always 200, the verdict in the JSON body.
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Redrive-Attempt") == "1" {
			fmt.Fprint(w, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`)
			return
		}
		fmt.Fprint(w, `{"status":1,"request":"x7k2p9"}`)
	}))
	defer svc.Close()

	h, err := httphandler.New(httphandler.Options{
		URL:     svc.URL + "/solve",
		Timeout: 10 * time.Second,
		Headers: map[string]string{"Authorization": "Bearer token"},
		JSON:    &httphandler.JSONRule{OKField: "status", OKValue: 1, CodeField: "request"},
		Codes: httphandler.Codes{
			Transient: []string{"ERROR_NO_SLOT_AVAILABLE"},
			NotReady:  []string{"CAPCHA_NOT_READY"},
			Permanent: []string{"ERROR_WRONG_USER_KEY"},
			MinDelay:  map[string]time.Duration{"ERROR_NO_SLOT_AVAILABLE": 5 * time.Second},
		},
	})
	if err != nil {
		panic(err)
	}
	req := &processor.Request{Record: &kgo.Record{Value: []byte("image bytes")}, ID: "solve.requests/0/42", Attempt: 1}
	out := h.Handle(context.Background(), req)
	fmt.Println(out.Kind, out.Code, out.MinDelay)

	req.Attempt = 2
	out = h.Handle(context.Background(), req)
	fmt.Println(out.Kind, string(out.Result))
	// Output:
	// transient ERROR_NO_SLOT_AVAILABLE 5s
	// success {"status":1,"request":"x7k2p9"}
}
