package cpuexec

import (
	"math"

	"github.com/gearboxlm/gearbox/kvcache"
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

// attendPaged writes softmax(q·Kᵀ·scale)·V over key positions [from, to) of
// one KV head into out, walking the block table one block at a time with an
// online softmax, and returns the log-sum-exp of the scaled scores so that
// partial results over disjoint key ranges can be merged. Blocks whose id
// in table is negative are skipped (another rank holds them), so the result
// is the partial over this cache's keys; with none it writes zeros and
// returns -Inf.
func attendPaged(out, q []float32, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32) float32 {
	bs, d := cache.BlockSize, cache.HeadDim
	var scores [kvcache.MaxBlockSize]float32
	sm := newSoftmax(out)
	for start := from - from%bs; start < to; start += bs {
		blk := table[start/bs]
		if blk < 0 {
			continue // held by another rank (CSPS's sequence-sharded KV)
		}
		keys, vals := cache.Keys(layer, blk, head), cache.Values(layer, blk, head)
		a, e := max(from, start)-start, min(to, start+bs)-start
		bm := float32(math.Inf(-1))
		for j := a; j < e; j++ {
			s := tensor.Dot(q, keys[j*d:(j+1)*d]) * scale
			scores[j] = s
			bm = max(bm, s)
		}
		sm.tile(out, scores[a:e], bm)
		for j := a; j < e; j++ {
			tensor.Axpy(scores[j], vals[j*d:(j+1)*d], out)
		}
	}
	return sm.finish(out)
}

// attendPagedHalf is attendPaged over a BF16 or F16 cache: per block, the
// scores of q against the block's keys and their weighted sum of its
// values are each one pass over the stored 16-bit elements
// (tensor.DotRowsHalf, tensor.AxpyRowsHalf), widened in registers and
// accumulated in float32; the online softmax is attendPaged's.
func attendPagedHalf(out, q []float32, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32) float32 {
	bs, d, dt := cache.BlockSize, cache.HeadDim, cache.DType
	var scores [kvcache.MaxBlockSize]float32
	sm := newSoftmax(out)
	for start := from - from%bs; start < to; start += bs {
		blk := table[start/bs]
		if blk < 0 {
			continue
		}
		a, e := max(from, start)-start, min(to, start+bs)-start
		s := scores[a:e]
		tensor.DotRowsHalf(dt, s, q, cache.HalfKeys(layer, blk, head)[a*d:e*d])
		sm.tile(out, s, tensor.ScaleMax(scale, s))
		tensor.AxpyRowsHalf(dt, out, s, cache.HalfValues(layer, blk, head)[a*d:e*d])
	}
	return sm.finish(out)
}

// groupHeads is how many query heads attendGroup takes at once: the
// scores of a block of keys for all of them stay on the stack.
const groupHeads = 8

// attendGroup is attendPaged for g query heads that share KV head head,
// held d apart in q and written d apart to out (the LSEs are not
// returned): each block's keys and values are read once for up to
// groupHeads heads, the scores by one tensor.Scores, the weighted values
// by tensor.AxpyRows per head. A float32 cache only.
func attendGroup(out, q []float32, g int, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32) {
	bs, d := cache.BlockSize, cache.HeadDim
	var scores [groupHeads * kvcache.MaxBlockSize]float32
	var sms [groupHeads]softmax
	for h0 := 0; h0 < g; h0 += groupHeads {
		gh := min(groupHeads, g-h0)
		qh, oh := q[h0*d:(h0+gh)*d], out[h0*d:(h0+gh)*d]
		for i := range gh {
			sms[i] = newSoftmax(oh[i*d : (i+1)*d])
		}
		for start := from - from%bs; start < to; start += bs {
			blk := table[start/bs]
			if blk < 0 {
				continue
			}
			keys, vals := cache.Keys(layer, blk, head), cache.Values(layer, blk, head)
			a, e := max(from, start)-start, min(to, start+bs)-start
			n := e - a
			tensor.Scores(scores[:gh*n], qh, keys[a*d:e*d], gh, n, d)
			for i := range gh {
				s := scores[i*n : (i+1)*n]
				bm := tensor.ScaleMax(scale, s)
				o := oh[i*d : (i+1)*d]
				sms[i].tile(o, s, bm)
				tensor.AxpyRows(o, s, vals[a*d:e*d])
			}
		}
		for i := range gh {
			sms[i].finish(oh[i*d : (i+1)*d])
		}
	}
}
