package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// Options configure Measure.
type Options struct {
	// Threads is the number of kernel threads, as gearbox serve's
	// --threads; 0 means every core.
	Threads int
	// Quick measures a smaller grid with fewer repetitions, a few seconds
	// instead of about 35, for tests and a first look.
	Quick bool
	// MemoryBytes is the memory available to the engine; 0 reads the
	// machine's physical memory from the OS.
	MemoryBytes int64
	// Log, when set, receives one line per measurement as it completes.
	Log io.Writer
}

// grid is what Measure measures and how often it repeats each measurement.
type grid struct {
	engineGrid
	sample     time.Duration // the shortest timed sample
	ms         []int         // GEMM rows (tokens)
	nks        [][2]int      // GEMM (N, K): weight shapes
	linkSizes  []int         // collective message sizes, bytes
	streamSize int           // STREAM arrays, float32 elements
}

func newGrid(quick bool) grid {
	if quick {
		return grid{
			engineGrid: engineGrid{rounds: 3, attention: attentionShape, prefill: 256, decode: [3]int{16, 64, 1024}, loopSteps: 64},
			sample:     5 * time.Millisecond,
			ms:         []int{1, 4, 16, 64, 256, 1024},
			nks:        [][2]int{{1024, 1024}, {4096, 1024}, {1024, 4096}},
			linkSizes:  []int{4 << 10, 64 << 10, 1 << 20, 8 << 20},
			streamSize: 32 << 20,
		}
	}
	return grid{
		engineGrid: engineGrid{rounds: 7, attention: attentionShape, prefill: 512, decode: [3]int{32, 64, 2048}, loopSteps: 128},
		sample:     10 * time.Millisecond,
		ms:         []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		nks:        [][2]int{{512, 512}, {1024, 1024}, {256, 4096}, {4096, 1024}, {1024, 4096}, {4096, 4096}, {8192, 2048}},
		linkSizes:  []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20},
		streamSize: 64 << 20,
	}
}

// Measure measures this machine with the kernels the CPU engine runs and
// returns the profile the simulator's cost model reads (sim.Profile.GPU
// fits its curves):
//
//   - GEMM: tensor.MatMulW's GFLOP/s over a grid of tokens M × weight
//     shapes N×K, weights read cold from a buffer larger than the
//     last-level cache, as a model larger than the cache reads them every
//     step; with float32 weights, then with bfloat16 and float16 ones
//     (GEMMWeights), which have kernels of their own;
//   - memory: STREAM copy over the kernel pool, bytes read plus written;
//   - kernel latency: one pooled kernel with negligible arithmetic;
//   - link: all-reduces and all-to-alls of 4 KiB to 8 MiB over two ranks
//     of the in-process transport, fitted to the cost model's alpha-beta
//     form;
//   - attention: the engine's paged attention in whole engine steps, as
//     the difference of two steps that differ only in the keys attended
//     (see measureAttention);
//   - step overhead: the engine loop's host time per step on a tiny
//     model, less the cost model's prediction for its kernels.
//
// Every measurement is the median of interleaved rounds, so a noisy
// machine moves the medians less than it moves single runs; the grid and
// the order are fixed. Other processes competing for the cores still
// bias it: the log reports the load average before it starts. The
// default grid takes about 35 s on two cores, Quick about 3 s. It returns
// ctx's error when ctx ends first.
func Measure(ctx context.Context, opts Options) (*sim.Profile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	g := newGrid(opts.Quick)
	mem := opts.MemoryBytes
	if mem == 0 {
		var err error
		if mem, err = memoryBytes(); err != nil {
			return nil, err
		}
	}
	pool := tensor.NewPool(opts.Threads)
	defer pool.Close()
	p := &sim.Profile{
		Version: sim.ProfileVersion, Name: cpuName(), Threads: pool.Threads(),
		MemoryBytes: mem, L2Bytes: lastLevelCache(),
	}
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	logf("calibrating %s with %d kernel threads (%s)", p.Name, p.Threads, loadAverage())

	cold := make([]float32, coldElems)
	fillRandom(pool, cold, 7)
	var err error
	if p.MemBytesPerS, err = measureStream(ctx, pool, cold, g); err != nil {
		return nil, err
	}
	logf("memory: STREAM copy %.1f GB/s", p.MemBytesPerS/1e9)
	if p.KernelLatencyS, err = measureKernelLatency(ctx, pool, g); err != nil {
		return nil, err
	}
	logf("kernel latency: %.2f µs", p.KernelLatencyS*1e6)
	if p.GEMM, err = measureGEMM(ctx, pool, cold, tensor.F32, g, logf); err != nil {
		return nil, err
	}
	p.GEMMWeights = map[string][]sim.GEMMPoint{}
	for _, d := range weightFormats {
		points, err := measureGEMM(ctx, pool, cold, d, g, logf)
		if err != nil {
			return nil, err
		}
		p.GEMMWeights[simDType(d).Name()] = points
	}
	cold = nil
	if p.Link, err = measureLink(ctx, g, p.KernelLatencyS, logf); err != nil {
		return nil, err
	}
	logf("link: %.2f µs per hop, %.1f GB/s", p.Link.HopS*1e6, p.Link.BytesPerS/1e9)
	if err := measureEngine(ctx, p, CPURunners(pool), pool, g.engineGrid, 4, logf); err != nil {
		return nil, err
	}
	logf("measured in %.1f s", time.Since(start).Seconds())
	return p, nil
}

// measureEngine completes p with what the executors the runners build
// measure: the attention rates (their KV cache holding kvBytes per
// element), then the step overhead, which is what the cost model does not
// already predict and so is measured last, against the rest of the
// profile. It validates p.
func measureEngine(ctx context.Context, p *sim.Profile, runners Runners, pool *tensor.Pool, g engineGrid, kvBytes int, logf func(string, ...any)) error {
	att, err := measureAttention(ctx, runners, pool, g, kvBytes)
	if err != nil {
		return err
	}
	p.AttentionGFLOPS, p.AttentionDecodeGFLOPS = att.Prefill, att.Decode
	logf("attention: %.1f GFLOP/s; decode attention %.1f GFLOP/s, streaming its KV cache at %.1f GB/s", att.Prefill, att.Decode, att.DecodeKVBytesPerS/1e9)
	p.StepOverheadS = 0
	host, err := measureStepOverhead(ctx, runners, pool, p, g)
	if err != nil {
		return err
	}
	p.StepOverheadS = host.Step
	logf("engine step overhead: %.1f µs, and %.1f µs per running sequence (not in the cost model)", host.Step*1e6, host.PerSeq*1e6)
	if err := p.Validate(); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	return nil
}

// coldElems is the float32 elements of the buffer weights are read from:
// 256 MiB, larger than any CPU's last-level cache, and the largest weight
// of the grid (8192·2048·4 bytes) fits in it many times.
const coldElems = 64 << 20

// measureStream is STREAM's copy over the pool, counting the bytes read
// plus written.
func measureStream(ctx context.Context, pool *tensor.Pool, cold []float32, g grid) (float64, error) {
	n := g.streamSize
	src, dst := cold[:n], make([]float32, n)
	copyAll := func() { pool.Run(n, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) }) }
	copyAll()
	t, err := rounds(ctx, 2*g.rounds, 1, func(int) (float64, error) {
		return perCall(0, func(int) { copyAll() }), nil
	})
	if err != nil {
		return 0, err
	}
	return 2 * 4 * float64(n) / t[0], nil
}

// measureKernelLatency is the time of one pooled kernel whose arithmetic
// is negligible: a 1×64×64 MatMul split over the pool's threads.
func measureKernelLatency(ctx context.Context, pool *tensor.Pool, g grid) (float64, error) {
	const n, k = 64, 64
	x, w, y := make([]float32, k), make([]float32, n*k), make([]float32, n)
	fillRandom(nil, w, 3)
	fillRandom(nil, x, 5)
	t, err := rounds(ctx, 2*g.rounds, 1, func(int) (float64, error) {
		return perCall(g.sample, func(int) { tensor.MatMul(pool, y, x, w, 1, k, n) }), nil
	})
	if err != nil {
		return 0, err
	}
	return t[0], nil
}

// ErrNoisy marks a measurement that scheduling noise swamped (a loaded
// machine): measuring again may succeed.
var ErrNoisy = errors.New("the machine is too noisy to measure it")

// weightFormats are the CPU engine's weight formats besides float32 whose
// GEMMs Measure times (sim.Profile.GEMMWeights), each with its own kernels.
var weightFormats = []tensor.DType{tensor.BF16, tensor.F16, tensor.Q8_0}

// simDType is the simulator's dtype of a weight format.
func simDType(d tensor.DType) sim.DType {
	switch d {
	case tensor.BF16:
		return sim.BF16
	case tensor.F16:
		return sim.FP16
	case tensor.Q8_0:
		return sim.Q8
	}
	return sim.FP32
}

// measureGEMM times tensor.MatMulW with weights in format d over the grid:
// every (M, N, K) once per round, each call reading its weights from the
// next slice of cold (converted to d), so that weights come from memory
// as in a step of a model larger than the cache.
func measureGEMM(ctx context.Context, pool *tensor.Pool, cold []float32, d tensor.DType, g grid, logf func(string, ...any)) ([]sim.GEMMPoint, error) {
	weights := func(off, n, k int) *tensor.Weights { return tensor.NewWeightsF32(cold[off:off+n*k], n, k) }
	switch d {
	case tensor.Q8_0:
		// Q8_0 rows are blocks of their own: cold is quantized once per
		// row length K as rows of K, and a weight is N of those rows.
		byK := map[int]*tensor.Weights{}
		for _, nk := range g.nks {
			if k := nk[1]; byK[k] == nil {
				byK[k] = tensor.QuantizeQ8_0(pool, tensor.NewWeightsF32(cold[:len(cold)/k*k], len(cold)/k, k))
			}
		}
		weights = func(off, n, k int) *tensor.Weights { return byK[k].Rows(off/k, off/k+n) }
	case tensor.BF16, tensor.F16:
		half := make([]uint16, len(cold))
		encode, wrap := tensor.EncodeBF16, tensor.NewWeightsBF16
		if d == tensor.F16 {
			encode, wrap = tensor.EncodeF16, tensor.NewWeightsF16
		}
		pool.Run(len(cold), func(lo, hi int) { encode(half[lo:hi], cold[lo:hi]) })
		weights = func(off, n, k int) *tensor.Weights { return wrap(half[off:off+n*k], n, k) }
	}
	shapes, maxMK, maxMN := gemmShapes(g.nks, g.ms)
	x, y := make([]float32, maxMK), make([]float32, maxMN)
	fillRandom(pool, x, 11)
	t, err := rounds(ctx, g.rounds, len(shapes), func(c int) (float64, error) {
		m, n, k := shapes[c][0], shapes[c][1], shapes[c][2]
		slots := len(cold) / (n * k)
		if slots < 1 {
			return 0, fmt.Errorf("calibrate: GEMM weight %d×%d exceeds the cold buffer", n, k)
		}
		return perCall(g.sample, func(i int) {
			tensor.MatMulW(pool, y[:m*n], x[:m*k], weights((i%slots)*n*k, n, k), m)
		}), nil
	})
	if err != nil {
		return nil, err
	}
	return gemmPoints(shapes, t, g.nks, d.String()+" GFLOP/s", 1, logf), nil
}

// gemmShapes is the GEMM grid, every M for each weight shape N×K, with the
// largest input (M·K) and output (M·N) it needs.
func gemmShapes(nks [][2]int, ms []int) (shapes [][3]int, maxMK, maxMN int) {
	for _, nk := range nks {
		for _, m := range ms {
			shapes = append(shapes, [3]int{m, nk[0], nk[1]})
			maxMK, maxMN = max(maxMK, m*nk[1]), max(maxMN, m*nk[0])
		}
	}
	return shapes, maxMK, maxMN
}

// gemmPoints turns the seconds t of each grid shape into profile points
// and logs one line per weight shape, rates in unit (GFLOP/s divided by
// per).
func gemmPoints(shapes [][3]int, t []float64, nks [][2]int, unit string, per float64, logf func(string, ...any)) []sim.GEMMPoint {
	out := make([]sim.GEMMPoint, len(shapes))
	for c, s := range shapes {
		out[c] = sim.GEMMPoint{M: s[0], N: s[1], K: s[2], GFLOPS: 2 * float64(s[0]) * float64(s[1]) * float64(s[2]) / t[c] / 1e9}
	}
	for _, nk := range nks {
		line := fmt.Sprintf("GEMM N=%d K=%d %s by M:", nk[0], nk[1], unit)
		for _, pt := range out {
			if pt.N == nk[0] && pt.K == nk[1] {
				line += fmt.Sprintf(" %d:%.1f", pt.M, pt.GFLOPS/per)
			}
		}
		logf("%s", line)
	}
	return out
}

// LinkPoint is one measured collective of the in-process transport over
// two ranks.
type LinkPoint struct {
	Kind    comm.Kind
	Bytes   int64   // bytes one member moves (the larger of sent and received, as package comm counts them)
	Seconds float64 // one call, median
}

// measureLink times all-reduces and all-to-alls over two ranks at each
// size and fits the cost model's collective time,
//
//	KernelLatency + steps·HopS + bytes/BytesPerS,
//
// by weighted least squares on the relative error (sizes span three
// orders of magnitude), with steps from sim.CollectiveSteps and bytes from
// package comm's volume functions.
func measureLink(ctx context.Context, g grid, kernelLatency float64, logf func(string, ...any)) (sim.AlphaBeta, error) {
	points, err := measureCollectives(ctx, g)
	if err != nil {
		return sim.AlphaBeta{}, err
	}
	for _, pt := range points {
		logf("link: %s of %d bytes per member: %.1f µs", pt.Kind, pt.Bytes, pt.Seconds*1e6)
	}
	return fitLink(points, kernelLatency)
}

const linkRanks = 2

func measureCollectives(ctx context.Context, g grid) ([]LinkPoint, error) {
	kinds := []comm.Kind{comm.KindAllReduce, comm.KindAllToAll}
	type linkCase struct {
		kind  comm.Kind
		elems int
	}
	var cases []linkCase
	for _, k := range kinds {
		for _, b := range g.linkSizes {
			cases = append(cases, linkCase{k, b / 4})
		}
	}
	t, err := rounds(ctx, g.rounds, len(cases), func(c int) (float64, error) {
		return timeCollective(ctx, cases[c].kind, cases[c].elems, g.sample)
	})
	if err != nil {
		return nil, err
	}
	out := make([]LinkPoint, len(cases))
	for c, lc := range cases {
		var sent, recv int64
		switch lc.kind {
		case comm.KindAllReduce:
			sent, recv = comm.AllReduceBytes(lc.elems, linkRanks, 0, 4)
		default:
			counts := []int{lc.elems / linkRanks, lc.elems / linkRanks}
			sent, recv = comm.AllToAllBytes(counts, counts, 0, 4)
		}
		out[c] = LinkPoint{Kind: lc.kind, Bytes: max(sent, recv), Seconds: t[c]}
	}
	return out, nil
}

// timeCollective runs one kind of collective of elems float32 elements
// per member back to back on two ranks for at least minDur and returns
// the seconds of one call as rank 0 sees them.
func timeCollective(ctx context.Context, kind comm.Kind, elems int, minDur time.Duration) (float64, error) {
	w, err := comm.NewWorld(linkRanks)
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	op := func(c *comm.Comm, send, recv []float32) error {
		if kind == comm.KindAllReduce {
			return c.AllReduce(ctx, send)
		}
		return c.AllToAll(ctx, send, recv)
	}
	// Rank 0 decides how many calls to run (at least minDur of them) and
	// tells rank 1 through a one-element all-reduce after each call.
	var wg sync.WaitGroup
	errs := make([]error, linkRanks)
	var perOp float64
	for r := 0; r < linkRanks; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := w.Comm(r)
			send, recv, flag := make([]float32, elems), make([]float32, elems), make([]float32, 1)
			if err := op(c, send, recv); err != nil { // warm-up
				errs[r] = err
				return
			}
			start := time.Now()
			var opTime time.Duration
			for n := 1; ; n++ {
				t0 := time.Now()
				if err := op(c, send, recv); err != nil {
					errs[r] = err
					w.Abort(err)
					return
				}
				opTime += time.Since(t0)
				flag[0] = 0
				if r == 0 && time.Since(start) >= minDur {
					flag[0] = 1
				}
				if err := c.AllReduce(ctx, flag); err != nil {
					errs[r] = err
					w.Abort(err)
					return
				}
				if flag[0] > 0 {
					if r == 0 {
						perOp = opTime.Seconds() / float64(n)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("calibrate: %s of %d elements: %w", kind, elems, err)
	}
	return perOp, nil
}

// fitLink fits HopS and BytesPerS to the points (see measureLink). A
// negative hop latency (a transport faster per call than a kernel launch)
// is clamped to 0 and the bandwidth refitted alone.
func fitLink(points []LinkPoint, kernelLatency float64) (sim.AlphaBeta, error) {
	// Minimise Σ wᵢ (a·sᵢ + b·xᵢ − yᵢ)² with yᵢ the time less the kernel
	// latency, sᵢ the algorithm steps, xᵢ the bytes and wᵢ = 1/tᵢ².
	var sss, ssx, sxx, ssy, sxy float64
	for _, p := range points {
		if !(p.Seconds > 0) {
			return sim.AlphaBeta{}, fmt.Errorf("calibrate: collective %s of %d bytes took %g s", p.Kind, p.Bytes, p.Seconds)
		}
		w := 1 / (p.Seconds * p.Seconds)
		s, x, y := float64(sim.CollectiveSteps(p.Kind, linkRanks)), float64(p.Bytes), p.Seconds-kernelLatency
		sss += w * s * s
		ssx += w * s * x
		sxx += w * x * x
		ssy += w * s * y
		sxy += w * x * y
	}
	det := sss*sxx - ssx*ssx
	a, b := 0.0, 0.0
	if det > 0 {
		a = (ssy*sxx - sxy*ssx) / det
		b = (sss*sxy - ssx*ssy) / det
	}
	if !(a >= 0) {
		a, b = 0, sxy/sxx
	}
	if !(b > 0) || math.IsInf(1/b, 0) {
		return sim.AlphaBeta{}, fmt.Errorf("calibrate: collective times do not grow with size; cannot fit a link bandwidth: %w", ErrNoisy)
	}
	return sim.AlphaBeta{HopS: a, BytesPerS: 1 / b}, nil
}
