// Package forward is one model step as every backend runs it: the Batch
// (sequence pieces — prefill chunks and decode tokens — against the paged
// KV cache, with the logits rows wanted) and the rank program, Run, written
// once over the Ops seam that the CPU executor, the CUDA executor and the
// simulator's cost model implement.
//
// Read program.go first: Run is Algorithm 1 of the Shift Parallelism
// paper generalised by a placement's shape (pipeline stage, TP and SP
// degrees), and Ops says what each backend op computes.
package forward
