package sched

// Load is one data-parallel replica's outstanding work in tokens.
type Load struct {
	QueuedPrefill int // prompt tokens admitted but not yet prefilled
	KVTokens      int // tokens whose KV the replica holds for running requests
}

// Tokens is the replica's outstanding tokens.
func (l Load) Tokens() int { return l.QueuedPrefill + l.KVTokens }

// Dispatcher picks the replica for a new request. Implementations are not
// safe for concurrent use; the engine loop owns them.
type Dispatcher interface {
	Pick(loads []Load) int
}

// LeastLoaded sends a request to the replica with the fewest outstanding
// tokens (queued prefill plus KV in use), not the fewest requests: one
// 8k-token prompt outweighs many short chats, which is what leaves
// request-count balancing uneven. Ties go to the lowest index.
type LeastLoaded struct{}

// Pick returns the least-loaded replica.
func (LeastLoaded) Pick(loads []Load) int {
	best := 0
	for i, l := range loads {
		if l.Tokens() < loads[best].Tokens() {
			best = i
		}
	}
	return best
}
