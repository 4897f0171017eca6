package cuda

// Tests and benchmarks that need a CUDA GPU. Without one they skip.

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
)

// openGPU opens device 0, skipping when the host has no driver or no
// device. Any other failure fails the test.
func openGPU(tb testing.TB) *Context {
	tb.Helper()
	if _, _, err := gpu.Search(gpu.Driver, gpu.OSEnv()); err != nil {
		tb.Skip("no GPU: " + err.Error())
	}
	c, err := Open(0)
	if errors.Is(err, &gpu.Error{Lib: gpu.LibCUDA, Code: 100}) {
		tb.Skip("CUDA driver present but no device: " + err.Error())
	}
	if err != nil {
		tb.Fatalf("Open(0): %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return c
}

// do runs f inside c.Do and fails the test on error.
func do(tb testing.TB, c *Context, f func() error) {
	tb.Helper()
	if err := c.Do(f); err != nil {
		tb.Fatal(err)
	}
}

// gpuKernels compiles testKernels for c's device and loads them.
func gpuKernels(tb testing.TB, c *Context) Module {
	tb.Helper()
	n := loadNVRTC(tb)
	image, err := CompileCached(n, nil, "test_kernels.cu", testKernels, []string{"-default-device"}, c.Capability(), c.DriverVersion())
	if err != nil {
		tb.Fatal(err)
	}
	var m Module
	do(tb, c, func() (err error) { m, err = c.LoadModule(image); return err })
	tb.Cleanup(func() {
		if err := c.Do(func() error { return c.UnloadModule(m) }); err != nil {
			tb.Error(err)
		}
	})
	return m
}

// toDevice allocates device memory holding xs.
func toDevice[T any](c *Context, xs []T) (DevicePtr, error) {
	bytes := int64(len(xs)) * int64(unsafe.Sizeof(xs[0]))
	p, err := c.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	return p, c.CopyHtoD(p, unsafe.Pointer(&xs[0]), bytes)
}

// fromDevice copies len(xs) elements at p into xs.
func fromDevice[T any](c *Context, xs []T, p DevicePtr) error {
	return c.CopyDtoH(unsafe.Pointer(&xs[0]), p, int64(len(xs))*int64(unsafe.Sizeof(xs[0])))
}

func randFloats(r *rand.Rand, n int) []float32 {
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = 2*r.Float32() - 1
	}
	return xs
}

func TestGPUInfo(t *testing.T) {
	c := openGPU(t)
	t.Logf("device %d: %s, sm_%d%d, %d SMs, %d MiB, driver %d (%s)", c.Ordinal(), c.Name(), c.Capability().Major,
		c.Capability().Minor, c.Multiprocessors(), c.TotalMem()>>20, c.DriverVersion(), c.DriverPath())
	if c.Name() == "" || c.Capability().Major < 3 || c.Multiprocessors() <= 0 || c.TotalMem() <= 0 || c.DriverVersion() < 11000 {
		t.Errorf("implausible device info")
	}
	do(t, c, func() error {
		free, total, err := c.MemInfo()
		if err == nil && (free <= 0 || free > total || total != c.TotalMem()) {
			t.Errorf("MemInfo = %d free, %d total; TotalMem %d", free, total, c.TotalMem())
		}
		return err
	})
}

func TestGPUCopyRoundTrip(t *testing.T) {
	c := openGPU(t)
	const n = 1<<20 + 3
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	do(t, c, func() error {
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		p, err := toDevice(c, src)
		if err != nil {
			return err
		}
		defer c.Free(p)
		q, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(q)
		if err := c.CopyDtoDAsync(q, p, n, s); err != nil {
			return err
		}
		got := make([]byte, n)
		if err := c.CopyDtoHAsync(unsafe.Pointer(&got[0]), q, n, s); err != nil {
			return err
		}
		if err := c.SyncStream(s); err != nil {
			return err
		}
		for i := range got {
			if got[i] != src[i] {
				t.Errorf("byte %d: got %d, want %d", i, got[i], src[i])
				break
			}
		}
		if err := c.MemsetD8Async(q, 0xab, 7, s); err != nil {
			return err
		}
		if err := c.MemsetD32Async(q+8, 0xdeadbeef, 2, s); err != nil {
			return err
		}
		if err := c.SyncStream(s); err != nil {
			return err
		}
		head := make([]byte, 16)
		if err := c.CopyDtoH(unsafe.Pointer(&head[0]), q, 16); err != nil {
			return err
		}
		want := []byte{0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, src[7], 0xef, 0xbe, 0xad, 0xde, 0xef, 0xbe, 0xad, 0xde}
		if string(head) != string(want) {
			t.Errorf("after memsets: % x, want % x", head, want)
		}
		return nil
	})
}

// launchSaxpy runs y = a·x + y with kernel f and checks the result.
func launchSaxpy(t *testing.T, c *Context, f Function) {
	t.Helper()
	const n = 1<<20 + 7
	r := rand.New(rand.NewPCG(3, 4))
	x, y := randFloats(r, n), randFloats(r, n)
	a := float32(2.5)
	got := make([]float32, n)
	do(t, c, func() error {
		dx, err := toDevice(c, x)
		if err != nil {
			return err
		}
		defer c.Free(dx)
		dy, err := toDevice(c, y)
		if err != nil {
			return err
		}
		defer c.Free(dy)
		nn := int32(n)
		block := uint32(256)
		grid := (uint32(n) + block - 1) / block
		if err := c.Launch(f, Dim3{grid, 1, 1}, Dim3{block, 1, 1}, 0, 0,
			unsafe.Pointer(&dy), unsafe.Pointer(&dx), unsafe.Pointer(&a), unsafe.Pointer(&nn)); err != nil {
			return err
		}
		if err := c.Synchronize(); err != nil {
			return err
		}
		return fromDevice(c, got, dy)
	})
	for i := range got {
		want := float32(float64(a)*float64(x[i]) + float64(y[i]))
		if d := math.Abs(float64(got[i] - want)); d > 1e-6*math.Max(1, math.Abs(float64(want))) {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func TestGPUSaxpyCubin(t *testing.T) {
	c := openGPU(t)
	m := gpuKernels(t, c)
	var f Function
	do(t, c, func() (err error) { f, err = c.Function(m, "saxpy"); return err })
	launchSaxpy(t, c, f)
}

func TestGPUSaxpyPTX(t *testing.T) {
	c := openGPU(t)
	n := loadNVRTC(t)
	cc := c.Capability()
	ptx, _, err := n.Compile("test_kernels.cu", testKernels, []string{"--gpu-architecture=compute_" + cc.Arch()[len("sm_"):], "-default-device"})
	if err != nil {
		t.Fatal(err)
	}
	var m Module
	var f Function
	err = c.Do(func() (err error) {
		if m, err = c.LoadModule(ptx); err != nil { // ptx has no NUL: LoadModule adds it
			return err
		}
		f, err = c.Function(m, "saxpy")
		return err
	})
	if errors.Is(err, &gpu.Error{Lib: gpu.LibCUDA, Code: 222}) {
		nmaj, nmin := n.Version()
		t.Skipf("NVRTC %d.%d writes PTX newer than driver %d reads: %v", nmaj, nmin, c.DriverVersion(), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Do(func() error { return c.UnloadModule(m) })
	launchSaxpy(t, c, f)
}

func TestGPUEvents(t *testing.T) {
	c := openGPU(t)
	m := gpuKernels(t, c)
	do(t, c, func() error {
		spin, err := c.Function(m, "spin")
		if err != nil {
			return err
		}
		e0, err := c.NewEvent()
		if err != nil {
			return err
		}
		defer c.DestroyEvent(e0)
		e1, err := c.NewEvent()
		if err != nil {
			return err
		}
		defer c.DestroyEvent(e1)
		cycles := int64(2_000_000) // about 1 ms at 2 GHz
		if err := c.RecordEvent(e0, 0); err != nil {
			return err
		}
		if err := c.Launch(spin, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, unsafe.Pointer(&cycles)); err != nil {
			return err
		}
		if err := c.RecordEvent(e1, 0); err != nil {
			return err
		}
		if done, err := c.EventDone(e1); err != nil || done {
			t.Errorf("EventDone right after queueing a 1 ms spin = %v, %v; want false", done, err)
		}
		if err := c.SyncEvent(e1); err != nil {
			return err
		}
		if done, err := c.EventDone(e1); err != nil || !done {
			t.Errorf("EventDone after SyncEvent = %v, %v; want true", done, err)
		}
		d, err := c.Elapsed(e0, e1)
		if err != nil {
			return err
		}
		t.Logf("spin of %d cycles: %v", cycles, d)
		if d < 100*time.Microsecond || d > 10*time.Second {
			t.Errorf("Elapsed = %v, want about 1ms", d)
		}
		return nil
	})
}

func TestGPUGraph(t *testing.T) {
	c := openGPU(t)
	m := gpuKernels(t, c)
	const n = 1000
	do(t, c, func() error {
		addOne, err := c.Function(m, "add_one")
		if err != nil {
			return err
		}
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		x, err := c.Alloc(n * 4)
		if err != nil {
			return err
		}
		defer c.Free(x)
		if err := c.MemsetD32Async(x, 0, n, s); err != nil {
			return err
		}
		if err := c.SyncStream(s); err != nil {
			return err
		}
		nn := int32(n)
		if err := c.BeginCapture(s); err != nil {
			return err
		}
		for range 2 {
			if err := c.Launch(addOne, Dim3{(n + 127) / 128, 1, 1}, Dim3{128, 1, 1}, 0, s, unsafe.Pointer(&x), unsafe.Pointer(&nn)); err != nil {
				c.EndCapture(s)
				return err
			}
		}
		g, err := c.EndCapture(s)
		if err != nil {
			return err
		}
		got := make([]float32, n)
		if err := fromDevice(c, got, x); err != nil {
			return err
		}
		if got[0] != 0 || got[n-1] != 0 {
			t.Errorf("captured work ran during capture: x = %v … %v", got[0], got[n-1])
		}
		ge, err := c.Instantiate(g)
		if err != nil {
			return err
		}
		if err := c.DestroyGraph(g); err != nil {
			return err
		}
		defer c.DestroyGraphExec(ge)
		for range 5 {
			if err := c.LaunchGraph(ge, s); err != nil {
				return err
			}
		}
		if err := c.SyncStream(s); err != nil {
			return err
		}
		if err := fromDevice(c, got, x); err != nil {
			return err
		}
		for i, v := range got {
			if v != 10 {
				t.Errorf("x[%d] = %v after 5 replays of 2 add_one, want 10", i, v)
				break
			}
		}
		return nil
	})
}

// gemmRef computes column-major alpha·op(A)·op(B) + beta·C in float64.
func gemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, len(c))
	for i, v := range c {
		out[i] = float64(v) // rows past m keep their values
	}
	for j := range n {
		for i := range m {
			var sum float64
			for l := range k {
				// Index only the layout op names: the other may run past
				// the slice.
				var av, bv float32
				if transA {
					av = a[l+i*lda]
				} else {
					av = a[i+l*lda]
				}
				if transB {
					bv = b[j+l*ldb]
				} else {
					bv = b[l+j*ldb]
				}
				sum += float64(av) * float64(bv)
			}
			out[i+j*ldc] = float64(alpha)*sum + float64(beta)*float64(c[i+j*ldc])
		}
	}
	return out
}

// relL2 is ‖got − want‖₂ / ‖want‖₂.
func relL2(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1 // round to nearest even
	return uint16(b >> 16)
}

func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func newBLAS(t *testing.T, c *Context) *BLAS {
	t.Helper()
	if _, _, err := gpu.Search(gpu.CUBLAS, gpu.OSEnv()); err != nil {
		t.Skip("no cuBLAS: " + err.Error())
	}
	var b *BLAS
	do(t, c, func() (err error) { b, err = c.NewBLAS(); return err })
	t.Cleanup(func() {
		if err := c.Do(b.Close); err != nil {
			t.Error(err)
		}
	})
	return b
}

func TestGPUGemmF32(t *testing.T) {
	c := openGPU(t)
	b := newBLAS(t, c)
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ ta, tb bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		const m, n, k = 33, 17, 65
		lda, ldb, ldc := m, k, m+3
		if tc.ta {
			lda = k
		}
		if tc.tb {
			ldb = n
		}
		a, bm, cm := randFloats(r, lda*max(m, k)), randFloats(r, ldb*max(k, n)), randFloats(r, ldc*n)
		alpha, beta := float32(1.25), float32(0.5)
		want := gemmRef(tc.ta, tc.tb, m, n, k, alpha, a, lda, bm, ldb, beta, cm, ldc)
		got := make([]float32, len(cm))
		do(t, c, func() error {
			s, err := c.NewStream()
			if err != nil {
				return err
			}
			defer c.DestroyStream(s)
			if err := b.SetStream(s); err != nil {
				return err
			}
			da, err := toDevice(c, a)
			if err != nil {
				return err
			}
			defer c.Free(da)
			db, err := toDevice(c, bm)
			if err != nil {
				return err
			}
			defer c.Free(db)
			dc, err := toDevice(c, cm)
			if err != nil {
				return err
			}
			defer c.Free(dc)
			if err := b.Gemm(tc.ta, tc.tb, m, n, k, alpha, da, R32F, lda, db, R32F, ldb, beta, dc, R32F, ldc); err != nil {
				return err
			}
			if err := c.SyncStream(s); err != nil {
				return err
			}
			return errors.Join(fromDevice(c, got, dc), b.SetStream(0))
		})
		if e := relL2(got, want); e >= 1e-5 {
			t.Errorf("transA %v transB %v: relative L2 error %g", tc.ta, tc.tb, e)
		}
	}
}

func TestGPUGemmBF16(t *testing.T) {
	c := openGPU(t)
	b := newBLAS(t, c)
	r := rand.New(rand.NewPCG(7, 8))
	const m, n, k = 128, 96, 256
	round := func(xs []float32) ([]float32, []uint16) {
		hs := make([]uint16, len(xs))
		for i, x := range xs {
			hs[i] = toBF16(x)
			xs[i] = fromBF16(hs[i])
		}
		return xs, hs
	}
	a, ah := round(randFloats(r, k*m)) // op(A) = Aᵀ, A is k×m
	bm, bh := round(randFloats(r, k*n))
	cm, ch := round(randFloats(r, m*n))
	alpha, beta := float32(0.75), float32(-1)
	want := gemmRef(true, false, m, n, k, alpha, a, k, bm, k, beta, cm, m)
	got := make([]uint16, m*n)
	do(t, c, func() error {
		ws, err := c.Alloc(32 << 20)
		if err != nil {
			return err
		}
		defer c.Free(ws)
		if err := b.SetWorkspace(ws, 32<<20); err != nil {
			return err
		}
		da, err := toDevice(c, ah)
		if err != nil {
			return err
		}
		defer c.Free(da)
		db, err := toDevice(c, bh)
		if err != nil {
			return err
		}
		defer c.Free(db)
		dc, err := toDevice(c, ch)
		if err != nil {
			return err
		}
		defer c.Free(dc)
		if err := b.Gemm(true, false, m, n, k, alpha, da, R16BF, k, db, R16BF, k, beta, dc, R16BF, m); err != nil {
			return err
		}
		if err := c.Synchronize(); err != nil {
			return err
		}
		return errors.Join(fromDevice(c, got, dc), b.SetWorkspace(0, 0))
	})
	gotF := make([]float32, len(got))
	for i, h := range got {
		gotF[i] = fromBF16(h)
	}
	if e := relL2(gotF, want); e >= 1e-2 {
		t.Errorf("relative L2 error %g", e)
	}
}

func TestGPUGemmBadArgs(t *testing.T) {
	c := openGPU(t)
	b := newBLAS(t, c)
	do(t, c, func() error {
		err := b.Gemm(false, false, 4, 4, 4, 1, 0, R32F, 1, 0, R32F, 4, 0, 0, R32F, 4) // lda < m
		if !errors.Is(err, &gpu.Error{Lib: gpu.LibCUBLAS, Code: 7}) {
			t.Errorf("lda < m: %v, want CUBLAS_STATUS_INVALID_VALUE", err)
		}
		return nil
	})
}

// BenchmarkGPULaunchEmpty measures queueing an empty kernel from inside one
// Do (the launch cost through purego).
func BenchmarkGPULaunchEmpty(b *testing.B) {
	c := openGPU(b)
	m := gpuKernels(b, c)
	do(b, c, func() error {
		f, err := c.Function(m, "empty")
		if err != nil {
			return err
		}
		b.ResetTimer()
		for range b.N {
			if err := c.Launch(f, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, 0); err != nil {
				return err
			}
		}
		err = c.Synchronize()
		b.StopTimer()
		return err
	})
}

// BenchmarkGPUDoLaunch measures one Do round trip per empty launch.
func BenchmarkGPUDoLaunch(b *testing.B) {
	c := openGPU(b)
	m := gpuKernels(b, c)
	var f Function
	do(b, c, func() (err error) { f, err = c.Function(m, "empty"); return err })
	b.ResetTimer()
	for range b.N {
		if err := c.Do(func() error { return c.Launch(f, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, 0) }); err != nil {
			b.Fatal(err)
		}
	}
	do(b, c, c.Synchronize)
}

// BenchmarkGPUCopy measures copy bandwidth for 64 MiB: host to device and
// device to host from pageable Go memory, and device to device.
func BenchmarkGPUCopy(b *testing.B) {
	c := openGPU(b)
	const size = 64 << 20
	host := make([]byte, size)
	var d0, d1 DevicePtr
	do(b, c, func() (err error) {
		if d0, err = c.Alloc(size); err != nil {
			return err
		}
		d1, err = c.Alloc(size)
		return err
	})
	defer c.Do(func() error { return errors.Join(c.Free(d0), c.Free(d1)) })
	for _, bc := range []struct {
		name string
		copy func() error
	}{
		{"HtoD", func() error { return c.CopyHtoD(d0, unsafe.Pointer(&host[0]), size) }},
		{"DtoH", func() error { return c.CopyDtoH(unsafe.Pointer(&host[0]), d0, size) }},
		{"DtoD", func() error { return c.CopyDtoDAsync(d1, d0, size, 0) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			do(b, c, func() error {
				start := time.Now()
				b.ResetTimer()
				for range b.N {
					if err := bc.copy(); err != nil {
						return err
					}
				}
				err := c.Synchronize()
				b.StopTimer()
				b.ReportMetric(float64(size)*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
				return err
			})
		})
	}
}
