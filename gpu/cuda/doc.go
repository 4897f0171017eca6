// Package cuda binds, at run time and without cgo, the parts of the CUDA
// driver API, NVRTC and cuBLAS that Gearbox's GPU backend uses. The
// libraries are found with gpu.Search and loaded with purego
// (github.com/ebitengine/purego), so `CGO_ENABLED=0 go build` works and the
// binary runs on hosts without a GPU; only Open, LoadNVRTC and NewBLAS fail
// there, with an error naming the library and every place searched. Each
// library is loaded once per process and path.
//
// # One worker thread per device
//
// A CUDA context is current per OS thread, not per goroutine, and the Go
// scheduler moves goroutines between threads. A driver call made by a
// goroutine that was moved after cuCtxSetCurrent fails with
// CUDA_ERROR_INVALID_CONTEXT (201), or worse, runs against another device's
// context. A Context therefore owns one worker goroutine that calls
// runtime.LockOSThread, makes the device's primary context current, and then
// makes every driver and cuBLAS call for that device. Other goroutines
// hand it work with Context.Do, which runs a function on the worker and
// returns its error. Every Context method other than the information
// getters (Ordinal, Name, Capability, ...), Do and Close calls the driver
// directly and must be called from inside Do; so must every BLAS method.
// Called anywhere else they fail with CUDA_ERROR_INVALID_CONTEXT.
//
// NVRTC needs no context: its functions may be called from any goroutine.
//
// Files to read first: context.go (Open, Do, Close), ops.go (memory,
// streams, modules, launches, events, graphs), nvrtc.go (Compile,
// CompileCached).
package cuda
