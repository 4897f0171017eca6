package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
)

// nvrtcAPI holds the NVRTC functions (nvrtc.h). nvrtcProgram is a handle
// (uintptr); nvrtcResult is int32.
type nvrtcAPI struct {
	nvrtcVersion           func(major, minor *int32) int32
	nvrtcCreateProgram     func(prog *uintptr, src, name *byte, numHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
	nvrtcCompileProgram    func(prog uintptr, numOptions int32, options unsafe.Pointer) int32
	nvrtcGetProgramLogSize func(prog uintptr, size *uintptr) int32
	nvrtcGetProgramLog     func(prog uintptr, log *byte) int32
	nvrtcGetPTXSize        func(prog uintptr, size *uintptr) int32
	nvrtcGetPTX            func(prog uintptr, ptx *byte) int32
	nvrtcGetCUBINSize      func(prog uintptr, size *uintptr) int32
	nvrtcGetCUBIN          func(prog uintptr, cubin *byte) int32
}

func (a *nvrtcAPI) symbols() []symbol {
	return []symbol{
		{fn: &a.nvrtcVersion, name: "nvrtcVersion"},
		{fn: &a.nvrtcCreateProgram, name: "nvrtcCreateProgram"},
		{fn: &a.nvrtcDestroyProgram, name: "nvrtcDestroyProgram"},
		{fn: &a.nvrtcCompileProgram, name: "nvrtcCompileProgram"},
		{fn: &a.nvrtcGetProgramLogSize, name: "nvrtcGetProgramLogSize"},
		{fn: &a.nvrtcGetProgramLog, name: "nvrtcGetProgramLog"},
		{fn: &a.nvrtcGetPTXSize, name: "nvrtcGetPTXSize"},
		{fn: &a.nvrtcGetPTX, name: "nvrtcGetPTX"},
		{fn: &a.nvrtcGetCUBINSize, name: "nvrtcGetCUBINSize"},
		{fn: &a.nvrtcGetCUBIN, name: "nvrtcGetCUBIN"},
	}
}

// NVRTC is a loaded NVRTC library, the CUDA C++ run-time compiler. It needs
// no GPU and no context; its methods are safe to call from any goroutine.
type NVRTC struct {
	path         string
	major, minor int
	api          *nvrtcAPI
}

// LoadNVRTC finds NVRTC with gpu.Search and loads it.
func LoadNVRTC() (*NVRTC, error) {
	path, _, err := gpu.Search(gpu.NVRTC, gpu.OSEnv())
	if err != nil {
		return nil, err
	}
	return LoadNVRTCFrom(path)
}

// LoadNVRTCFrom loads the NVRTC library file at path.
func LoadNVRTCFrom(path string) (*NVRTC, error) {
	api, err := load(gpu.NVRTC, path, (*nvrtcAPI).symbols)
	if err != nil {
		return nil, err
	}
	var major, minor int32
	if err := gpu.Check(gpu.LibNVRTC, "nvrtcVersion", int(api.nvrtcVersion(&major, &minor))); err != nil {
		return nil, fmt.Errorf("cuda: %s %s: %w", gpu.NVRTC.Name, path, err)
	}
	return &NVRTC{path: path, major: int(major), minor: int(minor), api: api}, nil
}

// Path is the library file that was loaded.
func (n *NVRTC) Path() string { return n.path }

// Version is NVRTC's version, e.g. 13, 0.
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// CompileError is a failed nvrtcCompileProgram.
type CompileError struct {
	Name   string // the program name passed to Compile
	Status error  // the *gpu.Error from nvrtcCompileProgram
	Log    string // the program log
}

// Error is the status followed, on the next lines, by the full log.
func (e *CompileError) Error() string {
	msg := fmt.Sprintf("cuda: nvrtc compile %s: %v", e.Name, e.Status)
	if e.Log != "" {
		msg += "\n" + e.Log
	}
	return msg
}

// Unwrap returns Status, so errors.Is matches the NVRTC code.
func (e *CompileError) Unwrap() error { return e.Status }

// Compile compiles one CUDA C++ source. name labels the program in the log
// and errors. opts are NVRTC options, e.g. "--gpu-architecture=sm_90",
// "-default-device", "--std=c++17" (NVRTC is not nvcc: it rejects -O3).
// When the last architecture option (--gpu-architecture, -arch) names an
// sm_XX target the image is a cubin; otherwise (compute_XX, or no option:
// NVRTC's default virtual architecture) it is PTX text without a trailing
// NUL. log is the program log, returned whenever it is non-empty. A failed
// compilation returns a *CompileError holding the status and the log.
func (n *NVRTC) Compile(name, src string, opts []string) (image []byte, log string, err error) {
	fail := func(err error) ([]byte, string, error) {
		return nil, log, fmt.Errorf("cuda: nvrtc compile %s: %w", name, err)
	}
	cname, err := cString("program name", name)
	if err != nil {
		return fail(err)
	}
	csrc, err := cString("source", src)
	if err != nil {
		return fail(errors.New("source contains a NUL byte"))
	}
	copts := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		if copts[i], err = cString("option", o); err != nil {
			return fail(err)
		}
		ptrs[i] = &copts[i][0]
	}
	if len(opts) > math.MaxInt32 {
		return fail(errors.New("too many options"))
	}

	a := n.api
	var prog uintptr
	code := a.nvrtcCreateProgram(&prog, &csrc[0], &cname[0], 0, nil, nil)
	runtime.KeepAlive(csrc)
	runtime.KeepAlive(cname)
	if err := gpu.Check(gpu.LibNVRTC, "nvrtcCreateProgram", int(code)); err != nil {
		return fail(err)
	}
	defer a.nvrtcDestroyProgram(&prog)

	var optv unsafe.Pointer
	if len(ptrs) > 0 {
		optv = unsafe.Pointer(&ptrs[0])
	}
	code = a.nvrtcCompileProgram(prog, int32(len(ptrs)), optv)
	runtime.KeepAlive(ptrs)
	runtime.KeepAlive(copts)
	logBytes, logErr := n.read(prog, "nvrtcGetProgramLogSize", a.nvrtcGetProgramLogSize, "nvrtcGetProgramLog", a.nvrtcGetProgramLog)
	log = strings.TrimRight(string(logBytes), "\x00")
	if code != 0 {
		return nil, log, &CompileError{Name: name, Status: gpu.Check(gpu.LibNVRTC, "nvrtcCompileProgram", int(code)), Log: log}
	}
	if logErr != nil {
		return fail(logErr)
	}
	if cubinArch(opts) {
		image, err = n.read(prog, "nvrtcGetCUBINSize", a.nvrtcGetCUBINSize, "nvrtcGetCUBIN", a.nvrtcGetCUBIN)
	} else {
		image, err = n.read(prog, "nvrtcGetPTXSize", a.nvrtcGetPTXSize, "nvrtcGetPTX", a.nvrtcGetPTX)
		for len(image) > 0 && image[len(image)-1] == 0 {
			image = image[:len(image)-1]
		}
	}
	if err != nil {
		return fail(err)
	}
	return image, log, nil
}

// read fetches one of a program's outputs (log, PTX, cubin) with its size
// and copy functions.
func (n *NVRTC) read(prog uintptr, sizeCall string, size func(uintptr, *uintptr) int32, getCall string, get func(uintptr, *byte) int32) ([]byte, error) {
	var sz uintptr
	if err := gpu.Check(gpu.LibNVRTC, sizeCall, int(size(prog, &sz))); err != nil {
		return nil, err
	}
	if sz == 0 {
		return nil, nil
	}
	buf := make([]byte, sz)
	if err := gpu.Check(gpu.LibNVRTC, getCall, int(get(prog, &buf[0]))); err != nil {
		return nil, err
	}
	return buf, nil
}

// cubinArch reports whether the last architecture option in opts names a
// real (sm_XX) rather than a virtual (compute_XX) architecture.
func cubinArch(opts []string) bool {
	arch := ""
	for i, o := range opts {
		for _, flag := range []string{"--gpu-architecture", "-arch"} {
			if v, ok := strings.CutPrefix(o, flag+"="); ok {
				arch = v
			} else if o == flag && i+1 < len(opts) {
				arch = opts[i+1]
			}
		}
	}
	return strings.HasPrefix(arch, "sm_")
}

// CompileCached returns the kernel image for src compiled for cc with opts
// plus "--gpu-architecture="+cc.Arch() (so a cubin), from cache when it
// holds one. Otherwise it compiles and stores the image. The cache key is
// gpu.KernelKey{src, the options with the architecture, cc, driverVersion,
// NVRTC's version}. A corrupt cache file is recompiled and overwritten; any
// other cache error is returned. A nil cache compiles every time.
func CompileCached(n *NVRTC, cache *gpu.KernelCache, name, src string, opts []string, cc gpu.ComputeCapability, driverVersion int) ([]byte, error) {
	compile := func(opts []string) ([]byte, error) {
		image, _, err := n.Compile(name, src, opts)
		return image, err
	}
	return compileCached(compile, [2]int{n.major, n.minor}, cache, src, opts, cc, driverVersion)
}

// compileCached is CompileCached with the compiler as a parameter, for
// tests.
func compileCached(compile func(opts []string) ([]byte, error), nvrtcVersion [2]int, cache *gpu.KernelCache, src string, opts []string, cc gpu.ComputeCapability, driverVersion int) ([]byte, error) {
	full := append(slices.Clip(opts), "--gpu-architecture="+cc.Arch())
	if cache == nil {
		return compile(full)
	}
	key := gpu.KernelKey{
		Source:        src,
		Options:       full,
		Capability:    cc,
		DriverVersion: driverVersion,
		NVRTCVersion:  nvrtcVersion,
	}
	image, ok, err := cache.Get(key)
	if ok {
		return image, nil
	}
	if err != nil && !errors.Is(err, gpu.ErrCorrupt) {
		return nil, err
	}
	image, err = compile(full)
	if err != nil {
		return nil, err
	}
	if err := cache.Put(key, image); err != nil {
		return nil, err
	}
	return image, nil
}
