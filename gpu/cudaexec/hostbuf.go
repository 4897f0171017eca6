package cudaexec

import (
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu/cuda"
)

// hostFloats is a float32 host buffer the device copies logits into. On a
// device it is page-locked memory (cuMemHostAlloc), which the copy engine
// reaches at the host link's rate; the driver stages a copy into pageable
// Go memory through its own buffers at a fraction of that (5.5 GB/s for
// 64 rows of Llama 3's vocabulary on an H200, gearbox calibrate
// 2026-11-26). Without a device (the host tests) or without
// cuMemHostAlloc it is Go memory.
type hostFloats struct {
	pinned unsafe.Pointer // page-locked memory, nil for Go memory
	buf    []float32
}

// get returns n floats of the buffer, reallocating it when it holds fewer;
// what an earlier get returned is invalid after a reallocation. Call
// inside the device's Do; ctx may be nil.
func (b *hostFloats) get(ctx *cuda.Context, n int) ([]float32, error) {
	if n <= cap(b.buf) {
		return b.buf[:n], nil
	}
	if err := b.release(ctx); err != nil {
		return nil, err
	}
	if ctx != nil {
		p, err := ctx.HostAlloc(4 * int64(n))
		if err != nil {
			return nil, err
		}
		if p != nil {
			b.pinned, b.buf = p, unsafe.Slice((*float32)(p), n)
			return b.buf, nil
		}
	}
	b.buf = make([]float32, n)
	return b.buf, nil
}

// release frees the buffer. Call inside the device's Do.
func (b *hostFloats) release(ctx *cuda.Context) error {
	var err error
	if b.pinned != nil {
		err = ctx.HostFree(b.pinned)
	}
	b.pinned, b.buf = nil, nil
	return err
}
