package cuda

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/gpu"
)

// testKernels are the kernels the NVRTC and GPU tests compile.
const testKernels = `
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void add_one(float* x, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] += 1.0f;
}

extern "C" __global__ void empty() {}

extern "C" __global__ void spin(long long cycles) {
	long long start = clock64();
	while (clock64() - start < cycles) {}
}
`

// loadNVRTC loads NVRTC or skips the test.
func loadNVRTC(tb testing.TB) *NVRTC {
	tb.Helper()
	n, err := LoadNVRTC()
	if errors.Is(err, gpu.ErrNotFound) {
		tb.Skip("NVRTC not found: " + err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func TestNVRTCVersion(t *testing.T) {
	n := loadNVRTC(t)
	major, minor := n.Version()
	t.Logf("NVRTC %d.%d from %s", major, minor, n.Path())
	if major < 11 || minor < 0 || n.Path() == "" {
		t.Errorf("Version = %d.%d, Path %q", major, minor, n.Path())
	}
	again, err := LoadNVRTCFrom(n.Path())
	if err != nil || again.api != n.api {
		t.Errorf("loading %s again should reuse the bound library: %v", n.Path(), err)
	}
}

func TestNVRTCCompileCubin(t *testing.T) {
	n := loadNVRTC(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		for _, opts := range [][]string{
			{"--gpu-architecture=" + arch, "-default-device"},
			{"-arch", arch, "--std=c++17"},
		} {
			image, log, err := n.Compile("test_kernels.cu", testKernels, opts)
			if err != nil {
				t.Fatalf("%v: %v", opts, err)
			}
			if !bytes.HasPrefix(image, []byte("\x7fELF")) {
				t.Errorf("%v: image is not a cubin (starts %q); log %q", opts, image[:min(len(image), 8)], log)
			}
		}
	}
}

func TestNVRTCCompilePTX(t *testing.T) {
	n := loadNVRTC(t)
	for _, opts := range [][]string{{"--gpu-architecture=compute_90"}, nil} {
		image, _, err := n.Compile("test_kernels.cu", testKernels, opts)
		if err != nil {
			t.Fatalf("%v: %v", opts, err)
		}
		ptx := string(image)
		if !strings.Contains(ptx, ".visible .entry saxpy(") || !strings.Contains(ptx, ".entry spin(") {
			t.Errorf("%v: PTX lacks the kernels:\n%.400s", opts, ptx)
		}
		if opts != nil && !strings.Contains(ptx, ".target sm_90") {
			t.Errorf("%v: PTX not for sm_90:\n%.400s", opts, ptx)
		}
		if strings.HasSuffix(ptx, "\x00") {
			t.Errorf("%v: PTX ends in NUL", opts)
		}
	}
}

func TestNVRTCSyntaxError(t *testing.T) {
	n := loadNVRTC(t)
	src := "extern \"C\" __global__ void k(float* x) {\n" +
		"\tx[0] = 1.0f;\n" +
		"\tx[1] = undeclared;\n" + // line 3
		"}\n"
	image, log, err := n.Compile("bad.cu", src, []string{"--gpu-architecture=sm_90"})
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want *CompileError", err, err)
	}
	if image != nil {
		t.Errorf("image returned on failure")
	}
	if ce.Name != "bad.cu" || ce.Log != log || !strings.Contains(ce.Log, "bad.cu(") || !strings.Contains(ce.Log, "error") {
		t.Errorf("CompileError %+v; log %q", ce, log)
	}
	if !strings.Contains(ce.Log, "bad.cu(3): error") || !strings.Contains(ce.Log, "undeclared") {
		t.Errorf("log does not point at the error line:\n%s", ce.Log)
	}
	if !errors.Is(err, &gpu.Error{Lib: gpu.LibNVRTC, Code: 6}) {
		t.Errorf("error is not NVRTC_ERROR_COMPILATION: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6)") || !strings.Contains(msg, ce.Log) {
		t.Errorf("Error() should hold the status and the full log:\n%s", msg)
	}
}

func TestNVRTCBadOption(t *testing.T) {
	n := loadNVRTC(t)
	_, _, err := n.Compile("k.cu", testKernels, []string{"-O3"})
	if !errors.Is(err, &gpu.Error{Lib: gpu.LibNVRTC, Code: 5}) {
		t.Fatalf("-O3: err = %v, want NVRTC_ERROR_INVALID_OPTION", err)
	}
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Errorf("want a *CompileError, got %T", err)
	}
	t.Logf("%v", err)
}

func TestNVRTCNul(t *testing.T) {
	n := loadNVRTC(t)
	for _, tc := range []struct{ name, src, opt string }{
		{"a\x00b.cu", testKernels, "-default-device"},
		{"k.cu", "int x;\x00 garbage", "-default-device"},
		{"k.cu", testKernels, "-default\x00-device"},
	} {
		if _, _, err := n.Compile(tc.name, tc.src, []string{tc.opt}); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("%q %q %q: err = %v, want a NUL byte error", tc.name, tc.src[:min(12, len(tc.src))], tc.opt, err)
		}
	}
}

func TestNVRTCConcurrent(t *testing.T) {
	n := loadNVRTC(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			arch := []string{"sm_80", "sm_90"}[i%2]
			image, _, err := n.Compile("test_kernels.cu", testKernels, []string{"--gpu-architecture=" + arch})
			if err != nil || !bytes.HasPrefix(image, []byte("\x7fELF")) {
				t.Errorf("%s: %v", arch, err)
			}
		})
	}
	wg.Wait()
}

func TestLoadNVRTCFromMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libnvrtc.so")
	_, err := LoadNVRTCFrom(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "NVRTC") {
		t.Errorf("LoadNVRTCFrom(%s) = %v", path, err)
	}
}

func TestCubinArch(t *testing.T) {
	for _, tc := range []struct {
		opts []string
		want bool
	}{
		{nil, false},
		{[]string{"--gpu-architecture=sm_90"}, true},
		{[]string{"--gpu-architecture=compute_90"}, false},
		{[]string{"-arch=sm_80", "-default-device"}, true},
		{[]string{"-arch", "sm_90a"}, true},
		{[]string{"--gpu-architecture", "compute_80"}, false},
		{[]string{"-arch=compute_80", "--gpu-architecture=sm_90"}, true},
		{[]string{"-arch=sm_80", "--gpu-architecture=compute_90"}, false},
		{[]string{"-arch"}, false},
	} {
		if got := cubinArch(tc.opts); got != tc.want {
			t.Errorf("cubinArch(%q) = %v, want %v", tc.opts, got, tc.want)
		}
	}
}

// compileCached with a stand-in compiler: runs everywhere.
func TestCompileCachedLogic(t *testing.T) {
	cache := &gpu.KernelCache{Dir: t.TempDir()}
	var calls [][]string
	compile := func(opts []string) ([]byte, error) {
		calls = append(calls, slices.Clone(opts))
		return []byte("image for " + strings.Join(opts, " ")), nil
	}
	cc := gpu.ComputeCapability{Major: 9, Minor: 0}
	opts := make([]string, 1, 8) // spare capacity: the caller's array must not be written
	opts[0] = "-default-device"
	get := func() []byte {
		t.Helper()
		image, err := compileCached(compile, [2]int{13, 0}, cache, "src", opts, cc, 13000)
		if err != nil {
			t.Fatal(err)
		}
		return image
	}
	first := get()
	if string(first) != "image for -default-device --gpu-architecture=sm_90" || len(calls) != 1 {
		t.Fatalf("first: %q after %d compiles", first, len(calls))
	}
	if opts[:2][1] != "" {
		t.Errorf("the caller's options array was written: %q", opts[:2])
	}
	if second := get(); !bytes.Equal(second, first) || len(calls) != 1 {
		t.Errorf("second call compiled again (%d compiles) or changed: %q", len(calls), second)
	}
	files, _ := filepath.Glob(filepath.Join(cache.Dir, "*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache files: %v", files)
	}
	if err := os.WriteFile(files[0], []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if third := get(); !bytes.Equal(third, first) || len(calls) != 2 {
		t.Errorf("corrupt file: %d compiles, image %q", len(calls), third)
	}
	if fourth := get(); !bytes.Equal(fourth, first) || len(calls) != 2 {
		t.Errorf("the recompiled image was not stored: %d compiles", len(calls))
	}
	// Another capability, driver or NVRTC version is another key.
	if _, err := compileCached(compile, [2]int{13, 0}, cache, "src", opts, gpu.ComputeCapability{Major: 8}, 13000); err != nil || len(calls) != 3 {
		t.Errorf("sm_80: %v, %d compiles", err, len(calls))
	}
	if _, err := compileCached(compile, [2]int{13, 1}, cache, "src", opts, cc, 13000); err != nil || len(calls) != 4 {
		t.Errorf("NVRTC 13.1: %v, %d compiles", err, len(calls))
	}
	// A nil cache compiles every time.
	for range 2 {
		if _, err := compileCached(compile, [2]int{13, 0}, nil, "src", opts, cc, 13000); err != nil {
			t.Fatal(err)
		}
	}
	if len(calls) != 6 {
		t.Errorf("nil cache: %d compiles, want 6", len(calls))
	}
	// Compile errors are returned and nothing is stored.
	boom := errors.New("boom")
	if _, err := compileCached(func([]string) ([]byte, error) { return nil, boom }, [2]int{13, 0}, cache, "other", nil, cc, 13000); err != boom {
		t.Errorf("compile error: %v", err)
	}
	// A cache error other than corruption is returned.
	bad := &gpu.KernelCache{Dir: filepath.Join(files[0], "not-a-dir")}
	if _, err := compileCached(compile, [2]int{13, 0}, bad, "src", opts, cc, 13000); err == nil {
		t.Errorf("unusable cache dir: no error")
	}
}

// CompileCached with the real NVRTC.
func TestCompileCached(t *testing.T) {
	n := loadNVRTC(t)
	cache := &gpu.KernelCache{Dir: t.TempDir()}
	cc := gpu.ComputeCapability{Major: 9, Minor: 0}
	image, err := CompileCached(n, cache, "test_kernels.cu", testKernels, []string{"-default-device"}, cc, 13000)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(image, []byte("\x7fELF")) {
		t.Fatalf("CompileCached for sm_90 did not return a cubin")
	}
	files, _ := filepath.Glob(filepath.Join(cache.Dir, "*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache files: %v", files)
	}
	stat, _ := os.Stat(files[0])
	again, err := CompileCached(n, cache, "test_kernels.cu", testKernels, []string{"-default-device"}, cc, 13000)
	if err != nil || !bytes.Equal(again, image) {
		t.Fatalf("second call: %v, equal %v", err, bytes.Equal(again, image))
	}
	if stat2, _ := os.Stat(files[0]); !stat2.ModTime().Equal(stat.ModTime()) {
		t.Errorf("cache file rewritten on a hit")
	}
	if err := os.WriteFile(files[0], []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := CompileCached(n, cache, "test_kernels.cu", testKernels, []string{"-default-device"}, cc, 13000)
	if err != nil || !bytes.HasPrefix(third, []byte("\x7fELF")) {
		t.Fatalf("after corruption: %v", err)
	}
	key := gpu.KernelKey{
		Source:        testKernels,
		Options:       []string{"-default-device", "--gpu-architecture=sm_90"},
		Capability:    cc,
		DriverVersion: 13000,
	}
	key.NVRTCVersion[0], key.NVRTCVersion[1] = n.Version()
	if cache.Path(key) != files[0] {
		t.Errorf("cache file %s, want %s for the documented key", files[0], cache.Path(key))
	}
	if _, ok, err := cache.Get(key); !ok || err != nil {
		t.Errorf("corrupt file not overwritten: ok %v, err %v", ok, err)
	}
}
