// Package kvcache holds the paged key/value cache.
//
// The cache is divided into fixed-size blocks of BlockSize token slots; a
// sequence owns a block table (a list of block ids) and token position p
// lives in block table[p/BlockSize], slot p%BlockSize. The package has two
// audiences, kept apart as in Ollama's cache: the layers read and write one
// layer's keys and values through Cache, and the scheduler hands out and
// takes back whole blocks through BlockManager (reference counts and
// automatic prefix caching), which answers yes or no and never blocks.
// HostStore is a second tier in host memory holding the whole model's KV
// of parked sequences, laid out so that ranks push and pull their slices
// (pipeline stages' layers, tensor-parallel heads) as contiguous runs.
// Both tiers store keys and values in one Layout.DType: float32, or BF16
// or F16 at half the bytes, rounded to nearest on Put and moved between
// tiers as stored.
//
// BlockManager's invariant: every block is exactly one of in use, evictable
// (cached, no references) or fresh; a cached block's hash names exactly the
// tokens written in it and every token before it, so a sequence that
// reuses it reads the keys and values it would have computed.
package kvcache
