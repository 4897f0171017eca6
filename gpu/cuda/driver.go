package cuda

import (
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
)

// driverAPI holds the CUDA driver functions. Go types follow cuda.h:
// CUresult and enums are int32, CUdevice is int32, size_t and CUdeviceptr
// (unsigned long long on 64-bit hosts) are uintptr, handles are uintptr.
type driverAPI struct {
	cuInit                      func(flags uint32) int32
	cuDriverGetVersion          func(version *int32) int32
	cuDeviceGetCount            func(count *int32) int32
	cuDeviceGet                 func(dev *int32, ordinal int32) int32
	cuDeviceGetName             func(name *byte, length int32, dev int32) int32
	cuDeviceGetAttribute        func(v *int32, attr int32, dev int32) int32
	cuDeviceTotalMem            func(bytes *uintptr, dev int32) int32
	cuDevicePrimaryCtxRetain    func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease   func(dev int32) int32
	cuCtxSetCurrent             func(ctx uintptr) int32
	cuCtxSynchronize            func() int32
	cuMemGetInfo                func(free, total *uintptr) int32
	cuMemAlloc                  func(p *DevicePtr, bytes uintptr) int32
	cuMemFree                   func(p DevicePtr) int32
	cuMemcpyHtoD                func(dst DevicePtr, src unsafe.Pointer, bytes uintptr) int32
	cuMemcpyDtoH                func(dst unsafe.Pointer, src DevicePtr, bytes uintptr) int32
	cuMemcpyHtoDAsync           func(dst DevicePtr, src unsafe.Pointer, bytes uintptr, s Stream) int32
	cuMemcpyDtoHAsync           func(dst unsafe.Pointer, src DevicePtr, bytes uintptr, s Stream) int32
	cuMemcpyDtoDAsync           func(dst, src DevicePtr, bytes uintptr, s Stream) int32
	cuMemsetD8Async             func(p DevicePtr, v uint8, n uintptr, s Stream) int32
	cuMemsetD32Async            func(p DevicePtr, v uint32, n uintptr, s Stream) int32
	cuStreamCreate              func(s *Stream, flags uint32) int32
	cuStreamDestroy             func(s Stream) int32
	cuStreamSynchronize         func(s Stream) int32
	cuModuleLoadData            func(m *Module, image unsafe.Pointer) int32
	cuModuleGetFunction         func(f *Function, m Module, name *byte) int32
	cuModuleUnload              func(m Module) int32
	cuFuncSetAttribute          func(f Function, attr int32, v int32) int32
	cuLaunchKernel              func(f Function, gx, gy, gz, bx, by, bz, shared uint32, s Stream, params, extra unsafe.Pointer) int32
	cuEventCreate               func(e *Event, flags uint32) int32
	cuEventRecord               func(e Event, s Stream) int32
	cuEventSynchronize          func(e Event) int32
	cuEventQuery                func(e Event) int32
	cuEventElapsedTime          func(ms *float32, start, end Event) int32
	cuEventDestroy              func(e Event) int32
	cuStreamBeginCapture        func(s Stream, mode int32) int32
	cuStreamEndCapture          func(s Stream, g *Graph) int32
	cuGraphInstantiateWithFlags func(e *GraphExec, g Graph, flags uint64) int32
	cuGraphLaunch               func(e GraphExec, s Stream) int32
	cuGraphDestroy              func(g Graph) int32
	cuGraphExecDestroy          func(e GraphExec) int32
	cuGetErrorName              func(code int32, name **byte) int32                        // optional
	cuMemHostAlloc              func(p *unsafe.Pointer, bytes uintptr, flags uint32) int32 // optional
	cuMemFreeHost               func(p unsafe.Pointer) int32                               // optional
}

func (d *driverAPI) symbols() []symbol {
	return []symbol{
		{fn: &d.cuInit, name: "cuInit"},
		{fn: &d.cuDriverGetVersion, name: "cuDriverGetVersion"},
		{fn: &d.cuDeviceGetCount, name: "cuDeviceGetCount"},
		{fn: &d.cuDeviceGet, name: "cuDeviceGet"},
		{fn: &d.cuDeviceGetName, name: "cuDeviceGetName"},
		{fn: &d.cuDeviceGetAttribute, name: "cuDeviceGetAttribute"},
		{fn: &d.cuDeviceTotalMem, name: "cuDeviceTotalMem_v2"},
		{fn: &d.cuDevicePrimaryCtxRetain, name: "cuDevicePrimaryCtxRetain"},
		{fn: &d.cuDevicePrimaryCtxRelease, name: "cuDevicePrimaryCtxRelease_v2"},
		{fn: &d.cuCtxSetCurrent, name: "cuCtxSetCurrent"},
		{fn: &d.cuCtxSynchronize, name: "cuCtxSynchronize"},
		{fn: &d.cuMemGetInfo, name: "cuMemGetInfo_v2"},
		{fn: &d.cuMemAlloc, name: "cuMemAlloc_v2"},
		{fn: &d.cuMemFree, name: "cuMemFree_v2"},
		{fn: &d.cuMemcpyHtoD, name: "cuMemcpyHtoD_v2"},
		{fn: &d.cuMemcpyDtoH, name: "cuMemcpyDtoH_v2"},
		{fn: &d.cuMemcpyHtoDAsync, name: "cuMemcpyHtoDAsync_v2"},
		{fn: &d.cuMemcpyDtoHAsync, name: "cuMemcpyDtoHAsync_v2"},
		{fn: &d.cuMemcpyDtoDAsync, name: "cuMemcpyDtoDAsync_v2"},
		{fn: &d.cuMemsetD8Async, name: "cuMemsetD8Async"},
		{fn: &d.cuMemsetD32Async, name: "cuMemsetD32Async"},
		{fn: &d.cuStreamCreate, name: "cuStreamCreate"},
		{fn: &d.cuStreamDestroy, name: "cuStreamDestroy_v2"},
		{fn: &d.cuStreamSynchronize, name: "cuStreamSynchronize"},
		{fn: &d.cuModuleLoadData, name: "cuModuleLoadData"},
		{fn: &d.cuModuleGetFunction, name: "cuModuleGetFunction"},
		{fn: &d.cuModuleUnload, name: "cuModuleUnload"},
		{fn: &d.cuFuncSetAttribute, name: "cuFuncSetAttribute"},
		{fn: &d.cuLaunchKernel, name: "cuLaunchKernel"},
		{fn: &d.cuEventCreate, name: "cuEventCreate"},
		{fn: &d.cuEventRecord, name: "cuEventRecord"},
		{fn: &d.cuEventSynchronize, name: "cuEventSynchronize"},
		{fn: &d.cuEventQuery, name: "cuEventQuery"},
		{fn: &d.cuEventElapsedTime, name: "cuEventElapsedTime"},
		{fn: &d.cuEventDestroy, name: "cuEventDestroy_v2"},
		{fn: &d.cuStreamBeginCapture, name: "cuStreamBeginCapture_v2"},
		{fn: &d.cuStreamEndCapture, name: "cuStreamEndCapture"},
		{fn: &d.cuGraphInstantiateWithFlags, name: "cuGraphInstantiateWithFlags"},
		{fn: &d.cuGraphLaunch, name: "cuGraphLaunch"},
		{fn: &d.cuGraphDestroy, name: "cuGraphDestroy"},
		{fn: &d.cuGraphExecDestroy, name: "cuGraphExecDestroy"},
		{fn: &d.cuGetErrorName, name: "cuGetErrorName", optional: true},
		{fn: &d.cuMemHostAlloc, name: "cuMemHostAlloc", optional: true},
		{fn: &d.cuMemFreeHost, name: "cuMemFreeHost", optional: true},
	}
}

// loadDriver binds the driver library at path, once per process.
func loadDriver(path string) (*driverAPI, error) {
	return load(gpu.Driver, path, (*driverAPI).symbols)
}

// status turns a CUresult into an error (nil for CUDA_SUCCESS). Codes the
// gpu package does not know are named by cuGetErrorName when the driver
// has it.
func (d *driverAPI) status(call string, code int32) error {
	err := gpu.Check(gpu.LibCUDA, call, int(code))
	if e, ok := err.(*gpu.Error); ok && d.cuGetErrorName != nil {
		if _, msg := gpu.Describe(gpu.LibCUDA, e.Code); msg == "" {
			var p *byte
			if d.cuGetErrorName(code, &p) == 0 && p != nil {
				e.Name = goString(p)
			}
		}
	}
	return err
}

// Driver API constants from cuda.h.
const (
	attrMultiprocessorCount    = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrComputeCapabilityMajor = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrComputeCapabilityMinor = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	funcAttrMaxDynamicShared   = 8   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	streamNonBlocking          = 1   // CU_STREAM_NON_BLOCKING
	captureModeThreadLocal     = 1   // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	eventDefault               = 0   // CU_EVENT_DEFAULT: timing enabled
	errNotReady                = 600 // CUDA_ERROR_NOT_READY: cuEventQuery on pending work
	deviceNameBufferBytes      = 256
)
