package cpuexec

import (
	"math"

	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/tensor"
)

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
	clear(out)
	m, sum := float32(math.Inf(-1)), float32(0)
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
		if bm > m {
			if sum > 0 {
				corr := float32(math.Exp(float64(m - bm)))
				tensor.Scale(corr, out)
				sum *= corr
			}
			m = bm
		}
		sum += tensor.ExpSub(scores[a:e], m)
		for j := a; j < e; j++ {
			tensor.Axpy(scores[j], vals[j*d:(j+1)*d], out)
		}
	}
	if sum == 0 {
		return m
	}
	tensor.Scale(1/sum, out)
	return m + float32(math.Log(float64(sum)))
}

// attendPagedHalf is attendPaged over a BF16 or F16 cache: per block, the
// scores of q against the block's keys and their weighted sum of its
// values are each one pass over the stored 16-bit elements
// (tensor.DotRowsHalf, tensor.AxpyRowsHalf), widened in registers and
// accumulated in float32; the online softmax is attendPaged's.
func attendPagedHalf(out, q []float32, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32) float32 {
	bs, d, dt := cache.BlockSize, cache.HeadDim, cache.DType
	var scores [kvcache.MaxBlockSize]float32
	clear(out)
	m, sum := float32(math.Inf(-1)), float32(0)
	for start := from - from%bs; start < to; start += bs {
		blk := table[start/bs]
		if blk < 0 {
			continue
		}
		a, e := max(from, start)-start, min(to, start+bs)-start
		s := scores[a:e]
		tensor.DotRowsHalf(dt, s, q, cache.HalfKeys(layer, blk, head)[a*d:e*d])
		bm := float32(math.Inf(-1))
		for j := range s {
			s[j] *= scale
			bm = max(bm, s[j])
		}
		if bm > m {
			if sum > 0 {
				corr := float32(math.Exp(float64(m - bm)))
				tensor.Scale(corr, out)
				sum *= corr
			}
			m = bm
		}
		sum += tensor.ExpSub(s, m)
		tensor.AxpyRowsHalf(dt, out, s, cache.HalfValues(layer, blk, head)[a*d:e*d])
	}
	if sum == 0 {
		return m
	}
	tensor.Scale(1/sum, out)
	return m + float32(math.Log(float64(sum)))
}
