package cpuexec

import (
	"math"
	"sync"

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

// groupHeads is the most query heads of a row attendBlock takes in one
// pass.
const groupHeads = 8

// widenElems is the float32 elements of attendBlock's buffer for a tile
// of keys (and one for its values) gathered from a cache: 64 keys of
// head_dim 64, 32 of 128, from as many blocks as they span, widened from
// BF16 or F16. Measured on the 1B shape, with blocks of 16 query rows
// prefill attention took 10–15% less time with 64 keys than with 32, and
// decode no more; with one row, 16 keys were 5–10% slower than 32.
const widenElems = 4096

// Bounds of attendBlock's passes over several rows: at most
// blockQueries query vectors (rows × heads) and blockQueryElems floats of
// them gathered at once, and scoreElems scores of a tile.
const (
	blockQueries    = 64
	blockQueryElems = 4096
	scoreElems      = 4096
)

// blockRows is how many rows of g query heads of head_dim d attendBlock
// takes in one pass (1 when a row's heads alone fill the bounds).
func blockRows(g, d int) int {
	gh := min(g, groupHeads)
	return max(1, min(blockQueries/gh, blockQueryElems/(gh*d)))
}

// cutBlocks appends to dst the blocks [first, first+n) that cut the rows
// [0, rows) for attendBlock: runs of up to rb rows, each row after a
// block's first one joining it when next(i) (row i is the next position
// of row i−1's sequence); rows for which skip(i) holds are left out.
func cutBlocks(dst [][2]int, rows, rb int, next, skip func(i int) bool) [][2]int {
	for r := 0; r < rows; {
		if skip != nil && skip(r) {
			r++
			continue
		}
		n := 1
		for n < rb && r+n < rows && next(r+n) && (skip == nil || !skip(r+n)) {
			n++
		}
		dst = append(dst, [2]int{r, n})
		r += n
	}
	return dst
}

// blockAt is the k-th of blocks taken early and late in turn (first,
// last, second, second to last, …), so that a pool's contiguous chunks of
// them get about equal causal work.
func blockAt(blocks [][2]int, k int) [2]int {
	if k%2 == 1 {
		return blocks[len(blocks)-1-k/2]
	}
	return blocks[k/2]
}

// queries is the block of query rows attendBlock takes: rows consecutive
// tokens of one sequence, row i's g heads of head_dim d at q[i·qStride:], its
// output written to out[i·outStride:] and, with lse non-nil, its heads'
// log-sum-exps of the scaled scores to lse[i·lseStride:] (−Inf for a
// head that sees no key), so that partials over disjoint keys can be
// merged. Row i attends to key positions [from, to+i), the last window of
// them with window > 0, and none from stop on with stop > 0.
type queries struct {
	q, out, lse                   []float32
	qStride, outStride, lseStride int
	d, g, rows                    int
	from, to, window, stop        int
	scale                         float32
}

// keys is the key positions row i attends to, [lo, hi).
func (b *queries) keys(i int) (lo, hi int) {
	lo, hi = b.from, b.to+i
	if b.window > 0 {
		lo = max(lo, hi-b.window)
	}
	if b.stop > 0 {
		hi = min(hi, b.stop)
	}
	return lo, hi
}

// outVec is row i's output vector of head h.
func (b *queries) outVec(i, h int) []float32 {
	o := i*b.outStride + h*b.d
	return b.out[o : o+b.d]
}

// tiles walks keys and values for attendBlock: walk hands every held key
// of positions [from, to) to sc.attendTile, in tiles of consecutive
// positions, for the pass b whose queries are qv and softmaxes sm.
type tiles interface {
	walk(sc *attendScratch, b *queries, qv []float32, sm []softmax, from, to int)
}

// cacheTiles are the keys and values of KV head head of a layer of the
// paged cache, under a block table whose negative ids are skipped
// (another rank holds them: CSPS's sequence-sharded KV).
type cacheTiles struct {
	cache       *kvcache.Cache
	layer, head int
	table       []int
}

// rowTiles are keys and values held in rows of a buffer: the key at
// position k is rows[(k−first)·stride+kOff:][:d] and its value at vOff.
type rowTiles struct {
	rows                      []float32
	stride, kOff, vOff, first int
}

// attendGroup writes softmax(q_h·Kᵀ·scale)·V over key positions [from,
// to) of KV head head into out for the g query heads q_h that share it,
// held d apart in q and written d apart to out (attendBlock for one
// row); with lse non-nil, lse[h] is head h's log-sum-exp.
func attendGroup(sc *attendScratch, out, q []float32, g int, cache *kvcache.Cache, layer int, table []int, head, from, to int, scale float32, lse []float32) {
	b := queries{q: q, out: out, lse: lse, lseStride: g, d: cache.HeadDim, g: g, rows: 1, from: from, to: to, scale: scale}
	attendBlock(sc, &b, cacheTiles{cache, layer, head, table})
}

// attendRows is attendGroup over keys and values held in rows of a buffer
// instead of the paged cache (rowTiles), for the g query heads q (d =
// len(q)/g apiece) that share them; it writes lse[h] for every head.
func attendRows(sc *attendScratch, out, q []float32, g int, rows []float32, stride, kOff, vOff, first, from, to int, scale float32, lse []float32) {
	b := queries{q: q, out: out, lse: lse, lseStride: g, d: len(q) / g, g: g, rows: 1, from: from, to: to, scale: scale}
	attendBlock(sc, &b, rowTiles{rows, stride, kOff, vOff, first})
}

// attendBlock attends the block of query rows b to the keys and values
// of src with an online softmax per query head and row; a head that sees
// no key gets zeros.
//
// The keys and values are read once a tile for every query vector of a
// pass: up to groupHeads heads of one row, or of as many rows as
// blockRows allows, whose queries are gathered side by side so that one
// tensor.Scores takes them all; each row then softmaxes and sums the
// tile's keys it sees (its causal range). Over a whole prompt this reads
// each key blockRows times fewer than row by row, from L1.
//
// sc is scratch space, which a caller keeps for many calls (getScratch).
func attendBlock(sc *attendScratch, b *queries, src tiles) {
	if b.rows == 1 && b.g <= groupHeads {
		sc.attendPass(b, src) // a decode's, or one of CSPS's and CSA's many small calls
		return
	}
	d := b.d
	rb := blockRows(b.g, d)
	for h0 := 0; h0 < b.g; h0 += groupHeads {
		gh := min(groupHeads, b.g-h0)
		for r0 := 0; r0 < b.rows; r0 += rb {
			pass := *b
			pass.q, pass.out = b.q[r0*b.qStride+h0*d:], b.out[r0*b.outStride+h0*d:]
			if b.lse != nil {
				pass.lse = b.lse[r0*b.lseStride+h0:]
			}
			pass.g, pass.rows, pass.to = gh, min(rb, b.rows-r0), b.to+r0
			sc.attendPass(&pass, src)
		}
	}
}

// attendPass is one pass of attendBlock: b.rows rows of b.g ≤ groupHeads
// heads, their queries gathered side by side unless there is one row.
func (sc *attendScratch) attendPass(b *queries, src tiles) {
	d, g := b.d, b.g
	nq := b.rows * g
	qv := b.q[:g*d]
	if b.rows > 1 {
		qv = sc.q[:nq*d]
		for i := range b.rows {
			copy(qv[i*g*d:(i+1)*g*d], b.q[i*b.qStride:i*b.qStride+g*d])
		}
	}
	sm := sc.sm[:nq]
	for i := range b.rows {
		for h := range g {
			sm[i*g+h] = newSoftmax(b.outVec(i, h))
		}
	}
	from, _ := b.keys(0)
	_, to := b.keys(b.rows - 1)
	src.walk(sc, b, qv, sm, from, to)
	for i := range b.rows {
		for h := range g {
			l := sm[i*g+h].finish(b.outVec(i, h))
			if b.lse != nil {
				b.lse[i*b.lseStride+h] = l
			}
		}
	}
}

// walk attends the cache's keys of [from, to) in tiles of up to
// tileKeys(d) keys that end at its multiples and at skipped blocks,
// whatever from is, so a query's result does not depend on the block of
// queries it came in. A float32 cache whose blocks hold whole tiles is
// attended in place; otherwise a tile's keys and values are copied (or
// widened from BF16 or F16) from one block or several into a buffer, so
// that the calls per key are spread over as many keys as it holds (with
// blocks of 16 keys of head_dim 64, float32 decode at 8k tokens and
// prefill attention took 13–15% less time gathered than in place).
func (c cacheTiles) walk(sc *attendScratch, b *queries, qv []float32, sm []softmax, from, to int) {
	bs, d := c.cache.BlockSize, c.cache.HeadDim
	room := tileKeys(d)
	if !c.cache.Half() && bs >= room {
		for start := from - from%bs; start < to; start += bs {
			blk := c.table[start/bs]
			if blk < 0 {
				continue
			}
			keys, vals := c.cache.Keys(c.layer, blk, c.head), c.cache.Values(c.layer, blk, c.head)
			for a, e := max(from, start), min(to, start+bs); a < e; {
				n := tileLen(a, e, room)
				sc.attendTile(b, qv, sm, keys[(a-start)*d:], vals[(a-start)*d:], d, a, n)
				a += n
			}
		}
		return
	}
	wk, wv := sc.wk[:], sc.wv[:]
	fill, ts := 0, 0 // keys gathered into wk, wv from position ts on, not yet attended
	flush := func() {
		if fill > 0 {
			sc.attendTile(b, qv, sm, wk, wv, d, ts, fill)
			fill = 0
		}
	}
	for start := from - from%bs; start < to; start += bs {
		blk := c.table[start/bs]
		if blk < 0 {
			flush() // a tile's keys are consecutive positions
			continue
		}
		for a, e := max(from, start), min(to, start+bs); a < e; {
			if fill == 0 {
				ts = a
			}
			n := tileLen(a, e, room)
			gatherKV(c.cache, c.layer, blk, c.head, a-start, n, wk[fill*d:(fill+n)*d], wv[fill*d:(fill+n)*d])
			fill, a = fill+n, a+n
			if a%room == 0 {
				flush()
			}
		}
	}
	flush()
}

// walk attends the buffer's keys of [from, to) in place, in tiles ending
// at multiples of tileKeys (the cache's tiles).
func (r rowTiles) walk(sc *attendScratch, b *queries, qv []float32, sm []softmax, from, to int) {
	room := tileKeys(b.d)
	for a := from; a < to; {
		n := tileLen(a, to, room)
		at := (a - r.first) * r.stride
		sc.attendTile(b, qv, sm, r.rows[at+r.kOff:], r.rows[at+r.vOff:], r.stride, a, n)
		a += n
	}
}

// tileLen is how many keys from position a (before end) the tile holding
// a takes: tiles end at multiples of room, whatever the walk's start, so
// a query's tiles are the same alone or in a block of queries.
func tileLen(a, end, room int) int { return min(end, (a/room+1)*room) - a }

// tileKeys is the most keys of head_dim d attendTile takes at once: what
// a widened tile holds, and what the scores of blockQueries queries hold.
func tileKeys(d int) int {
	return max(1, min(kvcache.MaxBlockSize, widenElems/d, scoreElems/blockQueries))
}

// gatherKV copies n keys and values of block blk from offset a on into
// k and v as float32 (widening a BF16 or F16 cache's).
func gatherKV(cache *kvcache.Cache, layer, blk, head, a, n int, k, v []float32) {
	d := cache.HeadDim
	if !cache.Half() {
		copy(k, cache.Keys(layer, blk, head)[a*d:(a+n)*d])
		copy(v, cache.Values(layer, blk, head)[a*d:(a+n)*d])
		return
	}
	widen(cache.DType, k, cache.HalfKeys(layer, blk, head)[a*d:(a+n)*d])
	widen(cache.DType, v, cache.HalfValues(layer, blk, head)[a*d:(a+n)*d])
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

// attendScratch is attendBlock's scratch: a pass's gathered queries,
// their softmaxes, the scores of a tile for all of them, and a tile of
// keys and values gathered or widened to float32. Go zeroes every array
// it declares, about 64 KiB here, so callers take one from getScratch for
// a pool chunk's calls instead of declaring it.
type attendScratch struct {
	q      [blockQueryElems]float32
	sm     [blockQueries]softmax
	scores [scoreElems]float32
	wk, wv [widenElems]float32
}

var attendScratches = sync.Pool{New: func() any { return new(attendScratch) }}

// getScratch takes an attendScratch; putScratch gives it back.
func getScratch() *attendScratch { return attendScratches.Get().(*attendScratch) }

func putScratch(sc *attendScratch) { attendScratches.Put(sc) }

// attendTile adds a tile of n float32 keys and values at positions [ts,
// ts+n), row j of each at keys[j·ld:] and vals[j·ld:], to the online
// softmaxes sm of the pass b, whose query vectors are qv (row by row, g
// heads a row): the scores of the rows that see any of the tile by one
// tensor.Scores, each key read once for all of them; then per row and
// head, over the keys the row sees, the scaling, the softmax's tile and
// the weighted values (tensor.AxpyRows).
func (sc *attendScratch) attendTile(b *queries, qv []float32, sm []softmax, keys, vals []float32, ld, ts, n int) {
	g, d := b.g, b.d
	if b.rows == 1 { // the walk's range is the row's: it sees every key
		tensor.Scores(sc.scores[:g*n], qv, keys, g, n, d, ld)
		for h := range g {
			s := sc.scores[h*n : (h+1)*n]
			o := b.outVec(0, h)
			sm[h].tile(o, s, tensor.ScaleMax(b.scale, s))
			tensor.AxpyRows(o, s, vals, ld)
		}
		return
	}
	// The rows that see the tile are consecutive: both ends of a row's
	// range grow with the row.
	ia, ib := 0, b.rows
	for ia < ib {
		if lo, hi := b.keys(ia); hi > ts && lo < hi {
			break
		}
		ia++
	}
	for ib > ia {
		if lo, _ := b.keys(ib - 1); lo < ts+n {
			break
		}
		ib--
	}
	if ia == ib {
		return
	}
	scores := sc.scores[:(ib-ia)*g*n]
	tensor.Scores(scores, qv[ia*g*d:ib*g*d], keys, (ib-ia)*g, n, d, ld)
	for i := ia; i < ib; i++ {
		lo, hi := b.keys(i)
		a, e := max(lo, ts)-ts, min(hi, ts+n)-ts
		if a >= e {
			continue
		}
		for h := range g {
			s := scores[((i-ia)*g+h)*n:][a:e]
			o := b.outVec(i, h)
			sm[i*g+h].tile(o, s, tensor.ScaleMax(b.scale, s))
			tensor.AxpyRows(o, s, vals[a*ld:], ld)
		}
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
