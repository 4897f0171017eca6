package migrate

import (
	"errors"

	"github.com/gearboxlm/gearbox/kvcache"
)

// The wire order of the KV one rank sends another: the pair's transfers
// in request order; within a transfer, layer by layer, head by head, the
// keys then the values, each a segment of Len·HeadDim values in token
// order. The order depends on no block size, so source and destination
// caches may page differently, and a staging buffer may end anywhere.

// errOverrun means a stream held fewer values than its messages: the
// handshake rules it out.
var errOverrun = errors.New("migrate: stream shorter than its messages")

// cursor walks one pair's transfers in wire order through one cache,
// packing from it (the sender's source cache, tables Src) or unpacking
// into it (the receiver's destination cache, tables Dst).
type cursor struct {
	c      *kvcache.Cache
	base   int // global index of the cache's first KV head
	ts     []Transfer
	dst    bool // walk the Dst tables, else the Src tables
	layers int
	d      int // head dim

	t, seg, off int // transfer, segment in it, value in the segment
}

// copy moves the next len(buf) values of the stream between the cache
// and buf: into buf when pack is set, else out of it.
func (u *cursor) copy(buf []float32, pack bool) error {
	for len(buf) > 0 {
		if u.t == len(u.ts) {
			return errOverrun
		}
		tr := &u.ts[u.t]
		segLen := tr.Len * u.d
		if u.off == segLen {
			u.off = 0
			u.seg++
			if segLen == 0 || u.seg == 2*tr.Heads.Len()*u.layers {
				u.seg = 0
				u.t++
			}
			continue
		}
		perLayer := 2 * tr.Heads.Len()
		layer, head, keys := u.seg/perLayer, tr.Heads.Lo+u.seg%perLayer/2-u.base, u.seg%2 == 0
		bs := u.c.BlockSize
		bi := u.off / u.d / bs // block index in the table
		table := tr.Src
		if u.dst {
			table = tr.Dst
		}
		page := slots(u.c, layer, table[bi], head, keys)
		run := page[u.off-bi*bs*u.d : min(bs, tr.Len-bi*bs)*u.d]
		var n int
		if pack {
			n = copy(buf, run)
		} else {
			n = copy(run, buf)
		}
		u.off += n
		buf = buf[n:]
	}
	return nil
}

// slots is one head's keys (or values) in one block of c.
func slots(c *kvcache.Cache, layer, block, head int, keys bool) []float32 {
	if keys {
		return c.Keys(layer, block, head)
	}
	return c.Values(layer, block, head)
}

// eachRun calls f for transfer tr's runs in wire order: per layer, head
// (global index), keys then values, each maximal token range [lo, hi)
// inside one source block of srcBS slots and one destination block of
// dstBS slots. A run is one page copy; the per-page mode sends each as
// its own message.
func eachRun(tr Transfer, layers, srcBS, dstBS int, f func(layer, head int, keys bool, lo, hi int) error) error {
	for l := 0; l < layers; l++ {
		for h := tr.Heads.Lo; h < tr.Heads.Hi; h++ {
			for _, keys := range [2]bool{true, false} {
				for lo := 0; lo < tr.Len; {
					hi := min(tr.Len, (lo/srcBS+1)*srcBS, (lo/dstBS+1)*dstBS)
					if err := f(l, h, keys, lo, hi); err != nil {
						return err
					}
					lo = hi
				}
			}
		}
	}
	return nil
}

// tokens is the part of cache c holding tokens [lo, hi) of one head
// (local index) of one layer, for a request with block table table; the
// range lies inside one block.
func tokens(c *kvcache.Cache, table []int, layer, head int, keys bool, lo, hi int) []float32 {
	bs, d := c.BlockSize, c.HeadDim
	s := lo % bs
	return slots(c, layer, table[lo/bs], head, keys)[s*d : (s+hi-lo)*d]
}
