// Package forward defines one model step as every executor sees it: a
// Batch of sequence pieces (prefill chunks and decode tokens) against the
// paged KV cache, with the logits rows it wants.
package forward
