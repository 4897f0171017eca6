package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// TestClientStreams feeds the client raw responses as servers write them.
func TestClientStreams(t *testing.T) {
	const usage = `data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}` + "\n\n"
	for _, tc := range []struct {
		name     string
		status   int
		ctype    string
		body     string
		failure  string // "" for success
		errPart  string
		out, in  int
		itlCount int
	}{
		{
			name: "usage, comments, CRLF, empty chunks",
			body: ": ping\r\n\r\nevent: message\r\ndata: {\"choices\":[{\"text\":\"\"}]}\r\n\r\n" +
				"data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata:{\"choices\":[{\"text\":\" b\"}]}\n\n" +
				"data: {\"choices\":[{\"text\":\" c\",\"finish_reason\":\"length\"}],\"usage\":null}\n\n" + usage + "data: [DONE]\n\n",
			out: 7, in: 12, itlCount: 2,
		},
		{
			name: "no usage: chunks counted",
			body: "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning_content\":\"y\"}}]}\n\ndata: [DONE]\n\n",
			out:  2, in: 10, itlCount: 1,
		},
		{name: "no DONE", body: "data: {\"choices\":[{\"text\":\"a\"}]}\n\n", failure: "truncated stream", errPart: "before [DONE] after 1 chunks"},
		{name: "error event", body: "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"out of memory\"}}\n\n", failure: "stream error", errPart: "out of memory"},
		{name: "bad chunk", body: "data: {\"choices\":\n\n", failure: "stream error", errPart: "bad chunk"},
		{name: "no text", body: "data: {\"choices\":[{\"text\":\"\"}]}\n\n" + usage + "data: [DONE]\n\n", failure: "empty response"},
		{
			name: "OpenAI error object", status: 400, body: `{"error":{"message":"max_tokens is too large","type":"BadRequestError","code":400}}`,
			failure: "HTTP 400 BadRequestError", errPart: "HTTP 400 Bad Request: max_tokens is too large",
		},
		{
			name: "flat vLLM error", status: 404, body: `{"object":"error","message":"The model m does not exist.","type":"NotFoundError","code":404}`,
			failure: "HTTP 404 NotFoundError", errPart: "does not exist",
		},
		{name: "not streamed", body: `{"choices":[{"text":"hello"}]}`, ctype: "application/json", failure: "not streamed", errPart: "not an event stream"},
		{name: "plain text error", status: 502, body: "bad gateway\n", failure: "HTTP 502", errPart: "HTTP 502 Bad Gateway: bad gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c := &client{http: srv.Client(), url: srv.URL + "/v1/completions", model: "m", clock: clock.Real{}}
			now := time.Now()
			res, cancelled := c.send(context.Background(), []byte("{}"), Request{Index: 3, InputTokens: 10, OutputTokens: 7}, now, now)
			if cancelled {
				t.Fatal("cancelled")
			}
			if res.Failure != tc.failure || !strings.Contains(res.Error, tc.errPart) {
				t.Fatalf("failure %q error %q, want %q containing %q", res.Failure, res.Error, tc.failure, tc.errPart)
			}
			if tc.failure != "" {
				if res.OutputTokens != 0 || res.TTFT != 0 || res.ITL != nil {
					t.Fatalf("a failure kept measurements: %+v", res)
				}
				return
			}
			if res.OutputTokens != tc.out || res.InputTokens != tc.in || len(res.ITL) != tc.itlCount || res.TTFT <= 0 || res.Latency < res.TTFT || res.Index != 3 {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestClientBodies(t *testing.T) {
	c := &client{model: "m", temperature: 0}
	b, _ := c.body("hi there", 9, 0)
	if string(b) != `{"model":"m","prompt":"hi there","max_tokens":9,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}` {
		t.Fatalf("completions body %s", b)
	}
	c.chat, c.ignoreEOS = true, true
	b, _ = c.body("hi", 3, 1)
	if string(b) != `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}` {
		t.Fatalf("chat body %s", b)
	}
	// With LoRA modules, each request names one of them, by the seed and
	// its index, and every one is used.
	c.loras, c.seed = []string{"a", "b", "c"}, 7
	seen := map[string]int{}
	for i := range 300 {
		var body struct{ Model string }
		raw, _ := c.body("hi", 3, i)
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		if again := c.modelFor(i); again != body.Model {
			t.Fatalf("request %d named %s, then %s", i, body.Model, again)
		}
		seen[body.Model]++
	}
	if len(seen) != 3 || seen["a"] < 70 || seen["b"] < 70 || seen["c"] < 70 {
		t.Fatalf("models chosen %v", seen)
	}
}
