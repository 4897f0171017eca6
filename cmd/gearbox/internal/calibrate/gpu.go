package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// GPUOptions configure MeasureGPU.
type GPUOptions struct {
	// Device is the CUDA device ordinal (--device cuda:N).
	Device int
	// Quick measures a smaller grid with fewer repetitions, for a first
	// look.
	Quick bool
	// KernelCache holds the CUDA executor's compiled kernels; nil
	// compiles them for every executor the measurement builds.
	KernelCache *gpu.KernelCache
	// Log, when set, receives one line per measurement as it completes.
	Log io.Writer
}

// gpuGrid is what MeasureGPU measures and how often.
type gpuGrid struct {
	engineGrid
	sample     time.Duration // the shortest timed graph replay or copy
	ms         []int         // GEMM rows (tokens)
	nks        [][2]int      // GEMM (N, K): weight shapes
	coldBytes  int64         // GEMM weights rotate through a buffer this large
	copyBytes  int64         // device copy: source and destination each
	logitsRows int           // logits readback: rows of logitsVocab float32
}

// gpuAttentionShape is the model whose CUDA executor steps measure
// attention: Llama-3.1-8B's heads (32 query and 8 KV heads of 128) on four
// narrow layers, so that the attention of a few thousand keys is most of
// a step and takes long enough (about a millisecond) to time on a GPU.
var gpuAttentionShape = Shape{Hidden: 4096, Intermediate: 256, Layers: 4, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 256, MaxPositions: 8192}

// logitsVocab is the vocabulary of the logits readback measurement,
// Llama 3's.
const logitsVocab = 128256

func newGPUGrid(quick bool) gpuGrid {
	// The weight shapes of Llama-3.2-1B's and Llama-3.1-8B's layers: the
	// fused q|k|v, o, fused gate|up and down projections.
	layers := [][2]int{{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}, {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}
	if quick {
		return gpuGrid{
			engineGrid: engineGrid{rounds: 3, attention: gpuAttentionShape, prefill: 512, decode: [3]int{32, 256, 2048}, loopSteps: 64},
			sample:     time.Millisecond,
			ms:         []int{1, 16, 128, 1024, 8192},
			nks:        [][2]int{{3072, 2048}, {16384, 2048}, {4096, 14336}},
			coldBytes:  1 << 30, copyBytes: 256 << 20, logitsRows: 16,
		}
	}
	return gpuGrid{
		engineGrid: engineGrid{rounds: 7, attention: gpuAttentionShape, prefill: 1024, decode: [3]int{64, 256, 4096}, loopSteps: 128},
		sample:     2 * time.Millisecond,
		ms:         []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192},
		nks:        layers,
		coldBytes:  2 << 30, copyBytes: 1 << 30, logitsRows: 64,
	}
}

// MeasureGPU measures CUDA device opts.Device with the libraries and
// kernels Gearbox's CUDA executor runs, in bfloat16, and returns the
// profile (DType sim.ProfileBFloat16) the simulator's cost model reads:
//
//   - GEMM: cuBLAS bfloat16 GEMMs with float32 accumulation (the
//     executor's cublasGemmEx call) over tokens M from 1 to 8192 × the
//     weight shapes of Llama-3.2-1B's and Llama-3.1-8B's layers, each
//     timed with events over a CUDA graph of back-to-back calls whose
//     weights rotate through a buffer far larger than L2, so they stream
//     from memory as a model's layers do;
//   - memory: device-to-device copies of 1 GiB, bytes read plus written;
//   - kernel latency: a CUDA graph of tiny (1×64×64) GEMMs, per kernel,
//     the floor of a kernel in the executor's decode graphs (the same
//     GEMMs launched one by one are logged);
//   - logits to host: the executor's readback of float32 logits into Go
//     memory (a device-to-host copy, then a copy into the step's output);
//   - attention: the executor's paged attention in whole executor steps,
//     as the difference of two steps that differ only in the keys
//     attended (see measureAttention), on Llama-3.1-8B's heads;
//   - step overhead: the engine loop on the executor with a tiny model,
//     less the cost model's prediction for its kernels.
//
// Every measurement is the median of interleaved rounds. When there is
// no CUDA driver, cuBLAS or NVRTC, the error is the gpu package's, saying
// which library was not found and where it looked. It returns ctx's error
// when ctx ends first.
func MeasureGPU(ctx context.Context, opts GPUOptions) (*sim.Profile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	g := newGPUGrid(opts.Quick)
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	p, err := measureDevice(ctx, opts.Device, g, logf)
	if err != nil {
		return nil, err
	}
	pool := tensor.NewPool(0) // random weights for the executors
	defer pool.Close()
	if err := measureEngine(ctx, p, GPURunners(opts.Device, opts.KernelCache), pool, g.engineGrid, 2, logf); err != nil {
		return nil, err
	}
	logf("measured in %.1f s", time.Since(start).Seconds())
	return p, nil
}

// measureDevice opens device ordinal and measures what needs no
// executor: copy bandwidth, kernel latency, the GEMM grid and the logits
// readback. It returns a profile with those filled in and releases the
// device before returning.
func measureDevice(ctx context.Context, ordinal int, g gpuGrid, logf func(string, ...any)) (_ *sim.Profile, err error) {
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	p := &sim.Profile{Version: sim.ProfileVersion, Name: dev.Name(), DType: sim.ProfileBFloat16, MemoryBytes: dev.TotalMem()}
	cc := dev.Capability()
	logf("calibrating %s (%s, %d SMs, %.1f GiB, driver %d) in bfloat16", p.Name, cc.Arch(), dev.Multiprocessors(),
		float64(p.MemoryBytes)/(1<<30), dev.DriverVersion())
	if c, ok := sim.MatchGPU(p.Name); ok {
		logf("catalog entry: %s", c.Name)
	} else {
		logf("no catalog entry matches %q", p.Name)
	}
	b := &gpuBench{dev: dev}
	defer func() { err = errors.Join(err, dev.Do(b.close)) }()
	if err := dev.Do(b.open); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if p.MemBytesPerS, err = b.measureCopy(ctx, g); err != nil {
		return nil, err
	}
	logf("memory: device copy %.1f GB/s (bytes read + written)", p.MemBytesPerS/1e9)
	graphed, eager, err := b.measureLaunch(ctx, g)
	if err != nil {
		return nil, err
	}
	p.KernelLatencyS, p.LaunchLatencyS = graphed, eager
	logf("kernel latency: %.2f µs in a CUDA graph, %.2f µs launched one by one", graphed*1e6, eager*1e6)
	if p.GEMM, err = b.measureGEMM(ctx, g, logf); err != nil {
		return nil, err
	}
	if p.LogitsBytesPerS, err = b.measureLogits(ctx, g); err != nil {
		return nil, err
	}
	logf("logits to host: %.1f GB/s (%d rows of %d float32)", p.LogitsBytesPerS/1e9, g.logitsRows, logitsVocab)
	return p, nil
}

// gpuBench is the device state of the kernel measurements. Its methods
// other than the measure ones run on the device's worker (inside Do).
type gpuBench struct {
	dev        *cuda.Context
	s          cuda.Stream
	blas       *cuda.BLAS
	start, end cuda.Event
	allocs     []cuda.DevicePtr
	graphs     []cuda.GraphExec
}

// blasWorkspace is cuBLAS's workspace, set explicitly (as the executor
// does) so that capturing GEMMs into a graph allocates nothing.
const blasWorkspace = 32 << 20

func (b *gpuBench) open() error {
	c := b.dev
	var err error
	if b.s, err = c.NewStream(); err != nil {
		return err
	}
	if b.blas, err = c.NewBLAS(); err != nil {
		return err
	}
	if err := b.blas.SetStream(b.s); err != nil {
		return err
	}
	work, err := b.alloc(blasWorkspace)
	if err != nil {
		return err
	}
	if err := b.blas.SetWorkspace(work, blasWorkspace); err != nil {
		return err
	}
	if b.start, err = c.NewEvent(); err != nil {
		return err
	}
	b.end, err = c.NewEvent()
	return err
}

// close releases everything open made or allocated.
func (b *gpuBench) close() error {
	c := b.dev
	var errs []error
	for _, g := range b.graphs {
		errs = append(errs, c.DestroyGraphExec(g))
	}
	for _, p := range b.allocs {
		errs = append(errs, c.Free(p))
	}
	for _, e := range []cuda.Event{b.start, b.end} {
		if e != 0 {
			errs = append(errs, c.DestroyEvent(e))
		}
	}
	if b.blas != nil {
		errs = append(errs, b.blas.Close())
	}
	if b.s != 0 {
		errs = append(errs, c.DestroyStream(b.s))
	}
	b.graphs, b.allocs = nil, nil
	return errors.Join(errs...)
}

func (b *gpuBench) alloc(bytes int64) (cuda.DevicePtr, error) {
	p, err := b.dev.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	b.allocs = append(b.allocs, p)
	return p, nil
}

// allocRandom allocates bytes of device memory holding bfloat16 values in
// [−0.025, 0.025): a host chunk copied in, then repeated on the device.
// GEMM timings depend on the values a little (zeros draw less power), so
// they are not left zero.
func (b *gpuBench) allocRandom(bytes int64) (cuda.DevicePtr, error) {
	p, err := b.alloc(bytes)
	if err != nil {
		return 0, err
	}
	const chunk = 16 << 20
	vals := make([]float32, chunk/2)
	fillRandom(nil, vals, uint32(len(b.allocs)))
	bf := make([]uint16, len(vals))
	for i, v := range vals {
		bf[i] = uint16(math.Float32bits(v) >> 16)
	}
	first := min(bytes, chunk)
	if err := b.dev.CopyHtoDAsync(p, unsafe.Pointer(&bf[0]), first, b.s); err != nil {
		return 0, err
	}
	for off := first; off < bytes; off += chunk {
		if err := b.dev.CopyDtoDAsync(p+cuda.DevicePtr(off), p, min(chunk, bytes-off), b.s); err != nil {
			return 0, err
		}
	}
	return p, b.dev.SyncStream(b.s)
}

// elapsed is the device time of the work run queues on the stream, in
// seconds, between two events.
func (b *gpuBench) elapsed(run func() error) (float64, error) {
	c := b.dev
	if err := c.RecordEvent(b.start, b.s); err != nil {
		return 0, err
	}
	if err := run(); err != nil {
		return 0, err
	}
	if err := c.RecordEvent(b.end, b.s); err != nil {
		return 0, err
	}
	if err := c.SyncEvent(b.end); err != nil {
		return 0, err
	}
	d, err := c.Elapsed(b.start, b.end)
	return d.Seconds(), err
}

// capture records calls of enqueue (given the call's index) on the stream
// into an instantiated graph, which close destroys.
func (b *gpuBench) capture(calls int, enqueue func(i int) error) (cuda.GraphExec, error) {
	c := b.dev
	if err := c.BeginCapture(b.s); err != nil {
		return 0, err
	}
	var runErr error
	for i := 0; i < calls && runErr == nil; i++ {
		runErr = enqueue(i)
	}
	g, err := c.EndCapture(b.s)
	if runErr != nil || err != nil {
		if g != 0 {
			err = errors.Join(err, c.DestroyGraph(g))
		}
		return 0, errors.Join(runErr, err)
	}
	exec, err := c.Instantiate(g)
	err = errors.Join(err, c.DestroyGraph(g))
	if err != nil {
		return 0, err
	}
	b.graphs = append(b.graphs, exec)
	return exec, nil
}

// replay is the device seconds of one call of a graph of calls calls.
func (b *gpuBench) replay(g cuda.GraphExec, calls int) (float64, error) {
	t, err := b.elapsed(func() error { return b.dev.LaunchGraph(g, b.s) })
	return t / float64(calls), err
}

// graphOf captures enqueue into a graph long enough to time: a first
// graph of a few calls is timed, and a graph of as many calls as fill
// g.sample (at most 512) replaces it when that is more. It returns the
// graph and its number of calls.
func (b *gpuBench) graphOf(g gpuGrid, enqueue func(i int) error) (cuda.GraphExec, int, error) {
	const first = 4
	exec, err := b.capture(first, enqueue)
	if err != nil {
		return 0, 0, err
	}
	if _, err := b.replay(exec, first); err != nil { // warm-up
		return 0, 0, err
	}
	t, err := b.replay(exec, first)
	if err != nil {
		return 0, 0, err
	}
	calls := first
	if t > 0 {
		calls = int(min(512, max(first, math.Ceil(g.sample.Seconds()/t))))
	}
	if calls == first {
		return exec, calls, nil
	}
	exec, err = b.capture(calls, enqueue)
	return exec, calls, err
}

// do runs f on the device's worker with the measurement's context check.
func (b *gpuBench) do(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.dev.Do(f); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	return nil
}

// measureCopy is the device-to-device copy bandwidth over g.copyBytes,
// counting the bytes read plus written.
func (b *gpuBench) measureCopy(ctx context.Context, g gpuGrid) (float64, error) {
	const copies = 4
	var src, dst cuda.DevicePtr
	err := b.do(ctx, func() error {
		var err error
		if src, err = b.allocRandom(g.copyBytes); err != nil {
			return err
		}
		dst, err = b.alloc(g.copyBytes)
		return err
	})
	if err != nil {
		return 0, err
	}
	run := func() error {
		for i := 0; i < copies; i++ {
			if err := b.dev.CopyDtoDAsync(dst, src, g.copyBytes, b.s); err != nil {
				return err
			}
		}
		return nil
	}
	t, err := rounds(ctx, 2*g.rounds+1, 1, func(int) (t float64, err error) { // the median leaves out the first, cold round
		err = b.do(ctx, func() error { t, err = b.elapsed(run); return err })
		return t / copies, err
	})
	if err != nil {
		return 0, err
	}
	return 2 * float64(g.copyBytes) / t[0], nil
}

// measureLaunch is the device time of one tiny kernel (a 1×64×64 GEMM)
// in a CUDA graph of back-to-back calls, and the same launched one by one
// from the host.
func (b *gpuBench) measureLaunch(ctx context.Context, g gpuGrid) (graphed, eager float64, err error) {
	const n, k, calls = 64, 64, 256
	var x, w, y cuda.DevicePtr
	var exec cuda.GraphExec
	gemv := func(int) error {
		return b.blas.Gemm(true, false, n, 1, k, 1, w, cuda.R16BF, k, x, cuda.R16BF, k, 0, y, cuda.R16BF, n)
	}
	err = b.do(ctx, func() error {
		var err error
		if x, err = b.allocRandom(2 * k); err != nil {
			return err
		}
		if w, err = b.allocRandom(2 * n * k); err != nil {
			return err
		}
		if y, err = b.alloc(2 * n); err != nil {
			return err
		}
		exec, err = b.capture(calls, gemv)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	oneByOne := func() error {
		for i := 0; i < calls; i++ {
			if err := gemv(i); err != nil {
				return err
			}
		}
		return nil
	}
	t, err := rounds(ctx, 2*g.rounds+1, 2, func(c int) (t float64, err error) {
		err = b.do(ctx, func() error {
			if c == 0 {
				t, err = b.replay(exec, calls)
				return err
			}
			t, err = b.elapsed(oneByOne)
			t /= calls
			return err
		})
		return t, err
	})
	if err != nil {
		return 0, 0, err
	}
	return t[0], t[1], nil
}

// measureGEMM times cuBLAS bfloat16 GEMMs, out[m, n] = in[m, k]·w[n, k]ᵀ
// as the executor calls them, over the grid: each (M, N, K) a graph of
// back-to-back calls whose weights rotate through a g.coldBytes buffer,
// replayed once per round.
func (b *gpuBench) measureGEMM(ctx context.Context, g gpuGrid, logf func(string, ...any)) ([]sim.GEMMPoint, error) {
	shapes, maxMK, maxMN := gemmShapes(g.nks, g.ms)
	var cold, x, y cuda.DevicePtr
	err := b.do(ctx, func() error {
		var err error
		if cold, err = b.allocRandom(g.coldBytes); err != nil {
			return err
		}
		if x, err = b.allocRandom(2 * int64(maxMK)); err != nil {
			return err
		}
		y, err = b.alloc(2 * int64(maxMN))
		return err
	})
	if err != nil {
		return nil, err
	}
	graphs := make([]cuda.GraphExec, len(shapes))
	calls := make([]int, len(shapes))
	for c, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		wb := 2 * int64(n) * int64(k)
		slots := g.coldBytes / wb
		if slots < 1 {
			return nil, fmt.Errorf("calibrate: GEMM weight %d×%d exceeds the %d-byte cold buffer", n, k, g.coldBytes)
		}
		gemm := func(i int) error {
			w := cold + cuda.DevicePtr(int64(i)%slots*wb)
			return b.blas.Gemm(true, false, n, m, k, 1, w, cuda.R16BF, k, x, cuda.R16BF, k, 0, y, cuda.R16BF, n)
		}
		if err := b.do(ctx, func() (err error) { graphs[c], calls[c], err = b.graphOf(g, gemm); return err }); err != nil {
			return nil, fmt.Errorf("calibrate: GEMM %d×%d×%d: %w", m, n, k, err)
		}
	}
	t, err := rounds(ctx, g.rounds, len(shapes), func(c int) (t float64, err error) {
		err = b.do(ctx, func() error { t, err = b.replay(graphs[c], calls[c]); return err })
		return t, err
	})
	if err != nil {
		return nil, err
	}
	return gemmPoints(shapes, t, g.nks, "TFLOP/s", 1e3, logf), nil
}

// measureLogits is the rate, bytes per second, at which the executor
// brings float32 logits to the host: g.logitsRows rows of logitsVocab
// copied from the device into Go memory, then into the step's output, as
// its readLogits does, timed on the host.
func (b *gpuBench) measureLogits(ctx context.Context, g gpuGrid) (rate float64, err error) {
	n := g.logitsRows * logitsVocab
	bytes := 4 * int64(n)
	// As the executor reads a single rank's logits: straight into its
	// page-locked output buffer, or Go memory where the driver has no
	// cuMemHostAlloc.
	var src cuda.DevicePtr
	var pinned unsafe.Pointer
	if err := b.do(ctx, func() (err error) {
		if src, err = b.allocRandom(bytes); err != nil {
			return err
		}
		pinned, err = b.dev.HostAlloc(bytes)
		return err
	}); err != nil {
		return 0, err
	}
	defer func() {
		err = errors.Join(err, b.do(context.Background(), func() error { return b.dev.HostFree(pinned) }))
	}()
	var out []float32
	if pinned != nil {
		out = unsafe.Slice((*float32)(pinned), n)
	} else {
		out = make([]float32, n)
	}
	read := func() error {
		if err := b.dev.CopyDtoHAsync(unsafe.Pointer(&out[0]), src, bytes, b.s); err != nil {
			return err
		}
		return b.dev.SyncStream(b.s)
	}
	t, err := rounds(ctx, 2*g.rounds+1, 1, func(int) (t float64, err error) { // the median leaves out the first round, which faults the pages in
		err = b.do(ctx, func() error {
			start := time.Now()
			err := read()
			t = time.Since(start).Seconds()
			return err
		})
		return t, err
	})
	if err != nil {
		return 0, err
	}
	return float64(bytes) / t[0], nil
}

// GPUName is the name CUDA gives device ordinal, e.g. "NVIDIA H100 80GB
// HBM3", the name sim.MatchGPU looks up.
func GPUName(ordinal int) (_ string, err error) {
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return "", fmt.Errorf("calibrate: %w", err)
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	return dev.Name(), nil
}
