package cudaexec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/safetensors"
)

// The kernel tests run every kernel on fresh random inputs for each dtype
// and compare with float64 references computed from the inputs as rounded
// to the dtype. Outputs are poisoned with 0xFF bytes (NaN in every dtype)
// before each launch: a NaN left in an output is an element never written,
// and guard regions after the outputs (and the cache slots a launch must
// not touch) must still hold the poison afterwards.

// kernelDevice is the test binary's context on device 0 with the kernels
// loaded so far, shared by every kernel test and benchmark.
var kernelDevice = sync.OnceValues(func() (*kernelDev, error) {
	ctx, err := cuda.Open(0)
	if err != nil {
		return nil, err
	}
	return &kernelDev{ctx: ctx, loaded: map[model.DType]*Kernels{}}, nil
})

type kernelDev struct {
	ctx    *cuda.Context
	mu     sync.Mutex
	loaded map[model.DType]*Kernels
}

// kernels returns dt's kernels, compiled and loaded once per process.
func (d *kernelDev) kernels(t testing.TB, dt model.DType) *Kernels {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if k := d.loaded[dt]; k != nil {
		return k
	}
	nv := loadNVRTC(t)
	var k *Kernels
	err := d.ctx.Do(func() error {
		var err error
		k, err = LoadKernels(d.ctx, nv, nil, dt)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	d.loaded[dt] = k
	return k
}

// kt is one kernel test: a device, the kernels of one dtype and a random
// source.
type kt struct {
	t   *testing.T
	ctx *cuda.Context
	k   *Kernels
	dt  model.DType
	rng *rand.Rand
}

// forEachDType runs f as a subtest for every dtype, skipping (with one
// line) when no GPU can be opened.
func forEachDType(t *testing.T, f func(e *kt)) {
	d, err := kernelDevice()
	if err != nil {
		t.Skip("no CUDA GPU: " + firstLine(err.Error()))
	}
	for i, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			k := d.kernels(t, dt)
			f(&kt{t: t, ctx: d.ctx, k: k, dt: dt, rng: rand.New(rand.NewPCG(uint64(i)+1, uint64(len(t.Name()))))})
		})
	}
}

// do runs f on the context's worker and fails the test on error.
func (e *kt) do(f func() error) {
	e.t.Helper()
	if err := e.ctx.Do(f); err != nil {
		e.t.Fatal(err)
	}
}

// run queues the launches of f on the default stream and waits for them,
// so that asynchronous launch errors surface here.
func (e *kt) run(f func(s cuda.Stream) error) {
	e.t.Helper()
	e.do(func() error {
		if err := f(0); err != nil {
			return err
		}
		return e.ctx.Synchronize()
	})
}

// dev allocates len(b) bytes on the device holding b; freed at cleanup.
func (e *kt) dev(b []byte) cuda.DevicePtr {
	e.t.Helper()
	var p cuda.DevicePtr
	e.do(func() error {
		var err error
		if p, err = e.ctx.Alloc(int64(max(len(b), 1))); err != nil {
			return err
		}
		if len(b) == 0 {
			return nil
		}
		return e.ctx.CopyHtoD(p, unsafePointer(b), int64(len(b)))
	})
	e.t.Cleanup(func() { _ = e.ctx.Do(func() error { return e.ctx.Free(p) }) })
	return p
}

// poisoned allocates n bytes of 0xFF.
func (e *kt) poisoned(n int) cuda.DevicePtr { return e.dev(poisonBytes(n)) }

// get copies n bytes from p.
func (e *kt) get(p cuda.DevicePtr, n int) []byte {
	e.t.Helper()
	b := make([]byte, n)
	e.do(func() error { return e.ctx.CopyDtoH(unsafePointer(b), p, int64(n)) })
	return b
}

// unsafePointer is the address of b's first byte; b must not be empty.
func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

func poisonBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xFF
	}
	return b
}

// size is the bytes per element of the test's dtype.
func (e *kt) size() int { return e.dt.Size() }

// tol is the relative L2 tolerance of the dtype.
func (e *kt) tol(f32 float64) float64 {
	if e.dt == model.Float32 {
		return f32
	}
	return 1e-2
}

// vals returns n random values in [-scale, scale) rounded to the dtype,
// never zero.
func (e *kt) vals(n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		x := 0.0
		for x == 0 {
			x = roundToDType(e.dt, (e.rng.Float64()*2-1)*scale)
		}
		v[i] = x
	}
	return v
}

// f32vals returns n random float32 values in [-scale, scale), never zero.
func (e *kt) f32vals(n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		for v[i] == 0 {
			v[i] = float64(float32((e.rng.Float64()*2 - 1) * scale))
		}
	}
	return v
}

// roundToDType rounds x to dt (to nearest even) and widens it back.
func roundToDType(dt model.DType, x float64) float64 {
	switch dt {
	case model.Float16:
		return float64(safetensors.F16ToFloat32(safetensors.Float32ToF16(float32(x))))
	case model.BFloat16:
		return float64(safetensors.BF16ToFloat32(safetensors.Float32ToBF16(float32(x))))
	}
	return float64(float32(x))
}

// encodeAs stores v as dt; NaN becomes the poison pattern (all ones).
func encodeAs(dt model.DType, v []float64) []byte {
	size := dt.Size()
	b := make([]byte, len(v)*size)
	for i, x := range v {
		if math.IsNaN(x) {
			for j := range size {
				b[i*size+j] = 0xFF
			}
			continue
		}
		switch dt {
		case model.Float16:
			binary.LittleEndian.PutUint16(b[2*i:], safetensors.Float32ToF16(float32(x)))
		case model.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], safetensors.Float32ToBF16(float32(x)))
		default:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
		}
	}
	return b
}

// decodeAs widens dt data to float64.
func decodeAs(dt model.DType, b []byte) []float64 {
	size := dt.Size()
	v := make([]float64, len(b)/size)
	for i := range v {
		switch dt {
		case model.Float16:
			v[i] = float64(safetensors.F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
		case model.BFloat16:
			v[i] = float64(safetensors.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
		default:
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	}
	return v
}

func f32Encode(v []float64) []byte { return encodeAs(model.Float32, v) }
func f32Decode(b []byte) []float64 { return decodeAs(model.Float32, b) }

func i32Bytes(v []int) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
	}
	return b
}

func i32Decode(b []byte) []int {
	v := make([]int, len(b)/4)
	for i := range v {
		v[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return v
}

// checkClose fails unless got is finite everywhere and within relative L2
// error tol of want.
func checkClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var num, den float64
	worst, wi := 0.0, -1
	for i := range got {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			t.Fatalf("%s: element %d is %v (never written?)", what, i, got[i])
		}
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
		if math.Abs(d) > worst {
			worst, wi = math.Abs(d), i
		}
	}
	if den == 0 {
		den = 1
	}
	if rel := math.Sqrt(num / den); rel > tol || math.IsNaN(rel) {
		t.Errorf("%s: relative L2 error %.3g > %.3g; worst element %d: got %v, want %v", what, rel, tol, wi, got[wi], want[wi])
	}
}

// checkPoison fails unless every byte of b is still 0xFF.
func checkPoison(t *testing.T, what string, b []byte) {
	t.Helper()
	for i, x := range b {
		if x != 0xFF {
			t.Fatalf("%s: byte %d overwritten (%#x)", what, i, x)
		}
	}
}

func TestKernelEmbed(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const n, hidden, lo, hi = 7, 200, 10, 50
		table := e.vals((hi-lo)*hidden, 1)
		ids := []int{10, 49, 3, 50, 25, 25, 60}
		x := e.poisoned((n + 1) * hidden * 4)
		pt, pi := e.dev(encodeAs(e.dt, table)), e.dev(i32Bytes(ids))
		e.run(func(s cuda.Stream) error { return e.k.Embed(s, x, pt, pi, n, hidden, lo, hi) })
		out := e.get(x, (n+1)*hidden*4)
		got := f32Decode(out[:n*hidden*4])
		for i, id := range ids {
			for c := range hidden {
				want := 0.0
				if id >= lo && id < hi {
					want = table[(id-lo)*hidden+c]
				}
				if got[i*hidden+c] != want {
					e.t.Fatalf("x[%d,%d] = %v, want %v", i, c, got[i*hidden+c], want)
				}
			}
		}
		checkPoison(e.t, "guard row", out[n*hidden*4:])
	})
}

func TestKernelGatherRows(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const rowsIn, width = 9, 201
		in := encodeAs(e.dt, e.vals(rowsIn*width, 1))
		rows := []int{8, 0, 3, 3, 7}
		m, rb := len(rows), width*e.size()
		out := e.poisoned((m + 1) * rb)
		pin, pr := e.dev(in), e.dev(i32Bytes(rows))
		e.run(func(s cuda.Stream) error { return e.k.GatherRows(s, out, pin, pr, m, width) })
		got := e.get(out, (m+1)*rb)
		for i, r := range rows {
			if string(got[i*rb:(i+1)*rb]) != string(in[r*rb:(r+1)*rb]) {
				e.t.Fatalf("row %d differs from input row %d", i, r)
			}
		}
		checkPoison(e.t, "guard row", got[m*rb:])
	})
}

func TestKernelCopy2D(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const rows, srcPitch, dstPitch, cols, srcCol, dstCol = 5, 210, 300, 201, 3, 7
		size := e.size()
		src := encodeAs(e.dt, e.vals(rows*srcPitch, 1))
		ps, pd := e.dev(src), e.poisoned(rows*dstPitch*size)
		e.run(func(s cuda.Stream) error {
			return e.k.Copy2D(s, pd+cuda.DevicePtr(dstCol*size), dstPitch, ps+cuda.DevicePtr(srcCol*size), srcPitch, rows, cols)
		})
		got := e.get(pd, rows*dstPitch*size)
		for r := range rows {
			row := got[r*dstPitch*size : (r+1)*dstPitch*size]
			want := src[(r*srcPitch+srcCol)*size : (r*srcPitch+srcCol+cols)*size]
			if string(row[dstCol*size:(dstCol+cols)*size]) != string(want) {
				e.t.Fatalf("row %d differs", r)
			}
			checkPoison(e.t, fmt.Sprintf("row %d before the block", r), row[:dstCol*size])
			checkPoison(e.t, fmt.Sprintf("row %d after the block", r), row[(dstCol+cols)*size:])
		}
	})
}

func TestKernelAdd(t *testing.T) {
	forEachDType(t, func(e *kt) {
		for _, tc := range []struct {
			n   int
			off int // elements: 1 makes the pointers unaligned
		}{{1001, 0}, {4096, 0}, {1001, 1}, {3, 0}} {
			dst, src := e.vals(tc.n+tc.off, 1), e.vals(tc.n+tc.off, 1)
			size := e.size()
			pd := e.dev(append(encodeAs(e.dt, dst), poisonBytes(64)...))
			ps := e.dev(encodeAs(e.dt, src))
			off := cuda.DevicePtr(tc.off * size)
			e.run(func(s cuda.Stream) error { return e.k.Add(s, pd+off, ps+off, int64(tc.n)) })
			out := e.get(pd, (tc.n+tc.off)*size+64)
			got := decodeAs(e.dt, out[tc.off*size:(tc.n+tc.off)*size])
			want := make([]float64, tc.n)
			for i := range want {
				want[i] = roundToDType(e.dt, dst[tc.off+i]+src[tc.off+i])
			}
			checkClose(e.t, fmt.Sprintf("n=%d off=%d", tc.n, tc.off), got, want, e.tol(1e-7))
			if tc.off > 0 && string(out[:tc.off*size]) != string(encodeAs(e.dt, dst[:tc.off])) {
				e.t.Errorf("n=%d off=%d: element before the range changed", tc.n, tc.off)
			}
			checkPoison(e.t, "guard", out[(tc.n+tc.off)*size:])
		}
	})
}

func TestKernelConvert(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const n = 1003
		in := e.f32vals(n, 4)
		copy(in, []float64{70000, 65519, 65520, -65504, 1e-6, -3e-8, 1e-30, math.Copysign(0, -1), 0, 1.00048828125, 3.999, 1e30})
		out := e.poisoned(n*e.size() + 64)
		back := e.poisoned(n*4 + 64)
		pin := e.dev(f32Encode(in))
		e.run(func(s cuda.Stream) error {
			if err := e.k.Convert(s, out, pin, n); err != nil {
				return err
			}
			return e.k.ToF32(s, back, out, n)
		})
		got := e.get(out, n*e.size()+64)
		want := encodeAs(e.dt, in)
		for i := range n {
			g, w := got[i*e.size():(i+1)*e.size()], want[i*e.size():(i+1)*e.size()]
			if string(g) != string(w) {
				e.t.Fatalf("convert(%v) = %x, want %x", in[i], g, w)
			}
		}
		checkPoison(e.t, "convert guard", got[n*e.size():])
		wide := e.get(back, n*4+64)
		for i, w := range decodeAs(e.dt, want) {
			g := math.Float32frombits(binary.LittleEndian.Uint32(wide[4*i:]))
			if math.Float32bits(g) != math.Float32bits(float32(w)) {
				e.t.Fatalf("to_f32 element %d = %v, want %v", i, g, w)
			}
		}
		checkPoison(e.t, "to_f32 guard", wide[n*4:])
	})
}

func TestKernelArgmax(t *testing.T) {
	forEachDType(t, func(e *kt) {
		if e.dt != model.Float32 {
			e.t.Skip("argmax reads float32 logits whatever the dtype")
		}
		for _, vocab := range []int{1000, 7, 50000} {
			const rows = 5
			lg := e.f32vals(rows*vocab, 10)
			// Row 1: a tie, the lower index must win. Row 2: NaN before the
			// maximum. Row 3: all -Inf. Row 4: the maximum last.
			lg[1*vocab+vocab/2], lg[1*vocab+vocab/3] = 50, 50
			lg[2*vocab], lg[2*vocab+vocab-2] = math.NaN(), 40
			for j := range vocab {
				lg[3*vocab+j] = math.Inf(-1)
			}
			lg[4*vocab+vocab-1] = 60
			idx := e.poisoned((rows + 1) * 4)
			pl := e.dev(f32Encode(lg))
			e.run(func(s cuda.Stream) error { return e.k.Argmax(s, idx, pl, rows, vocab) })
			b := e.get(idx, (rows+1)*4)
			got := i32Decode(b[:rows*4])
			for r := range rows {
				want := 0
				for j := 1; j < vocab; j++ {
					if lg[r*vocab+j] > lg[r*vocab+want] || math.IsNaN(lg[r*vocab+want]) && !math.IsNaN(lg[r*vocab+j]) {
						want = j
					}
				}
				if got[r] != want {
					e.t.Errorf("vocab %d row %d: argmax %d, want %d", vocab, r, got[r], want)
				}
			}
			checkPoison(e.t, "guard", b[rows*4:])
		}
	})
}

// rmsRef is out = x·rsqrt(mean(x²)+eps)·w in float64.
func rmsRef(out, x, w []float64, eps float64) {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i, v := range x {
		out[i] = v * inv * w[i]
	}
}

func TestKernelAddRMSNorm(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const n, eps = 7, 1e-5
		for _, hidden := range []int{200, 201, 4096} {
			for _, mode := range []string{"delta+bias", "delta", "none"} {
				name := fmt.Sprintf("hidden=%d %s", hidden, mode)
				resid := e.f32vals(n*hidden, 2)
				delta, bias := e.vals(n*hidden, 1), e.vals(hidden, 0.5)
				w := e.vals(hidden, 1)
				pr := e.dev(f32Encode(resid))
				var pd, pb cuda.DevicePtr
				if mode != "none" {
					pd = e.dev(encodeAs(e.dt, delta))
				}
				if mode == "delta+bias" {
					pb = e.dev(encodeAs(e.dt, bias))
				}
				out, pw := e.poisoned((n+1)*hidden*e.size()), e.dev(encodeAs(e.dt, w))
				e.run(func(s cuda.Stream) error { return e.k.AddRMSNorm(s, out, pr, pd, pb, pw, n, hidden, eps) })
				want, wantOut := make([]float64, n*hidden), make([]float64, n*hidden)
				for i := range n {
					for c := range hidden {
						v := resid[i*hidden+c]
						if mode != "none" {
							v += delta[i*hidden+c]
						}
						if mode == "delta+bias" {
							v += bias[c]
						}
						want[i*hidden+c] = v
					}
					rmsRef(wantOut[i*hidden:(i+1)*hidden], want[i*hidden:(i+1)*hidden], w, eps)
				}
				gotResid := f32Decode(e.get(pr, n*hidden*4))
				if mode == "none" {
					for i := range resid {
						if gotResid[i] != resid[i] {
							e.t.Fatalf("%s: resid[%d] changed without delta", name, i)
						}
					}
				} else {
					checkClose(e.t, name+" resid", gotResid, want, 1e-6)
				}
				b := e.get(out, (n+1)*hidden*e.size())
				checkClose(e.t, name+" out", decodeAs(e.dt, b[:n*hidden*e.size()]), wantOut, e.tol(1e-5))
				checkPoison(e.t, name+" guard row", b[n*hidden*e.size():])
			}
		}
	})
}

func TestKernelSiLUMul(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const n = 7
		for _, inter := range []int{200, 201} {
			for _, withBias := range []bool{true, false} {
				name := fmt.Sprintf("inter=%d bias=%v", inter, withBias)
				gu := e.vals(n*2*inter, 4)
				bias := e.vals(2*inter, 1)
				var pb cuda.DevicePtr
				if withBias {
					pb = e.dev(encodeAs(e.dt, bias))
				}
				out, pg := e.poisoned((n+1)*inter*e.size()), e.dev(encodeAs(e.dt, gu))
				e.run(func(s cuda.Stream) error { return e.k.SiLUMul(s, out, pg, pb, n, inter) })
				want := make([]float64, n*inter)
				for i := range n {
					for j := range inter {
						g, u := gu[i*2*inter+j], gu[i*2*inter+inter+j]
						if withBias {
							g, u = g+bias[j], u+bias[inter+j]
						}
						want[i*inter+j] = g / (1 + math.Exp(-g)) * u
					}
				}
				b := e.get(out, (n+1)*inter*e.size())
				checkClose(e.t, name, decodeAs(e.dt, b[:n*inter*e.size()]), want, e.tol(1e-5))
				checkPoison(e.t, name+" guard row", b[n*inter*e.size():])
			}
		}
	})
}

// ropeTables returns cos and sin [positions, d/2] as float32 values.
func ropeTables(positions, d int) (cos, sin []float64) {
	half := d / 2
	cos, sin = make([]float64, positions*half), make([]float64, positions*half)
	for p := range positions {
		for j := range half {
			f := math.Pow(10000, -2*float64(j)/float64(d))
			s, c := math.Sincos(float64(p) * f)
			cos[p*half+j], sin[p*half+j] = float64(float32(c)), float64(float32(s))
		}
	}
	return cos, sin
}

func TestKernelQKVRope(t *testing.T) {
	forEachDType(t, func(e *kt) {
		const n, heads, kvHeads, bs, blocks, positions, eps = 7, 8, 2, 16, 5, 100, 1e-6
		for _, d := range []int{64, 128, 80} {
			for _, full := range []bool{true, false} {
				name := fmt.Sprintf("d=%d bias+norms=%v", d, full)
				w := (heads + 2*kvHeads) * d
				qkv := e.vals(n*w, 2)
				bias, qn, kn := e.vals(w, 0.5), e.vals(d, 1), e.vals(d, 1)
				cos, sin := ropeTables(positions, d)
				pos := make([]int, n)
				for i := range pos {
					pos[i] = e.rng.IntN(positions)
				}
				slotPerm := e.rng.Perm(blocks * bs)
				slot := slotPerm[:n]
				slot[2], slot[5] = -1, -1
				var pb, pq, pk cuda.DevicePtr
				if full {
					pb, pq, pk = e.dev(encodeAs(e.dt, bias)), e.dev(encodeAs(e.dt, qn)), e.dev(encodeAs(e.dt, kn))
				}
				cacheBytes := blocks * kvHeads * bs * d * e.size()
				q := e.poisoned((n + 1) * heads * d * e.size())
				kc, vc := e.poisoned(cacheBytes), e.poisoned(cacheBytes)
				args := QKVArgs{
					Q: q, KCache: kc, VCache: vc, QKV: e.dev(encodeAs(e.dt, qkv)), Bias: pb, QNorm: pq, KNorm: pk,
					Cos: e.dev(f32Encode(cos)), Sin: e.dev(f32Encode(sin)), Pos: e.dev(i32Bytes(pos)), Slot: e.dev(i32Bytes(slot)),
					N: n, Heads: heads, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, Eps: eps,
				}
				e.run(func(s cuda.Stream) error { return e.k.QKVRope(s, args) })
				// Reference: every head of every token, in float64.
				half := d / 2
				head := func(i, hh int) []float64 {
					x := make([]float64, d)
					for j := range d {
						x[j] = qkv[i*w+hh*d+j]
						if full {
							x[j] += bias[hh*d+j]
						}
					}
					if hh >= heads+kvHeads {
						return x
					}
					if full {
						nw := qn
						if hh >= heads {
							nw = kn
						}
						rmsRef(x, x, nw, eps)
					}
					c, s := cos[pos[i]*half:], sin[pos[i]*half:]
					for j := range half {
						a, b := x[j], x[j+half]
						x[j], x[j+half] = a*c[j]-b*s[j], b*c[j]+a*s[j]
					}
					return x
				}
				wantQ := make([]float64, 0, n*heads*d)
				wantK, wantV := make([]float64, blocks*kvHeads*bs*d), make([]float64, blocks*kvHeads*bs*d)
				for i := range wantK {
					wantK[i], wantV[i] = math.NaN(), math.NaN()
				}
				for i := range n {
					for h := range heads {
						wantQ = append(wantQ, head(i, h)...)
					}
					if slot[i] < 0 {
						continue
					}
					blk, off := slot[i]/bs, slot[i]%bs
					for kh := range kvHeads {
						at := ((blk*kvHeads+kh)*bs + off) * d
						copy(wantK[at:at+d], head(i, heads+kh))
						copy(wantV[at:at+d], head(i, heads+kvHeads+kh))
					}
				}
				b := e.get(q, (n+1)*heads*d*e.size())
				checkClose(e.t, name+" q", decodeAs(e.dt, b[:n*heads*d*e.size()]), wantQ, e.tol(1e-5))
				checkPoison(e.t, name+" q guard row", b[n*heads*d*e.size():])
				for _, c := range []struct {
					what string
					p    cuda.DevicePtr
					want []float64
				}{{"k cache", kc, wantK}, {"v cache", vc, wantV}} {
					raw := e.get(c.p, cacheBytes)
					var got, want []float64
					for i, wv := range c.want {
						cell := raw[i*e.size() : (i+1)*e.size()]
						if math.IsNaN(wv) {
							checkPoison(e.t, fmt.Sprintf("%s %s element %d (no token's slot)", name, c.what, i), cell)
							continue
						}
						got = append(got, decodeAs(e.dt, cell)[0])
						want = append(want, wv)
					}
					checkClose(e.t, name+" "+c.what, got, want, e.tol(1e-5))
				}
			}
		}
	})
}

// attnSeq is one sequence of an attention test batch: pos tokens cached
// before the chunk and qlen queries in it.
type attnSeq struct{ pos, qlen int }

type attnCase struct {
	name                          string
	heads, kvHeads, d, bs, window int
}

// attnBatch is one attention test: the paged cache, the batch tables and
// the float64 reference.
type attnBatch struct {
	c         attnCase
	seqs      []attnSeq
	maxBlocks int
	table     []int
	k, v      []float64 // cache [blocks, kvHeads, bs, d]; NaN where nothing was written
	q         []float64 // [tokens, heads, d]
	qStart    []int
	seqPos    []int
	tokens    int
	maxQLen   int
}

func (e *kt) newAttnBatch(c attnCase, seqs []attnSeq) *attnBatch {
	b := &attnBatch{c: c, seqs: seqs}
	need := make([]int, len(seqs))
	total := 0
	for i, s := range seqs {
		need[i] = (s.pos + s.qlen + c.bs - 1) / c.bs
		b.maxBlocks = max(b.maxBlocks, need[i])
		total += need[i]
		b.qStart = append(b.qStart, b.tokens)
		b.seqPos = append(b.seqPos, s.pos)
		b.tokens += s.qlen
		b.maxQLen = max(b.maxQLen, s.qlen)
	}
	b.qStart = append(b.qStart, b.tokens)
	// Physical blocks in random order; two spare blocks stay poisoned, and
	// unused table entries point at one of them.
	blocks := total + 2
	perm := e.rng.Perm(blocks)
	b.table = make([]int, len(seqs)*b.maxBlocks)
	next := 0
	for i := range seqs {
		for j := range b.maxBlocks {
			if j < need[i] {
				b.table[i*b.maxBlocks+j] = perm[next]
				next++
			} else {
				b.table[i*b.maxBlocks+j] = perm[blocks-1]
			}
		}
	}
	cells := blocks * c.kvHeads * c.bs * c.d
	b.k, b.v = make([]float64, cells), make([]float64, cells)
	for i := range b.k {
		b.k[i], b.v[i] = math.NaN(), math.NaN()
	}
	for i, s := range seqs {
		for t := range s.pos + s.qlen {
			for kh := range c.kvHeads {
				at := b.at(i, t, kh)
				copy(b.k[at:at+c.d], e.vals(c.d, 1))
				copy(b.v[at:at+c.d], e.vals(c.d, 1))
			}
		}
	}
	b.q = e.vals(b.tokens*c.heads*c.d, 1)
	return b
}

// at is the cache index of key position t of sequence s, KV head kh.
func (b *attnBatch) at(s, t, kh int) int {
	blk := b.table[s*b.maxBlocks+t/b.c.bs]
	return ((blk*b.c.kvHeads+kh)*b.c.bs + t%b.c.bs) * b.c.d
}

// reference is softmax(q·kᵀ/sqrt(d))·v over each row's causal window.
func (b *attnBatch) reference() []float64 {
	c := b.c
	out := make([]float64, b.tokens*c.heads*c.d)
	scale := 1 / math.Sqrt(float64(c.d))
	group := c.heads / c.kvHeads
	for s, sq := range b.seqs {
		for i := range sq.qlen {
			p := sq.pos + i
			lo := 0
			if c.window > 0 && p+1 > c.window {
				lo = p + 1 - c.window
			}
			for h := range c.heads {
				row := ((b.qStart[s]+i)*c.heads + h) * c.d
				q := b.q[row : row+c.d]
				sc := make([]float64, p+1-lo)
				mx := math.Inf(-1)
				for t := lo; t <= p; t++ {
					at := b.at(s, t, h/group)
					dot := 0.0
					for j, x := range q {
						dot += x * b.k[at+j]
					}
					sc[t-lo] = dot * scale
					mx = max(mx, sc[t-lo])
				}
				sum := 0.0
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				o := out[row : row+c.d]
				for t := lo; t <= p; t++ {
					at, w := b.at(s, t, h/group), sc[t-lo]/sum
					for j := range o {
						o[j] += w * b.v[at+j]
					}
				}
			}
		}
	}
	return out
}

// attention runs the batch through Kernels.Attention (maxQLen as given,
// which may exceed the batch's, and decodeSeqs) and checks the output.
func (e *kt) attention(name string, b *attnBatch, maxQLen, decodeSeqs int) {
	e.t.Helper()
	c := b.c
	outBytes := b.tokens * c.heads * c.d * e.size()
	out := e.poisoned(outBytes + c.heads*c.d*e.size())
	ws := e.poisoned(int(AttnWorkspaceBytes(len(b.seqs), c.heads, c.d)))
	kc, vc := e.dev(encodeAs(e.dt, b.k)), e.dev(encodeAs(e.dt, b.v))
	args := AttnArgs{
		Out: out, Q: e.dev(encodeAs(e.dt, b.q)), KCache: kc, VCache: vc,
		BlockTables: e.dev(i32Bytes(b.table)), QStart: e.dev(i32Bytes(b.qStart)), SeqPos: e.dev(i32Bytes(b.seqPos)),
		NumSeqs: len(b.seqs), NumTokens: b.tokens, MaxQLen: maxQLen, MaxBlocks: b.maxBlocks,
		Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.d, BlockSize: c.bs, Window: c.window,
		Scale: float32(1 / math.Sqrt(float64(c.d))), Workspace: ws, DecodeSeqs: decodeSeqs,
	}
	e.run(func(s cuda.Stream) error { return e.k.Attention(s, args) })
	got := e.get(out, outBytes+c.heads*c.d*e.size())
	checkClose(e.t, name, decodeAs(e.dt, got[:outBytes]), b.reference(), e.tol(2e-5))
	checkPoison(e.t, name+" guard row", got[outBytes:])
}

var attnCases = []attnCase{
	{name: "d64", heads: 8, kvHeads: 2, d: 64, bs: 16},
	{name: "d128", heads: 8, kvHeads: 2, d: 128, bs: 16},
	{name: "d128-window24", heads: 8, kvHeads: 2, d: 128, bs: 16, window: 24},
	{name: "d80-group3", heads: 6, kvHeads: 2, d: 80, bs: 16},
	{name: "d98-mha-bs7", heads: 4, kvHeads: 4, d: 98, bs: 7},
	{name: "d256-group8", heads: 8, kvHeads: 1, d: 256, bs: 16},
	{name: "d64-mha", heads: 4, kvHeads: 4, d: 64, bs: 16},
	{name: "d128-group6", heads: 12, kvHeads: 2, d: 128, bs: 16},
	{name: "d128-group16", heads: 32, kvHeads: 2, d: 128, bs: 16},
	{name: "d128-bs4-window70", heads: 8, kvHeads: 2, d: 128, bs: 4, window: 70},
}

func TestKernelAttentionPrefill(t *testing.T) {
	forEachDType(t, func(e *kt) {
		// Fresh prompts, chunks after cached tokens, single-token rows and a
		// chunk longer than a query tile, none a multiple of the block size.
		seqs := []attnSeq{{0, 37}, {21, 5}, {100, 1}, {0, 1}, {130, 70}}
		// Single-query sequences first, then chunks: DecodeSeqs = 3 sends
		// the first three through the decode kernels.
		mixed := []attnSeq{{40, 1}, {2999, 1}, {0, 1}, {0, 37}, {130, 70}, {21, 5}}
		// The 16-bit types take the tensor-core kernel for head_dim 64 and
		// 128; they run the SIMT kernels too.
		paths := []bool{false}
		if e.size() == 2 {
			paths = append(paths, true)
		}
		defer func() { e.k.prefillSIMT = false }()
		for _, simt := range paths {
			e.k.prefillSIMT = simt
			for _, c := range attnCases {
				name := c.name
				if simt {
					name += " simt"
				}
				b := e.newAttnBatch(c, seqs)
				e.attention(name, b, b.maxQLen, 0)
				if c.name == "d64" {
					e.attention(name+" padded maxQLen", b, b.maxQLen+20, 0)
				}
				m := e.newAttnBatch(c, mixed)
				e.attention(name+" mixed", m, m.maxQLen, 3)
			}
		}
	})
}

func TestKernelAttentionDecode(t *testing.T) {
	forEachDType(t, func(e *kt) {
		// Context lengths 1, 5000, 17, 32 and 101.
		seqs := []attnSeq{{0, 1}, {4999, 1}, {16, 1}, {31, 1}, {100, 1}}
		sms := e.k.sms
		defer func() { e.k.sms, e.k.decodeGeneric = sms, false }()
		for _, c := range attnCases {
			b := e.newAttnBatch(c, seqs)
			for _, generic := range []bool{false, true} {
				e.k.decodeGeneric = generic
				for _, m := range []int{sms, 1} { // many splits; one per (sequence, kv head)
					e.k.sms = m
					g := newDecodeGeometry(e.size(), c.d, c.heads/c.kvHeads, 16, generic)
					splits := e.k.decodeSplits(len(seqs), c.kvHeads*g.groups)
					e.attention(fmt.Sprintf("%s rows=%v splits=%d", c.name, g.rows, splits), b, 1, 0)
				}
			}
		}
	})
}

// TestHostHalfConversions checks the float16 and bfloat16 rounding the
// GPU tests build their references with (model/safetensors's; no GPU
// needed): every finite value round-trips, and values
// between neighbours round to the nearer one, ties to the even one.
func TestHostHalfConversions(t *testing.T) {
	type codec struct {
		name  string
		bits  func(float32) uint16
		value func(uint16) float32
		inf   uint16
	}
	for _, c := range []codec{{"float16", safetensors.Float32ToF16, safetensors.F16ToFloat32, 0x7c00}, {"bfloat16", safetensors.Float32ToBF16, safetensors.BF16ToFloat32, 0x7f80}} {
		for h := range uint16(0x7fff) {
			v := c.value(h)
			if math.IsNaN(float64(v)) {
				continue
			}
			if got := c.bits(v); got != h {
				t.Fatalf("%s: %#04x -> %v -> %#04x", c.name, h, v, got)
			}
			if got := c.bits(-v); got != h|0x8000 {
				t.Fatalf("%s: -%#04x -> %v -> %#04x", c.name, h, -v, got)
			}
			if h+1 > c.inf {
				continue
			}
			next := float64(c.value(h + 1))
			if h+1 == c.inf { // the rounding boundary above the largest finite value
				next = float64(v) + (float64(v) - float64(c.value(h-1)))
			}
			mid := (float64(v) + next) / 2
			even := h
			if h&1 == 1 {
				even = h + 1
			}
			for _, tc := range []struct {
				x    float64
				want uint16
			}{{mid, even}, {math.Nextafter(mid, 0), h}, {math.Nextafter(mid, math.Inf(1)), h + 1}} {
				if float64(float32(tc.x)) != tc.x {
					continue // not a float32: the rounding happens before ours
				}
				if got := c.bits(float32(tc.x)); got != tc.want {
					t.Fatalf("%s: %v (between %#04x and %#04x) -> %#04x, want %#04x", c.name, tc.x, h, h+1, got, tc.want)
				}
			}
		}
	}
}
