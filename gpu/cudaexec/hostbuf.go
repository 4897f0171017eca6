package cudaexec

import (
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu/cuda"
)

// hostBuf is a host buffer the device copies to and from: the step's
// logits, a rank's logits slice, Seesaw's swap stage. On a device it is
// page-locked memory (cuMemHostAlloc), which the copy engine reaches at
// the host link's rate; the driver stages a copy into pageable Go memory
// through its own buffers at a fraction of that (5.5 GB/s for 64 rows of
// Llama 3's vocabulary on an H200, gearbox calibrate 2026-11-26). Without
// a device (the host tests) or without cuMemHostAlloc it is Go memory.
type hostBuf[T float32 | byte] struct {
	pinned unsafe.Pointer // page-locked memory, nil for Go memory
	buf    []T
}

// get returns n elements of the buffer, reallocating it when it holds
// fewer; what an earlier get returned is invalid after a reallocation.
// Call inside the device's Do; ctx may be nil.
func (b *hostBuf[T]) get(ctx *cuda.Context, n int) ([]T, error) {
	if n <= cap(b.buf) {
		return b.buf[:n], nil
	}
	if err := b.release(ctx); err != nil {
		return nil, err
	}
	if ctx != nil {
		var zero T
		p, err := ctx.HostAlloc(int64(n) * int64(unsafe.Sizeof(zero)))
		if err != nil {
			return nil, err
		}
		if p != nil {
			b.pinned, b.buf = p, unsafe.Slice((*T)(p), n)
			return b.buf, nil
		}
	}
	b.buf = make([]T, n)
	return b.buf, nil
}

// release frees the buffer. Call inside the device's Do.
func (b *hostBuf[T]) release(ctx *cuda.Context) error {
	var err error
	if b.pinned != nil {
		err = ctx.HostFree(b.pinned)
	}
	b.pinned, b.buf = nil, nil
	return err
}
