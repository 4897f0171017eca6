package policy

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/gearboxlm/gearbox/parallel"
)

// DefaultSiDPThreshold is B_th, the batched tokens per step (over all
// replicas) below which SiDP's group moves to Compute-as-a-Service once
// the drop persists. The paper profiles it per GPU and model as the batch
// whose forward time hides the weight fetch (R16/R17). On CPU ranks a
// fetch is a memcpy over the memory bus the GEMMs read too, so it never
// hides; the threshold is where CaS stops beating WaS. cpuexec's
// BenchmarkSiDPStep (dp=2, hidden 512, intermediate 2048, 2 threads,
// medians of 3, docs/performance.md) measured per decode step: 48 batched
// tokens CaS 74 ms, WaS 132 ms; 64 tokens CaS 99 ms, WaS 103 ms (a tie
// within the noise); 128 tokens CaS 284 ms, WaS 216 ms. 64 is the tie,
// and the band's top (2·64 = 128) is where WaS clearly wins. A measured
// number, not fitted to any test.
const DefaultSiDPThreshold = 64

// DefaultSiDPWindow is the persistence window in steps: a mode changes
// only after this many consecutive steps on the far side of the band. 16
// rides out the one- or two-step dips of continuous batching (a finished
// request's place refilled at the next step) while still switching well
// within a second at CPU step times; the paper's "minute-level" switches
// are at GPU scale, and it gives no number.
const DefaultSiDPWindow = 16

// SiDP is SiDP's orchestrator (paper 001, §4.3): one mode for the whole
// group at each step, Weight-as-a-Service while the step's batched tokens
// B stay at or above Threshold, Compute-as-a-Service after B stays below
// Threshold for Window consecutive steps, and back to WaS after B stays at
// or above High = 2·Threshold for Window consecutive steps. The band
// [Threshold, High) and the window are the hysteresis: B oscillating
// inside the band, or leaving it for fewer than Window steps, never
// switches. B is the group's batched tokens (all replicas together), the
// quantity the engine's batch carries; the paper leaves per-engine or
// group-wide open. Every rank runs the step under the one placement Place
// returns, so all ranks switch at the same step; each switch is logged.
type SiDP struct {
	WaS, CaS  parallel.Placement
	Threshold int // B_th, batched tokens
	High      int // 2·Threshold: the band's top
	Window    int // persistence, in steps
	Log       *slog.Logger

	mu       sync.Mutex
	cas      bool
	run      int // consecutive steps on the far side of the band
	steps    int
	switches int
}

// NewSiDP validates a SiDP policy over plan's replicas (dp ≥ 2, pp = sp
// = 1) with the given threshold (batched tokens) and window (steps); a
// nil logger logs to slog.Default.
func NewSiDP(plan parallel.Plan, threshold, window int, log *slog.Logger) (*SiDP, error) {
	was, err := parallel.SiDPPlacement(plan, parallel.FFNWaS)
	if err != nil {
		return nil, fmt.Errorf("sidp policy: %w", err)
	}
	cas, err := parallel.SiDPPlacement(plan, parallel.FFNCaS)
	if err != nil {
		return nil, fmt.Errorf("sidp policy: %w", err)
	}
	if threshold < 0 || window < 1 {
		return nil, fmt.Errorf("sidp policy: threshold %d must not be negative and window %d must be at least 1", threshold, window)
	}
	if log == nil {
		log = slog.Default()
	}
	return &SiDP{WaS: was, CaS: cas, Threshold: threshold, High: 2 * threshold, Window: window, Log: log}, nil
}

// Decide keeps the pooled KV placement and mixed batches.
func (s *SiDP) Decide(State) Decision { return Decision{Placement: s.WaS} }

// Place advances the hysteresis with the step's batched tokens and
// returns the mode's placement for the step.
func (s *SiDP) Place(_ Decision, b Batch) parallel.Placement {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps++
	far := b.Tokens < s.Threshold
	if s.cas {
		far = b.Tokens >= s.High
	}
	if !far {
		s.run = 0
	} else if s.run++; s.run >= s.Window {
		s.cas, s.run = !s.cas, 0
		s.switches++
		to := s.WaS
		if s.cas {
			to = s.CaS
		}
		s.Log.Info("sidp: mode switch", "to", to.FFN.String(), "step", s.steps, "batched_tokens", b.Tokens,
			"threshold", s.Threshold, "high", s.High, "window", s.Window)
	}
	if s.cas {
		return s.CaS
	}
	return s.WaS
}

// Placements returns the WaS placement, whose shards the CaS placement
// also runs on (both hold the same pieces and KV).
func (s *SiDP) Placements() []parallel.Placement { return []parallel.Placement{s.WaS} }

// Mode is the mode of the last step placed (FFNWaS before the first).
func (s *SiDP) Mode() parallel.FFNMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cas {
		return parallel.FFNCaS
	}
	return parallel.FFNWaS
}

// Switches is the number of mode switches so far.
func (s *SiDP) Switches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.switches
}

func (s *SiDP) String() string { return "sidp" }
