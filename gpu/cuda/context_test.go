package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
)

// loadable reports whether this build can load CUDA libraries at all.
func loadable() bool {
	return runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
}

// realDriver returns the path of the host's CUDA driver, or "".
func realDriver() string {
	path, _, err := gpu.Search(gpu.Driver, gpu.OSEnv())
	if err != nil {
		return ""
	}
	return path
}

// fakeDriver builds testdata/fakecuda.c, with extra cc flags, into a new
// directory and points GEARBOX_CUDA_PATH at it. It skips when the host has
// a real driver (the fake is never loaded beside it) or no C compiler.
func fakeDriver(t *testing.T, flags ...string) string {
	t.Helper()
	if !loadable() {
		t.Skipf("CUDA libraries are not loaded on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if p := realDriver(); p != "" {
		t.Skipf("real CUDA driver at %s; the fake driver is only used without one", p)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build the fake CUDA driver")
	}
	dir := t.TempDir()
	args := append([]string{"-shared", "-fPIC", "-o", filepath.Join(dir, "libcuda.so.1")}, flags...)
	args = append(args, filepath.Join("testdata", "fakecuda.c"))
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake CUDA driver: %v\n%s", err, out)
	}
	t.Setenv("GEARBOX_CUDA_PATH", dir)
	return dir
}

// openFake opens device 0 of a fresh fake driver.
func openFake(t *testing.T) *Context {
	t.Helper()
	fakeDriver(t)
	c, err := Open(0)
	if err != nil {
		t.Fatalf("Open(0) with the fake driver: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// testContext opens device 0 of the real driver when the host has one, else
// of the fake driver.
func testContext(t *testing.T) *Context {
	t.Helper()
	if realDriver() != "" {
		return openGPU(t)
	}
	return openFake(t)
}

func TestOpenNoDriver(t *testing.T) {
	t.Setenv("GEARBOX_CUDA_PATH", "")
	_, _, searchErr := gpu.Search(gpu.Driver, gpu.OSEnv())
	if searchErr == nil {
		t.Skip("a CUDA driver is installed; this test needs a host without one")
	}
	start := time.Now()
	c, err := Open(0)
	if err == nil {
		c.Close()
		t.Fatal("Open(0) succeeded without a driver")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open(0) took %v to fail", d)
	}
	if !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("error does not wrap gpu.ErrNotFound: %v", err)
	}
	if err.Error() != searchErr.Error() {
		t.Errorf("error %q, want gpu.Search's %q", err, searchErr)
	}
	if !strings.Contains(err.Error(), "CUDA driver") || !strings.Contains(err.Error(), "looked in:") || strings.Contains(err.Error(), "\n") {
		t.Errorf("want one line naming the CUDA driver and where it looked, got %q", err)
	}
}

func TestOpenBadDriverFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(path, []byte("not a shared library"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GEARBOX_CUDA_PATH", dir)
	c, err := Open(0)
	if err == nil {
		c.Close()
		t.Fatal("Open(0) succeeded with a garbage driver file")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "CUDA driver") {
		t.Errorf("error should name the CUDA driver and %s: %v", path, err)
	}
}

func TestOpenNegativeOrdinal(t *testing.T) {
	if _, err := Open(-1); err == nil || !strings.Contains(err.Error(), "device -1") {
		t.Errorf("Open(-1) = %v, want an error naming device -1", err)
	}
}

func TestFakeOpenInfo(t *testing.T) {
	dir := fakeDriver(t)
	c, err := Open(1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Ordinal() != 1 || c.Name() != "Fake GPU 1" || c.Capability() != (gpu.ComputeCapability{Major: 9, Minor: 0}) ||
		c.Multiprocessors() != 132 || c.TotalMem() != 80<<30 || c.DriverVersion() != 13000 ||
		c.DriverPath() != filepath.Join(dir, "libcuda.so.1") {
		t.Errorf("info: ordinal %d name %q cc %v SMs %d mem %d driver %d path %s",
			c.Ordinal(), c.Name(), c.Capability(), c.Multiprocessors(), c.TotalMem(), c.DriverVersion(), c.DriverPath())
	}
	err = c.Do(func() error {
		free, total, err := c.MemInfo()
		if err == nil && (free != 70<<30 || total != 80<<30) {
			t.Errorf("MemInfo = %d, %d", free, total)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFakeOpenNoSuchDevice(t *testing.T) {
	fakeDriver(t)
	_, err := Open(2)
	if err == nil || !strings.Contains(err.Error(), "device 2") || !strings.Contains(err.Error(), "2 CUDA device(s)") {
		t.Errorf("Open(2) of 2 devices = %v", err)
	}
	t.Setenv("FAKECUDA_DEVICES", "0")
	_, err = Open(0)
	if err == nil || !strings.Contains(err.Error(), "0 CUDA device(s)") {
		t.Errorf("Open(0) of no devices = %v", err)
	}
}

func TestFakeMissingSymbol(t *testing.T) {
	dir := fakeDriver(t, "-DOMIT_GRAPH_LAUNCH")
	_, err := Open(0)
	if err == nil || !strings.Contains(err.Error(), "missing symbols cuGraphLaunch") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Open with a driver lacking cuGraphLaunch = %v", err)
	}
}

// The fake, like the real driver, keeps the current context per OS thread:
// driver calls made outside Do find none.
func TestFakeCallOutsideDo(t *testing.T) {
	c := openFake(t)
	_, err := c.Alloc(16)
	if !errors.Is(err, &gpu.Error{Lib: gpu.LibCUDA, Code: 201}) {
		t.Fatalf("Alloc outside Do = %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
	if !strings.Contains(err.Error(), "cuda: device 0: alloc 16 bytes: cuMemAlloc_v2: CUDA_ERROR_INVALID_CONTEXT (201)") {
		t.Errorf("error text: %v", err)
	}
}

func TestFakeOperations(t *testing.T) {
	c := openFake(t)
	err := c.Do(func() error {
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		// Copies and memsets.
		src := []byte("hello, device memory!")
		p, err := c.Alloc(int64(len(src)))
		if err != nil {
			return err
		}
		q, err := c.Alloc(int64(len(src)))
		if err != nil {
			return err
		}
		if err := c.CopyHtoDAsync(p, unsafe.Pointer(&src[0]), int64(len(src)), s); err != nil {
			return err
		}
		if err := c.CopyDtoDAsync(q, p, int64(len(src)), s); err != nil {
			return err
		}
		if err := c.MemsetD8Async(q, 'X', 5, s); err != nil {
			return err
		}
		got := make([]byte, len(src))
		if err := c.CopyDtoHAsync(unsafe.Pointer(&got[0]), q, int64(len(got)), s); err != nil {
			return err
		}
		if err := c.SyncStream(s); err != nil {
			return err
		}
		if string(got) != "XXXXX, device memory!" {
			t.Errorf("round trip: %q", got)
		}
		if err := c.MemsetD32Async(p, 0x01020304, 4, s); err != nil {
			return err
		}
		var words [4]uint32
		if err := c.CopyDtoH(unsafe.Pointer(&words), p, 16); err != nil {
			return err
		}
		if words != [4]uint32{0x01020304, 0x01020304, 0x01020304, 0x01020304} {
			t.Errorf("MemsetD32Async: %x", words)
		}

		// Modules and launches; "fake module" lacks its NUL, LoadModule adds it.
		m, err := c.LoadModule([]byte("fake module"))
		if err != nil {
			return err
		}
		if _, err := c.LoadModule([]byte("other module")); !errors.Is(err, &gpu.Error{Lib: gpu.LibCUDA, Code: 218}) ||
			!strings.Contains(err.Error(), "load module (PTX, 13 bytes)") {
			t.Errorf("bad module: %v", err)
		}
		if _, err := c.Function(m, "nope"); err == nil || !strings.Contains(err.Error(), `kernel "nope"`) ||
			!strings.Contains(err.Error(), "CUDA_ERROR_NOT_FOUND") {
			t.Errorf("missing kernel: %v", err)
		}
		fill, err := c.Function(m, "fill")
		if err != nil {
			return err
		}
		out, err := c.Alloc(64 * 4)
		if err != nil {
			return err
		}
		v, n := float32(0.5), int32(64)
		if err := c.Launch(fill, Dim3{1, 1, 1}, Dim3{64, 1, 1}, 0, s, unsafe.Pointer(&out), unsafe.Pointer(&v), unsafe.Pointer(&n)); err != nil {
			return err
		}
		fs := make([]float32, 64)
		if err := c.CopyDtoH(unsafe.Pointer(&fs[0]), out, 64*4); err != nil {
			return err
		}
		for i, f := range fs {
			if f != 0.5+float32(i) {
				t.Errorf("fill[%d] = %v", i, f)
				break
			}
		}
		dims, err := c.Function(m, "dims")
		if err != nil {
			return err
		}
		if err := c.Launch(dims, Dim3{7, 6, 5}, Dim3{4, 3, 2}, 1<<20, s, unsafe.Pointer(&out)); err != nil {
			return err
		}
		var got7 [7]uint32
		if err := c.CopyDtoH(unsafe.Pointer(&got7), out, 28); err != nil {
			return err
		}
		if got7 != [7]uint32{7, 6, 5, 4, 3, 2, 1 << 20} {
			t.Errorf("launch dims reached the driver as %v", got7)
		}
		if err := c.SetMaxDynamicShared(fill, 100<<10); err != nil {
			return err
		}
		if err := c.SetMaxDynamicShared(fill, 12345); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_FAKE_12345 (12345)") {
			t.Errorf("unknown code not named by cuGetErrorName: %v", err)
		}
		if err := c.UnloadModule(m); err != nil {
			return err
		}

		// Events.
		e0, err := c.NewEvent()
		if err != nil {
			return err
		}
		e1, err := c.NewEvent()
		if err != nil {
			return err
		}
		if err := errors.Join(c.RecordEvent(e0, s), c.RecordEvent(e1, s), c.SyncEvent(e1)); err != nil {
			return err
		}
		if d, err := c.Elapsed(e0, e1); err != nil || d != 1500*time.Microsecond {
			t.Errorf("Elapsed = %v, %v; want 1.5ms", d, err)
		}
		if err := c.RecordEvent(e0, s); err != nil {
			return err
		}
		for i, want := range []bool{false, true} { // the fake's event is pending for one query
			if done, err := c.EventDone(e0); err != nil || done != want {
				t.Errorf("EventDone after a record, query %d = %v, %v; want %v", i, done, err, want)
			}
		}

		// Graphs.
		if err := c.BeginCapture(s); err != nil {
			return err
		}
		g, err := c.EndCapture(s)
		if err != nil {
			return err
		}
		ge, err := c.Instantiate(g)
		if err != nil {
			return err
		}
		return errors.Join(
			c.LaunchGraph(ge, s), c.DestroyGraphExec(ge), c.DestroyGraph(g),
			c.DestroyEvent(e0), c.DestroyEvent(e1), c.Synchronize(),
			c.Free(p), c.Free(q), c.Free(out), c.Free(0), c.DestroyStream(s))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFakeBadArguments(t *testing.T) {
	c := openFake(t)
	err := c.Do(func() error {
		for _, err := range []error{
			func() error { _, err := c.Alloc(0); return err }(),
			func() error { _, err := c.Alloc(-1); return err }(),
			c.CopyHtoD(0, nil, -1),
			c.MemsetD32Async(0, 0, -4, 0),
			func() error { _, err := c.LoadModule(nil); return err }(),
			func() error { _, err := c.Function(0, "a\x00b"); return err }(),
			c.Launch(0, Dim3{1, 1, 1}, Dim3{1, 1, 1}, -1, 0),
			c.SetMaxDynamicShared(0, -1),
		} {
			if err == nil || !strings.HasPrefix(err.Error(), "cuda: device 0: ") {
				t.Errorf("bad argument: got %v, want an error naming device 0", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFakeTwoDevices(t *testing.T) {
	fakeDriver(t)
	var ctxs [2]*Context
	for i := range ctxs {
		c, err := Open(i)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctxs[i] = c
	}
	var wg sync.WaitGroup
	for _, c := range ctxs {
		wg.Go(func() {
			for range 100 {
				err := c.Do(func() error {
					p, err := c.Alloc(8)
					if err != nil {
						return err
					}
					return c.Free(p)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestDoPanic(t *testing.T) {
	c := testContext(t)
	err := c.Do(func() error {
		xs := make([]int, 2)
		i := len(os.Args) + 2
		xs[i] = 1 // panics: index out of range
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "panic in Do") || !strings.Contains(err.Error(), "context_test.go") {
		t.Fatalf("Do(panicking f) = %v", err)
	}
	var re runtime.Error
	if !errors.As(err, &re) {
		t.Errorf("a panic with an error value should be wrapped: %v", err)
	}
	if err := c.Do(func() error { panic("plain") }); err == nil || !strings.HasSuffix(err.Error(), ": plain") {
		t.Errorf("Do(panic(string)) = %v", err)
	}
	// The worker survives.
	if err := c.Do(func() error { _, _, err := c.MemInfo(); return err }); err != nil {
		t.Errorf("Do after a panic: %v", err)
	}
}

func TestDoErrorAndNesting(t *testing.T) {
	c := testContext(t)
	want := errors.New("mine")
	if err := c.Do(func() error { return want }); err != want {
		t.Errorf("Do returned %v, want f's error", err)
	}
	if err := c.Do(nil); err != nil {
		t.Errorf("Do(nil) = %v", err)
	}
	ran := false
	err := c.Do(func() error {
		return c.Do(func() error {
			ran = true
			_, _, err := c.MemInfo()
			return err
		})
	})
	if err != nil || !ran {
		t.Errorf("nested Do: ran %v, err %v", ran, err)
	}
	if err := c.Do(func() error { return c.Close() }); err == nil || !strings.Contains(err.Error(), "Close called inside Do") {
		t.Errorf("Close inside Do = %v", err)
	}
}

func TestDoConcurrent(t *testing.T) {
	c := testContext(t)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		threads = map[int]bool{}
	)
	for range 16 {
		wg.Go(func() {
			for range 50 {
				err := c.Do(func() error {
					mu.Lock()
					threads[threadID()] = true
					mu.Unlock()
					_, _, err := c.MemInfo()
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(threads) != 1 {
		t.Errorf("Do ran on %d OS threads, want 1", len(threads))
	}
}

func TestClose(t *testing.T) {
	c := testContext(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	ran := false
	if err := c.Do(func() error { ran = true; return nil }); err == nil || ran || !strings.Contains(err.Error(), "context closed") {
		t.Errorf("Do after Close: ran %v, err %v", ran, err)
	}
}
