package sim

import "math"

// Constants of Nitsum's reconfiguration (papers/003 §3.2; spec §4.4).
// The two migration rates are fitted to Figure 7, so the paper's 3.6 ms
// and 24.8 ms (and, for the naive copy, 9.25 s) are not checks of them.
const (
	// NitsumHandshake is the fixed part of a fast KV migration, seconds:
	// the two-point fit through Figure 7's Nitsum column (0.5 GiB in
	// 3.6 ms, 5 GiB in 24.8 ms) has intercept 3.6 ms − 0.5 GiB / 227.9 GB/s
	// = 1.244 ms: the metadata handshake (request, head, length) and the
	// pipeline's fill.
	NitsumHandshake = 3.6e-3 - 0.5*gib/NitsumMigrationBytesPerS

	// NitsumMigrationBytesPerS is the aggregated, double-buffered KV
	// migration's rate, bytes per second: Figure 7's slope, (5 − 0.5) GiB
	// over (24.8 − 3.6) ms.
	NitsumMigrationBytesPerS = 4.5 * gib / (24.8e-3 - 3.6e-3)

	// NitsumMemcpyBytesPerS is the naive path's KV rate, one
	// cudaMemcpyAsync per page: Figure 7's 5 GiB in 9.25 s (0.58 GB/s),
	// with no fixed cost; its 0.5 GiB point (0.88 s) is then a prediction.
	NitsumMemcpyBytesPerS = 5 * gib / 9.25

	// NitsumWeightReload is the naive path's weight reload at a TP
	// change, seconds: "about 30 s for Qwen-14B even when the weights are
	// cached in CPU memory" (§3.2.1, W5). It is the paper's measurement of
	// SGLang's reload path, not this cost model's host copy (which would
	// take under a second over PCIe Gen5): the reload re-initialises the
	// engine, which the model does not price.
	NitsumWeightReload = 30.0

	// NitsumKernelPrep is the naive path's kernel preparation (CUDA graph
	// capture, torch.compile) at a TP change, seconds: the low end of
	// "10 s to more than 1 min" (§3.2.1, W5).
	NitsumKernelPrep = 10.0
)

// NitsumSwitch is how an instance changes TP degree or role.
type NitsumSwitch uint8

const (
	// FastSwitch is Nitsum's: shard views and warm executors switch
	// weights for free (spec §4.4: "treat as 0"), KV moves aggregated and
	// pipelined at NitsumMigrationBytesPerS after NitsumHandshake.
	FastSwitch NitsumSwitch = iota
	// NaiveSwitch reloads the weights (NitsumWeightReload), prepares the
	// kernels (NitsumKernelPrep) and copies KV page by page at
	// NitsumMemcpyBytesPerS: the ablation's "dynamic TP without fast
	// switching".
	NaiveSwitch
)

func (s NitsumSwitch) String() string {
	if s == NaiveSwitch {
		return "naive"
	}
	return "fast"
}

// MigrationTime is the seconds to move bytes of KV into one GPU under
// switch s: the pause of stop-and-migrate for a receiver of that many
// bytes (every receiver of a reconfiguration works in parallel).
func MigrationTime(s NitsumSwitch, bytes float64) float64 {
	if s == NaiveSwitch {
		return bytes / NitsumMemcpyBytesPerS
	}
	if bytes <= 0 {
		return NitsumHandshake
	}
	return NitsumHandshake + bytes/NitsumMigrationBytesPerS
}

// SwitchPause is the seconds an instance is stopped when it is created by
// a reconfiguration and receives kvBytes of KV per GPU: the migration,
// plus under NaiveSwitch the weight reload and kernel preparation.
func SwitchPause(s NitsumSwitch, kvBytes float64) float64 {
	t := MigrationTime(s, kvBytes)
	if s == NaiveSwitch {
		t += NitsumWeightReload + NitsumKernelPrep
	}
	return math.Max(t, 0)
}
