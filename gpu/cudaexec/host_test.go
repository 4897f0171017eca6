package cudaexec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// The host tests run the executor's step — tables, every plan's rank
// program, collectives, byte accounting, logits assembly — on an emulated
// device: hostMemory holds the buffers, hostOps does the copies, GEMMs and
// attention in float64, and hostKernels' launch hook runs the element-wise
// kernels with their documented semantics. Only float32 is emulated. What
// this cannot check (the CUDA C itself, cuBLAS, graphs) the GPU tests do.

func (h *hostMemory) bytes(p cuda.DevicePtr, n int64) []byte {
	off := int(p) - hostBase
	return unsafe.Slice((*byte)(unsafe.Pointer(&h.mem[0])), 4*len(h.mem))[off : off+int(n)]
}

func (h *hostMemory) f32(p cuda.DevicePtr, n int) []float32 { i := h.at(p); return h.mem[i : i+n] }

func (h *hostMemory) i32(p cuda.DevicePtr, i int) int {
	return int(int32(math.Float32bits(h.mem[h.at(p)+i])))
}

// vec is an optional vector argument: nil for a null pointer.
func (h *hostMemory) vec(p cuda.DevicePtr, n int) []float32 {
	if p == 0 {
		return nil
	}
	return h.f32(p, n)
}

type hostOps struct {
	h      *hostMemory
	stream *hostSide
}

// hostSide emulates the side stream: its copies are queued and land when
// sideDone is first asked at least delay after the last mark, so tests
// can keep a swap in flight while steps run. (Its gathers, launched as
// kernels, run at once: they read KV that no step is writing.)
type hostSide struct {
	delay  time.Duration
	queued []func()
	markAt time.Time
	landed int // copies landed so far
}

func (o hostOps) sideToDevice(dst cuda.DevicePtr, src unsafe.Pointer, bytes int64) error {
	o.stream.queued = append(o.stream.queued, func() { o.toDevice(dst, src, bytes) })
	return nil
}

func (o hostOps) side() (cuda.Stream, error) { return 0, nil }

func (o hostOps) sideToHost(dst unsafe.Pointer, src cuda.DevicePtr, bytes int64) error {
	o.stream.queued = append(o.stream.queued, func() { o.toHost(dst, src, bytes) })
	return nil
}

func (o hostOps) sideCopy(dst, src cuda.DevicePtr, bytes int64) error {
	o.stream.queued = append(o.stream.queued, func() { o.copy(dst, src, bytes) })
	return nil
}

func (o hostOps) sideMark() error {
	o.stream.markAt = time.Now()
	return nil
}

func (o hostOps) sideDone() (bool, error) {
	if time.Since(o.stream.markAt) < o.stream.delay {
		return false, nil
	}
	for _, f := range o.stream.queued {
		f()
	}
	o.stream.landed += len(o.stream.queued)
	o.stream.queued = o.stream.queued[:0]
	return true, nil
}

func (o hostOps) alloc(bytes int64) (cuda.DevicePtr, error) {
	return o.h.alloc(int((bytes + 3) / 4)), nil
}
func (o hostOps) free(cuda.DevicePtr) error { return nil }
func (o hostOps) sync() error               { return nil }

func (o hostOps) toDevice(dst cuda.DevicePtr, src unsafe.Pointer, bytes int64) error {
	copy(o.h.bytes(dst, bytes), unsafe.Slice((*byte)(src), bytes))
	return nil
}

func (o hostOps) toHost(dst unsafe.Pointer, src cuda.DevicePtr, bytes int64) error {
	copy(unsafe.Slice((*byte)(dst), bytes), o.h.bytes(src, bytes))
	return nil
}

func (o hostOps) copy(dst, src cuda.DevicePtr, bytes int64) error {
	copy(o.h.bytes(dst, bytes), o.h.bytes(src, bytes))
	return nil
}

func (o hostOps) linear(y, x, w cuda.DevicePtr, n, in, out int, _ model.DType) error {
	ys, xs, ws := o.h.f32(y, n*out), o.h.f32(x, n*in), o.h.f32(w, out*in)
	for i := 0; i < n; i++ {
		for j := 0; j < out; j++ {
			var s float64
			for k := 0; k < in; k++ {
				s += float64(xs[i*in+k]) * float64(ws[j*in+k])
			}
			ys[i*out+j] = float32(s)
		}
	}
	return nil
}

func (o hostOps) attention(a AttnArgs) error {
	h, d, bs := o.h, a.HeadDim, a.BlockSize
	group := a.Heads / a.KVHeads
	for s := 0; s < a.NumSeqs; s++ {
		q0, q1 := h.i32(a.QStart, s), h.i32(a.QStart, s+1)
		for r := q0; r < q1; r++ {
			p := h.i32(a.SeqPos, s) + r - q0
			lo := 0
			if a.Window > 0 && p+1 > a.Window {
				lo = p + 1 - a.Window
			}
			for hd := 0; hd < a.Heads; hd++ {
				kh := hd / group
				q := h.f32(a.Q+cuda.DevicePtr(4*(r*a.Heads+hd)*d), d)
				scores := make([]float64, p+1-lo)
				m := math.Inf(-1)
				for t := lo; t <= p; t++ {
					blk := h.i32(a.BlockTables, s*a.MaxBlocks+t/bs)
					key := h.f32(a.KCache+cuda.DevicePtr(4*((blk*a.KVHeads+kh)*bs+t%bs)*d), d)
					var dot float64
					for j := range q {
						dot += float64(q[j]) * float64(key[j])
					}
					scores[t-lo] = dot * float64(a.Scale)
					m = math.Max(m, scores[t-lo])
				}
				out := h.f32(a.Out+cuda.DevicePtr(4*(r*a.Heads+hd)*d), d)
				acc := make([]float64, d)
				var sum float64
				for t := lo; t <= p; t++ {
					wt := math.Exp(scores[t-lo] - m)
					sum += wt
					blk := h.i32(a.BlockTables, s*a.MaxBlocks+t/bs)
					v := h.f32(a.VCache+cuda.DevicePtr(4*((blk*a.KVHeads+kh)*bs+t%bs)*d), d)
					for j := range acc {
						acc[j] += wt * float64(v[j])
					}
				}
				for j := range out {
					out[j] = float32(acc[j] / sum)
				}
			}
		}
	}
	return nil
}

// Function handles the host kernels answer to.
const (
	fnEmbed cuda.Function = iota + 1
	fnRMSNorm
	fnQKV
	fnSiLU
	fnGather
	fnCopy2D
	fnAdd
	fnArgmax
)

func hostKernels(h *hostMemory) *Kernels {
	k := &Kernels{dt: model.Float32, size: 4, embed: fnEmbed, rmsnorm: fnRMSNorm, qkv: fnQKV, silu: fnSiLU,
		gather: fnGather, copy2d: fnCopy2D, add: fnAdd, argmax: fnArgmax}
	k.launchHook = func(f cuda.Function, grid, _ cuda.Dim3, _ int, a *launchArgs) error {
		ptr := func(i int) cuda.DevicePtr { return cuda.DevicePtr(*(*uint64)(a.ptrs[i])) }
		i32 := func(i int) int { return int(*(*int32)(a.ptrs[i])) }
		f32 := func(i int) float32 { return *(*float32)(a.ptrs[i]) }
		switch f {
		case fnEmbed:
			n, hid, lo, hi := i32(3), i32(4), i32(5), i32(6)
			x := h.f32(ptr(0), n*hid)
			for i := 0; i < n; i++ {
				row := x[i*hid : (i+1)*hid]
				clear(row)
				if id := h.i32(ptr(2), i); id >= lo && id < hi {
					copy(row, h.f32(ptr(1)+cuda.DevicePtr(4*(id-lo)*hid), hid))
				}
			}
		case fnRMSNorm:
			n, hid, eps := int(grid.X), i32(5), f32(6)
			for i := 0; i < n; i++ {
				resid := h.f32(ptr(1)+cuda.DevicePtr(4*i*hid), hid)
				if delta := h.vec(ptr(2), n*hid); delta != nil {
					bias := h.vec(ptr(3), hid)
					for j := range resid {
						resid[j] += delta[i*hid+j]
						if bias != nil {
							resid[j] += bias[j]
						}
					}
				}
				tensor.RMSNorm(h.f32(ptr(0)+cuda.DevicePtr(4*i*hid), hid), resid, h.f32(ptr(4), hid), eps)
			}
		case fnQKV:
			n, heads, kvh, d, bs, eps := int(grid.X), i32(11), i32(12), i32(13), i32(14), f32(15)
			w := (heads + 2*kvh) * d
			half := d / 2
			for i := 0; i < n; i++ {
				row := append([]float32(nil), h.f32(ptr(3)+cuda.DevicePtr(4*i*w), w)...)
				if bias := h.vec(ptr(4), w); bias != nil {
					tensor.Add(row, bias)
				}
				pos, slot := h.i32(ptr(9), i), h.i32(ptr(10), i)
				cos, sin := h.f32(ptr(7)+cuda.DevicePtr(4*pos*half), half), h.f32(ptr(8)+cuda.DevicePtr(4*pos*half), half)
				for hd := 0; hd < heads+kvh; hd++ {
					x := row[hd*d : (hd+1)*d]
					norm := ptr(5)
					if hd >= heads {
						norm = ptr(6)
					}
					if nw := h.vec(norm, d); nw != nil {
						tensor.RMSNorm(x, x, nw, eps)
					}
					for j := 0; j < half; j++ {
						a, b := x[j], x[j+half]
						x[j], x[j+half] = a*cos[j]-b*sin[j], b*cos[j]+a*sin[j]
					}
				}
				copy(h.f32(ptr(0)+cuda.DevicePtr(4*i*heads*d), heads*d), row[:heads*d])
				if slot < 0 {
					continue
				}
				blk, off := slot/bs, slot%bs
				for kh := 0; kh < kvh; kh++ {
					at := cuda.DevicePtr(4 * ((blk*kvh+kh)*bs + off) * d)
					copy(h.f32(ptr(1)+at, d), row[(heads+kh)*d:(heads+kh+1)*d])
					copy(h.f32(ptr(2)+at, d), row[(heads+kvh+kh)*d:(heads+kvh+kh+1)*d])
				}
			}
		case fnSiLU:
			n, inter := i32(3), i32(4)
			gu, out, bias := h.f32(ptr(1), n*2*inter), h.f32(ptr(0), n*inter), h.vec(ptr(2), 2*inter)
			for i := 0; i < n; i++ {
				for j := 0; j < inter; j++ {
					g, u := gu[i*2*inter+j], gu[i*2*inter+inter+j]
					if bias != nil {
						g, u = g+bias[j], u+bias[inter+j]
					}
					out[i*inter+j] = g / (1 + float32(math.Exp(float64(-g)))) * u
				}
			}
		case fnGather:
			m, wd := i32(3), i32(4)
			for i := 0; i < m; i++ {
				copy(h.f32(ptr(0)+cuda.DevicePtr(4*i*wd), wd), h.f32(ptr(1)+cuda.DevicePtr(4*h.i32(ptr(2), i)*wd), wd))
			}
		case fnCopy2D:
			h.copy2d(a)
		case fnArgmax:
			vocab := i32(2)
			for i := 0; i < int(grid.X); i++ {
				best := tensor.MaxIndex(h.f32(ptr(1)+cuda.DevicePtr(4*i*vocab), vocab))
				h.mem[h.at(ptr(0))+i] = math.Float32frombits(uint32(int32(best)))
			}
		case fnAdd:
			n := int(*(*int64)(a.ptrs[2]))
			tensor.Add(h.f32(ptr(0), n), h.f32(ptr(1), n))
		default:
			return fmt.Errorf("host kernels: unknown function %d", f)
		}
		return nil
	}
	return k
}

// newHostExecutor builds an executor over the emulated device, in float32,
// with blocks KV blocks of 4 tokens.
func newHostExecutor(t *testing.T, cfg *model.Config, w *model.Weights, placements []parallel.Placement, blocks int) *Executor {
	t.Helper()
	return newHostExecutorOpts(t, cfg, w, Options{Placements: placements, BlockSize: 4, MaxNumTokens: 64, MaxNumSeqs: 8, EnforceEager: true}, blocks)
}

// newHostExecutorOpts builds an executor of opts over the emulated device,
// in float32, with blocks KV blocks.
func newHostExecutorOpts(t *testing.T, cfg *model.Config, w *model.Weights, opts Options, blocks int) *Executor {
	t.Helper()
	h := &hostMemory{}
	k := hostKernels(h)
	e := &Executor{
		cfg: cfg, dt: model.Float32, k: k, k32: k, ops: hostOps{h, &hostSide{}},
		opts:    opts,
		base:    opts.Placements[0],
		layouts: map[string]*devLayout{}, graphs: map[graphKey]cuda.GraphExec{}, steps: map[string]int{},
		replayed: comm.Stats{}, allocs: map[cuda.DevicePtr]bool{}, pool: tensor.NewPool(3),
	}
	t.Cleanup(e.pool.Close)
	if err := fillDefaults(cfg, &e.opts); err != nil {
		t.Fatal(err)
	}
	if err := e.initHost(w); err != nil {
		t.Fatal(err)
	}
	up := e.newUploader()
	if err := errors.Join(e.loadShards(w, up.put), up.finish()); err != nil {
		t.Fatal(err)
	}
	if err := e.prepare(); err != nil {
		t.Fatal(err)
	}
	if err := e.allocKV(blocks); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestStepOnHost runs the foundation scenarios through the executor's step
// on the emulated device under every plan — one rank, TP, SP, SP×TP, PP,
// PP×TP — with 8 query heads over 4, 2 and 1 KV heads, against the float64
// oracle, and checks the collective traffic equals the CPU executor's.
func TestStepOnHost(t *testing.T) {
	plans := []string{"single", "tp=2", "sp=2", "sp=2,tp=2", "pp=2", "pp=2,tp=2", "sp=4", "tp=4"}
	for _, kv := range []int{4, 2, 1} {
		m, ref := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 4, AttentionBias: kv == 2, Seed: uint64(80 + kv)})
		for _, ps := range plans {
			t.Run(fmt.Sprintf("kv=%d/%s", kv, ps), func(t *testing.T) {
				plan, err := parallel.Parse(ps)
				if err != nil {
					t.Fatal(err)
				}
				p := parallel.Standard(plan)
				scenariosLikeCPU(t, newHostExecutor(t, m.Config, m.Weights, []parallel.Placement{p}, 256), m, ref, p)
			})
		}
	}
}

// TestShiftOnHost switches decode steps between sp=2,tp=2 and its shift
// plan tp=4 on the emulated device: greedy tokens equal the oracle's, both
// plans run, and the traffic equals the CPU executor's.
func TestShiftOnHost(t *testing.T) {
	for _, kv := range []int{4, 2, 1} {
		t.Run(fmt.Sprintf("kv=%d", kv), func(t *testing.T) {
			m, ref := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 3, Seed: uint64(90 + kv)})
			base := parallel.Plan{DP: 1, PP: 1, SP: 2, TP: 2}
			switchPlans(t, newHostExecutor(t, m.Config, m.Weights, shiftPlacements(base), 128), m, ref, base, kv)
		})
	}
}

// TestToyPlacementOnHost runs the foundation scenarios on the emulated
// device under a placement the rank program was not written for —
// pp=2,tp=2 with the stages on the ranks in reverse order — against the
// oracle and the CPU executor's traffic.
func TestToyPlacementOnHost(t *testing.T) {
	toy, err := fixture.ReversedStages(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []int{4, 1} {
		t.Run(fmt.Sprintf("kv=%d", kv), func(t *testing.T) {
			m, ref := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 4, Seed: uint64(120 + kv)})
			scenariosLikeCPU(t, newHostExecutor(t, m.Config, m.Weights, []parallel.Placement{toy}, 256), m, ref, toy)
		})
	}
}

// TestStepGreedyOnHost: StepGreedy's tokens (the device argmax with one
// TP rank, the host's under TP) equal the argmax of Step's logits.
func TestStepGreedyOnHost(t *testing.T) {
	m, _ := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: 2, Seed: 99})
	vocab := m.Config.Vocab
	for _, ps := range []string{"single", "sp=2", "tp=2", "pp=2"} {
		plan, err := parallel.Parse(ps)
		if err != nil {
			t.Fatal(err)
		}
		x := newHostExecutor(t, m.Config, m.Weights, []parallel.Placement{parallel.Standard(plan)}, 64)
		var b forward.Batch
		for i := 0; i < 4; i++ {
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: fixture.Tokens(60+i, 2+3*i, vocab), Blocks: []int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3}, NumLogits: 1 + i%2})
		}
		logits, err := x.Step(context.Background(), &b, parallel.Standard(plan))
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for i := 0; i < b.NumLogits(); i++ {
			want = append(want, tensor.MaxIndex(logits[i*vocab:(i+1)*vocab]))
		}
		got, err := x.StepGreedy(context.Background(), &b, parallel.Standard(plan))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: StepGreedy %v, argmax of Step %v", plan, got, want)
		}
	}
}

// TestHiddenOnHost: a step whose batch asks for hidden states gives each
// logits row's final-norm hidden state (the oracle's) under every plan on
// the emulated device, beside the logits; a step that does not ask gives
// none.
func TestHiddenOnHost(t *testing.T) {
	m, ref := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: 2, Layers: 4, Seed: 131})
	a, b := fixture.Tokens(1, 7, m.Config.Vocab), fixture.Tokens(2, 5, m.Config.Vocab)
	for _, ps := range []string{"single", "tp=2", "sp=2", "sp=2,tp=2", "pp=2", "pp=2,tp=2"} {
		t.Run(ps, func(t *testing.T) {
			plan, err := parallel.Parse(ps)
			if err != nil {
				t.Fatal(err)
			}
			p := parallel.Standard(plan)
			e := newHostExecutor(t, m.Config, m.Weights, []parallel.Placement{p}, 64)
			batch := &forward.Batch{Hidden: true, Seqs: []forward.SeqBatch{
				{Tokens: a, Blocks: []int{0, 1}, NumLogits: 2}, // the last two positions
				{Tokens: b, Blocks: []int{2, 3}, NumLogits: 1},
			}}
			if _, err := e.Step(context.Background(), batch, p); err != nil {
				t.Fatal(err)
			}
			h := m.Config.Hidden
			got := e.Hidden()
			if len(got) != 3*h {
				t.Fatalf("%d hidden values, want %d", len(got), 3*h)
			}
			wantA, wantB := ref.Hidden(a), ref.Hidden(b)
			for i, want := range [][]float64{wantA[len(a)-2], wantA[len(a)-1], wantB[len(b)-1]} {
				row := got[i*h : (i+1)*h]
				maxAbs, maxDiff := 0.0, 0.0
				for j, w := range want {
					maxAbs, maxDiff = math.Max(maxAbs, math.Abs(w)), math.Max(maxDiff, math.Abs(float64(row[j])-w))
				}
				if maxDiff > 1e-4*maxAbs {
					t.Fatalf("row %d: %.3g from the oracle's (relative to its largest)", i, maxDiff/maxAbs)
				}
			}
			batch.Hidden = false
			if _, err := e.Step(context.Background(), &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: a[:1], Blocks: []int{4}, NumLogits: 1}}}, p); err != nil || e.Hidden() != nil {
				t.Fatalf("a step without Hidden: %v, %d hidden values", err, len(e.Hidden()))
			}
		})
	}
}
