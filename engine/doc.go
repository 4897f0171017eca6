// Package engine runs models: the CPU forward pass over a flattened varlen
// batch against a paged KV cache, and the generation loop on top of it.
//
// Read these first: batch.go (what one step is), runner.go (the forward
// pass, top to bottom), attention.go (paged attention with an online
// softmax that also returns the log-sum-exp, so partial results over
// disjoint key ranges merge exactly).
//
// Invariant: the runner computes the same function as the naive float64
// forward pass kept in the tests, for any split of sequences into prefill
// chunks and decode steps.
package engine
