package kvcache

import "fmt"

// HostStore is a KV tier in host memory shared by every rank: the whole
// model's keys and values (all layers, all KV heads) of the sequences
// parked there, in blocks of BlockSize tokens. A block is laid out
// [layer][kv_head][slot][head_dim] — HND within each layer — so the keys
// of any range of heads of one layer of a block are one contiguous run,
// and a rank pushing its pipeline stage's layers, or pulling its tensor-
// parallel heads, copies whole runs (Seesaw's host layout).
//
// Ranks may push and pull disjoint parts (other blocks, layers or heads)
// concurrently; a part must not be read while it is written.
type HostStore struct {
	Layout           // Layers and KVHeads are the whole model's
	k, v   []float32 // NumBlocks·Layers·KVHeads·BlockSize·HeadDim
}

// NewHostStore allocates a host store of l.NumBlocks blocks.
func NewHostStore(l Layout) (*HostStore, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	n := l.NumBlocks * l.Layers * l.KVHeads * l.BlockSize * l.HeadDim
	return &HostStore{Layout: l, k: make([]float32, n), v: make([]float32, n)}, nil
}

// Offset is the element offset of layer layer, KV head head of host block
// block in the keys (or values) array: heads of one layer are adjacent,
// each BlockSize·HeadDim long.
func (h *HostStore) Offset(block, layer, head int) int {
	return ((block*h.Layers+layer)*h.KVHeads + head) * h.BlockSize * h.HeadDim
}

// Slice names the part of the model's KV a rank caches: layers
// [LayerLo, LayerHi) and KV heads [HeadLo, HeadHi), global indices.
type Slice struct {
	LayerLo, LayerHi int
	HeadLo, HeadHi   int
}

// Elems is the number of float32 values one block of the slice holds,
// keys and values together.
func (s Slice) Elems(blockSize, headDim int) int64 {
	return 2 * int64(s.LayerHi-s.LayerLo) * int64(s.HeadHi-s.HeadLo) * int64(blockSize) * int64(headDim)
}

// check validates a rank's cache c, holding slice s, against the store.
func (h *HostStore) check(c *Cache, s Slice, device, host []int) error {
	switch {
	case len(device) != len(host):
		return fmt.Errorf("kvcache: %d device blocks for %d host blocks", len(device), len(host))
	case c.BlockSize != h.BlockSize || c.HeadDim != h.HeadDim:
		return fmt.Errorf("kvcache: device blocks of %d×%d, host blocks of %d×%d", c.BlockSize, c.HeadDim, h.BlockSize, h.HeadDim)
	case s.LayerHi-s.LayerLo != c.Layers || s.HeadHi-s.HeadLo != c.KVHeads:
		return fmt.Errorf("kvcache: slice %+v does not match a cache of %d layers × %d KV heads", s, c.Layers, c.KVHeads)
	case s.LayerLo < 0 || s.LayerHi > h.Layers || s.HeadLo < 0 || s.HeadHi > h.KVHeads:
		return fmt.Errorf("kvcache: slice %+v outside the store's %d layers × %d KV heads", s, h.Layers, h.KVHeads)
	}
	for i := range device {
		if device[i] < 0 || device[i] >= c.NumBlocks || host[i] < 0 || host[i] >= h.NumBlocks {
			return fmt.Errorf("kvcache: block pair %d → %d outside %d device and %d host blocks", device[i], host[i], c.NumBlocks, h.NumBlocks)
		}
	}
	return nil
}

// Push copies rank cache c's slice s of device blocks device[i] into host
// blocks host[i] (swap-out) and returns the bytes copied.
func (h *HostStore) Push(c *Cache, s Slice, device, host []int) (int64, error) {
	if err := h.check(c, s, device, host); err != nil {
		return 0, err
	}
	return h.copy(c, s, device, host, true), nil
}

// Pull copies host blocks host[i] into rank cache c's slice s of device
// blocks device[i] (swap-in) and returns the bytes copied. The rank's
// slice may differ from the one that pushed: the store holds every layer
// and head.
func (h *HostStore) Pull(c *Cache, s Slice, device, host []int) (int64, error) {
	if err := h.check(c, s, device, host); err != nil {
		return 0, err
	}
	return h.copy(c, s, device, host, false), nil
}

// copy moves whole head runs: for each block pair and layer of the slice,
// the slice's heads are one run on the device (a block's heads are
// adjacent within a layer there too) and one run in the store.
func (h *HostStore) copy(c *Cache, s Slice, device, host []int, push bool) int64 {
	run := (s.HeadHi - s.HeadLo) * h.BlockSize * h.HeadDim
	for i, db := range device {
		for l := s.LayerLo; l < s.LayerHi; l++ {
			ho := h.Offset(host[i], l, s.HeadLo)
			do := c.offset(db, 0)
			hk, hv := h.k[ho:ho+run], h.v[ho:ho+run]
			dk, dv := c.k[l-s.LayerLo][do:do+run], c.v[l-s.LayerLo][do:do+run]
			if push {
				copy(hk, dk)
				copy(hv, dv)
			} else {
				copy(dk, hk)
				copy(dv, hv)
			}
		}
	}
	return 4 * int64(len(device)) * s.Elems(h.BlockSize, h.HeadDim)
}

// Keys returns the keys of one head of one layer of host block block:
// BlockSize·HeadDim values.
func (h *HostStore) Keys(block, layer, head int) []float32 {
	o := h.Offset(block, layer, head)
	return h.k[o : o+h.BlockSize*h.HeadDim]
}

// Values returns the values, as Keys.
func (h *HostStore) Values(block, layer, head int) []float32 {
	o := h.Offset(block, layer, head)
	return h.v[o : o+h.BlockSize*h.HeadDim]
}
