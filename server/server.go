package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/gearboxlm/gearbox/chat"
	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/reasoning"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/slo"
	"github.com/gearboxlm/gearbox/structured"
	"github.com/gearboxlm/gearbox/tokenizer"
	"github.com/gearboxlm/gearbox/toolcall"
)

// Version is reported by GET /version.
const Version = "0.1.0"

// Backend is what the server asks of the serving side: *engine.Engine,
// or Nitsum's multi-instance runtime (package nitsum/cluster), which
// dispatches each request to one of its engines. The streams' contract
// is engine.Engine's: every accepted request's stream ends with exactly
// one final event.
type Backend interface {
	Submit(req engine.Request) (*engine.Stream, error)
	Abort(id string) bool
	MaxModelLen() int
}

// Options configure a Server.
type Options struct {
	Engine    Backend
	Tokenizer *tokenizer.Tokenizer
	ModelName string // served name; requests must name it (or an alias)
	// ModelAliases are other names requests may give the model (vLLM's
	// several --served-model-name), listed by /v1/models after it.
	ModelAliases []string
	ModelRoot    string // the model directory, reported by /v1/models as "root" ("" for the built-in model)
	// LoRA holds the LoRA adapters requests may name as their model (nil:
	// none), under the ids engine.Request.Adapter takes. With
	// RuntimeLoRA, POST /v1/load_lora_adapter and /v1/unload_lora_adapter
	// change them (vLLM's, behind its VLLM_ALLOW_RUNTIME_LORA_UPDATING).
	LoRA        *lora.Registry
	RuntimeLoRA bool
	// Defaults are the sampling parameters requests that leave them out
	// get (nil: OpenAI's defaults).
	Defaults     *SamplingDefaults
	ChatTemplate *chat.Template // nil: chat requests get a 400
	// ToolSyntax is how the model marks tool calls in free text, which
	// tool_choice "auto" reads; "": "auto" is refused ("required" and a
	// named function work with any model).
	ToolSyntax toolcall.Syntax
	// FreeToolCalls leaves tool_choice "auto" calls unconstrained. By
	// default, for a syntax that tags its calls (Hermes), each call is
	// held to the offered tools' schemas while the text around it stays
	// free (toolcall.Choice.AutoFormat).
	FreeToolCalls bool
	// ResponsesStore is how many responses of /v1/responses the server
	// keeps in memory, for previous_response_id and GET
	// /v1/responses/{id}, forgetting the oldest first; 0 keeps none.
	ResponsesStore int
	// CompactJSON holds every JSON output format (response_format,
	// guided_json, forced tool calls) to no whitespace between tokens,
	// as a request's structured_outputs.disable_any_whitespace does.
	CompactJSON bool
	// ReasoningParser splits a reasoning model's thinking off into
	// message.reasoning; "": none, the thinking stays in content.
	ReasoningParser reasoning.Parser
	BOS, EOS        string // template variables bos_token and eos_token
	// EOSTokens are the ids that end a generation (the engine's), which
	// structured output allows once its format is complete; nil: the
	// tokenizer's.
	EOSTokens    []int
	APIKey       string   // when set, requests need "Authorization: Bearer KEY"
	MaxBodyBytes int64    // default 8 MiB
	Metrics      *Metrics // nil: /metrics serves an empty registry
	// Tiers are the SLO tiers requests may name (the slo_tier field or the
	// X-SLO-Tier header); nil: requests name none.
	Tiers  *slo.Set
	Clock  clock.Clock
	Logger *slog.Logger
	// Health, when set, is asked by /health, which answers 503 with its
	// error while it returns one (rank processes that failed).
	Health func() error
}

// Server is the OpenAI-compatible HTTP API over an Engine.
type Server struct {
	opts     Options
	authHash [sha256.Size]byte // SHA-256 of "Bearer " + APIKey, when APIKey is set
	mux      *http.ServeMux
	nextID   atomic.Int64
	draining atomic.Bool

	responsesStore *responseStore // nil: none kept

	vocabOnce sync.Once
	vocab     *structured.Vocab // the tokenizer's, for structured output; built on first use
}

// New builds a server.
func New(opts Options) *Server {
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics("", "")
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	if opts.ResponsesStore > 0 {
		s.responsesStore = newResponseStore(opts.ResponsesStore)
	}
	if opts.APIKey != "" {
		s.authHash = sha256.Sum256([]byte("Bearer " + opts.APIKey))
	}
	s.mux.HandleFunc("/v1/completions", s.post(s.completions))
	s.mux.HandleFunc("/v1/chat/completions", s.post(s.chatCompletions))
	s.mux.HandleFunc("/v1/responses", s.post(s.responses))
	s.mux.HandleFunc("/v1/responses/{id}", s.responseByID)
	s.mux.HandleFunc("/v1/embeddings", s.post(s.embeddings))
	for _, p := range []string{"/score", "/v1/score"} {
		s.mux.HandleFunc(p, s.post(s.score))
	}
	for _, p := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		s.mux.HandleFunc(p, s.post(s.rerank))
	}
	s.mux.HandleFunc("/tokenize", s.post(s.tokenize))
	s.mux.HandleFunc("/detokenize", s.post(s.detokenize))
	s.mux.HandleFunc("/v1/models", s.get(s.models))
	if opts.RuntimeLoRA && opts.LoRA != nil {
		s.mux.HandleFunc("/v1/load_lora_adapter", s.post(s.loadLoRA))
		s.mux.HandleFunc("/v1/unload_lora_adapter", s.post(s.unloadLoRA))
	}
	s.mux.HandleFunc("/health", s.get(s.health))
	s.mux.HandleFunc("/version", s.get(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": Version})
	}))
	s.mux.Handle("/metrics", opts.Metrics.Handler())
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeError(w, notFound(r.URL.Path)) })
	return s
}

// statusWriter records the status a handler wrote, for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer (to flush).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Handler returns the server's HTTP handler: API-key check, panic
// recovery and one structured log line per request.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := s.opts.Clock.Now()
		w := &statusWriter{ResponseWriter: rw}
		defer func() {
			if v := recover(); v != nil {
				s.opts.Logger.Error("panic serving request", "path", r.URL.Path, "panic", v)
				writeError(w, internal(fmt.Errorf("internal error")))
			}
			if r.URL.Path != "/metrics" && r.URL.Path != "/health" {
				s.opts.Logger.Info("request", "method", r.Method, "path", r.URL.Path, "status", w.status,
					"duration_ms", s.opts.Clock.Now().Sub(start).Milliseconds(), "remote", r.RemoteAddr)
			}
		}()
		if s.opts.APIKey != "" && r.URL.Path != "/health" && r.URL.Path != "/metrics" && r.URL.Path != "/version" {
			if !s.authorized(r) {
				writeError(w, unauthorized())
				return
			}
		}
		s.mux.ServeHTTP(w, r)
	})
}

// authorized reports whether r's Authorization header is "Bearer KEY" for
// the configured API key. It compares SHA-256 digests of the two in
// constant time, so the response time gives away neither how much of the
// key matched nor its length.
func (s *Server) authorized(r *http.Request) bool {
	got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	return subtle.ConstantTimeCompare(got[:], s.authHash[:]) == 1
}

// Drain makes new generation requests fail with 503; in-flight ones finish.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) post(h func(http.ResponseWriter, *http.Request, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, methodNotAllowed(r.Method, r.URL.Path))
			return
		}
		if s.draining.Load() {
			writeError(w, draining())
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, tooLarge(s.opts.MaxBodyBytes))
			return
		case err != nil:
			writeError(w, invalid("", "reading the request body: %v", err))
			return
		case !utf8.Valid(body):
			writeError(w, invalid("", "the request body is not valid UTF-8"))
			return
		}
		h(w, r, body)
	}
}

func (s *Server) get(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, methodNotAllowed(r.Method, r.URL.Path))
			return
		}
		h(w, r)
	}
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Health != nil {
		if err := s.opts.Health(); err != nil {
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Code: str("unhealthy"), Message: err.Error()})
			return
		}
	}
	if s.draining.Load() {
		writeError(w, draining())
		return
	}
	w.WriteHeader(http.StatusOK)
}

type modelObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root,omitempty"`
	Parent      string `json:"parent,omitempty"` // an adapter's base model, as vLLM reports it
	MaxModelLen int    `json:"max_model_len"`
}

// models lists the served model, then its LoRA adapters.
func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	now, maxLen := s.opts.Clock.Now().Unix(), s.opts.Engine.MaxModelLen()
	var data []modelObject
	for _, name := range append([]string{s.opts.ModelName}, s.opts.ModelAliases...) {
		data = append(data, modelObject{ID: name, Object: "model", Created: now, OwnedBy: "gearbox", Root: s.opts.ModelRoot, MaxModelLen: maxLen})
	}
	if s.opts.LoRA != nil {
		for _, a := range s.opts.LoRA.List() {
			data = append(data, modelObject{ID: a.Name, Object: "model", Created: now, OwnedBy: "gearbox", Root: a.Path, Parent: s.opts.ModelName, MaxModelLen: maxLen})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// decode parses body into v, reporting type errors by field. Unknown
// fields are ignored (as vLLM does) and logged.
func (s *Server) decode(body []byte, v any, known func(string) bool) *apiError {
	if err := json.Unmarshal(body, v); err != nil {
		return decodeError(err)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) == nil {
		var unknown []string
		for k := range fields {
			if !known(k) {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			s.opts.Logger.Warn("ignoring unknown request fields", "fields", strings.Join(unknown, ","))
		}
	}
	return nil
}

// knownFields returns a membership test for the request field names an
// endpoint understands.
func knownFields(names ...string) func(string) bool {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return func(k string) bool { return set[k] }
}

var commonFieldNames = []string{"model", "response_format", "guided_json", "guided_choice", "guided_regex", "guided_grammar", "structured_outputs", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
	"stop_token_ids", "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "stream", "stream_options",
	"ignore_eos", "min_tokens", "include_stop_str_in_output", "skip_special_tokens", "prompt_logprobs", "allowed_token_ids", "bad_words",
	"truncate_prompt_tokens", "return_tokens_as_token_ids", "priority", "user", "logit_bias", "best_of", "slo_tier", "use_beam_search", "length_penalty"}

func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, s.opts.Clock.Now().UnixNano(), s.nextID.Add(1))
}

// structuredVocab returns the tokenizer's vocabulary arranged for
// structured output, building it on first use (a pass over every token).
func (s *Server) structuredVocab() *structured.Vocab {
	s.vocabOnce.Do(func() {
		s.vocab = structured.TokenizerVocab(s.opts.Tokenizer, s.endTokens())
	})
	return s.vocab
}

// endTokens are the ids that end a generation: Options.EOSTokens, else
// the tokenizer's.
func (s *Server) endTokens() []int {
	if s.opts.EOSTokens != nil || s.opts.Tokenizer == nil {
		return s.opts.EOSTokens
	}
	return s.opts.Tokenizer.EOS()
}

// submitError maps an engine admission error to its HTTP error.
func submitError(err error, param string) *apiError {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return queueFull()
	case errors.Is(err, engine.ErrDraining):
		return draining()
	case errors.Is(err, engine.ErrPromptTooLong):
		return invalid(param, "%v", err)
	case errors.Is(err, engine.ErrUnknownAdapter): // unloaded since the request named it
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: str("model"), Code: str("model_not_found"), Message: err.Error()}
	case errors.Is(err, engine.ErrNoEmbeddings):
		return invalid("model", "this deployment serves no embeddings (%v)", err)
	case errors.Is(err, sample.ErrLogitBias):
		return invalid("logit_bias", "%v", err)
	case errors.Is(err, sample.ErrAllowedTokenIDs):
		return invalid("allowed_token_ids", "%v", err)
	case errors.Is(err, sample.ErrBadWords):
		return invalid("bad_words", "%v", err)
	}
	return invalid("", "%v", err)
}
