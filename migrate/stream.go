package migrate

import (
	"errors"

	"github.com/gearboxlm/gearbox/kvcache"
)

// The wire order of the KV one rank sends another: the pair's transfers
// in request order; within a transfer, layer by layer, the keys then the
// values; within those, the sender's pages in token order — piece k holds
// tokens [k·S, min((k+1)·S, Len)) where S is the sender's block size —
// and within a piece head by head, token by token. A full source block's
// share of the transfer's heads is one contiguous run of the source cache
// (a block is laid out [kv_head][slot][head_dim]), so the sender packs
// each page with one copy, and a receiver paging alike unpacks it with
// one; other pieces go head by head and block by block. Only the slots of
// tokens [0, Len) move, whatever the block sizes, and a staging buffer may
// end anywhere.

// errOverrun means a stream held fewer values than its messages: the
// handshake rules it out.
var errOverrun = errors.New("migrate: stream shorter than its messages")

// piece is tokens [lo, hi) of transfer t's heads in one layer, keys or
// values: one source page, the unit of the wire order.
type piece struct {
	t      *Transfer
	layer  int
	keys   bool
	lo, hi int
}

// pieces iterates a pair's transfers in wire order, cutting pieces every
// bs tokens (the sender's block size).
type pieces struct {
	ts         []Transfer
	layers, bs int

	t, layer, kv, lo int // the next piece: transfer, layer, keys (0) or values (1), first token
}

// next returns the next piece, or false at the end of the stream.
func (it *pieces) next() (piece, bool) {
	for it.t < len(it.ts) {
		tr := &it.ts[it.t]
		if it.lo >= tr.Len {
			it.lo, it.kv = 0, it.kv+1
			if it.kv == 2 {
				it.kv, it.layer = 0, it.layer+1
			}
			if it.layer == it.layers || tr.Len == 0 {
				it.kv, it.layer, it.t = 0, 0, it.t+1
			}
			continue
		}
		p := piece{t: tr, layer: it.layer, keys: it.kv == 0, lo: it.lo, hi: min(tr.Len, it.lo+it.bs)}
		it.lo = p.hi
		return p, true
	}
	return piece{}, false
}

// extent is one contiguous part of a piece in a cache: heads
// [h, h+heads) (offsets from the transfer's first head) of slots
// [slot, slot+n) in the block at index bi of the table. heads > 1 only
// for a whole block, whose heads are adjacent.
type extent struct {
	bi, h, heads, slot, n int
}

// extents appends the parts in which a cache of block size bs holds p, in
// wire order.
func extents(out []extent, bs int, p piece) []extent {
	nh := p.t.Heads.Len()
	if p.lo%bs == 0 && p.hi-p.lo == bs {
		return append(out, extent{bi: p.lo / bs, heads: nh, n: bs})
	}
	for h := range nh {
		for lo := p.lo; lo < p.hi; {
			bi := lo / bs
			hi := min(p.hi, (bi+1)*bs)
			out = append(out, extent{bi: bi, h: h, heads: 1, slot: lo - bi*bs, n: hi - lo})
			lo = hi
		}
	}
	return out
}

// side is one rank's view of a pair's KV: its cache, the first KV head
// the cache holds, and which table of the transfers it reads.
type side struct {
	c    *kvcache.Cache
	base int
	dst  bool

	ext []extent // scratch
}

// regions appends the slices of s's cache that hold p, in wire order.
func (s *side) regions(out [][]float32, p piece) [][]float32 {
	table := p.t.Src
	if s.dst {
		table = p.t.Dst
	}
	d := s.c.HeadDim
	s.ext = extents(s.ext[:0], s.c.BlockSize, p)
	h0 := p.t.Heads.Lo - s.base
	for _, e := range s.ext {
		if e.heads > 1 {
			if p.keys {
				out = append(out, s.c.KeyHeads(p.layer, table[e.bi], h0, h0+e.heads))
			} else {
				out = append(out, s.c.ValueHeads(p.layer, table[e.bi], h0, h0+e.heads))
			}
			continue
		}
		out = append(out, slots(s.c, p.layer, table[e.bi], h0+e.h, p.keys)[e.slot*d:(e.slot+e.n)*d])
	}
	return out
}

// slots is one head's keys (or values) in one block of c.
func slots(c *kvcache.Cache, layer, block, head int, keys bool) []float32 {
	if keys {
		return c.Keys(layer, block, head)
	}
	return c.Values(layer, block, head)
}

// cursor walks a pair's stream through one side, packing from the cache
// into staging buffers or unpacking from them into the cache.
type cursor struct {
	side
	it   pieces
	regs [][]float32 // the current piece's regions
	ri   int         // current region
	ro   int         // offset in it
}

// copy moves the next len(buf) values of the stream between the cache
// and buf: into buf when pack is set, else out of it.
func (u *cursor) copy(buf []float32, pack bool) error {
	for len(buf) > 0 {
		if u.ri == len(u.regs) {
			p, ok := u.it.next()
			if !ok {
				return errOverrun
			}
			u.regs, u.ri, u.ro = u.regions(u.regs[:0], p), 0, 0
		}
		r := u.regs[u.ri]
		var n int
		if pack {
			n = copy(buf, r[u.ro:])
		} else {
			n = copy(r[u.ro:], buf)
		}
		buf = buf[n:]
		if u.ro += n; u.ro == len(r) {
			u.ri, u.ro = u.ri+1, 0
		}
	}
	return nil
}

// cuts calls f with mine, a piece's regions on this side, cut wherever a
// region of the peer's side (of peerBS-slot blocks) ends: the largest
// runs contiguous on both sides, in wire order. Both sides of a pair cut
// the same lengths.
func cuts(mine [][]float32, peer []extent, d int, f func([]float32) error) error {
	i, off := 0, 0
	for _, e := range peer {
		for n := e.heads * e.n * d; n > 0; {
			r := mine[i][off:]
			k := min(len(r), n)
			if err := f(r[:k]); err != nil {
				return err
			}
			off, n = off+k, n-k
			if off == len(mine[i]) {
				i, off = i+1, 0
			}
		}
	}
	return nil
}
