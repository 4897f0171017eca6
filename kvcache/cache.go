package kvcache

import "fmt"

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
}

// Bytes is the float32 storage the layout needs, keys and values together.
func (l Layout) Bytes() int64 {
	return 2 * 4 * int64(l.Layers) * int64(l.NumBlocks) * int64(l.KVHeads) * int64(l.BlockSize) * int64(l.HeadDim)
}

// Validate checks that every dimension is positive and BlockSize fits.
func (l Layout) Validate() error {
	if l.Layers <= 0 || l.KVHeads <= 0 || l.HeadDim <= 0 || l.BlockSize <= 0 || l.NumBlocks <= 0 {
		return fmt.Errorf("kvcache: every dimension must be positive: %+v", l)
	}
	if l.BlockSize > MaxBlockSize {
		return fmt.Errorf("kvcache: block size %d exceeds %d", l.BlockSize, MaxBlockSize)
	}
	return nil
}

// Cache is one rank's paged KV storage, float32. Within a layer a block is
// laid out [kv_head][slot][head_dim], so one head's keys in a block are
// contiguous. Writers of distinct slots may run concurrently; a slot must
// not be read while it is written.
type Cache struct {
	Layout
	k, v [][]float32 // per layer: NumBlocks·KVHeads·BlockSize·HeadDim
}

// New allocates a cache.
func New(l Layout) (*Cache, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	c := &Cache{Layout: l, k: make([][]float32, l.Layers), v: make([][]float32, l.Layers)}
	n := l.NumBlocks * l.KVHeads * l.BlockSize * l.HeadDim
	for i := range c.k {
		c.k[i] = make([]float32, n)
		c.v[i] = make([]float32, n)
	}
	return c, nil
}

// Put stores the keys and values of the token at position pos of a sequence
// with the given block table. k and v are [KVHeads·HeadDim].
func (c *Cache) Put(layer int, table []int, pos int, k, v []float32) {
	blk, slot := table[pos/c.BlockSize], pos%c.BlockSize
	d := c.HeadDim
	for h := 0; h < c.KVHeads; h++ {
		off := c.offset(blk, h) + slot*d
		copy(c.k[layer][off:off+d], k[h*d:(h+1)*d])
		copy(c.v[layer][off:off+d], v[h*d:(h+1)*d])
	}
}

// Keys returns the keys of one head in one block: [BlockSize·HeadDim].
func (c *Cache) Keys(layer, block, head int) []float32 {
	off := c.offset(block, head)
	return c.k[layer][off : off+c.BlockSize*c.HeadDim]
}

// Values returns the values of one head in one block: [BlockSize·HeadDim].
func (c *Cache) Values(layer, block, head int) []float32 {
	off := c.offset(block, head)
	return c.v[layer][off : off+c.BlockSize*c.HeadDim]
}

// KeyHeads returns the keys of heads [lo, hi) in one block, one head
// after another: [(hi−lo)·BlockSize·HeadDim]. A run of heads of a block is
// contiguous, so a whole block's share of a head range moves as one copy.
func (c *Cache) KeyHeads(layer, block, lo, hi int) []float32 {
	return c.k[layer][c.offset(block, lo):c.offset(block, hi)]
}

// ValueHeads returns the values of heads [lo, hi) in one block, as
// KeyHeads.
func (c *Cache) ValueHeads(layer, block, lo, hi int) []float32 {
	return c.v[layer][c.offset(block, lo):c.offset(block, hi)]
}

func (c *Cache) offset(block, head int) int {
	return (block*c.KVHeads + head) * c.BlockSize * c.HeadDim
}

// BlocksFor is how many blocks hold n tokens.
func (l Layout) BlocksFor(n int) int { return (n + l.BlockSize - 1) / l.BlockSize }
