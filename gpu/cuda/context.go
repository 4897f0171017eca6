package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/gpu"
)

// DevicePtr is a device memory address; 0 is null.
type DevicePtr uintptr

// Stream is a CUstream; 0 is the legacy default stream.
type Stream uintptr

// Module is a loaded CUmodule.
type Module uintptr

// Function is a kernel (CUfunction) in a Module.
type Function uintptr

// Event is a CUevent.
type Event uintptr

// Graph is a captured CUgraph.
type Graph uintptr

// GraphExec is an instantiated, launchable CUgraphExec.
type GraphExec uintptr

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// Context is one device's primary context and the worker goroutine, locked
// to its OS thread, that makes every driver call for it (see the package
// documentation). Open one per device; Close it when done.
type Context struct {
	// Set at Open, read-only afterwards.
	ordinal       int
	dev           int32 // CUdevice
	name          string
	cc            gpu.ComputeCapability
	sms           int
	totalMem      int64
	driverVersion int
	driverPath    string
	d             *driverAPI

	ctx uintptr // CUcontext, the device's primary context

	// tid is the worker's OS thread id while the worker runs, -1 after.
	tid atomic.Int64

	reqs      chan request
	quit      chan struct{} // closed by Close
	done      chan struct{} // closed by the worker when it has stopped
	closeOnce sync.Once
	closeErr  error // the worker's release error; read after done
}

type request struct {
	f     func() error
	reply chan error
}

// replies recycles Do's reply channels (buffered, one value each).
var replies = sync.Pool{New: func() any { return make(chan error, 1) }}

// Open initialises the CUDA driver and device ordinal and starts the
// device's worker. It finds the driver with gpu.Search; when there is none
// the error is gpu.Search's, naming the library and every place looked in
// (it wraps gpu.ErrNotFound). Driver errors wrap *gpu.Error and name the
// device.
func Open(ordinal int) (*Context, error) {
	if ordinal < 0 {
		return nil, fmt.Errorf("cuda: device %d: negative ordinal", ordinal)
	}
	path, _, err := gpu.Search(gpu.Driver, gpu.OSEnv())
	if err != nil {
		return nil, err
	}
	d, err := loadDriver(path)
	if err != nil {
		return nil, err
	}
	c := &Context{
		ordinal:    ordinal,
		driverPath: path,
		d:          d,
		reqs:       make(chan request),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	c.tid.Store(-1)
	started := make(chan error)
	go c.worker(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// worker runs on its own locked OS thread for the Context's lifetime. It
// never unlocks the thread: when it returns, the runtime ends the thread,
// and with it the thread's current-context binding.
func (c *Context) worker(started chan<- error) {
	runtime.LockOSThread()
	c.tid.Store(int64(threadID()))
	if err := c.init(); err != nil {
		c.tid.Store(-1)
		started <- err
		return
	}
	started <- nil
	for {
		select {
		case r := <-c.reqs:
			r.reply <- c.run(r.f)
		case <-c.quit:
			c.closeErr = c.release()
			c.tid.Store(-1)
			close(c.done)
			return
		}
	}
}

// init runs on the worker thread: cuInit, device properties, primary
// context retained and made current.
func (c *Context) init() error {
	d := c.d
	if err := c.check("cuInit", d.cuInit(0)); err != nil {
		return err
	}
	var v int32
	if err := c.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return err
	}
	c.driverVersion = int(v)
	var n int32
	if err := c.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return err
	}
	if c.ordinal >= int(n) {
		return fmt.Errorf("cuda: device %d: no such device: the driver reports %d CUDA device(s)", c.ordinal, n)
	}
	if err := c.check("cuDeviceGet", d.cuDeviceGet(&c.dev, int32(c.ordinal))); err != nil {
		return err
	}
	buf := make([]byte, deviceNameBufferBytes)
	if err := c.check("cuDeviceGetName", d.cuDeviceGetName(&buf[0], int32(len(buf)), c.dev)); err != nil {
		return err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	c.name = string(buf)
	attr := func(a int32) (int, error) {
		var v int32
		err := c.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, a, c.dev))
		return int(v), err
	}
	var errs [3]error
	c.cc.Major, errs[0] = attr(attrComputeCapabilityMajor)
	c.cc.Minor, errs[1] = attr(attrComputeCapabilityMinor)
	c.sms, errs[2] = attr(attrMultiprocessorCount)
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	var total uintptr
	if err := c.check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&total, c.dev)); err != nil {
		return err
	}
	c.totalMem = int64(total)
	if err := c.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c.ctx, c.dev)); err != nil {
		return err
	}
	if err := c.check("cuCtxSetCurrent", d.cuCtxSetCurrent(c.ctx)); err != nil {
		return errors.Join(err, c.check("cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease(c.dev)))
	}
	return nil
}

// release runs on the worker thread when the Context closes.
func (c *Context) release() error {
	d := c.d
	return errors.Join(
		c.check("cuCtxSetCurrent", d.cuCtxSetCurrent(0)),
		c.check("cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease(c.dev)),
	)
}

// Do runs f on the device's worker thread, where the context is current,
// and returns f's error. It may be called from any goroutine; calls are
// run one at a time in arrival order. A panic in f is recovered and
// returned as an error. Do called from inside f runs the inner function
// directly. After Close, Do returns an error without running f.
func (c *Context) Do(f func() error) error {
	if f == nil {
		return nil
	}
	if c.onWorker() {
		return c.run(f)
	}
	reply := replies.Get().(chan error)
	select {
	case c.reqs <- request{f: f, reply: reply}:
	case <-c.quit:
		replies.Put(reply)
		return fmt.Errorf("cuda: device %d: context closed", c.ordinal)
	}
	err := <-reply
	replies.Put(reply)
	return err
}

// onWorker reports whether the caller is the worker goroutine. The worker
// is locked to its thread, so no other goroutine ever runs on that thread
// while it lives.
func (c *Context) onWorker() bool {
	tid := c.tid.Load()
	return tid >= 0 && tid == int64(threadID())
}

// run calls f, turning a panic into an error.
func (c *Context) run(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			at := panicSite()
			if e, ok := r.(error); ok {
				err = fmt.Errorf("cuda: device %d: panic in Do%s: %w", c.ordinal, at, e)
			} else {
				err = fmt.Errorf("cuda: device %d: panic in Do%s: %v", c.ordinal, at, r)
			}
		}
	}()
	return f()
}

// panicSite returns " at function (file:line)" for the innermost non-runtime
// frame of the panicking goroutine, or "" when there is none. It must be
// called from the deferred function that recovers.
func panicSite() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs) // skip Callers, panicSite, the deferred func
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf(" at %s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}

// Close releases the primary context and stops the worker, after the
// function it is running, if any, returns. It is idempotent: later calls
// return the first call's result. Close must not be called from inside Do.
func (c *Context) Close() error {
	if c.onWorker() {
		return fmt.Errorf("cuda: device %d: Close called inside Do", c.ordinal)
	}
	c.closeOnce.Do(func() {
		close(c.quit)
		<-c.done
	})
	return c.closeErr
}

// Ordinal is the device ordinal passed to Open.
func (c *Context) Ordinal() int { return c.ordinal }

// Name is the device's name, e.g. "NVIDIA H100 80GB HBM3".
func (c *Context) Name() string { return c.name }

// Capability is the device's compute capability, e.g. {9, 0}.
func (c *Context) Capability() gpu.ComputeCapability { return c.cc }

// Multiprocessors is the device's streaming multiprocessor count.
func (c *Context) Multiprocessors() int { return c.sms }

// TotalMem is the device's memory in bytes.
func (c *Context) TotalMem() int64 { return c.totalMem }

// DriverVersion is cuDriverGetVersion's value, e.g. 13000 for CUDA 13.0.
func (c *Context) DriverVersion() int { return c.driverVersion }

// DriverPath is the driver library file that was loaded.
func (c *Context) DriverPath() string { return c.driverPath }

// check returns nil for CUDA_SUCCESS and otherwise an error naming the
// device and wrapping the *gpu.Error for call.
func (c *Context) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("cuda: device %d: %w", c.ordinal, c.d.status(call, code))
}

// fail is check for a non-zero code with a description of the operation.
func (c *Context) fail(what, call string, code int32) error {
	return fmt.Errorf("cuda: device %d: %s: %w", c.ordinal, what, c.d.status(call, code))
}
