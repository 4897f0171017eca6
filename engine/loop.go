package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// Request is one generation request.
type Request struct {
	ID           string // unique among live requests; generated when empty
	Prompt       []int
	MaxTokens    int // completion tokens at most; the context length also bounds it
	Sampling     sample.Params
	Stop         []string // stop strings; the text ends before the first one found
	StopTokenIDs []int    // extra token ids that end generation
	IgnoreEOS    bool     // keep generating past end-of-sequence tokens
	// MinTokens is the fewest tokens to generate before an end token or a
	// stop string may end the generation (vLLM's min_tokens): the sampler
	// masks the end tokens until then, and stop strings are not looked
	// for. At most MaxTokens.
	MinTokens int
	// IncludeStop keeps the stop string that ended the generation at the
	// end of its text (vLLM's include_stop_str_in_output).
	IncludeStop bool
	// KeepSpecial keeps special tokens in the text (vLLM's
	// skip_special_tokens false); the token that ends the generation is
	// never text.
	KeepSpecial bool
	Priority    int    // smaller runs first; FCFS within a priority
	Tier        string // the request's SLO tier (package slo), reported back in FinishStats; "" for none
	// PromptLogprobs asks for the log-probabilities of the prompt's
	// tokens after the first (vLLM's prompt_logprobs; OpenAI's echo with
	// logprobs), each with its position's PromptTopLogprobs most likely
	// tokens; they come with the first token's event. Such a request
	// computes its whole prompt (no prefix-cache hits) in chunks whose
	// logits stay under promptLogitsBytes.
	PromptLogprobs    bool
	PromptTopLogprobs int
	// Constraint, when set, holds the generation to a format (structured
	// output): the sampler masks with it and it follows every token. One
	// per request; the engine keeps it through preemptions.
	Constraint sample.Constraint
	// Adapter is the LoRA adapter the request runs with: 0 for the base
	// model, else the id the runner holds it as (AdapterRunner).
	Adapter int
	// Embed makes the request an embedding: its prompt is computed, and
	// its one event carries the final-norm hidden state of the prompt's
	// last token (Event.Embedding; last-token pooling, not normalized)
	// and no tokens. MaxTokens, sampling and stops are ignored. The
	// runner must be a HiddenRunner (ErrNoEmbeddings otherwise).
	Embed bool
}

// AdapterRunner is a Runner that applies LoRA adapters: a batch's
// sequence with forward.SeqBatch.Adapter i runs with the adapter
// installed as id i (HasAdapter).
type AdapterRunner interface {
	Runner
	HasAdapter(id int) bool
}

// HiddenRunner is a Runner that also gives the final-norm hidden state
// of each logits row of its last step when the batch asks
// (forward.Batch.Hidden): the embeddings of Request.Embed.
type HiddenRunner interface {
	Runner
	// GivesHidden reports whether steps can return hidden states (a
	// runner whose ranks live in other processes may not).
	GivesHidden() bool
	// Hidden is [NumLogits, hidden] of the last Step, valid until the
	// next one.
	Hidden() []float32
}

// Finish reasons, as OpenAI names them, plus the two terminal states a
// request can reach without finishing.
const (
	FinishStop      = "stop"      // an EOS or stop token, or a stop string
	FinishLength    = "length"    // max tokens or the context length
	FinishCancelled = "cancelled" // aborted: the client went away or asked
	FinishError     = "error"     // the executor failed on the request's step
)

// Event is one update of a request's stream. The last event has Finish set.
type Event struct {
	Text     string          // newly final completion text
	Tokens   []int           // newly generated token ids (a final stop token included)
	Logprobs []sample.Result // one per token in Tokens when Sampling.Logprobs >= 0
	// PromptLogprobs, on the first token's event of a request with
	// Request.PromptLogprobs, has one entry per prompt token after the
	// first: that token's log-probability at its position.
	PromptLogprobs []sample.Result
	// Embedding is an Embed request's result: the final-norm hidden
	// state of its prompt's last token.
	Embedding []float32
	Finish    string // "" until the last event
	Err       error  // with FinishError
	Usage     Usage  // counts so far
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int // prompt tokens served from the prefix cache
}

// Errors Submit returns.
var (
	ErrPromptTooLong = errors.New("prompt too long")
	ErrQueueFull     = errors.New("waiting queue is full")
	ErrDraining      = errors.New("engine is draining")
	// ErrNoEmbeddings: an embedding request, and a runner that does not
	// give hidden states (HiddenRunner).
	ErrNoEmbeddings = errors.New("engine: this runner does not give hidden states, so it serves no embeddings")
	// ErrUnknownAdapter: a request names a LoRA adapter the runner does
	// not hold.
	ErrUnknownAdapter = errors.New("engine: unknown LoRA adapter")
	// ErrNoTokenizer: a request has stop strings, and the engine has no
	// tokenizer to find them in the text.
	ErrNoTokenizer = errors.New("engine: stop strings need a tokenizer, and this engine has none")
)

// Observer receives the engine's measurements (the server's Prometheus
// metrics implement it). Calls come from the engine loop goroutine.
type Observer interface {
	Step(s StepStats)
	FirstToken(queue, ttft time.Duration)
	Token(itl time.Duration)
	Finish(f FinishStats)
}

// StepStats describes one engine iteration.
type StepStats struct {
	Plan           string
	Tokens         int // batched tokens
	Running        int
	Waiting        int
	KVUsage        float64 // fraction of KV blocks in use
	Preemptions    int     // in this step
	PrefixQueries  int64   // cumulative, in tokens
	PrefixHits     int64   // cumulative, in tokens
	Duration       time.Duration
	PromptTokens   int // prompt tokens of the requests whose first token came in this step
	GeneratedToken int // tokens sampled in this step
	// Speculative decoding: the sequences that carried drafts, their
	// draft tokens, and the drafts the model agreed with.
	Drafts, DraftTokens, AcceptedTokens int
	// AcceptedPerPos[i] counts the sequences whose i-th draft was kept
	// (vLLM's per-position acceptance), valid during the Observer call.
	AcceptedPerPos []int
}

// FinishStats describes one request's end.
type FinishStats struct {
	ID               string // Request.ID
	Reason           string
	Tier             string // Request.Tier
	PromptTokens     int
	CompletionTokens int
	TTFT             time.Duration // arrival to the first token; 0 without one
	E2E              time.Duration
	TPOT             time.Duration // mean time per output token after the first; 0 with fewer than 2
}

// Runner runs model steps for an Engine: the CPU executor (package
// cpuexec), the CUDA executor (gpu/cudaexec) and the simulator's cost-model
// runner implement it. An Engine calls it from one goroutine.
type Runner interface {
	// Config is the model's configuration.
	Config() *model.Config
	// Placements lists the placements Step accepts, the one the KV cache
	// is under first.
	Placements() []parallel.Placement
	// KVLayout is the KV cache geometry the scheduler allocates blocks in.
	KVLayout() kvcache.Layout
	// PlanSteps counts the steps run under each placement, by name.
	PlanSteps() map[string]int
	// Step runs one batch under placement p and returns [NumLogits, vocab]
	// logits in batch order, valid until the next call. b is the engine's
	// and valid only during the call.
	Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error)
}

// GreedyRunner is a Runner that can also take the argmax of each logits
// row itself (on a GPU, without copying the logits to the host). The
// engine uses it for steps in which every sampled sequence is plain
// greedy (sample.Sampler.PlainGreedy).
type GreedyRunner interface {
	Runner
	// StepGreedy runs b like Step and returns, for each logits row, the
	// lowest id among the largest logits, each in [0, vocab).
	StepGreedy(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]int, error)
}

// Transitioner is a Runner that can move its KV cache (and weights it
// does not hold) to another placement between steps. The engine calls it
// when the policy decides on a placement that does not share the KV
// cache's current one; no step runs during a transition.
type Transitioner interface {
	Runner
	Transition(ctx context.Context, to parallel.Placement) (parallel.TransitionStats, error)
}

// SequenceSharded is a Runner whose KV pool is split along the sequence
// over ranks (CSPS): block b lives on rank b / (NumBlocks/shards), and the
// scheduler gives a sequence's consecutive blocks to consecutive ranks,
// sptBlocks per rank.
type SequenceSharded interface {
	Runner
	KVShards() (shards, sptBlocks int)
}

// Swapper is a Runner with a host KV tier (Seesaw's CPU KV store): it
// copies KV blocks between its device cache and the host store, each rank
// its KV slice under the placement the cache is under, so a request
// parked under one placement comes back under another. The engine calls
// it between steps when the policy's decision offloads prefilled
// requests or onboards parked ones.
type Swapper interface {
	Runner
	// HostBlocks is the host store's size in KV blocks per replica; 0
	// means the runner has none.
	HostBlocks() int
	SwapOut(ctx context.Context, swaps []forward.Swap) (bytes int64, err error)
	SwapIn(ctx context.Context, swaps []forward.Swap) (bytes int64, err error)
}

// Options configure an Engine.
type Options struct {
	Exec      Runner
	Policy    policy.Policy        // nil runs every step under the runner's first placement
	Tokenizer *tokenizer.Tokenizer // nil: no Event.Text, and Submit rejects stop strings (the simulator has none)
	EOS       []int
	Clock     clock.Clock // default the wall clock
	Sched     sched.Config
	Observer  Observer     // may be nil
	Logger    *slog.Logger // default slog.Default()
	// Speculative configures speculative decoding; the zero Config (no
	// Method) turns it off. A decode step then carries each sequence's
	// drafts after its last token and keeps those the sampler would have
	// chosen itself: the tokens and their distribution are those of
	// plain decoding.
	Speculative specdecode.Config
	// DraftRunner runs the draft model of Speculative's "draft_model"
	// method (and must be set with it, and only with it): a runner of a
	// model with the target's vocabulary on one data-parallel replica,
	// whose first placement drafts run under, with a KV cache of its own
	// that the engine manages. Its Config's context, less what its KV
	// pool holds, bounds how far into a sequence drafts reach.
	DraftRunner Runner
	// Drafter, when set with Speculative, proposes the drafts instead of
	// Speculative's method (the simulator's, whose runner decides which
	// are kept); Speculative.NumTokens still bounds them. It must be safe
	// for concurrent use.
	Drafter specdecode.Proposer
	// OnEvent, if set, is called each time an event is queued on a
	// request's stream, from the goroutine running the loop and with the
	// engine's lock held: it must neither block nor call the engine. A
	// caller that drives the engine itself (the simulator, through
	// Iterate) uses it to read, with Stream.TryRecv, only the streams
	// that have events.
	OnEvent func(*Stream)
}

// Engine is the serving loop: it admits requests into the scheduler, runs
// each scheduled step on the executor under the policy's plan, samples,
// detokenizes, applies stop conditions and streams events. Submit and
// Abort are safe for concurrent use; Run is called once.
type Engine struct {
	exec   Runner
	policy policy.Policy
	tok    *tokenizer.Tokenizer
	eos    []int
	clk    clock.Clock
	obs    Observer
	log    *slog.Logger
	event  func(*Stream) // Options.OnEvent
	maxLen int
	kvAt   parallel.Placement // the placement the runner's KV cache is under
	inKV   int                // steps since the last transition
	stuck  bool               // the last iteration scheduled nothing while requests were live

	// Swaps running in the background: Seesaw's prefetcher (swap-in,
	// spec P3) and the offload of prefilled requests (swap-out, P2).
	prefetch, offload bgSwap

	// Speculative decoding: the proposer (nil when off) and the most
	// drafts a step carries per sequence.
	drafter   specdecode.Proposer
	draft     *draftModel // the draft_model method's, instead of drafter
	maxDrafts int

	// Counters for Stats, written under mu.
	phase                        sched.Phase
	transitions, swapOut, swapIn int64
	draftTokens, acceptedTokens  int64

	// runStep's buffers, reused from step to step (Iterate runs on one
	// goroutine at a time).
	batch       forward.Batch
	taken       [][]int         // per sequence: accepted drafts, then the sampled token
	promptRows  []int           // per sequence: logits rows for prompt log-probabilities
	lives       []*live         // per sequence: its request, nil if it has ended
	forgotten   int             // requests forgotten so far: lives holds when it has not moved
	tokBuf      []int           // backs taken
	results     []sample.Result // per logits row
	jobs        []sampleJob
	acceptedPos []int // StepStats.AcceptedPerPos

	mu       sync.Mutex
	sched    *sched.Scheduler
	reqs     map[string]*live
	draining bool
	nextID   atomic.Int64
	wake     chan struct{}
	idle     chan struct{} // closed and replaced whenever no request is live
}

// live is the engine's state of one request.
type live struct {
	req       Request
	sampler   *sample.Sampler
	dec       *tokenizer.Decoder // nil without a tokenizer: no text
	match     *stopMatcher       // nil without a tokenizer
	stops     []int
	out       *Stream
	arrival   time.Time
	scheduled time.Time // first scheduled (queue time ends)
	first     time.Time
	last      time.Time
	tokens    int // completion tokens so far
	cached    int // prompt tokens served from the prefix cache
	// Prompt log-probabilities (Request.PromptLogprobs): those of prompt
	// tokens [1, len(promptLP]+1) are known.
	promptLP []sample.Result
}

// promptLogitsBytes bounds the logits one step returns for a request's
// prompt log-probabilities (its chunks are cut to fit): 64 MiB is 128
// positions of Llama 3's 128,256-token vocabulary.
const promptLogitsBytes = 64 << 20

// promptRows is the number of logits rows of prompt positions that chunk
// s of l must return for its prompt log-probabilities: those of the
// positions in the chunk whose next prompt token has none yet. They end
// the chunk's prompt positions, so they are trailing rows (before the
// sampled position's row, when the chunk ends the prompt). Called with
// e.mu held.
func (l *live) promptRows(s sched.SeqStep) int {
	if !l.req.PromptLogprobs {
		return 0
	}
	start := max(s.Pos, len(l.promptLP))                 // position p gives token p+1's
	end := min(s.Pos+len(s.Tokens), len(l.req.Prompt)-1) // the last prompt position gives the first output
	return max(0, end-start)
}

// NewEngine builds an engine; the scheduler's block geometry comes from
// the executor.
func NewEngine(opts Options) (*Engine, error) {
	if opts.Exec == nil {
		return nil, fmt.Errorf("engine: an executor is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	placements := opts.Exec.Placements()
	if len(placements) == 0 {
		return nil, fmt.Errorf("engine: the runner holds no placement")
	}
	kv := opts.Exec.KVLayout()
	cfg := opts.Sched
	cfg.BlockSize, cfg.NumBlocks, cfg.Replicas = kv.BlockSize, kv.NumBlocks, placements[0].Plan.DP
	if sw, ok := opts.Exec.(Swapper); ok {
		cfg.HostBlocks = sw.HostBlocks()
	}
	if sh, ok := opts.Exec.(SequenceSharded); ok {
		cfg.KVShards, cfg.SPTBlocks = sh.KVShards()
	}
	if cfg.MaxModelLen == 0 || cfg.MaxModelLen > opts.Exec.Config().MaxPositions {
		cfg.MaxModelLen = opts.Exec.Config().MaxPositions
	}
	s, err := sched.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		exec: opts.Exec, policy: opts.Policy, tok: opts.Tokenizer, eos: opts.EOS, clk: opts.Clock, obs: opts.Observer,
		log: opts.Logger, event: opts.OnEvent, maxLen: cfg.MaxModelLen, kvAt: placements[0], sched: s, reqs: map[string]*live{}, wake: make(chan struct{}, 1),
		idle: make(chan struct{}),
	}
	if (opts.DraftRunner != nil) != (opts.Speculative.Method == specdecode.DraftModel) {
		return nil, fmt.Errorf("engine: a draft model runner goes with speculative method %q, and that method needs one", specdecode.DraftModel)
	}
	switch {
	case opts.Speculative.Method == specdecode.DraftModel:
		budget := cfg.MaxNumBatchedTokens
		if budget == 0 {
			budget = sched.DefaultMaxNumBatchedTokens
		}
		d, err := newDraftModel(opts.DraftRunner, opts.Exec, budget)
		if err != nil {
			return nil, err
		}
		e.draft, e.maxDrafts = d, opts.Speculative.NumTokens
	case opts.Drafter != nil && opts.Speculative.Method != "":
		e.drafter, e.maxDrafts = opts.Drafter, opts.Speculative.NumTokens
	case opts.Speculative.Method != "":
		ngram, err := specdecode.NewNGram(opts.Speculative)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.drafter, e.maxDrafts = ngram, opts.Speculative.NumTokens
	}
	return e, nil
}

// MaxModelLen is the longest prompt plus completion the engine accepts.
func (e *Engine) MaxModelLen() int { return e.maxLen }

// Submit admits a request and returns its stream. It fails at once with
// ErrPromptTooLong, ErrQueueFull or ErrDraining (wrapped), ErrNoTokenizer
// (stop strings without a tokenizer), or a sampling parameter error;
// otherwise the stream ends with exactly one final event.
func (e *Engine) Submit(req Request) (*Stream, error) {
	n := len(req.Prompt)
	if n == 0 {
		return nil, fmt.Errorf("engine: empty prompt")
	}
	if n >= e.maxLen {
		return nil, fmt.Errorf("%w: %d prompt tokens, the context length is %d", ErrPromptTooLong, n, e.maxLen)
	}
	if req.Embed {
		if h, ok := e.exec.(HiddenRunner); !ok || !h.GivesHidden() {
			return nil, ErrNoEmbeddings
		}
		req.MaxTokens, req.MinTokens, req.Stop, req.StopTokenIDs, req.Constraint, req.PromptLogprobs = 1, 0, nil, nil, nil, false
		req.Sampling = sample.Params{Logprobs: -1} // a greedy row the step samples and the engine drops
	}
	if req.MaxTokens <= 0 {
		return nil, fmt.Errorf("engine: max tokens must be positive, got %d", req.MaxTokens)
	}
	if req.PromptLogprobs && (req.PromptTopLogprobs < 0 || req.PromptTopLogprobs > e.exec.Config().Vocab) {
		return nil, fmt.Errorf("engine: prompt top log-probabilities must be in [0, %d], got %d", e.exec.Config().Vocab, req.PromptTopLogprobs)
	}
	if req.MinTokens < 0 || req.MinTokens > req.MaxTokens {
		return nil, fmt.Errorf("engine: min tokens must be in [0, max tokens %d], got %d", req.MaxTokens, req.MinTokens)
	}
	if e.tok == nil && slices.ContainsFunc(req.Stop, func(s string) bool { return s != "" }) {
		return nil, ErrNoTokenizer
	}
	maxTokens := min(req.MaxTokens, e.maxLen-n)
	vocab := e.exec.Config().Vocab
	sampler, err := sample.New(req.Sampling, req.Prompt, vocab)
	if err != nil {
		return nil, err
	}
	if req.Constraint != nil {
		sampler.Constrain(req.Constraint)
	}
	for _, id := range req.Prompt {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("engine: prompt token id %d outside the vocabulary [0, %d)", id, vocab)
		}
	}
	if req.ID == "" {
		req.ID = fmt.Sprintf("req-%d", e.nextID.Add(1))
	}
	l := &live{req: req, sampler: sampler, out: newStream(req.ID), arrival: e.clk.Now()}
	if e.tok != nil {
		l.dec, l.match = e.tok.NewDecoder(req.Prompt, !req.KeepSpecial), newStopMatcher(req.Stop, req.IncludeStop)
	}
	l.req.MaxTokens = maxTokens
	l.stops = slices.Clone(req.StopTokenIDs)
	if !req.IgnoreEOS {
		l.stops = append(l.stops, e.eos...)
	}
	if req.MinTokens > 0 {
		sampler.SuppressUntil(l.stops, req.MinTokens)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return nil, ErrDraining
	}
	if _, dup := e.reqs[req.ID]; dup {
		return nil, fmt.Errorf("engine: request id %q is already live", req.ID)
	}
	if req.Adapter != 0 { // under the lock, against FreeAdapter
		if a, ok := e.exec.(AdapterRunner); !ok || !a.HasAdapter(req.Adapter) {
			return nil, fmt.Errorf("%w: %d", ErrUnknownAdapter, req.Adapter)
		}
	}
	sr := sched.Request{ID: req.ID, Prompt: req.Prompt, MaxTokens: maxTokens, Priority: req.Priority, Arrival: l.arrival, Adapter: req.Adapter}
	if req.PromptLogprobs {
		sr.NoPrefixCache, sr.MaxChunk = true, max(1, promptLogitsBytes/(4*vocab))
	}
	err = e.sched.Add(&sr)
	switch {
	case errors.Is(err, sched.ErrQueueFull):
		return nil, fmt.Errorf("%w: %v", ErrQueueFull, err)
	case errors.Is(err, sched.ErrTooLong):
		return nil, fmt.Errorf("%w: %v", ErrPromptTooLong, err)
	case err != nil:
		return nil, fmt.Errorf("engine: %w", err)
	}
	e.reqs[req.ID] = l
	e.signal()
	return l.out, nil
}

// Abort cancels a live request; its stream ends with FinishCancelled and
// its KV blocks are freed before the next step. It reports whether the
// request was live.
func (e *Engine) Abort(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.reqs[id]; !ok {
		return false
	}
	e.sched.Abort(id)
	e.drainTerminal()
	e.signal()
	return true
}

// Drain stops admitting requests (Submit returns ErrDraining) and returns
// a channel closed once every live request has ended.
func (e *Engine) Drain() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.draining = true
	if len(e.reqs) == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	return e.idle
}

// Stats is a snapshot of the engine's queues and counters.
type Stats struct {
	Running, Waiting int
	Parked           int     // requests whose KV is on the host tier
	KVUsage          float64 // fraction of device KV blocks in use
	HostKVUsage      float64 // fraction of host-tier KV blocks in use; 0 without a tier
	Preemptions      int64
	PrefixQueries    int64
	PrefixHits       int64
	PlanSteps        map[string]int
	Phase            sched.Phase // of the latest decision
	Transitions      int64       // KV placement changes
	SwapOutBytes     int64       // KV bytes parked on the host tier
	SwapInBytes      int64       // KV bytes brought back
	DraftTokens      int64       // speculative tokens verified
	AcceptedTokens   int64       // of those, the ones kept
	// RunningAdapters and WaitingAdapters are the LoRA adapters of the
	// running and of the waiting requests (sched.Scheduler.Adapters).
	RunningAdapters, WaitingAdapters []int
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	hostUsed, hostTotal := e.sched.HostBlocks()
	s := Stats{
		Running: e.sched.NumRunning(), Waiting: e.sched.NumWaiting(), Parked: e.sched.NumParked(), KVUsage: e.sched.KVUsage(),
		HostKVUsage: policy.Tier{Used: hostUsed, Capacity: hostTotal}.Usage(),
		Preemptions: e.sched.Preemptions(), PrefixQueries: e.sched.PrefixQueries(), PrefixHits: e.sched.PrefixHits(),
		PlanSteps: e.exec.PlanSteps(), Phase: e.phase, Transitions: e.transitions, SwapOutBytes: e.swapOut, SwapInBytes: e.swapIn,
		DraftTokens: e.draftTokens, AcceptedTokens: e.acceptedTokens,
	}
	if _, ok := e.exec.(AdapterRunner); ok {
		s.RunningAdapters, s.WaitingAdapters = e.sched.Adapters()
	}
	return s
}

// FreeAdapter calls free, which uninstalls LoRA adapter id from the
// runner, unless a live request runs with it, and reports whether it
// did. Submit checks a request's adapter under the same lock, so no
// request is admitted with an adapter being freed.
func (e *Engine) FreeAdapter(id int, free func() error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.reqs {
		if l.req.Adapter == id {
			return false
		}
	}
	return free() == nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run is the engine loop; it returns when ctx is done, after ending every
// live request with FinishCancelled. A failed step ends its requests with
// FinishError and is logged; the loop goes on.
func (e *Engine) Run(ctx context.Context) error {
	for {
		ran, err := e.Iterate(ctx)
		if ctx.Err() != nil {
			e.abortAll()
			return ctx.Err()
		}
		if err != nil {
			e.log.Error("engine step failed", "err", err)
		}
		if ran {
			continue
		}
		select {
		case <-ctx.Done():
			e.abortAll()
			return ctx.Err()
		case <-e.wake:
		}
	}
}

// Start runs the loop in a goroutine; stop cancels it and waits for it to
// return.
func (e *Engine) Start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Iterate runs one iteration of the loop: the policy's decision (and the
// transition it asks for), the scheduler's step, the runner's step, and
// sampling. It reports whether a step ran; false means nothing was
// runnable. Callers that drive the engine themselves (the simulator, on a
// virtual clock) call it instead of Run, from one goroutine.
func (e *Engine) Iterate(ctx context.Context) (bool, error) {
	moved, err := e.finishSwaps(false) // a transition or a swap: the next decision sees a new state
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	d := e.decide()
	e.phase = d.Phase
	e.mu.Unlock()
	if d.Placement.Name != e.kvAt.Name && !d.Placement.SharesKV(e.exec.Config(), e.kvAt) {
		if _, err := e.finishSwaps(true); err != nil { // a transition replaces the caches the swaps copy
			return false, err
		}
		if err := e.transition(ctx, d.Placement); err != nil {
			return false, err
		}
		moved = true
	}
	if d.Onboard && e.prefetch.plans == nil {
		if e.inlineSwaps() {
			n, err := e.swapNow(ctx, false)
			if err != nil {
				return false, err
			}
			moved = moved || n > 0
		} else {
			e.startSwap(ctx, &e.prefetch, false)
		}
	}
	e.mu.Lock()
	step := e.sched.SchedulePhase(d.Phase)
	e.drainTerminal()
	wasStuck := e.stuck
	e.stuck = len(step.Seqs) == 0 && len(e.reqs) > 0 && e.prefetch.plans == nil && e.offload.plans == nil
	e.mu.Unlock()
	if len(step.Parked) > 0 {
		if err := e.park(ctx, step.Parked); err != nil {
			return true, err
		}
	}
	if len(step.Seqs) == 0 {
		if e.stuck && !wasStuck && !moved && e.policy != nil {
			return e.Iterate(ctx) // once more: the policy sees Idle and may decide otherwise
		}
		return moved, nil // a swap in flight wakes the loop when it lands
	}
	if err := e.runStep(ctx, step, d); err != nil {
		return true, err
	}
	if e.draft != nil {
		e.runDrafts(ctx)
	}
	if d.Offload {
		if e.inlineSwaps() {
			if _, err := e.swapNow(ctx, true); err != nil {
				return true, err
			}
		} else if e.offload.plans == nil {
			e.startSwap(ctx, &e.offload, true)
		}
	}
	return true, nil
}

// inlineSwapper is a Swapper whose swaps the engine runs inline rather
// than in the background: the simulator's, which models their overlap
// with compute in virtual time itself.
type inlineSwapper interface{ InlineSwaps() bool }

// inlineSwaps reports whether the runner wants its swaps inline.
func (e *Engine) inlineSwaps() bool {
	is, ok := e.exec.(inlineSwapper)
	return ok && is.InlineSwaps()
}

// bgSwap is a swap running in the background: its plans (nil when none
// is in flight) and where its result arrives.
type bgSwap struct {
	plans []sched.HostSwap
	done  chan swapResult
}

// swapResult is what a background swap reports.
type swapResult struct {
	bytes int64
	err   error
}

// startSwap starts b in the background. Out, it parks the requests past
// their prompt on the runner's host tier, as far as it has room (Seesaw's
// offload of prefilled KV, which overlaps the next prefill steps, spec
// P2); in, it brings parked requests back as far as device blocks allow
// (Seesaw's prefetcher, P3). Either way the requests are neither
// scheduled nor preempted until finishSwaps sees the copy done (P5),
// while the loop steps the others.
func (e *Engine) startSwap(ctx context.Context, b *bgSwap, out bool) {
	sw, plans := e.swapPlans(out)
	if len(plans) == 0 {
		return
	}
	if b.done == nil {
		b.done = make(chan swapResult, 1)
	}
	b.plans = plans
	go func() {
		var r swapResult
		r.bytes, r.err = copySwaps(ctx, sw, plans, out)
		b.done <- r
		e.signal()
	}()
}

// finishSwaps commits the background swaps that have finished (waiting
// for them with wait) and reports whether there were any. A failed copy
// leaves its requests where they were.
func (e *Engine) finishSwaps(wait bool) (bool, error) {
	in, inErr := e.finishSwap(&e.prefetch, wait)
	out, outErr := e.finishSwap(&e.offload, wait)
	return in || out, errors.Join(inErr, outErr)
}

// finishSwap commits b if it has finished (waiting for it with wait) and
// reports whether it had.
func (e *Engine) finishSwap(b *bgSwap, wait bool) (bool, error) {
	if b.plans == nil {
		return false, nil
	}
	var r swapResult
	if wait {
		r = <-b.done
	} else {
		select {
		case r = <-b.done:
		default:
			return false, nil
		}
	}
	plans := b.plans
	b.plans = nil
	return true, e.endSwaps(plans, r.bytes, r.err)
}

// swapPlans asks the scheduler for the swaps of one direction: out, the
// running requests past their prompt as far as the host tier has room;
// in, the parked requests as far as device blocks allow. It returns the
// runner's Swapper with them, and no plans when the runner has no host
// tier.
func (e *Engine) swapPlans(out bool) (Swapper, []sched.HostSwap) {
	sw, ok := e.exec.(Swapper)
	if !ok || sw.HostBlocks() == 0 {
		return nil, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !out {
		return sw, e.sched.SwapIn(0)
	}
	var plans []sched.HostSwap
	for _, id := range e.sched.Decoding() {
		p, ok := e.sched.SwapOut(id)
		if !ok {
			break // the host tier is full
		}
		plans = append(plans, p)
	}
	return sw, plans
}

// copySwaps has sw copy plans, out to the host tier or in from it, and
// returns the bytes copied.
func copySwaps(ctx context.Context, sw Swapper, plans []sched.HostSwap, out bool) (int64, error) {
	if out {
		return sw.SwapOut(ctx, hostSwaps(plans))
	}
	return sw.SwapIn(ctx, hostSwaps(plans))
}

// swapNow parks the requests past their prompt on the runner's host
// tier, as far as it has room (out), or brings parked requests back as
// far as device blocks allow (in), and returns how many it moved. A
// failed copy undoes the swaps; the requests stay where they were.
func (e *Engine) swapNow(ctx context.Context, out bool) (int, error) {
	sw, plans := e.swapPlans(out)
	if len(plans) == 0 {
		return 0, nil
	}
	n, err := copySwaps(ctx, sw, plans, out)
	if err := e.endSwaps(plans, n, err); err != nil {
		return 0, err
	}
	return len(plans), nil
}

// park copies to the host tier the KV of the requests the scheduler
// parked in place of preempting them, before the step that may reuse
// their device blocks runs. If the copy fails their KV is lost: they end
// with the error.
func (e *Engine) park(ctx context.Context, plans []sched.HostSwap) error {
	sw, ok := e.exec.(Swapper)
	var n int64
	err := errors.New("the runner has no host tier")
	if ok {
		n, err = sw.SwapOut(ctx, hostSwaps(plans))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		e.swapOut += n
		return nil
	}
	err = fmt.Errorf("engine: parking preempted requests: %w", err)
	for _, p := range plans {
		e.fail(p.ID, err)
	}
	e.drainTerminal()
	return err
}

// fail ends live request id with err. Called with e.mu held.
func (e *Engine) fail(id string, err error) {
	if l, ok := e.reqs[id]; ok {
		e.sched.Finish(id, sched.Error)
		e.finish(l, Event{Finish: FinishError, Err: err, Usage: l.usage()}) // counted by the Observer as every finish is
	}
}

// endSwaps tells the scheduler that the copies of plans (all one
// direction) are done — or undone, after the runner's err — and counts
// their bytes.
func (e *Engine) endSwaps(plans []sched.HostSwap, bytes int64, err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	copied := err == nil
	for _, p := range plans {
		if derr := e.sched.SwapDone(p, copied); derr != nil && err == nil {
			err = derr
		}
	}
	e.drainTerminal()
	if err != nil {
		return fmt.Errorf("engine: swap: %w", err)
	}
	if plans[0].Out() {
		e.swapOut += bytes
	} else {
		e.swapIn += bytes
	}
	return nil
}

// hostSwaps are the runner's form of the scheduler's swap plans.
func hostSwaps(plans []sched.HostSwap) []forward.Swap {
	swaps := make([]forward.Swap, len(plans))
	for i, p := range plans {
		swaps[i] = forward.Swap{Replica: p.Replica, Device: p.Device, Host: p.Host}
	}
	return swaps
}

// decide asks the policy where the next step runs; without a policy every
// step runs under the runner's first placement. Called with e.mu held.
func (e *Engine) decide() policy.Decision {
	if e.policy == nil {
		return policy.Decision{Placement: e.kvAt}
	}
	used, total := e.sched.KVBlocks()
	hostUsed, hostTotal := e.sched.HostBlocks()
	return e.policy.Decide(policy.State{
		Waiting: e.sched.NumWaiting(), Running: e.sched.NumRunning(), Prefilling: e.sched.NumPrefilling(),
		Parked:   e.sched.NumParked(),
		DeviceKV: policy.Tier{Used: used, Capacity: total}, HostKV: policy.Tier{Used: hostUsed, Capacity: hostTotal},
		HostFits: e.sched.HostFits(), DeviceFits: e.sched.DeviceFits(), Idle: e.stuck,
		Current: e.kvAt.Name, StepsInCurrent: e.inKV,
	})
}

// transition moves the runner's KV cache to placement to. A runner that
// cannot move its KV refuses, and the engine stays where it is.
func (e *Engine) transition(ctx context.Context, to parallel.Placement) error {
	t, ok := e.exec.(Transitioner)
	if !ok {
		return fmt.Errorf("engine: the policy chose placement %s, which does not share the KV cache of %s, and the runner cannot move its KV", to, e.kvAt)
	}
	start := e.clk.Now()
	st, err := t.Transition(ctx, to)
	if err != nil {
		return fmt.Errorf("engine: transition %s → %s: %w", e.kvAt, to, err)
	}
	e.log.Debug("transition", "from", e.kvAt.Name, "to", to.Name, "kv_bytes", st.KVBytes, "weight_bytes", st.WeightBytes,
		"duration", e.clk.Now().Sub(start))
	e.mu.Lock()
	e.kvAt, e.inKV = to, 0
	e.transitions++
	e.mu.Unlock()
	return nil
}

func (e *Engine) abortAll() {
	_, _ = e.finishSwaps(true) // the copies end with the context; their requests end below
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.reqs {
		e.sched.Abort(id)
	}
	e.drainTerminal()
}

// runStep executes one scheduled step and hands its tokens to requests.
func (e *Engine) runStep(ctx context.Context, step *sched.Step, d policy.Decision) error {
	start := e.clk.Now()
	greedy, onDevice := e.exec.(GreedyRunner)
	promptRows := slices.Grow(e.promptRows[:0], len(step.Seqs))[:len(step.Seqs)]
	lives := slices.Grow(e.lives[:0], len(step.Seqs))[:len(step.Seqs)]
	e.promptRows, e.lives = promptRows, lives
	defer clear(lives)
	e.mu.Lock()
	for i, s := range step.Seqs {
		l, ok := e.reqs[s.ID]
		lives[i] = l
		if ok && l.scheduled.IsZero() {
			l.scheduled, l.cached = start, s.Pos // a first chunk starts after its prefix-cache hits
		}
		if s.Sample && ok && !l.sampler.PlainGreedy() {
			onDevice = false
		}
		promptRows[i] = 0
		if ok {
			promptRows[i] = l.promptRows(s)
		}
		if promptRows[i] > 0 {
			onDevice = false
		}
		if s.Sample && ok && l.req.Embed {
			e.batch.Hidden, onDevice = true, false
		}
	}
	forgotten := e.forgotten
	e.mu.Unlock()
	batch := &e.batch
	defer func() { batch.Hidden = false }()
	batch.Seqs = slices.Grow(batch.Seqs[:0], len(step.Seqs))[:len(step.Seqs)]
	for i, s := range step.Seqs {
		batch.Seqs[i] = forward.SeqBatch{Tokens: s.Tokens, Pos: s.Pos, Blocks: s.Blocks, Replica: s.Replica, NumLogits: promptRows[i], Adapter: s.Adapter}
		if s.Sample {
			batch.Seqs[i].NumLogits += 1 + s.Draft
		}
	}
	defer clear(batch.Seqs) // drop the references to the step's token and block slices
	plan := d.Placement
	if e.policy != nil {
		plan = e.policy.Place(d, policy.Batch{Tokens: step.NumBatchedTokens, Seqs: len(step.Seqs)})
	}
	e.inKV++
	var logits []float32
	var tokens []int // the argmax of each logits row, when the runner chose them
	var err error
	if onDevice {
		tokens, err = greedy.StepGreedy(ctx, batch, plan)
	} else {
		logits, err = e.exec.Step(ctx, batch, plan)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.forgotten != forgotten { // a request left during the step (aborted, or handed off and back): look them up again
		for i, s := range step.Seqs {
			lives[i] = e.reqs[s.ID]
		}
	}
	if err != nil {
		for _, s := range step.Seqs {
			e.fail(s.ID, err)
		}
		e.drainTerminal()
		return err
	}
	rows := batch.NumLogits()
	vocab := e.exec.Config().Vocab
	taken := slices.Grow(e.taken[:0], len(step.Seqs))[:len(step.Seqs)]
	results := slices.Grow(e.results[:0], rows)[:rows]
	e.taken, e.results = taken, results
	defer clear(results) // drop the log-probabilities' slices
	defer clear(taken)
	row := 0
	now := e.clk.Now()
	jobs := e.jobs[:0]
	var prompts []promptJob
	for i, s := range step.Seqs {
		l := lives[i]
		ok := l != nil
		if n := promptRows[i]; n > 0 {
			if ok {
				prompts = append(prompts, l.promptJob(logits[row*vocab:(row+n)*vocab], n))
			}
			row += n
		}
		if !s.Sample {
			continue
		}
		n := 1 + s.Draft
		if ok && l.req.Embed {
			e.embedded(l, row)
			ok = false
		}
		if ok {
			j := sampleJob{sampler: l.sampler, drafts: s.Tokens[len(s.Tokens)-s.Draft:], stops: l.stops, out: results[row : row+n], seq: i}
			if tokens != nil {
				j.argmax = tokens[row : row+n]
			} else {
				j.logits = logits[row*vocab : (row+n)*vocab]
			}
			jobs = append(jobs, j)
		}
		row += n
	}
	promptLogprobs(prompts, vocab)
	sampleRows(jobs)
	buf := slices.Grow(e.tokBuf[:0], rows)
	stats := StepStats{AcceptedPerPos: e.acceptedPos[:0]}
	for _, j := range jobs {
		at := len(buf)
		for _, r := range j.out[:j.n] {
			buf = append(buf, r.Token)
		}
		taken[j.seq] = buf[at:len(buf):len(buf)]
		if len(j.drafts) > 0 {
			stats.Drafts++
			stats.DraftTokens += len(j.drafts)
			stats.AcceptedTokens += j.n - 1
			for p := range j.n - 1 {
				if p == len(stats.AcceptedPerPos) {
					stats.AcceptedPerPos = append(stats.AcceptedPerPos, 0)
				}
				stats.AcceptedPerPos[p]++
			}
		}
	}
	e.acceptedPos = stats.AcceptedPerPos
	e.tokBuf = buf
	if err := e.sched.UpdateDrafts(step, taken); err != nil {
		clear(jobs)
		return fmt.Errorf("engine: scheduler update: %w", err)
	}
	e.draftTokens += int64(stats.DraftTokens)
	e.acceptedTokens += int64(stats.AcceptedTokens)
	for _, j := range jobs {
		l := lives[j.seq]
		if l.tokens == 0 {
			stats.PromptTokens += len(l.req.Prompt)
		}
		for _, r := range j.out[:j.n] {
			stats.GeneratedToken++
			if e.emit(l, r, now) {
				break
			}
		}
	}
	e.propose(jobs, step)
	clear(jobs) // drop the logits and samplers
	e.jobs = jobs[:0]
	e.drainTerminal()
	if e.obs != nil {
		stats.Plan, stats.Tokens, stats.Running, stats.Waiting = plan.Name, step.NumBatchedTokens, e.sched.NumRunning(), e.sched.NumWaiting()
		stats.KVUsage, stats.Preemptions, stats.PrefixQueries, stats.PrefixHits = e.sched.KVUsage(), len(step.Preempted), e.sched.PrefixQueries(), e.sched.PrefixHits()
		stats.Duration = now.Sub(start)
		e.obs.Step(stats)
	}
	return nil
}

// embedded ends an Embed request with the hidden state of its logits
// row (the prompt's last token): the scheduler lets it go before the
// step's update, which then skips it. Called with e.mu held.
func (e *Engine) embedded(l *live, row int) {
	h := e.exec.Config().Hidden
	hidden := e.exec.(HiddenRunner).Hidden()
	ev := Event{Usage: l.usage(), Finish: FinishStop}
	if len(hidden) < (row+1)*h {
		ev.Finish, ev.Err = FinishError, fmt.Errorf("engine: the runner gave %d hidden values, row %d of %d wanted", len(hidden), row, h)
	} else {
		ev.Embedding = slices.Clone(hidden[row*h : (row+1)*h])
	}
	e.sched.Finish(l.req.ID, sched.Stop)
	e.finish(l, ev)
}

// promptJob is one sequence's logits rows of prompt positions, each
// giving the next prompt token's log-probability.
type promptJob struct {
	l      *live
	logits []float32
	out    []sample.Result
	first  int // the prompt token of the first row
}

// promptJob makes room in l.promptLP for the next n prompt tokens and
// returns the job that fills it from logits, their n rows. Called with
// e.mu held.
func (l *live) promptJob(logits []float32, n int) promptJob {
	first := len(l.promptLP) + 1
	l.promptLP = slices.Grow(l.promptLP, n)[:len(l.promptLP)+n]
	return promptJob{l: l, logits: logits, out: l.promptLP[first-1:], first: first}
}

// promptLogprobs runs the jobs. The rows are many and each costs a pass
// over the vocabulary, so they are spread over the sampling workers.
func promptLogprobs(jobs []promptJob, vocab int) {
	work := 0
	for _, j := range jobs {
		work += len(j.out) * vocab
	}
	forEach(len(jobs), work, func(i int) {
		j := jobs[i]
		for r := range j.out {
			j.out[r] = sample.LogprobOf(j.logits[r*vocab:(r+1)*vocab], j.l.req.Prompt[j.first+r], j.l.req.PromptTopLogprobs)
		}
	})
}

// propose gives the requests that sampled in this step and go on their
// drafts for the next one, searching their sequences in parallel when
// they are long (the search is linear in a sequence's length). Called
// with e.mu held, so the scheduler's token slices stay put.
func (e *Engine) propose(jobs []sampleJob, step *sched.Step) {
	if e.draft != nil {
		e.draft.reset()
	}
	if e.drafter == nil && e.draft == nil {
		return
	}
	work := 0
	for i := range jobs {
		j := &jobs[i]
		j.known, j.k = nil, 0
		l, ok := e.reqs[step.Seqs[j.seq].ID]
		if !ok {
			continue // finished
		}
		// No draft past the last token the request may generate: the
		// token sampled after the drafts is one more.
		if j.k = min(e.maxDrafts, l.req.MaxTokens-l.tokens-1); j.k > 0 {
			j.known = e.sched.Tokens(l.req.ID)
			work += len(j.known)
		}
		if e.draft != nil && j.k > 0 {
			e.draft.collect(l.req.ID, j.known, j.k) // drafted after the step, without the lock (runDrafts)
		}
	}
	if e.draft != nil {
		return
	}
	forEach(len(jobs), work, func(i int) {
		if j := &jobs[i]; j.k > 0 {
			j.proposed = e.drafter.Propose(j.proposed[:0], j.known, j.k)
		}
	})
	for _, j := range jobs {
		if j.k > 0 {
			e.sched.SetDraft(step.Seqs[j.seq].ID, j.proposed)
		}
	}
}

// runDrafts runs the draft model for the requests the last step
// collected (propose) and gives the scheduler their drafts. The model runs
// without the lock: the known tokens it reads only grow, and only this
// goroutine grows them. A failed draft step costs one step's drafts, not
// a request: it is logged, and every sequence in it is recomputed the
// next time.
func (e *Engine) runDrafts(ctx context.Context) {
	d := e.draft
	var err error
	if len(d.work) > 0 {
		err = d.propose(ctx)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.log.Warn("draft model step failed; no drafts this step", "err", err)
	}
	for _, w := range d.work {
		switch {
		case err != nil:
			d.drop(w.id)
		case len(w.drafts) > 0:
			e.sched.SetDraft(w.id, w.drafts)
		}
	}
	d.reset() // and free the blocks of the requests that ended meanwhile
}

// emit handles one sampled token of a live request: stop tokens, text,
// stop strings, the length limit, and the stream event. It reports
// whether the request finished.
func (e *Engine) emit(l *live, res sample.Result, now time.Time) bool {
	tok := res.Token
	l.tokens++
	if l.tokens == 1 {
		l.first = now
		if e.obs != nil {
			e.obs.FirstToken(l.scheduled.Sub(l.arrival), now.Sub(l.arrival))
		}
	} else if e.obs != nil {
		e.obs.Token(now.Sub(l.last))
	}
	l.last = now
	ev := Event{Tokens: []int{tok}}
	if l.req.Sampling.Logprobs >= 0 {
		ev.Logprobs = []sample.Result{res}
	}
	if l.tokens == 1 && l.req.PromptLogprobs {
		ev.PromptLogprobs = l.promptLP
	}
	finish := ""
	switch {
	case slices.Contains(l.stops, tok) && l.tokens > l.req.MinTokens:
		finish = FinishStop
		ev.Text = l.flush()
	case l.dec == nil: // no tokenizer: no text, no stop strings
		if l.tokens >= l.req.MaxTokens {
			finish = FinishLength
		}
	default:
		text, stopped := l.match.Push(l.dec.Add(tok), l.tokens >= l.req.MinTokens)
		ev.Text = text
		switch {
		case stopped:
			finish = FinishStop
		case l.tokens >= l.req.MaxTokens:
			finish = FinishLength
			ev.Text += l.flush()
		}
	}
	ev.Usage = l.usage()
	if finish == "" {
		e.send(l, ev)
		return false
	}
	ev.Finish = finish
	reason := sched.Stop
	if finish == FinishLength {
		reason = sched.Length
	}
	e.sched.Finish(l.req.ID, reason)
	e.finish(l, ev)
	return true
}

// flush returns the text held back by the detokenizer and stop matcher
// when generation ends on a stop token or the length limit; "" without a
// tokenizer.
func (l *live) flush() string {
	if l.dec == nil {
		return ""
	}
	text, stopped := l.match.Push(l.dec.Flush(), l.tokens >= l.req.MinTokens)
	if stopped {
		return text
	}
	return text + l.match.Flush()
}

func (l *live) usage() Usage {
	return Usage{PromptTokens: len(l.req.Prompt), CompletionTokens: l.tokens, CachedTokens: l.cached}
}

// send queues an event on l's stream.
func (e *Engine) send(l *live, ev Event) {
	l.out.push(ev)
	if e.event != nil {
		e.event(l.out)
	}
}

// finish sends a request's last event and records its metrics.
func (e *Engine) finish(l *live, ev Event) {
	e.send(l, ev)
	if e.obs != nil {
		f := FinishStats{ID: l.req.ID, Reason: ev.Finish, Tier: l.req.Tier, PromptTokens: len(l.req.Prompt), CompletionTokens: l.tokens, E2E: e.clk.Now().Sub(l.arrival)}
		if l.tokens > 0 {
			f.TTFT = l.first.Sub(l.arrival)
		}
		if l.tokens > 1 {
			f.TPOT = l.last.Sub(l.first) / time.Duration(l.tokens-1)
		}
		e.obs.Finish(f)
	}
	e.forget(l.req.ID)
}

// drainTerminal ends the streams of requests the scheduler ended itself:
// aborted ones, and ones whose tokens no longer fit the context or the
// block pool (length). Requests the engine finished are already gone.
func (e *Engine) drainTerminal() {
	for _, f := range e.sched.Drain() {
		l, ok := e.reqs[f.ID]
		if !ok {
			continue
		}
		ev := Event{Usage: l.usage()}
		switch f.Reason {
		case sched.Cancelled:
			ev.Finish = FinishCancelled
		case sched.Length:
			ev.Finish, ev.Text = FinishLength, l.flush()
		case sched.Stop:
			ev.Finish, ev.Text = FinishStop, l.flush()
		default:
			ev.Finish, ev.Err = FinishError, fmt.Errorf("engine: request %s failed in the scheduler", f.ID)
		}
		e.finish(l, ev)
	}
}

func (e *Engine) forget(id string) {
	delete(e.reqs, id)
	if e.draft != nil {
		e.draft.gone = append(e.draft.gone, id)
	}
	e.forgotten++
	if len(e.reqs) == 0 {
		close(e.idle)
		e.idle = make(chan struct{})
	}
}
