package cuda

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"
)

// Every method in this file calls the driver directly and must run inside
// Do on c's worker.

// MemInfo returns the device's free and total memory in bytes. Call inside
// Do.
func (c *Context) MemInfo() (free, total int64, err error) {
	var f, t uintptr
	if err := c.check("cuMemGetInfo_v2", c.d.cuMemGetInfo(&f, &t)); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

// Alloc allocates bytes of device memory. Call inside Do.
func (c *Context) Alloc(bytes int64) (DevicePtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("cuda: device %d: alloc %d bytes: size must be positive", c.ordinal, bytes)
	}
	var p DevicePtr
	if code := c.d.cuMemAlloc(&p, uintptr(bytes)); code != 0 {
		return 0, c.fail(fmt.Sprintf("alloc %d bytes", bytes), "cuMemAlloc_v2", code)
	}
	return p, nil
}

// Free frees memory from Alloc. Freeing 0 does nothing. Call inside Do.
func (c *Context) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return c.check("cuMemFree_v2", c.d.cuMemFree(p))
}

// HostAlloc allocates bytes of page-locked host memory, which copies to
// and from the device cross at the link's rate (the driver stages pageable
// memory through its own page-locked buffers at a fraction of it). It
// returns nil and no error when the driver lacks cuMemHostAlloc; free the
// memory with HostFree. Call inside Do.
func (c *Context) HostAlloc(bytes int64) (unsafe.Pointer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: device %d: host alloc %d bytes: size must be positive", c.ordinal, bytes)
	}
	if c.d.cuMemHostAlloc == nil || c.d.cuMemFreeHost == nil {
		return nil, nil
	}
	var p unsafe.Pointer
	if code := c.d.cuMemHostAlloc(&p, uintptr(bytes), 0); code != 0 {
		return nil, c.fail(fmt.Sprintf("host alloc %d bytes", bytes), "cuMemHostAlloc", code)
	}
	return p, nil
}

// HostFree frees memory from HostAlloc. Freeing nil does nothing. Call
// inside Do.
func (c *Context) HostFree(p unsafe.Pointer) error {
	if p == nil {
		return nil
	}
	return c.check("cuMemFreeHost", c.d.cuMemFreeHost(p))
}

// size checks a byte or element count passed to the driver.
func (c *Context) size(what string, n int64) error {
	if n < 0 {
		return fmt.Errorf("cuda: device %d: %s: negative size %d", c.ordinal, what, n)
	}
	return nil
}

// CopyHtoD copies bytes from host memory at src to dst and returns when
// the copy is done. Call inside Do.
func (c *Context) CopyHtoD(dst DevicePtr, src unsafe.Pointer, bytes int64) error {
	if err := c.size("copy host to device", bytes); err != nil {
		return err
	}
	code := c.d.cuMemcpyHtoD(dst, src, uintptr(bytes))
	runtime.KeepAlive(src)
	return c.check("cuMemcpyHtoD_v2", code)
}

// CopyDtoH copies bytes from src to host memory at dst and returns when
// the copy is done. Call inside Do.
func (c *Context) CopyDtoH(dst unsafe.Pointer, src DevicePtr, bytes int64) error {
	if err := c.size("copy device to host", bytes); err != nil {
		return err
	}
	code := c.d.cuMemcpyDtoH(dst, src, uintptr(bytes))
	runtime.KeepAlive(dst)
	return c.check("cuMemcpyDtoH_v2", code)
}

// CopyHtoDAsync queues a copy of bytes from host memory at src to dst on
// s. src must stay alive and unchanged until the stream reaches the copy;
// from pageable Go memory the driver stages the data before returning, but
// only page-locked memory makes the copy truly asynchronous. Call inside
// Do.
func (c *Context) CopyHtoDAsync(dst DevicePtr, src unsafe.Pointer, bytes int64, s Stream) error {
	if err := c.size("copy host to device", bytes); err != nil {
		return err
	}
	code := c.d.cuMemcpyHtoDAsync(dst, src, uintptr(bytes), s)
	runtime.KeepAlive(src)
	return c.check("cuMemcpyHtoDAsync_v2", code)
}

// CopyDtoHAsync queues a copy of bytes from src to host memory at dst on
// s. dst must stay alive until the stream has been synchronised. Call
// inside Do.
func (c *Context) CopyDtoHAsync(dst unsafe.Pointer, src DevicePtr, bytes int64, s Stream) error {
	if err := c.size("copy device to host", bytes); err != nil {
		return err
	}
	code := c.d.cuMemcpyDtoHAsync(dst, src, uintptr(bytes), s)
	runtime.KeepAlive(dst)
	return c.check("cuMemcpyDtoHAsync_v2", code)
}

// CopyDtoDAsync queues a device-to-device copy of bytes on s. Call inside
// Do.
func (c *Context) CopyDtoDAsync(dst, src DevicePtr, bytes int64, s Stream) error {
	if err := c.size("copy device to device", bytes); err != nil {
		return err
	}
	return c.check("cuMemcpyDtoDAsync_v2", c.d.cuMemcpyDtoDAsync(dst, src, uintptr(bytes), s))
}

// MemsetD8Async queues setting bytes bytes at p to v on s. Call inside Do.
func (c *Context) MemsetD8Async(p DevicePtr, v byte, bytes int64, s Stream) error {
	if err := c.size("memset", bytes); err != nil {
		return err
	}
	return c.check("cuMemsetD8Async", c.d.cuMemsetD8Async(p, v, uintptr(bytes), s))
}

// MemsetD32Async queues setting words 32-bit words at p (4-byte aligned)
// to v on s. Call inside Do.
func (c *Context) MemsetD32Async(p DevicePtr, v uint32, words int64, s Stream) error {
	if err := c.size("memset", words); err != nil {
		return err
	}
	return c.check("cuMemsetD32Async", c.d.cuMemsetD32Async(p, v, uintptr(words), s))
}

// Synchronize waits for all work queued on the device (cuCtxSynchronize).
// Call inside Do.
func (c *Context) Synchronize() error {
	return c.check("cuCtxSynchronize", c.d.cuCtxSynchronize())
}

// NewStream creates a stream that does not synchronise with the legacy
// default stream (CU_STREAM_NON_BLOCKING). Call inside Do.
func (c *Context) NewStream() (Stream, error) {
	var s Stream
	if err := c.check("cuStreamCreate", c.d.cuStreamCreate(&s, streamNonBlocking)); err != nil {
		return 0, err
	}
	return s, nil
}

// DestroyStream destroys s once its queued work is done. Call inside Do.
func (c *Context) DestroyStream(s Stream) error {
	return c.check("cuStreamDestroy_v2", c.d.cuStreamDestroy(s))
}

// SyncStream waits for the work queued on s. Call inside Do.
func (c *Context) SyncStream(s Stream) error {
	return c.check("cuStreamSynchronize", c.d.cuStreamSynchronize(s))
}

// elfMagic starts a cubin; fatbinMagic (0xBA55ED50, little-endian) starts
// a fat binary.
var (
	elfMagic    = []byte("\x7fELF")
	fatbinMagic = []byte{0x50, 0xed, 0x55, 0xba}
)

// LoadModule loads a cubin, fat binary or PTX image. PTX is text and must
// be NUL-terminated for the driver; a copy with a NUL appended is passed
// when image lacks one. Call inside Do.
func (c *Context) LoadModule(image []byte) (Module, error) {
	kind := "PTX"
	switch {
	case len(image) == 0:
		return 0, fmt.Errorf("cuda: device %d: load module: empty image", c.ordinal)
	case bytes.HasPrefix(image, elfMagic):
		kind = "cubin"
	case bytes.HasPrefix(image, fatbinMagic):
		kind = "fatbin"
	case image[len(image)-1] != 0:
		image = append(image[:len(image):len(image)], 0)
	}
	var m Module
	code := c.d.cuModuleLoadData(&m, unsafe.Pointer(&image[0]))
	runtime.KeepAlive(image)
	if code != 0 {
		return 0, c.fail(fmt.Sprintf("load module (%s, %d bytes)", kind, len(image)), "cuModuleLoadData", code)
	}
	return m, nil
}

// UnloadModule unloads m; its functions become invalid. Call inside Do.
func (c *Context) UnloadModule(m Module) error {
	return c.check("cuModuleUnload", c.d.cuModuleUnload(m))
}

// Function looks up the kernel name (its extern "C" or mangled name) in m.
// Call inside Do.
func (c *Context) Function(m Module, name string) (Function, error) {
	cname, err := cString("kernel name", name)
	if err != nil {
		return 0, fmt.Errorf("cuda: device %d: %w", c.ordinal, err)
	}
	var f Function
	code := c.d.cuModuleGetFunction(&f, m, &cname[0])
	runtime.KeepAlive(cname)
	if code != 0 {
		return 0, c.fail(fmt.Sprintf("kernel %q", name), "cuModuleGetFunction", code)
	}
	return f, nil
}

// SetMaxDynamicShared lets launches of f ask for up to bytes of dynamic
// shared memory (needed above 48 KiB). Call inside Do.
func (c *Context) SetMaxDynamicShared(f Function, bytes int) error {
	if bytes < 0 || bytes > math.MaxInt32 {
		return fmt.Errorf("cuda: device %d: max dynamic shared memory %d bytes out of range", c.ordinal, bytes)
	}
	if code := c.d.cuFuncSetAttribute(f, funcAttrMaxDynamicShared, int32(bytes)); code != 0 {
		return c.fail(fmt.Sprintf("set max dynamic shared memory to %d bytes", bytes), "cuFuncSetAttribute", code)
	}
	return nil
}

// Launch queues kernel f on s with sharedBytes of dynamic shared memory.
// Each of args points at a Go variable holding one kernel argument, in
// order: for `k(float* y, float a, int n)` pass unsafe.Pointer(&y),
// unsafe.Pointer(&a), unsafe.Pointer(&n) where y is a DevicePtr, a a
// float32 and n an int32. The driver copies the values before Launch
// returns. Call inside Do.
func (c *Context) Launch(f Function, grid, block Dim3, sharedBytes int, s Stream, args ...unsafe.Pointer) error {
	if sharedBytes < 0 || uint64(sharedBytes) > math.MaxUint32 {
		return fmt.Errorf("cuda: device %d: launch: shared memory %d bytes out of range", c.ordinal, sharedBytes)
	}
	var params unsafe.Pointer
	if len(args) > 0 {
		params = unsafe.Pointer(&args[0])
	}
	code := c.d.cuLaunchKernel(f, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, uint32(sharedBytes), s, params, nil)
	runtime.KeepAlive(args)
	if code != 0 {
		return c.fail(fmt.Sprintf("launch grid %v block %v shared %d with %d args", grid, block, sharedBytes, len(args)), "cuLaunchKernel", code)
	}
	return nil
}

// NewEvent creates an event that records timing. Call inside Do.
func (c *Context) NewEvent() (Event, error) {
	var e Event
	if err := c.check("cuEventCreate", c.d.cuEventCreate(&e, eventDefault)); err != nil {
		return 0, err
	}
	return e, nil
}

// RecordEvent queues e on s. Call inside Do.
func (c *Context) RecordEvent(e Event, s Stream) error {
	return c.check("cuEventRecord", c.d.cuEventRecord(e, s))
}

// SyncEvent waits until the work before e's last record is done. Call
// inside Do.
func (c *Context) SyncEvent(e Event) error {
	return c.check("cuEventSynchronize", c.d.cuEventSynchronize(e))
}

// EventDone reports whether the work before e's last record is done,
// without waiting (cuEventQuery). Call inside Do.
func (c *Context) EventDone(e Event) (bool, error) {
	switch code := c.d.cuEventQuery(e); code {
	case 0:
		return true, nil
	case errNotReady:
		return false, nil
	default:
		return false, c.check("cuEventQuery", code)
	}
}

// Elapsed is the GPU time between two recorded, completed events (about
// 0.5 µs resolution). Call inside Do.
func (c *Context) Elapsed(start, end Event) (time.Duration, error) {
	var ms float32
	if err := c.check("cuEventElapsedTime", c.d.cuEventElapsedTime(&ms, start, end)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// DestroyEvent destroys e. Call inside Do.
func (c *Context) DestroyEvent(e Event) error {
	return c.check("cuEventDestroy_v2", c.d.cuEventDestroy(e))
}

// BeginCapture starts capturing the work queued on s into a graph instead
// of running it (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL). s must not be the
// legacy default stream. Call inside Do, and EndCapture on the same
// worker.
func (c *Context) BeginCapture(s Stream) error {
	return c.check("cuStreamBeginCapture_v2", c.d.cuStreamBeginCapture(s, captureModeThreadLocal))
}

// EndCapture ends the capture on s and returns the captured graph. Call
// inside Do.
func (c *Context) EndCapture(s Stream) (Graph, error) {
	var g Graph
	if err := c.check("cuStreamEndCapture", c.d.cuStreamEndCapture(s, &g)); err != nil {
		return 0, err
	}
	return g, nil
}

// Instantiate makes a launchable graph from g; g may then be destroyed.
// Call inside Do.
func (c *Context) Instantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	if err := c.check("cuGraphInstantiateWithFlags", c.d.cuGraphInstantiateWithFlags(&e, g, 0)); err != nil {
		return 0, err
	}
	return e, nil
}

// LaunchGraph queues g on s. Call inside Do.
func (c *Context) LaunchGraph(g GraphExec, s Stream) error {
	return c.check("cuGraphLaunch", c.d.cuGraphLaunch(g, s))
}

// DestroyGraph destroys g. Call inside Do.
func (c *Context) DestroyGraph(g Graph) error {
	return c.check("cuGraphDestroy", c.d.cuGraphDestroy(g))
}

// DestroyGraphExec destroys g. Call inside Do.
func (c *Context) DestroyGraphExec(g GraphExec) error {
	return c.check("cuGraphExecDestroy", c.d.cuGraphExecDestroy(g))
}
