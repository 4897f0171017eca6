// Package cpuexec runs model steps on CPU ranks: one goroutine per rank,
// each holding its weight shard and KV slice under a placement and talking
// to its peers only through comm, over a flattened varlen batch against a
// paged KV cache.
//
// Read these first: executor.go (placements held, Step, the ranks'
// goroutines), rank.go (one rank's forward pass, top to bottom),
// attention.go (paged attention with an online softmax that also returns
// the log-sum-exp, so partial results over disjoint key ranges merge
// exactly), transition.go (moving KV and weights to another placement),
// sidp.go (SiDP: the replicas' pooled MLP weights, fetched into slots or
// served by their owner), procs.go (ranks in several processes: a step
// runs only the ranks this process hosts). csps.go is CSPS's executor (KV
// sharded along the sequence, full weights per rank, queries moved to the
// KV), csps_rank.go its rank program (SP-NTP), csps_sptp.go its SP-TP
// prefill (all-gather, head-chunk weights, reduce-scatter), csa.go its
// multi-level sparse attention.
//
// Weight matrices are multiplied in the format the model holds them in
// (tensor.MatMulW: float32, BF16, F16 or Q8_0, accumulating in float32);
// activations are float32. The KV cache is float32 by default, or BF16 or
// F16 (Options.KVDType): keys and values are rounded to nearest as they
// are written, at half the cache's bytes, and attention accumulates in
// float32: attendBlock widens 32 keys and values at a time into a buffer
// and attends them as float32 ones. Attention takes a prompt's rows in
// blocks of up to 16 per KV head (attendBlock), each tile of keys scored
// for all of them at once, and gives a query the same result bit for bit
// whatever block it came in (CSPS's micro-partitions rely on it).
//
// Invariant: under every placement, the executor computes the same
// function as the naive float64 forward pass kept in the tests, for any
// split of sequences into prefill chunks and decode steps (exactly up to
// float32 rounding with float32 or checkpoint-dtype BF16/F16 weights and
// a float32 KV cache; within the stated tolerances of lowp_test.go with
// converted or Q8_0 weights and of kvdtype_test.go with a 16-bit KV
// cache); a transition or a swap through the host store delivers every KV
// element (the stored 16-bit ones of a BF16 or F16 cache) and every
// weight element bit-exact (Q8_0 shards are re-cut from the host copy
// instead of moved).
package cpuexec
