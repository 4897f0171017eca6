package sched

import (
	"errors"
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/kvcache"
)

// Errors returned by Add (wrapped with details) and Finish.
var (
	ErrQueueFull    = errors.New("sched: waiting queue full")
	ErrTooLong      = errors.New("sched: request too long")
	ErrDuplicateID  = errors.New("sched: duplicate request id")
	ErrEmptyPrompt  = errors.New("sched: empty prompt")
	ErrBadRequest   = errors.New("sched: bad request")
	ErrUnknownID    = errors.New("sched: unknown request id")
	ErrStaleStep    = errors.New("sched: step does not match the scheduler's state")
	ErrBadSampleLen = errors.New("sched: sampled tokens do not match the step")
)

// Request is what the engine submits. The scheduler copies what it keeps;
// the caller may reuse the Request after Add returns.
type Request struct {
	ID        string // unique among live (not yet terminal) requests
	Prompt    []int  // token ids, at least one
	MaxTokens int    // completion tokens at most, ≥ 1; only checked at Add (the engine decides when to stop)
	Priority  int    // smaller runs first, as in vLLM
	Arrival   time.Time
	// NoPrefixCache computes every prompt token even where the prefix
	// cache holds it (the request's own full blocks are still cached for
	// others): for prompt log-probabilities, which need every position's
	// logits.
	NoPrefixCache bool
	// MaxChunk, when positive, bounds each of the request's chunks, to
	// bound what a step returns for it (logits for every position).
	MaxChunk int
	// Adapter is the LoRA adapter the request runs with (0: none): its
	// steps carry it, and its blocks are prefix-cached apart from other
	// adapters' (kvcache.Salted), since its K/V differs.
	Adapter int
}

// FinishReason is how a request ended.
type FinishReason int

// Terminal states.
const (
	Stop      FinishReason = iota + 1 // a stop token or string
	Length                            // MaxTokens reached, or the context (MaxModelLen or a replica's whole KV pool) is full
	Cancelled                         // aborted by the client
	Error                             // the engine failed the request
)

// String returns the OpenAI-style name: "stop", "length", "cancelled" or
// "error".
func (r FinishReason) String() string {
	switch r {
	case Stop:
		return "stop"
	case Length:
		return "length"
	case Cancelled:
		return "cancelled"
	case Error:
		return "error"
	}
	return fmt.Sprintf("FinishReason(%d)", int(r))
}

// Finished reports that a request reached its terminal state.
type Finished struct {
	ID     string
	Reason FinishReason
	// Output is the tokens sampled for the request, in order (each was
	// passed to Update); the caller owns the slice.
	Output []int
}

type state uint8

const (
	waiting     state = iota
	running           // KV on the device; scheduled
	swappingOut       // KV being copied to the host tier (SwapOut until SwapDone)
	parked            // KV on the host tier only
	swappingIn        // KV being copied back (SwapIn until SwapDone)
	done
)

// request is the scheduler's record of one live request.
type request struct {
	id        string
	priority  int
	arrival   time.Time
	order     uint64 // Add order, the last tie-break
	promptLen int
	noPrefix  bool         // Request.NoPrefixCache
	maxChunk  int          // Request.MaxChunk; 0 for none
	adapter   int          // Request.Adapter
	tokens    []int        // known: prompt, then sampled outputs
	computed  int          // tokens of tokens whose KV is in kv
	draft     []int        // speculative tokens to verify after the known ones (SetDraft)
	planned   []int        // a step's known tokens and drafts, when it carries drafts
	replica   int          // -1 until first admitted
	kv        *kvcache.Seq // device blocks
	host      *kvcache.Seq // host-tier blocks, while parked or swapping
	state     state
	heapIdx   int // position in the waiting heap
}

// compare orders requests by priority, then arrival, then Add order:
// negative when a runs before b.
func compare(a, b *request) int {
	if a.priority != b.priority {
		if a.priority < b.priority {
			return -1
		}
		return 1
	}
	if c := a.arrival.Compare(b.arrival); c != 0 {
		return c
	}
	if a.order < b.order {
		return -1
	}
	if a.order > b.order {
		return 1
	}
	return 0
}

// waitQueue is a binary min-heap of waiting requests by compare.
type waitQueue []*request

func (q waitQueue) Len() int { return len(q) }

func (q waitQueue) peek() *request { return q[0] }

func (q *waitQueue) push(r *request) {
	r.heapIdx = len(*q)
	*q = append(*q, r)
	q.up(r.heapIdx)
}

// remove takes r out of the queue.
func (q *waitQueue) remove(r *request) {
	h := *q
	i, last := r.heapIdx, len(h)-1
	if i != last {
		h.swap(i, last)
	}
	h[last] = nil
	*q = h[:last]
	if i != last {
		if !q.down(i) {
			q.up(i)
		}
	}
	r.heapIdx = -1
}

func (q waitQueue) swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIdx = i
	q[j].heapIdx = j
}

func (q waitQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if compare(q[i], q[p]) >= 0 {
			return
		}
		q.swap(i, p)
		i = p
	}
}

// down sifts i down and reports whether it moved.
func (q waitQueue) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(q) {
			break
		}
		if c+1 < len(q) && compare(q[c+1], q[c]) < 0 {
			c++
		}
		if compare(q[c], q[i]) >= 0 {
			break
		}
		q.swap(i, c)
		i = c
	}
	return i != start
}
