package kvcache

import (
	"fmt"

	"github.com/gearboxlm/gearbox/tensor"
)

// MaxBlockSize bounds BlockSize so attention can keep one block's scores on
// the stack.
const MaxBlockSize = 256

// Layout describes the cache a rank holds.
type Layout struct {
	Layers    int // layers held by this rank
	KVHeads   int // KV heads held by this rank
	HeadDim   int
	BlockSize int // token slots per block
	NumBlocks int
	// DType is the element format of the stored keys and values:
	// tensor.F32 (the zero value), or tensor.BF16 or tensor.F16, which
	// Put rounds to nearest (ties to even) and readers widen exactly.
	DType tensor.DType
}

// ElemBytes is the size of one stored key or value element: 4 for F32, 2
// for BF16 and F16.
func (l Layout) ElemBytes() int {
	if l.DType == tensor.F32 {
		return 4
	}
	return 2
}

// TokenBytes is the storage one token takes in every layer and KV head of
// the layout, keys and values together.
func (l Layout) TokenBytes() int64 {
	return 2 * int64(l.ElemBytes()) * int64(l.Layers) * int64(l.KVHeads) * int64(l.HeadDim)
}

// Bytes is the storage the layout needs, keys and values together, in its
// DType.
func (l Layout) Bytes() int64 {
	return l.TokenBytes() * int64(l.NumBlocks) * int64(l.BlockSize)
}

// Validate checks that every dimension is positive, BlockSize fits and
// DType is one the cache stores.
func (l Layout) Validate() error {
	if l.Layers <= 0 || l.KVHeads <= 0 || l.HeadDim <= 0 || l.BlockSize <= 0 || l.NumBlocks <= 0 {
		return fmt.Errorf("kvcache: every dimension must be positive: %+v", l)
	}
	if l.BlockSize > MaxBlockSize {
		return fmt.Errorf("kvcache: block size %d exceeds %d", l.BlockSize, MaxBlockSize)
	}
	if l.DType != tensor.F32 && !l.Half() {
		return fmt.Errorf("kvcache: keys and values in %s are not supported (f32, bf16 or f16)", l.DType)
	}
	return nil
}

// Half reports whether the layout stores 16-bit elements (BF16 or F16).
func (l Layout) Half() bool { return l.DType == tensor.BF16 || l.DType == tensor.F16 }

// Cache is one rank's paged KV storage in its layout's DType. Within a
// layer a block is laid out [kv_head][slot][head_dim], so one head's keys
// in a block are contiguous. An F32 cache is read through Keys, Values,
// KeyHeads and ValueHeads, a BF16 or F16 one through their Half forms,
// which return the stored 16-bit patterns (widen them with
// tensor.FromBF16 or tensor.FromF16); Get reads either, widened. Writers of
// distinct slots may run concurrently; a slot must not be read while it
// is written.
type Cache struct {
	Layout
	k, v   [][]float32 // F32, per layer: NumBlocks·KVHeads·BlockSize·HeadDim
	hk, hv [][]uint16  // BF16 or F16, likewise
}

// New allocates a cache.
func New(l Layout) (*Cache, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	c := &Cache{Layout: l}
	n := l.NumBlocks * l.KVHeads * l.BlockSize * l.HeadDim
	if l.Half() {
		c.hk, c.hv = make([][]uint16, l.Layers), make([][]uint16, l.Layers)
		for i := range c.hk {
			c.hk[i] = make([]uint16, n)
			c.hv[i] = make([]uint16, n)
		}
		return c, nil
	}
	c.k, c.v = make([][]float32, l.Layers), make([][]float32, l.Layers)
	for i := range c.k {
		c.k[i] = make([]float32, n)
		c.v[i] = make([]float32, n)
	}
	return c, nil
}

// Put stores the keys and values of the token at position pos of a sequence
// with the given block table, rounded to the cache's DType. k and v are
// [KVHeads·HeadDim].
func (c *Cache) Put(layer int, table []int, pos int, k, v []float32) {
	blk, slot := table[pos/c.BlockSize], pos%c.BlockSize
	d := c.HeadDim
	for h := 0; h < c.KVHeads; h++ {
		off := c.offset(blk, h) + slot*d
		src := h * d
		switch c.DType {
		case tensor.BF16:
			tensor.EncodeBF16(c.hk[layer][off:off+d], k[src:src+d])
			tensor.EncodeBF16(c.hv[layer][off:off+d], v[src:src+d])
		case tensor.F16:
			tensor.EncodeF16(c.hk[layer][off:off+d], k[src:src+d])
			tensor.EncodeF16(c.hv[layer][off:off+d], v[src:src+d])
		default:
			copy(c.k[layer][off:off+d], k[src:src+d])
			copy(c.v[layer][off:off+d], v[src:src+d])
		}
	}
}

// Get reads the keys and values of the token at position pos of a
// sequence with the given block table into k and v, [KVHeads·HeadDim],
// widened to float32 (exactly).
func (c *Cache) Get(layer int, table []int, pos int, k, v []float32) {
	blk, slot := table[pos/c.BlockSize], pos%c.BlockSize
	d := c.HeadDim
	for h := 0; h < c.KVHeads; h++ {
		off := c.offset(blk, h) + slot*d
		dst := h * d
		switch c.DType {
		case tensor.BF16:
			tensor.DecodeBF16(k[dst:dst+d], c.hk[layer][off:off+d])
			tensor.DecodeBF16(v[dst:dst+d], c.hv[layer][off:off+d])
		case tensor.F16:
			tensor.DecodeF16(k[dst:dst+d], c.hk[layer][off:off+d])
			tensor.DecodeF16(v[dst:dst+d], c.hv[layer][off:off+d])
		default:
			copy(k[dst:dst+d], c.k[layer][off:off+d])
			copy(v[dst:dst+d], c.v[layer][off:off+d])
		}
	}
}

// Keys returns the keys of one head in one block of an F32 cache:
// [BlockSize·HeadDim]. It panics on a 16-bit cache (see HalfKeys).
func (c *Cache) Keys(layer, block, head int) []float32 {
	if c.Half() {
		c.wrong("Keys")
	}
	off := c.offset(block, head)
	return c.k[layer][off : off+c.BlockSize*c.HeadDim]
}

// Values returns the values of one head in one block of an F32 cache, as
// Keys.
func (c *Cache) Values(layer, block, head int) []float32 {
	if c.Half() {
		c.wrong("Values")
	}
	off := c.offset(block, head)
	return c.v[layer][off : off+c.BlockSize*c.HeadDim]
}

// KeyHeads returns the keys of heads [lo, hi) in one block of an F32
// cache, one head after another: [(hi−lo)·BlockSize·HeadDim]. A run of
// heads of a block is contiguous, so a whole block's share of a head
// range moves as one copy.
func (c *Cache) KeyHeads(layer, block, lo, hi int) []float32 {
	if c.Half() {
		c.wrong("KeyHeads")
	}
	return c.k[layer][c.offset(block, lo):c.offset(block, hi)]
}

// ValueHeads returns the values of heads [lo, hi) in one block of an F32
// cache, as KeyHeads.
func (c *Cache) ValueHeads(layer, block, lo, hi int) []float32 {
	if c.Half() {
		c.wrong("ValueHeads")
	}
	return c.v[layer][c.offset(block, lo):c.offset(block, hi)]
}

// HalfKeys returns the stored BF16 or F16 keys of one head in one block
// of a 16-bit cache: [BlockSize·HeadDim]. It panics on an F32 cache.
func (c *Cache) HalfKeys(layer, block, head int) []uint16 {
	if !c.Half() {
		c.wrong("HalfKeys")
	}
	off := c.offset(block, head)
	return c.hk[layer][off : off+c.BlockSize*c.HeadDim]
}

// HalfValues returns the stored values of one head in one block of a
// 16-bit cache, as HalfKeys.
func (c *Cache) HalfValues(layer, block, head int) []uint16 {
	if !c.Half() {
		c.wrong("HalfValues")
	}
	off := c.offset(block, head)
	return c.hv[layer][off : off+c.BlockSize*c.HeadDim]
}

// wrong panics: method reads the other format's storage, a bug.
func (c *Cache) wrong(method string) {
	panic(fmt.Sprintf("kvcache: %s of a cache of %s keys and values", method, c.DType))
}

func (c *Cache) offset(block, head int) int {
	return (block*c.KVHeads + head) * c.BlockSize * c.HeadDim
}

// BlocksFor is how many blocks hold n tokens.
func (l Layout) BlocksFor(n int) int { return (n + l.BlockSize - 1) / l.BlockSize }
