package bench

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// builtinTokenizer is the stories260K tokenizer, loaded once.
var builtinTokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	tj, err := fs.ReadFile(builtin.FS(), "tokenizer.json")
	if err != nil {
		return nil, err
	}
	tc, err := fs.ReadFile(builtin.FS(), "tokenizer_config.json")
	if err != nil {
		return nil, err
	}
	return tokenizer.New(tj, tc)
})

func storiesTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := builtinTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Behaviours of the fake server, chosen per request by its max tokens.
const (
	behaveStream   = ""
	behave503      = "503"
	behaveTruncate = "truncate"
	behaveErrEvent = "error-event"
	behaveHang     = "hang"
)

// fakeServer is an OpenAI-compatible server that streams max_tokens chunks
// of one token each, delay apart, reports usage (prompt tokens counted with
// the stories260K tokenizer plus BOS, as a real server counts them), and
// misbehaves as behave says.
type fakeServer struct {
	*httptest.Server
	tok    *tokenizer.Tokenizer
	delay  time.Duration
	behave func(maxTokens int) string
	root   string // the model directory /v1/models reports

	inflight, maxInflight, received atomic.Int64
	mu                              sync.Mutex
	bodies                          []map[string]any
	auth                            []string
}

func newFakeServer(t *testing.T, delay time.Duration, behave func(int) string) *fakeServer {
	t.Helper()
	f := &fakeServer{tok: storiesTokenizer(t), delay: delay, behave: behave}
	if f.behave == nil {
		f.behave = func(int) string { return behaveStream }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{{"id": "stories260K", "object": "model", "root": f.root}}})
	})
	mux.HandleFunc("POST /v1/completions", f.complete)
	mux.HandleFunc("POST /v1/chat/completions", f.complete)
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// requests returns the bodies and Authorization headers received so far.
func (f *fakeServer) requests() (bodies []map[string]any, auth []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...), append([]string(nil), f.auth...)
}

func (f *fakeServer) complete(w http.ResponseWriter, r *http.Request) {
	f.received.Add(1)
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxInflight.Load()
		if n <= m || f.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	var prompt string
	var maxTokens int
	if chat {
		prompt = body["messages"].([]any)[0].(map[string]any)["content"].(string)
		maxTokens = int(body["max_completion_tokens"].(float64))
	} else {
		prompt = body["prompt"].(string)
		maxTokens = int(body["max_tokens"].(float64))
	}
	promptTokens := len(f.tok.Encode(prompt, false))
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()

	behave := f.behave(maxTokens)
	if behave == behave503 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":{"message":"server overloaded","type":"ServiceUnavailableError","code":503}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	choice := func(text string) map[string]any {
		if chat {
			return map[string]any{"index": 0, "delta": map[string]any{"content": text}}
		}
		return map[string]any{"index": 0, "text": text}
	}
	if chat {
		// A role-only first delta, as vLLM sends: no text, so no TTFT.
		send(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}}}})
	}
	if behave == behaveHang {
		<-r.Context().Done()
		return
	}
	for i := range maxTokens {
		if f.delay > 0 {
			time.Sleep(f.delay)
		}
		send(map[string]any{"choices": []any{choice(fmt.Sprintf(" w%d", i))}})
		if behave == behaveTruncate && i == 1 {
			return
		}
		if behave == behaveErrEvent && i == 0 {
			send(map[string]any{"error": map[string]any{"message": "engine died", "type": "InternalServerError"}})
			return
		}
	}
	send(map[string]any{"choices": []any{map[string]any{"index": 0, "text": "", "finish_reason": "length"}}})
	send(map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": promptTokens + 1, "completion_tokens": maxTokens, "total_tokens": promptTokens + 1 + maxTokens}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}
