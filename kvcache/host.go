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
// The store holds its layout's DType, which must be the ranks' caches':
// pushes and pulls move the stored elements (16-bit patterns of a BF16 or
// F16 cache) unchanged, so a block comes back bit for bit as it left.
//
// Ranks may push and pull disjoint parts (other blocks, layers or heads)
// concurrently; a part must not be read while it is written.
type HostStore struct {
	Layout           // Layers and KVHeads are the whole model's
	k, v   []float32 // F32: NumBlocks·Layers·KVHeads·BlockSize·HeadDim
	hk, hv []uint16  // BF16 or F16, likewise
}

// NewHostStore allocates a host store of l.NumBlocks blocks of l.DType.
func NewHostStore(l Layout) (*HostStore, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	n := l.NumBlocks * l.Layers * l.KVHeads * l.BlockSize * l.HeadDim
	if l.Half() {
		return &HostStore{Layout: l, hk: make([]uint16, n), hv: make([]uint16, n)}, nil
	}
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

// Elems is the number of elements (keys and values together) one block of
// the slice holds.
func (s Slice) Elems(blockSize, headDim int) int64 {
	return 2 * int64(s.LayerHi-s.LayerLo) * int64(s.HeadHi-s.HeadLo) * int64(blockSize) * int64(headDim)
}

// check validates a rank's cache c, holding slice s, against the store.
func (h *HostStore) check(c *Cache, s Slice, device, host []int) error {
	switch {
	case len(device) != len(host):
		return fmt.Errorf("kvcache: %d device blocks for %d host blocks", len(device), len(host))
	case c.DType != h.DType:
		return fmt.Errorf("kvcache: a cache of %s keys and values and a host store of %s: the tiers must hold one dtype", c.DType, h.DType)
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
// blocks host[i] (swap-out) and returns the bytes copied. c must hold the
// store's DType.
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
			if h.Half() {
				moveRun(h.hk[ho:ho+run], c.hk[l-s.LayerLo][do:do+run], push)
				moveRun(h.hv[ho:ho+run], c.hv[l-s.LayerLo][do:do+run], push)
			} else {
				moveRun(h.k[ho:ho+run], c.k[l-s.LayerLo][do:do+run], push)
				moveRun(h.v[ho:ho+run], c.v[l-s.LayerLo][do:do+run], push)
			}
		}
	}
	return int64(h.ElemBytes()) * int64(len(device)) * s.Elems(h.BlockSize, h.HeadDim)
}

// moveRun copies dev into host when push is set, host into dev otherwise.
func moveRun[E float32 | uint16](host, dev []E, push bool) {
	if push {
		copy(host, dev)
	} else {
		copy(dev, host)
	}
}

// Keys returns the keys of one head of one layer of host block block of
// an F32 store: BlockSize·HeadDim values. It panics on a 16-bit store.
func (h *HostStore) Keys(block, layer, head int) []float32 {
	h.want(false, "Keys")
	o := h.Offset(block, layer, head)
	return h.k[o : o+h.BlockSize*h.HeadDim]
}

// Values returns the values of an F32 store, as Keys.
func (h *HostStore) Values(block, layer, head int) []float32 {
	h.want(false, "Values")
	o := h.Offset(block, layer, head)
	return h.v[o : o+h.BlockSize*h.HeadDim]
}

// HalfKeys returns the stored BF16 or F16 keys of one head of one layer
// of host block block of a 16-bit store. It panics on an F32 store.
func (h *HostStore) HalfKeys(block, layer, head int) []uint16 {
	h.want(true, "HalfKeys")
	o := h.Offset(block, layer, head)
	return h.hk[o : o+h.BlockSize*h.HeadDim]
}

// HalfValues returns the stored values of a 16-bit store, as HalfKeys.
func (h *HostStore) HalfValues(block, layer, head int) []uint16 {
	h.want(true, "HalfValues")
	o := h.Offset(block, layer, head)
	return h.hv[o : o+h.BlockSize*h.HeadDim]
}

// want panics unless the store holds 16-bit elements (half) or float32
// ones (!half).
func (h *HostStore) want(half bool, method string) {
	if h.Half() != half {
		panic(fmt.Sprintf("kvcache: %s of a host store of %s keys and values", method, h.DType))
	}
}
