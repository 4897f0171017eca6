package policy

import (
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/parallel"
)

// Arch is how a CSPS request's prefill is sequence-parallel (paper 002,
// §3.2.1).
type Arch uint8

const (
	// Local: the prompt fits one rank's partition and runs there whole
	// (degree 1, DP-like), beside the shards of long prompts.
	Local Arch = iota
	// SPNTP: SP without TP (Ulysses): every rank holds the full weights,
	// two all-to-alls per layer (R1–R6).
	SPNTP
	// SPTP: SP with TP over the same ranks: all-gather the SPTs, column
	// and row shards of the attention weights, reduce-scatter (R7–R10).
	SPTP
)

func (a Arch) String() string {
	switch a {
	case Local:
		return "local"
	case SPNTP:
		return "sp-ntp"
	case SPTP:
		return "sp-tp"
	}
	return fmt.Sprintf("Arch(%d)", uint8(a))
}

// CSPSConfig is one request's CSPS configuration.
type CSPSConfig struct {
	Degree int  // N: ranks holding the prompt's sequence partitions
	Arch   Arch // how its prefill runs
	// Elements each architecture moves per layer over all N ranks (App A,
	// R13): SP-NTP on a TP deployment (4d² weights gathered +
	// 4·L·d/N activations)·(N−1), without TP 4·L·d·(N−1)/N; SP-TP
	// 2·L·d·(N−1). Zero at degree 1.
	NTPElems, TPElems float64
	// CSA's levels and level-2 drop ratio for the prompt's prefill: the
	// policy's setting when the prompt spans several ranks, none (1
	// level, exact attention) when it lives on one.
	CSALevels int
	CSADrop   float64
}

// CSPS is CSPS's policy (paper 002): every step runs under the CSPS
// executor's one placement, in which a prompt's KV is sharded along the
// sequence; what varies per request is its configuration (Configure):
// how many ranks its sequence partitions take and which SP architecture
// prefills it. The degree is enforced by the scheduler's sequence-sharded
// allocation (a prompt of L tokens spans ⌈L/SPTMax⌉ ranks), so Configure
// and the executor agree by construction.
//
// Choices the paper leaves open, stated: the degree is ⌈L/SPTMax⌉ capped
// at the ranks (R12, inferred), the overflow of a prompt longer than
// Ranks·SPTMax going to the last rank; the architecture is App A's
// inequality evaluated exactly in integers (SP-NTP iff 2N·d < (N−2)·L,
// so N = 2 always gives SP-TP, contradicting the paper's sentence, G10),
// and a deployment without TP always uses SP-NTP (R13). The CPU executor
// holds full weights on every rank and has no TP (TP = 1), so App A's
// choice there is always SP-NTP; ForceArch overrides it (the CPU
// executor runs either, cpuexec.CSPSPrompt).
type CSPS struct {
	P      parallel.Placement
	Ranks  int // ranks of the placement
	SPTMax int // longest sequence partition per rank, in tokens
	Hidden int // d, the model width
	TP     int // the deployment's TP degree: 1 on the CPU
	// ForceArch, SPNTP or SPTP, is the architecture of every prompt over
	// several ranks; Local (the zero value) leaves App A's choice.
	ForceArch Arch
	// CSALevels > 1 turns on CSA's multi-level sparse attention for
	// prompts spread over several ranks, with level-2 drop ratio CSADrop;
	// ≤ 1 is off (exact).
	CSALevels int
	CSADrop   float64
	// MicroPartitions is the executor's SP-NTP pipelining depth (R27).
	MicroPartitions int
	// Objective, when its TTFT is set, chooses each request's drop ratio
	// instead of CSADrop.
	Objective CSPSObjective
}

// CSPSObjective is CSPS's per-request objective (R39, Eq. 9): the least
// accuracy loss subject to TTFT ≤ TTFT. Without the paper's accuracy
// regressor (F_Ad, R40), the loss is taken to grow with the drop ratio
// (inferred), so the choice is: no CSA when dense SP-NTP meets the TTFT,
// else the smallest level-2 drop on R43's grid (0 to 0.9 by 0.02) that
// does, else 0.9.
type CSPSObjective struct {
	TTFT time.Duration
	// Prefill predicts a prompt's prefill time under a configuration (the
	// simulator's F_pipe, or a calibrated model of the ranks); required
	// with TTFT.
	Prefill func(promptLen int, c CSPSConfig) time.Duration
}

// dropGrid is R43's search: level-2 drop ratios 0, 0.02, …, 0.9.
const dropSteps, dropStep = 45, 0.02

// NewCSPS validates a CSPS policy over placement p.
func NewCSPS(p parallel.Placement, sptMax, hidden, tp int) (*CSPS, error) {
	if p.Ranks() < 1 || sptMax < 1 || hidden < 1 || tp < 1 {
		return nil, fmt.Errorf("csps policy: ranks %d, SPT length %d, width %d and TP %d must be positive", p.Ranks(), sptMax, hidden, tp)
	}
	return &CSPS{P: p, Ranks: p.Ranks(), SPTMax: sptMax, Hidden: hidden, TP: tp}, nil
}

// Decide keeps the CSPS placement and mixed batches (long prefills share
// steps with short requests' prefills and decodes, R11, R33).
func (c *CSPS) Decide(State) Decision { return Decision{Placement: c.P} }

// Place keeps the CSPS placement.
func (c *CSPS) Place(Decision, Batch) parallel.Placement { return c.P }

// Placements returns the CSPS placement.
func (c *CSPS) Placements() []parallel.Placement { return []parallel.Placement{c.P} }

func (c *CSPS) String() string { return "csps" }

// Configure chooses a prompt of promptLen tokens' degree, architecture
// and CSA setting (the executor asks it per prompt through
// cpuexec.CSPSOptions.Configure).
func (c *CSPS) Configure(promptLen int) CSPSConfig {
	n := min(c.Ranks, max(1, (promptLen+c.SPTMax-1)/c.SPTMax))
	if n == 1 {
		return CSPSConfig{Degree: 1, Arch: Local, CSALevels: 1}
	}
	ntp, tp := ArchElems(promptLen, c.Hidden, n, c.TP > 1)
	cfg := CSPSConfig{Degree: n, Arch: SPNTP, NTPElems: ntp, TPElems: tp, CSALevels: 1}
	if c.CSALevels > 1 {
		cfg.CSALevels, cfg.CSADrop = c.CSALevels, c.CSADrop
		if o := c.Objective; o.TTFT > 0 && o.Prefill != nil {
			cfg = c.objective(promptLen, cfg)
		}
	}
	if c.TP > 1 && !NTPCheaper(promptLen, c.Hidden, n) {
		cfg.Arch = SPTP
	}
	if c.ForceArch == SPNTP || c.ForceArch == SPTP {
		cfg.Arch = c.ForceArch
	}
	return cfg
}

// NTPCheaper is App A's inequality d/L < ½(1 − 2/N), evaluated exactly as
// 2N·d < (N−2)·L: SP-NTP on a TP deployment (gathering the attention
// weights) moves less than SP-TP. False for N ≤ 2.
func NTPCheaper(promptLen, hidden, n int) bool {
	return int64(2*n)*int64(hidden) < int64(n-2)*int64(promptLen)
}

// ArchElems are the elements SP-NTP and SP-TP move per layer over all n
// ranks for a prompt of promptLen tokens and width hidden (App A, which
// assumes MHA): SP-NTP's two all-to-alls 4·L·d·(N−1)/N, plus the
// attention weights' all-gather 4d²·(N−1) on a TP deployment; SP-TP's
// all-gather and reduce-scatter 2·L·d·(N−1).
func ArchElems(promptLen, hidden, n int, gatherWeights bool) (ntp, tp float64) {
	l, d, nn := float64(promptLen), float64(hidden), float64(n)
	ntp = 4 * l * d * (nn - 1) / nn
	if gatherWeights {
		ntp += 4 * d * d * (nn - 1)
	}
	return ntp, 2 * l * d * (nn - 1)
}

// objective picks cfg's CSA setting by the TTFT objective.
func (c *CSPS) objective(promptLen int, cfg CSPSConfig) CSPSConfig {
	o := c.Objective
	dense := cfg
	dense.CSALevels, dense.CSADrop = 1, 0
	if o.Prefill(promptLen, dense) <= o.TTFT {
		return dense
	}
	for i := 0; i <= dropSteps; i++ {
		cfg.CSADrop = float64(i) * dropStep
		if o.Prefill(promptLen, cfg) <= o.TTFT {
			return cfg
		}
	}
	return cfg
}
