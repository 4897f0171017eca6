package gpu

import "fmt"

// Lib names a CUDA library for error reporting.
type Lib string

// The libraries whose result codes this package names.
const (
	LibCUDA   Lib = "cuda"   // driver API, CUresult
	LibNVRTC  Lib = "nvrtc"  // nvrtcResult
	LibCUBLAS Lib = "cublas" // cublasStatus_t
)

// Error is a non-success result code returned by a CUDA library call.
type Error struct {
	Lib  Lib    // which library's code space Code belongs to
	Call string // the function that returned it, e.g. "cuMemAlloc"
	Code int    // the numeric result code
	Name string // the symbolic name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
}

// Error formats as "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
}

// Message is a one-line explanation of the code, or "" when none is known.
func (e *Error) Message() string {
	_, msg := Describe(e.Lib, e.Code)
	return msg
}

// Is reports whether target is an *Error with the same library and code,
// so errors.Is(err, &Error{Lib: LibCUDA, Code: 2}) matches any
// out-of-memory from the driver whatever the call.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Lib == e.Lib && t.Code == e.Code
}

// Check returns nil when code is the library's success code (0 for all three
// libraries) and an *Error naming call and code otherwise.
func Check(lib Lib, call string, code int) error {
	if code == 0 {
		return nil
	}
	name, _ := Describe(lib, code)
	return &Error{Lib: lib, Call: call, Code: code, Name: name}
}

// Describe returns the symbolic name and a short message for a result code.
// Unknown codes get a name like "CUDA_ERROR_UNRECOGNIZED_999" and "".
func Describe(lib Lib, code int) (name, message string) {
	var table map[int]codeInfo
	var prefix string
	switch lib {
	case LibCUDA:
		table, prefix = cudaCodes, "CUDA_ERROR"
	case LibNVRTC:
		table, prefix = nvrtcCodes, "NVRTC_ERROR"
	case LibCUBLAS:
		table, prefix = cublasCodes, "CUBLAS_STATUS"
	default:
		return fmt.Sprintf("%s_UNRECOGNIZED_%d", lib, code), ""
	}
	if info, ok := table[code]; ok {
		return info.name, info.msg
	}
	return fmt.Sprintf("%s_UNRECOGNIZED_%d", prefix, code), ""
}

type codeInfo struct{ name, msg string }

// cudaCodes are CUresult values from cuda.h.
var cudaCodes = map[int]codeInfo{
	0:   {"CUDA_SUCCESS", "no error"},
	1:   {"CUDA_ERROR_INVALID_VALUE", "an argument is out of range"},
	2:   {"CUDA_ERROR_OUT_OF_MEMORY", "device memory allocation failed"},
	3:   {"CUDA_ERROR_NOT_INITIALIZED", "cuInit has not been called"},
	4:   {"CUDA_ERROR_DEINITIALIZED", "the driver is shutting down"},
	5:   {"CUDA_ERROR_PROFILER_DISABLED", "profiler disabled"},
	34:  {"CUDA_ERROR_STUB_LIBRARY", "a link stub was loaded instead of the real driver"},
	46:  {"CUDA_ERROR_DEVICE_UNAVAILABLE", "device busy or unavailable (compute mode)"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device detected"},
	101: {"CUDA_ERROR_INVALID_DEVICE", "device ordinal does not name a device"},
	102: {"CUDA_ERROR_DEVICE_NOT_LICENSED", "device not licensed"},
	200: {"CUDA_ERROR_INVALID_IMAGE", "kernel image is invalid"},
	201: {"CUDA_ERROR_INVALID_CONTEXT", "no valid context current on this OS thread"},
	202: {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	205: {"CUDA_ERROR_MAP_FAILED", "map or register operation failed"},
	206: {"CUDA_ERROR_UNMAP_FAILED", "unmap or unregister operation failed"},
	209: {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image for this GPU architecture"},
	214: {"CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error"},
	215: {"CUDA_ERROR_UNSUPPORTED_LIMIT", "limit not supported by the device"},
	216: {"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "context already in use by another thread"},
	217: {"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access not supported between these devices"},
	218: {"CUDA_ERROR_INVALID_PTX", "PTX JIT compilation failed"},
	220: {"CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error"},
	221: {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	222: {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "PTX built with a newer toolchain than the driver"},
	300: {"CUDA_ERROR_INVALID_SOURCE", "kernel source is invalid"},
	301: {"CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	302: {"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
	303: {"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialisation failed"},
	304: {"CUDA_ERROR_OPERATING_SYSTEM", "an OS call failed"},
	400: {"CUDA_ERROR_INVALID_HANDLE", "resource handle is invalid"},
	401: {"CUDA_ERROR_ILLEGAL_STATE", "resource in an illegal state"},
	500: {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	600: {"CUDA_ERROR_NOT_READY", "asynchronous work not yet complete"},
	700: {"CUDA_ERROR_ILLEGAL_ADDRESS", "kernel accessed an illegal memory address; the context is unusable"},
	701: {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	702: {"CUDA_ERROR_LAUNCH_TIMEOUT", "kernel ran past the watchdog timeout"},
	704: {"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access already enabled"},
	705: {"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access not enabled"},
	708: {"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context already active"},
	709: {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context destroyed"},
	710: {"CUDA_ERROR_ASSERT", "device-side assert triggered"},
	714: {"CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	715: {"CUDA_ERROR_ILLEGAL_INSTRUCTION", "illegal instruction"},
	716: {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	717: {"CUDA_ERROR_INVALID_ADDRESS_SPACE", "invalid address space"},
	718: {"CUDA_ERROR_INVALID_PC", "invalid program counter"},
	719: {"CUDA_ERROR_LAUNCH_FAILED", "exception while executing a kernel; the context is unusable"},
	720: {"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "cooperative launch too large"},
	800: {"CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	801: {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	802: {"CUDA_ERROR_SYSTEM_NOT_READY", "system not ready (e.g. fabric manager not running)"},
	803: {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "driver and kernel module versions differ"},
	804: {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward-compatibility not supported on this device"},
	900: {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not allowed while a stream is capturing"},
	901: {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "stream capture invalidated by an earlier error"},
	902: {"CUDA_ERROR_STREAM_CAPTURE_MERGE", "capture would merge two independent captures"},
	903: {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not started in this stream"},
	904: {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "forked capture was not joined back"},
	905: {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency crosses the capture boundary"},
	906: {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "implicit dependency on a capturing legacy stream"},
	907: {"CUDA_ERROR_CAPTURED_EVENT", "operation not allowed on an event last recorded in a capture"},
	908: {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "capture ended on a different thread than it began"},
	909: {"CUDA_ERROR_TIMEOUT", "wait timed out"},
	910: {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "graph exec update not allowed"},
	999: {"CUDA_ERROR_UNKNOWN", "unknown internal error"},
}

// nvrtcCodes are nvrtcResult values from nvrtc.h.
var nvrtcCodes = map[int]codeInfo{
	0:  {"NVRTC_SUCCESS", "no error"},
	1:  {"NVRTC_ERROR_OUT_OF_MEMORY", "host memory allocation failed"},
	2:  {"NVRTC_ERROR_PROGRAM_CREATION_FAILURE", "program creation failed"},
	3:  {"NVRTC_ERROR_INVALID_INPUT", "invalid input"},
	4:  {"NVRTC_ERROR_INVALID_PROGRAM", "invalid program handle"},
	5:  {"NVRTC_ERROR_INVALID_OPTION", "unrecognised compile option (NVRTC is not nvcc: no -O3)"},
	6:  {"NVRTC_ERROR_COMPILATION", "compilation failed; see the program log"},
	7:  {"NVRTC_ERROR_BUILTIN_OPERATION_FAILURE", "builtin operation failed"},
	8:  {"NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION", "name expressions added after compilation"},
	9:  {"NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION", "lowered names requested before compilation"},
	10: {"NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", "name expression not valid"},
	11: {"NVRTC_ERROR_INTERNAL_ERROR", "internal error"},
}

// cublasCodes are cublasStatus_t values from cublas_api.h.
var cublasCodes = map[int]codeInfo{
	0:  {"CUBLAS_STATUS_SUCCESS", "no error"},
	1:  {"CUBLAS_STATUS_NOT_INITIALIZED", "handle not initialised"},
	3:  {"CUBLAS_STATUS_ALLOC_FAILED", "resource allocation failed"},
	7:  {"CUBLAS_STATUS_INVALID_VALUE", "unsupported value or parameter"},
	8:  {"CUBLAS_STATUS_ARCH_MISMATCH", "feature absent on this GPU architecture"},
	11: {"CUBLAS_STATUS_MAPPING_ERROR", "access to GPU memory space failed"},
	13: {"CUBLAS_STATUS_EXECUTION_FAILED", "GPU program failed to execute"},
	14: {"CUBLAS_STATUS_INTERNAL_ERROR", "internal operation failed"},
	15: {"CUBLAS_STATUS_NOT_SUPPORTED", "functionality not supported"},
	16: {"CUBLAS_STATUS_LICENSE_ERROR", "license error"},
}
