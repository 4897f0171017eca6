package sim

import "time"

// PlacementStats is what a run's steps under one placement did, summed
// over replicas: Seesaw's prefill phase is the steps under its prefill
// placement, its decode phase those under its decode placement.
type PlacementStats struct {
	Plan    string  `json:"plan"`
	Steps   int     `json:"steps"`
	Seconds float64 `json:"seconds"` // the steps' predicted durations, waits for copies (HostStats.WaitSeconds) not included
	Tokens  int64   `json:"tokens"`  // batched tokens
	Seqs    int64   `json:"seqs"`    // sequences in the steps
	// Decodes, DecodeSteps and DecodeSeconds are the decode-only steps'
	// sequences (one token each), number and durations: the mean decode
	// batch, and the time a static plan spends without prefill work.
	Decodes, DecodeSteps int64
	DecodeSeconds        float64
	MaxSeqs              int // the largest step
}

// HostStats is what the host KV tier and the transitions cost a run,
// summed over replicas.
type HostStats struct {
	Transitions       int     `json:"transitions"`
	TransitionSeconds float64 `json:"transition_s"` // the ranks blocked re-sharding weights
	WeightBytes       int64   `json:"weight_bytes"` // re-sharded, every rank's
	// WaitSeconds is the time steps were held past their compute for a
	// swap to land: the copies not hidden behind compute.
	WaitSeconds float64 `json:"wait_s"`
	// CopySeconds is the busiest copy engine's time moving KV, hidden or
	// not.
	CopySeconds    float64 `json:"copy_s"`
	SwapOutBytes   int64   `json:"swap_out_bytes"`
	SwapInBytes    int64   `json:"swap_in_bytes"`
	HostKVTokens   int64   `json:"host_kv_tokens"` // the tier's capacity, one replica
	DeviceKVTokens int64   `json:"device_kv_tokens"`
}

// note adds a step of seqs sequences, tokens tokens and the given
// duration to placement i's statistics.
func (r *CostRunner) note(i int, seqs, tokens int, seconds float64, decodeOnly bool) {
	s := &r.stats[i]
	s.Steps++
	s.Seconds += seconds
	s.Tokens += int64(tokens)
	s.Seqs += int64(seqs)
	s.MaxSeqs = max(s.MaxSeqs, seqs)
	if decodeOnly {
		s.DecodeSteps++
		s.Decodes += int64(seqs)
		s.DecodeSeconds += seconds
	}
}

// PlacementStats is the runner's statistics by placement, in the order
// of its placements.
func (r *CostRunner) PlacementStats() []PlacementStats {
	out := make([]PlacementStats, len(r.stats))
	for i, s := range r.stats {
		s.Plan = r.placements[i].Name
		out[i] = s
	}
	return out
}

// HostStats is the runner's host-tier and transition statistics.
func (r *CostRunner) HostStats() HostStats {
	h := r.host.stats
	h.WeightBytes = r.host.moved.WeightBytes
	h.HostKVTokens = int64(r.host.blocks) * int64(r.kv.BlockSize)
	h.DeviceKVTokens = int64(r.kv.NumBlocks) * int64(r.kv.BlockSize)
	var busiest time.Duration
	for _, d := range r.host.copyBusy {
		busiest = max(busiest, d)
	}
	h.CopySeconds = busiest.Seconds()
	return h
}

// addPlacementStats sums o into s (placements by position).
func addPlacementStats(s, o []PlacementStats) []PlacementStats {
	if s == nil {
		return append([]PlacementStats(nil), o...)
	}
	for i := range o {
		a := &s[i]
		a.Steps += o[i].Steps
		a.Seconds += o[i].Seconds
		a.Tokens += o[i].Tokens
		a.Seqs += o[i].Seqs
		a.Decodes += o[i].Decodes
		a.DecodeSteps += o[i].DecodeSteps
		a.DecodeSeconds += o[i].DecodeSeconds
		a.MaxSeqs = max(a.MaxSeqs, o[i].MaxSeqs)
	}
	return s
}

// add sums a replica's statistics into h.
func (h *HostStats) add(o HostStats) {
	h.Transitions += o.Transitions
	h.TransitionSeconds += o.TransitionSeconds
	h.WeightBytes += o.WeightBytes
	h.WaitSeconds += o.WaitSeconds
	h.CopySeconds = max(h.CopySeconds, o.CopySeconds)
	h.SwapOutBytes += o.SwapOutBytes
	h.SwapInBytes += o.SwapInBytes
	h.HostKVTokens = o.HostKVTokens
	h.DeviceKVTokens = o.DeviceKVTokens
}
