// Package cudaexec runs a Llama-family model on one CUDA device: the
// Executor (executor.go) holds the weights in the run's dtype, a paged KV
// cache and the step buffers; forward.go runs a step's rank program for
// every rank of a placement on the one device, collectives as device
// copies counted as the CPU executor counts them; kernels.go wraps the
// CUDA C kernels of kernels/ and graphs.go picks the CUDA graph buckets.
// Read executor.go, then forward.go, then seesaw.go.
//
// Seesaw (paper 004; seesaw.go, swap.go). The executor is an
// engine.Transitioner and an engine.Swapper, so `--policy seesaw` runs on
// the GPU. Choices the spec leaves open, stated:
//
//   - Weights: only the placements sharing the KV cache's current slices
//     are resident. A transition to a placement that does not share them
//     frees those shards and uploads the new ones from the host copy of
//     the weights (model.Weights, kept by the executor; the uploader of
//     upload.go packs them in the run's dtype into page-locked stages and
//     copies one while it packs the next), never keeping
//     both placements' weights on the device even when memory would allow
//     it: Seesaw re-shards because device memory is better spent on KV,
//     and one rule keeps the KV pool's size independent of the model's.
//     The pool is sized at start for the larger placement's weights and
//     KV layout plus one layer of transition headroom.
//   - KV on a transition: the whole device pool moves (policy.Seesaw keeps
//     requests still decoding on the device across a phase change), device
//     to device, one global layer at a time: each rank's keys and values
//     are one allocation per layer, so the new layer is allocated, filled
//     by strided copies from the old ranks' buffers as parallel.Transition
//     plans them, and the old layer freed.
//   - Host KV store: Options.HostBlocks blocks of a kvcache.HostStore (HND
//     per layer) in pageable Go memory. A swap moves each rank's slice
//     through a device and a host staging buffer (at most 64 MiB each;
//     the host one page-locked), host↔device in 4 MiB copies (so that
//     a step's own copies wait behind one piece, not a whole chunk), the
//     host side packed and unpacked on the executor's pool: out, a
//     gather kernel per layer collects the blocks; in, one device copy
//     per run of consecutive device blocks places them. Both run on a
//     side stream beside the steps (the engine's background offload and
//     prefetch, spec P2 and P3): the device thread only queues the
//     gathers and copies, the caller polls their event between steps and
//     moves the host stage to or from the store itself; a swap returns,
//     and its requests become decodable or their device blocks free,
//     once the copies have landed. One swap runs at a time, and a
//     chunk's stages are refilled only after it has landed.
//   - A transition that fails half-way (out of memory, a device error)
//     leaves the executor unusable: every later call returns its error.
package cudaexec
