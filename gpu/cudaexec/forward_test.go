package cudaexec

import (
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// TestUploadMeta checks the step tables the device reads, without a
// device: token ids, positions and cache slots (−1 for SP padding),
// sequence starts, cached lengths, block tables, and which SP member holds
// each logits row and where it goes in the output.
func TestUploadMeta(t *testing.T) {
	e := &Executor{kv: kvcache.Layout{BlockSize: 4, NumBlocks: 16}, cap: capacity{tokens: 16, seqs: 8, logitRows: 8, maxBlocks: 4}}
	b := &forward.Batch{Seqs: []forward.SeqBatch{
		{Tokens: []int{11, 12, 13, 14, 15}, Pos: 3, Blocks: []int{7, 2, 9}, NumLogits: 1},
		{Tokens: []int{21}, Pos: 10, Blocks: []int{1, 4, 6}, NumLogits: 1},
		{Tokens: []int{31, 32, 33}, Blocks: []int{5}, NumLogits: 3},
	}}
	const sp = 2
	lay := newMetaLayout(e.cap, sp)
	sh := stepShape{tokens: 9, seqs: 3, maxQLen: 5, stride: 3, logitRows: 5, nl: 5, rows: make([]int, sp)}
	out := e.uploadMeta(b, lay, &sh, sp)
	m := e.host
	span := func(off, n int) []int32 { return m[off : off+n] }

	if got, want := span(lay.ids, 9), []int32{11, 12, 13, 14, 15, 21, 31, 32, 33}; !slices.Equal(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	if got, want := span(lay.pos, 9), []int32{3, 4, 5, 6, 7, 10, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("positions %v, want %v", got, want)
	}
	// Position p of a sequence is slot table[p/4]·4 + p%4; row 9 pads the
	// micro-batch to SP·nl = 10 tokens and writes nothing.
	if got, want := span(lay.slot, 10), []int32{7*4 + 3, 2*4 + 0, 2*4 + 1, 2*4 + 2, 2*4 + 3, 6*4 + 2, 5 * 4, 5*4 + 1, 5*4 + 2, -1}; !slices.Equal(got, want) {
		t.Errorf("slots %v, want %v", got, want)
	}
	if got, want := span(lay.qStart, 4), []int32{0, 5, 6, 9}; !slices.Equal(got, want) {
		t.Errorf("qStart %v, want %v", got, want)
	}
	if got, want := span(lay.seqPos, 3), []int32{3, 10, 0}; !slices.Equal(got, want) {
		t.Errorf("seqPos %v, want %v", got, want)
	}
	if got, want := span(lay.tables, 9), []int32{7, 2, 0, 1, 4, 6, 5, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("block tables (stride 3) %v, want %v", got, want)
	}
	// Logits rows: token 4 (the first sequence's last) is SP member 0's
	// local row 4; tokens 5–8 are member 1's local rows 0–3.
	if !slices.Equal(sh.rows, []int{1, 4}) {
		t.Errorf("rows per SP member %v, want [1 4]", sh.rows)
	}
	if got := span(lay.rows, 1); !slices.Equal(got, []int32{4}) {
		t.Errorf("member 0's rows %v, want [4]", got)
	}
	if got := span(lay.rows+lay.rowsCap, 4); !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Errorf("member 1's rows %v, want [0 1 2 3]", got)
	}
	if !slices.Equal(out[0], []int{0}) || !slices.Equal(out[1], []int{1, 2, 3, 4}) {
		t.Errorf("output rows %v, want [[0] [1 2 3 4]]", out)
	}
}

// TestUploadMetaGraphPadding: a decode batch of 3 run as the graph of
// bucket 4 gets one idle sequence that writes no KV and whose logits row
// goes nowhere, and the block tables use the capacity's fixed stride.
func TestUploadMetaGraphPadding(t *testing.T) {
	e := &Executor{kv: kvcache.Layout{BlockSize: 4, NumBlocks: 16}, cap: capacity{tokens: 16, seqs: 8, logitRows: 8, maxBlocks: 4}}
	var b forward.Batch
	for i := 0; i < 3; i++ {
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: []int{40 + i}, Pos: 4 + i, Blocks: []int{2 * i, 2*i + 1}, NumLogits: 1})
	}
	lay := newMetaLayout(e.cap, 1)
	sh := e.graphShape(4, 1)
	out := e.uploadMeta(&b, lay, &sh, 1)
	m := e.host
	if got, want := m[lay.slot:lay.slot+4], []int32{1*4 + 0, 3*4 + 1, 5*4 + 2, -1}; !slices.Equal(got, want) {
		t.Errorf("slots %v, want %v", got, want)
	}
	if got, want := m[lay.qStart:lay.qStart+5], []int32{0, 1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("qStart %v, want %v", got, want)
	}
	if got, want := m[lay.tables:lay.tables+8], []int32{0, 1, 0, 0, 2, 3, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("block tables (stride 4) %v, want %v", got, want)
	}
	if sh.rows[0] != 4 || !slices.Equal(out[0], []int{0, 1, 2, -1}) {
		t.Errorf("rows %v, output rows %v; want 4 rows, [0 1 2 -1]", sh.rows, out[0])
	}
}

// hostMemory emulates device memory for the copy kernels: a DevicePtr is
// a byte offset into mem plus a non-zero base.
type hostMemory struct {
	mem  []float32
	next int
}

const hostBase = 1 << 20

func (h *hostMemory) alloc(elems int) cuda.DevicePtr {
	p := cuda.DevicePtr(hostBase + 4*h.next)
	h.next += elems
	h.mem = append(h.mem, make([]float32, elems)...)
	return p
}

func (h *hostMemory) at(p cuda.DevicePtr) int { return (int(p) - hostBase) / 4 }

// copy2d runs a recorded Copy2D launch on the host.
func (h *hostMemory) copy2d(a *launchArgs) {
	dst := *(*uint64)(a.ptrs[0])
	dstPitch := *(*int64)(a.ptrs[1])
	src := *(*uint64)(a.ptrs[2])
	srcPitch := *(*int64)(a.ptrs[3])
	rows, cols := int(*(*int32)(a.ptrs[4])), int(*(*int32)(a.ptrs[5]))
	d, s := h.at(cuda.DevicePtr(dst)), h.at(cuda.DevicePtr(src))
	for r := 0; r < rows; r++ {
		copy(h.mem[d+r*int(dstPitch):d+r*int(dstPitch)+cols], h.mem[s+r*int(srcPitch):s+r*int(srcPitch)+cols])
	}
}

// TestHeadsAllToAll runs the SP all-to-alls of sp=2,tp=2 and sp=4 (8
// query heads over 4, 2 and 1 KV heads: chunks with their own KV heads and
// chunks sharing a replicated one) through a host emulation of the copy
// kernel, and checks that every rank receives, for every token, exactly
// its chunk's q, k and v heads in attention-input order, and that the
// return all-to-all hands every rank its own rows' heads back in slice
// order, as the CPU executor's ulysses does.
func TestHeadsAllToAll(t *testing.T) {
	for _, kvHeads := range []int{4, 2, 1} {
		for _, plan := range []parallel.Plan{{DP: 1, PP: 1, SP: 2, TP: 2}, {DP: 1, PP: 1, SP: 4, TP: 1}} {
			cfg := &model.Config{Hidden: 32, Intermediate: 64, Layers: 1, Heads: 8, KVHeads: kvHeads, HeadDim: 4, Vocab: 10, MaxPositions: 64}
			if err := plan.Validate(cfg); err != nil {
				t.Fatal(err)
			}
			w := &model.Weights{}
			for _, bd := range model.Bindings(cfg, w) {
				n := 1
				for _, d := range bd.Shape {
					n *= d
				}
				bd.SetFloat32(make([]float32, n))
			}
			w.LMHead = w.Embed
			var h hostMemory
			k := &Kernels{dt: model.Float32, size: 4, launchHook: func(_ cuda.Function, _, _ cuda.Dim3, _ int, a *launchArgs) error {
				h.copy2d(a)
				return nil
			}}
			e := &Executor{cfg: cfg, k: k, dt: model.Float32, replayed: comm.Stats{}}
			l := parallel.Standard(plan)
			dl := &devLayout{layout: l}
			const nl, d = 3, 4
			for r := range l.Coords {
				sh := parallel.NewShard(nil, cfg, w, l, r)
				ds := &devShard{spans: sh}
				ds.qs, ds.ks = (sh.Slice.QHi-sh.Slice.QLo)*d, (sh.Slice.KVHi-sh.Slice.KVLo)*d
				ds.qc, ds.kc = (sh.Chunk.QHi-sh.Chunk.QLo)*d, (sh.Chunk.KVHi-sh.Chunk.KVLo)*d
				ds.sliceW, ds.chunkW = ds.qs+2*ds.ks, ds.qc+2*ds.kc
				dl.shards = append(dl.shards, ds)
				rk := &devRank{id: r, qkv: h.alloc(nl * ds.sliceW), recv: h.alloc(plan.SP * nl * ds.chunkW),
					attnC: h.alloc(plan.SP * nl * ds.qc), attn: h.alloc(nl * ds.qs)}
				e.ranks = append(e.ranks, rk)
				// Element (token t, global head, part, j) holds a code naming it.
				for i := 0; i < nl; i++ {
					tok := l.Coords[r].SP*nl + i
					row := h.mem[h.at(rk.qkv)+i*ds.sliceW:]
					for hd := sh.Slice.QLo; hd < sh.Slice.QHi; hd++ {
						for j := 0; j < d; j++ {
							row[(hd-sh.Slice.QLo)*d+j] = float32(tok*10000 + 0*1000 + hd*10 + j)
						}
					}
					for hd := sh.Slice.KVLo; hd < sh.Slice.KVHi; hd++ {
						for j := 0; j < d; j++ {
							row[ds.qs+(hd-sh.Slice.KVLo)*d+j] = float32(tok*10000 + 1*1000 + hd*10 + j)
							row[ds.qs+ds.ks+(hd-sh.Slice.KVLo)*d+j] = float32(tok*10000 + 2*1000 + hd*10 + j)
						}
					}
				}
			}
			ranks := make([]int, len(l.Coords))
			for r := range ranks {
				ranks[r] = r
			}
			if err := e.scatterHeads(dl, ranks, nl); err != nil {
				t.Fatal(err)
			}
			for r, rk := range e.ranks {
				ds := dl.shards[r]
				ch := ds.spans.Chunk
				for tok := 0; tok < plan.SP*nl; tok++ {
					row := h.mem[h.at(rk.recv)+tok*ds.chunkW:]
					var want []float32
					for part, lo, hi := 0, ch.QLo, ch.QHi; part < 3; part++ {
						if part > 0 {
							lo, hi = ch.KVLo, ch.KVHi
						}
						for hd := lo; hd < hi; hd++ {
							for j := 0; j < d; j++ {
								want = append(want, float32(tok*10000+part*1000+hd*10+j))
							}
						}
					}
					if !slices.Equal(row[:ds.chunkW], want) {
						t.Fatalf("%s, %d KV heads: rank %d token %d got %v, want %v", plan, kvHeads, r, tok, row[:ds.chunkW], want)
					}
				}
				// Attention as the identity on q: attnC = the chunk's q heads.
				for tok := 0; tok < plan.SP*nl; tok++ {
					copy(h.mem[h.at(rk.attnC)+tok*ds.qc:h.at(rk.attnC)+(tok+1)*ds.qc], h.mem[h.at(rk.recv)+tok*ds.chunkW:h.at(rk.recv)+tok*ds.chunkW+ds.qc])
				}
			}
			if err := e.gatherHeads(dl, ranks, nl); err != nil {
				t.Fatal(err)
			}
			for r, rk := range e.ranks {
				ds := dl.shards[r]
				for i := 0; i < nl; i++ {
					got := h.mem[h.at(rk.attn)+i*ds.qs : h.at(rk.attn)+(i+1)*ds.qs]
					want := h.mem[h.at(rk.qkv)+i*ds.sliceW : h.at(rk.qkv)+i*ds.sliceW+ds.qs]
					if !slices.Equal(got, want) {
						t.Fatalf("%s, %d KV heads: rank %d row %d after the return all-to-all %v, want its q heads %v", plan, kvHeads, r, i, got, want)
					}
				}
			}
			// Traffic: two all-to-alls per SP group, as the CPU counts them.
			if n := e.CommStats().Kind(comm.KindAllToAll).Calls; n != int64(2*len(l.Coords)) {
				t.Errorf("%s: %d all-to-all calls counted, want %d", plan, n, 2*len(l.Coords))
			}
		}
	}
}
