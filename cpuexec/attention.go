package cpuexec

import (
	"math"

	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// softmax is an online softmax over tiles of keys: the running maximum m
// of the scaled scores so far and the sum of exp(s − m); the caller keeps
// out, the exp-weighted sum of the values so far.
type softmax struct{ m, sum float32 }

// newSoftmax starts an online softmax with no keys seen, clearing out.
func newSoftmax(out []float32) softmax {
	clear(out)
	return softmax{m: float32(math.Inf(-1))}
}

// tile takes a tile of scaled scores s whose maximum is bm: it rescales
// out and the sum to the new running maximum, turns s into the tile's
// weights exp(s − m) and adds them to the sum. The caller then adds the
// tile's values, weighted by s, to out.
func (o *softmax) tile(out, s []float32, bm float32) {
	if bm > o.m {
		if o.sum > 0 {
			corr := float32(math.Exp(float64(o.m - bm)))
			tensor.Scale(corr, out)
			o.sum *= corr
		}
		o.m = bm
	}
	o.sum += tensor.ExpSub(s, o.m)
}

// finish normalises out and returns the log-sum-exp of the scores, or
// −Inf (out all zeros) when no key was seen.
func (o *softmax) finish(out []float32) float32 {
	if o.sum == 0 {
		return o.m
	}
	tensor.Scale(1/o.sum, out)
	return o.m + float32(math.Log(float64(o.sum)))
}

// groupHeads is how many query heads attendGroup takes at once: the
// scores of a block of keys for all of them stay on the stack.
const groupHeads = 8

// widenElems is attendGroup's buffer for a tile of a 16-bit cache's keys
// (and one for its values) widened to float32: 32 keys of head_dim 64, 16
// of 128, gathered from as many blocks as they span. Measured on the 1B
// shape, 32 keys were as fast as 64 or faster, 16 slower by 5–10%.
const widenElems = 2048

// attendGroup writes softmax(q_h·Kᵀ·scale)·V over key positions [from,
// to) of KV head head into out for the g query heads q_h that share it,
// held d apart in q and written d apart to out, walking the block table
// with an online softmax; blocks whose id in table is negative are
// skipped (another rank holds them: CSPS's sequence-sharded KV), and a
// head that sees no key gets zeros. With lse non-nil, lse[h] is head h's
// log-sum-exp of the scaled scores (−Inf for none), so that partials over
// disjoint keys can be merged. The keys and values are read once for up
// to groupHeads heads, a tile at a time (attendTile). A float32 cache's
// tiles are its blocks, attended in place; a BF16 or F16 cache's are
// widenElems/d keys widened to float32 from one block or several, so
// that the softmax and the calls per key are spread over as many keys as
// the buffer holds.
//
// sc is scratch space, which a caller keeps for many calls: Go zeroes
// every array it declares, 24 KiB here, and a decode token makes a call
// per KV head per layer.
func attendGroup(sc *attendScratch, out, q []float32, g int, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32, lse []float32) {
	bs, d := cache.BlockSize, cache.HeadDim
	half := cache.Half()
	scores, wk, wv := sc.scores[:], sc.wk[:], sc.wv[:]
	var sms [groupHeads]softmax
	room := max(1, min(kvcache.MaxBlockSize, widenElems/d)) // keys a widened tile holds
	for h0 := 0; h0 < g; h0 += groupHeads {
		gh := min(groupHeads, g-h0)
		qh, oh, sm := q[h0*d:(h0+gh)*d], out[h0*d:(h0+gh)*d], sms[:gh]
		for i := range gh {
			sm[i] = newSoftmax(oh[i*d : (i+1)*d])
		}
		fill := 0 // keys widened into wk, wv and not yet attended
		for start := from - from%bs; start < to; start += bs {
			blk := table[start/bs]
			if blk < 0 {
				continue
			}
			a, e := max(from, start)-start, min(to, start+bs)-start
			if !half {
				attendTile(oh, qh, sm, scores, cache.Keys(layer, blk, head)[a*d:e*d], cache.Values(layer, blk, head)[a*d:e*d], e-a, d, scale)
				continue
			}
			keys, vals := cache.HalfKeys(layer, blk, head), cache.HalfValues(layer, blk, head)
			for a < e {
				n := min(e-a, room-fill)
				widen(cache.DType, wk[fill*d:(fill+n)*d], keys[a*d:(a+n)*d])
				widen(cache.DType, wv[fill*d:(fill+n)*d], vals[a*d:(a+n)*d])
				fill, a = fill+n, a+n
				if fill == room {
					attendTile(oh, qh, sm, scores, wk[:fill*d], wv[:fill*d], fill, d, scale)
					fill = 0
				}
			}
		}
		if fill > 0 {
			attendTile(oh, qh, sm, scores, wk[:fill*d], wv[:fill*d], fill, d, scale)
		}
		for i := range sm {
			l := sm[i].finish(oh[i*d : (i+1)*d])
			if lse != nil {
				lse[h0+i] = l
			}
		}
	}
}

// headRuns cuts the query heads [h.QLo, h.QHi) into runs of consecutive
// heads that share a KV head (group query heads to a KV head), as
// [lo, hi) pairs counted from h.QLo: the units attendGroup takes.
func headRuns(h parallel.Heads, group int) [][2]int {
	var runs [][2]int
	for j, n := 0, h.QHi-h.QLo; j < n; {
		e := min(n, ((h.QLo+j)/group+1)*group-h.QLo)
		runs = append(runs, [2]int{j, e})
		j = e
	}
	return runs
}

// attendHead is attendGroup for one query head: it writes softmax(q·Kᵀ·
// scale)·V over key positions [from, to) of KV head head into out and
// returns the log-sum-exp of the scaled scores, so that partial results
// over disjoint key ranges can be merged (CSPS, CSA). Blocks whose id in
// table is negative are skipped (another rank holds them), so the result
// is the partial over this cache's keys; with none it writes zeros and
// returns -Inf.
func attendHead(sc *attendScratch, out, q []float32, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32) float32 {
	var lse [1]float32
	attendGroup(sc, out, q, 1, cache, layer, table, head, from, to, scale, lse[:])
	return lse[0]
}

// attendScratch is attendGroup's scratch: the scores of a tile for every
// head of a group, and a 16-bit cache's tile of keys and values widened.
type attendScratch struct {
	scores [groupHeads * kvcache.MaxBlockSize]float32
	wk, wv [widenElems]float32
}

// attendTile adds a tile of n float32 keys and values, row j of each at
// keys[j·ld:] and vals[j·ld:] (d = len(out)/len(sm) elements apiece), to
// the online softmaxes sm of the len(sm) query heads q, whose outputs are
// out: the scores of every head by one tensor.Scores, each key read once
// for all of them, into scores; then per head the scaling, the softmax's
// tile and the weighted values (tensor.AxpyRows).
func attendTile(out, q []float32, sm []softmax, scores, keys, vals []float32, n, ld int, scale float32) {
	gh := len(sm)
	d := len(out) / gh
	tensor.Scores(scores[:gh*n], q, keys, gh, n, d, ld)
	for i := range sm {
		s := scores[i*n : (i+1)*n]
		o := out[i*d : (i+1)*d]
		sm[i].tile(o, s, tensor.ScaleMax(scale, s))
		tensor.AxpyRows(o, s, vals, ld)
	}
}

// widen sets dst to the BF16 or F16 (dt) values of src.
func widen(dt tensor.DType, dst []float32, src []uint16) {
	if dt == tensor.BF16 {
		tensor.DecodeBF16(dst, src)
	} else {
		tensor.DecodeF16(dst, src)
	}
}
