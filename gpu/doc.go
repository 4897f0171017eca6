// Package gpu is the pure-Go foundation of Gearbox's CUDA backend: it finds
// the CUDA libraries on the host (driver, NVRTC, cuBLAS, cuBLASLt),
// decides at start-up whether a run uses a GPU or the CPU, names the error
// codes those libraries return, caches NVRTC-compiled kernels on disk and
// picks the CUDA graph bucket for a decode batch.
//
// Nothing here needs cgo: libraries are loaded at run time with purego
// (github.com/ebitengine/purego), so `CGO_ENABLED=0 go build` produces a
// binary that runs on hosts with or without a GPU. Link stubs (any path with
// a "stubs" element) are never chosen: loading one makes every driver call
// fail with CUDA_ERROR_STUB_LIBRARY.
//
// Threads and contexts. A CUDA context is current per OS thread, and the Go
// scheduler moves goroutines between threads, so a call made after
// cuCtxSetCurrent on one thread can fail with CUDA_ERROR_INVALID_CONTEXT on
// another. The backend therefore gives each device exactly one worker
// goroutine that calls runtime.LockOSThread before making the context
// current and makes every driver and cuBLAS call for that device;
// other goroutines hand it work over a channel and never call CUDA
// themselves (gpu/cuda's Context.Do).
//
// The invariant this package keeps: every failure says what was asked for
// and where it was looked for (ErrNotFound lists every place searched;
// *Error carries the library, call, numeric code and name).
//
// Files to read first: libs.go (Search), device.go (ParseDevice, Resolve),
// errors.go (Error). The bindings live in gpu/cuda and the executor that
// runs a model on the GPU in gpu/cudaexec.
package gpu
