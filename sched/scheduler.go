package sched

import (
	"fmt"
	"slices"

	"github.com/gearboxlm/gearbox/kvcache"
)

// Config sizes a Scheduler. Zero fields take the defaults noted.
type Config struct {
	MaxNumBatchedTokens int // tokens per step, prefill chunks and decodes (1 each) together; default 2048
	MaxNumSeqs          int // running requests at most; default 256
	MaxModelLen         int // context length in tokens; required
	BlockSize           int // tokens per KV block; required, at most kvcache.MaxBlockSize
	NumBlocks           int // KV blocks per replica; required
	Replicas            int // data-parallel replicas, each with its own pool of block ids [0, NumBlocks); default 1
	// Dispatcher picks the replica of a request when it is first admitted,
	// from the replicas' Loads; default LeastLoaded{}. A pick outside
	// [0, Replicas) falls back to LeastLoaded.
	Dispatcher Dispatcher
	// Watermark is the fraction of a replica's blocks that admitting a
	// request from waiting must leave free or evictable, as headroom for
	// the running requests' growth (a replica with nothing running admits
	// without it). 0 means the default 0.01; negative means none.
	Watermark float64
	// EnablePrefixCaching reuses the KV of full blocks that an earlier
	// request computed for the same leading tokens.
	EnablePrefixCaching bool
	// MaxWaiting bounds the waiting queue: Add fails with ErrQueueFull when
	// it holds that many. 0 means unlimited. Preempted requests re-enter
	// waiting regardless.
	MaxWaiting int
	// HostBlocks is the size, in KV blocks per replica, of a host KV tier
	// where requests are parked (SwapOut, SwapIn); 0 means none. Host
	// block ids of replica d run over [d·HostBlocks, (d+1)·HostBlocks).
	HostBlocks int
	// KVShards > 1 allocates each replica's blocks along the sequence over
	// that many equal ranges of ids, SPTBlocks consecutive blocks of a
	// sequence per range (kvcache.ManagerConfig.Shards, CSPS's per-rank
	// block tables).
	KVShards, SPTBlocks int
}

// The engine limits a zero Config field means (vLLM's defaults).
const (
	DefaultMaxNumBatchedTokens = 2048
	DefaultMaxNumSeqs          = 256
)

// Scheduler plans engine steps by continuous batching with chunked prefill,
// priority admission, prefix caching and preemption by recomputation. See
// the package documentation for the calling protocol. It is not safe for
// concurrent use.
type Scheduler struct {
	cfg   Config
	limit int // most known tokens a request can compute: min(MaxModelLen, NumBlocks·BlockSize)

	reps     []replica
	byID     map[string]*request // live requests
	waiting  waitQueue
	running  []*request // sorted by compare
	parked   []*request // on the host tier, sorted by compare
	swapping int        // requests between SwapOut or SwapIn and SwapDone
	finished []Finished // since the last Drain
	order    uint64     // next Add order

	preemptions int64
	loads       []Load      // dispatcher scratch
	updated     []*request  // Update scratch
	outBuf      [][]int     // Update scratch
	ll          LeastLoaded // fallback dispatcher
}

type replica struct {
	kv   *kvcache.BlockManager
	host *kvcache.BlockManager // the host tier; nil without one
	load Load                  // of the requests assigned here: uncomputed known tokens and computed ones
}

// New validates cfg, fills in the defaults and returns an idle scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.MaxNumBatchedTokens == 0 {
		cfg.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Dispatcher == nil {
		cfg.Dispatcher = LeastLoaded{}
	}
	if cfg.Watermark == 0 {
		cfg.Watermark = 0.01
	}
	watermark := max(cfg.Watermark, 0)
	switch {
	case cfg.MaxNumBatchedTokens < 0:
		return nil, fmt.Errorf("sched: MaxNumBatchedTokens %d is negative", cfg.MaxNumBatchedTokens)
	case cfg.MaxNumSeqs < 0:
		return nil, fmt.Errorf("sched: MaxNumSeqs %d is negative", cfg.MaxNumSeqs)
	case cfg.MaxModelLen <= 0:
		return nil, fmt.Errorf("sched: MaxModelLen %d must be positive", cfg.MaxModelLen)
	case cfg.Replicas < 0:
		return nil, fmt.Errorf("sched: Replicas %d is negative", cfg.Replicas)
	case cfg.MaxWaiting < 0:
		return nil, fmt.Errorf("sched: MaxWaiting %d is negative", cfg.MaxWaiting)
	case cfg.HostBlocks < 0:
		return nil, fmt.Errorf("sched: HostBlocks %d is negative", cfg.HostBlocks)
	}
	s := &Scheduler{
		cfg:   cfg,
		limit: min(cfg.MaxModelLen, cfg.NumBlocks*cfg.BlockSize),
		byID:  map[string]*request{},
		reps:  make([]replica, cfg.Replicas),
		loads: make([]Load, cfg.Replicas),
	}
	for i := range s.reps {
		kv, err := kvcache.NewBlockManager(kvcache.ManagerConfig{
			NumBlocks:           cfg.NumBlocks,
			BlockSize:           cfg.BlockSize,
			Watermark:           watermark,
			EnablePrefixCaching: cfg.EnablePrefixCaching,
			Shards:              cfg.KVShards,
			SPTBlocks:           cfg.SPTBlocks,
		})
		if err != nil {
			return nil, fmt.Errorf("sched: %w", err)
		}
		s.reps[i].kv = kv
		if cfg.HostBlocks > 0 {
			if s.reps[i].host, err = kvcache.NewBlockManager(kvcache.ManagerConfig{NumBlocks: cfg.HostBlocks, BlockSize: cfg.BlockSize, Watermark: 0}); err != nil {
				return nil, fmt.Errorf("sched: host tier: %w", err)
			}
		}
	}
	return s, nil
}

// Add queues a request. It fails, queueing nothing, with ErrEmptyPrompt,
// ErrBadRequest (MaxTokens < 1), ErrTooLong (prompt+MaxTokens exceeds
// MaxModelLen, or the prompt alone needs more blocks than a replica has),
// ErrDuplicateID (a live request has the ID) or ErrQueueFull.
func (s *Scheduler) Add(r *Request) error {
	if r == nil {
		return fmt.Errorf("%w: nil request", ErrEmptyPrompt)
	}
	if len(r.Prompt) == 0 {
		return fmt.Errorf("%w: request %q", ErrEmptyPrompt, r.ID)
	}
	if r.MaxChunk < 0 {
		return fmt.Errorf("%w: request %q: max chunk %d is negative", ErrBadRequest, r.ID, r.MaxChunk)
	}
	if r.MaxTokens < 1 {
		return fmt.Errorf("%w: request %q: max tokens %d, want at least 1", ErrBadRequest, r.ID, r.MaxTokens)
	}
	n := len(r.Prompt)
	if n+r.MaxTokens > s.cfg.MaxModelLen {
		return fmt.Errorf("%w: request %q: %d prompt + %d completion tokens exceed the context length %d", ErrTooLong, r.ID, n, r.MaxTokens, s.cfg.MaxModelLen)
	}
	if blocks := (n + s.cfg.BlockSize - 1) / s.cfg.BlockSize; blocks > s.cfg.NumBlocks {
		return fmt.Errorf("%w: request %q: %d prompt tokens need %d KV blocks, a replica has %d", ErrTooLong, r.ID, n, blocks, s.cfg.NumBlocks)
	}
	if _, ok := s.byID[r.ID]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateID, r.ID)
	}
	if s.cfg.MaxWaiting > 0 && len(s.waiting) >= s.cfg.MaxWaiting {
		return fmt.Errorf("%w: %d requests waiting", ErrQueueFull, len(s.waiting))
	}
	tokens := make([]int, n, n+min(r.MaxTokens, 128))
	copy(tokens, r.Prompt)
	req := &request{
		id:        r.ID,
		priority:  r.Priority,
		arrival:   r.Arrival,
		order:     s.order,
		promptLen: n,
		noPrefix:  r.NoPrefixCache,
		maxChunk:  r.MaxChunk,
		adapter:   r.Adapter,
		tokens:    tokens,
		replica:   -1,
	}
	s.order++
	s.byID[r.ID] = req
	s.waiting.push(req)
	return nil
}

// Abort cancels a waiting or running request: it becomes terminal with
// Cancelled and its blocks are freed at once. It reports false for an
// unknown or already terminal request.
func (s *Scheduler) Abort(id string) bool {
	r := s.byID[id]
	if r == nil {
		return false
	}
	s.terminate(r, Cancelled)
	return true
}

// Finish ends a waiting or running request with reason, freeing its blocks
// (full computed ones stay in the prefix cache). It fails with
// ErrUnknownID for an unknown or already terminal request.
func (s *Scheduler) Finish(id string, reason FinishReason) error {
	if reason < Stop || reason > Error {
		return fmt.Errorf("sched: finish %q: invalid reason %d", id, int(reason))
	}
	r := s.byID[id]
	if r == nil {
		return fmt.Errorf("%w: finish %q", ErrUnknownID, id)
	}
	s.terminate(r, reason)
	return nil
}

// Drain returns the requests that became terminal since the last call, in
// the order they ended. Each accepted request appears exactly once over
// all calls.
func (s *Scheduler) Drain() []Finished {
	out := s.finished
	s.finished = nil
	return out
}

// NumRunning is the number of requests holding KV blocks.
func (s *Scheduler) NumRunning() int { return len(s.running) }

// NumWaiting is the number of queued requests, new and preempted.
func (s *Scheduler) NumWaiting() int { return len(s.waiting) }

// Adapters are the LoRA adapters (Request.Adapter, 0 left out) of the
// running requests and of the waiting ones, each list sorted and without
// repeats.
func (s *Scheduler) Adapters() (running, waiting []int) {
	ids := func(rs []*request) []int {
		var out []int
		for _, r := range rs {
			if r.adapter > 0 {
				out = append(out, r.adapter)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return ids(s.running), ids(s.waiting)
}

// KVUsage is the fraction of KV blocks in use, mean over replicas, in
// [0, 1].
func (s *Scheduler) KVUsage() float64 {
	u := 0.0
	for _, r := range s.reps {
		u += r.kv.Usage()
	}
	return u / float64(len(s.reps))
}

// NumPrefilling is the number of running requests whose prompt is not
// fully computed.
func (s *Scheduler) NumPrefilling() int {
	n := 0
	for _, r := range s.running {
		if !r.decoding() {
			n++
		}
	}
	return n
}

// KVBlocks returns the KV blocks in use and the blocks in all, summed over
// replicas.
func (s *Scheduler) KVBlocks() (used, total int64) {
	for _, r := range s.reps {
		used += int64(r.kv.NumUsed())
		total += int64(s.cfg.NumBlocks)
	}
	return used, total
}

// Preemptions is the number of preemptions so far.
func (s *Scheduler) Preemptions() int64 { return s.preemptions }

// PrefixQueries is the number of tokens looked up in the prefix cache by
// admitted requests (resumed ones count again), over all replicas; 0 with
// caching off.
func (s *Scheduler) PrefixQueries() int64 {
	var n int64
	for _, r := range s.reps {
		n += r.kv.PrefixQueries()
	}
	return n
}

// PrefixHits is the number of those tokens found in the cache.
func (s *Scheduler) PrefixHits() int64 {
	var n int64
	for _, r := range s.reps {
		n += r.kv.PrefixHits()
	}
	return n
}

// Loads returns each replica's outstanding tokens, as the Dispatcher sees
// them: QueuedPrefill counts the known tokens not yet computed of the
// requests assigned to the replica (prompt chunks, one per decode, and the
// tokens preempted requests must recompute), KVTokens the computed tokens
// of its running requests.
func (s *Scheduler) Loads() []Load {
	out := make([]Load, len(s.reps))
	for i, r := range s.reps {
		out[i] = r.load
	}
	return out
}

// account adds (sign 1) or removes (sign -1) r's tokens to its replica's
// load. Every change of r.tokens, r.computed or r.replica is bracketed by
// the two.
func (s *Scheduler) account(r *request, sign int) {
	if r.replica < 0 {
		return
	}
	l := &s.reps[r.replica].load
	l.QueuedPrefill += sign * (len(r.tokens) - r.computed)
	l.KVTokens += sign * r.computed
}

// terminate ends live request r with reason.
func (s *Scheduler) terminate(r *request, reason FinishReason) {
	s.account(r, -1)
	switch r.state {
	case running:
		s.removeRunning(r)
	case waiting:
		s.waiting.remove(r)
	case parked:
		s.removeParked(r)
	case swappingIn, swappingOut:
		s.swapping--
	}
	s.freeBlocks(r)
	r.state = done
	delete(s.byID, r.id)
	s.finished = append(s.finished, Finished{ID: r.id, Reason: reason, Output: r.tokens[r.promptLen:]})
}

// preempt returns running r to waiting: its blocks are freed (full ones
// stay cached), its computed count drops to 0 and it keeps its known
// tokens and its replica.
func (s *Scheduler) preempt(r *request) {
	s.account(r, -1)
	s.removeRunning(r)
	s.reps[r.replica].kv.Free(r.kv)
	r.kv, r.computed, r.state, r.draft = nil, 0, waiting, r.draft[:0]
	s.account(r, 1)
	s.waiting.push(r)
	s.preemptions++
}

func (s *Scheduler) insertRunning(r *request) { insertSorted(&s.running, r) }

func (s *Scheduler) removeRunning(r *request) { removeSorted(&s.running, r) }

// insertSorted adds r to a list kept sorted by compare.
func insertSorted(list *[]*request, r *request) {
	i, _ := slices.BinarySearchFunc(*list, r, compare)
	*list = slices.Insert(*list, i, r)
}

// removeSorted takes r out of a list kept sorted by compare.
func removeSorted(list *[]*request, r *request) {
	if i, ok := slices.BinarySearchFunc(*list, r, compare); ok {
		*list = slices.Delete(*list, i, i+1)
	}
}

// pick asks the dispatcher for a replica.
func (s *Scheduler) pick() int {
	for i, r := range s.reps {
		s.loads[i] = r.load
	}
	i := s.cfg.Dispatcher.Pick(s.loads)
	if i < 0 || i >= len(s.reps) {
		i = s.ll.Pick(s.loads)
	}
	return i
}
