package cudaexec

import (
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// uploader writes host tensors into new device tensors in the executor's
// dtype: the weights at load and on every Seesaw transition (spec R3:
// re-sharded from the host copy). Each chunk of a tensor is packed on the
// host, in the executor's dtype, into one of two page-locked stages — a
// plain copy of the stored values when the tensor is held in that dtype
// (a checkpoint's memory-mapped BF16 under a BF16 executor), else
// narrowed or widened on the way (rounded to nearest, ties to even) — by
// the executor's pool, and its copy to the device queued on the
// executor's stream; the next chunk is packed into the other stage while
// the copy engine moves this one. An upload so runs at the slower of the
// host's packing and the host link, moving each weight byte across the
// link once. It counts the device bytes written and keeps the first
// error; call put and finish on the device thread.
type uploader struct {
	e     *Executor
	stage int // bytes of each stage, uploadStageBytes
	next  int // the stage the next chunk is packed into
	bytes int64
	err   error
}

// uploadStageBytes is the size of each of the uploader's two stages.
const uploadStageBytes = 32 << 20

// newUploader starts an upload; finish ends it.
func (e *Executor) newUploader() *uploader {
	return &uploader{e: e, stage: uploadStageBytes}
}

// put writes parts (nil ones skipped) back to back into one new device
// tensor; 0 when they are all empty or an earlier put failed.
func (u *uploader) put(parts ...*tensor.Weights) cuda.DevicePtr {
	n := 0
	for _, p := range parts {
		if p != nil {
			rows, cols := p.Shape()
			n += rows * cols
		}
	}
	if n == 0 || u.err != nil {
		return 0
	}
	e := u.e
	elem := e.dt.Size()
	dst, err := e.alloc(int64(n) * int64(elem))
	if err != nil {
		u.err = err
		return 0
	}
	u.bytes += int64(n) * int64(elem)
	chunk := u.stage / elem
	at := dst
	for _, p := range parts {
		if p == nil {
			continue
		}
		rows, cols := p.Shape()
		for lo := 0; lo < rows*cols && u.err == nil; lo += chunk {
			hi := min(rows*cols, lo+chunk)
			u.err = u.chunk(at, p, lo, hi)
			at += cuda.DevicePtr((hi - lo) * elem)
		}
	}
	return dst
}

// chunk packs elements [lo, hi) of w (row-major) into the next stage and
// queues their copy to dst. The copy queued before it, from the other
// stage, is the only one that may still be in flight, so the stage is
// free; it is waited for before this one is queued, so that the stage
// packed next is free too.
func (u *uploader) chunk(dst cuda.DevicePtr, w *tensor.Weights, lo, hi int) error {
	e := u.e
	stage, err := e.upStages[u.next].get(e.ctx, u.stage)
	if err != nil {
		return err
	}
	n := (hi - lo) * e.dt.Size()
	packAs(e.pool, stage[:n], e.dt, w, lo, hi)
	if err := e.ops.sync(); err != nil {
		return err
	}
	if err := e.ops.toDevice(dst, unsafe.Pointer(&stage[0]), int64(n)); err != nil {
		return err
	}
	u.next ^= 1
	return nil
}

// finish waits for the last copy; it returns the upload's first error.
func (u *uploader) finish() error {
	if u.err != nil {
		return u.err
	}
	return u.e.ops.sync()
}

// packAs writes elements [lo, hi) of w (row-major) into dst as dt, on
// the pool's goroutines (nil: the caller's).
func packAs(p *tensor.Pool, dst []byte, dt model.DType, w *tensor.Weights, lo, hi int) {
	const grain = 1 << 16 // elements per piece of work
	pieces := (hi - lo + grain - 1) / grain
	p.Run(pieces, func(a, b int) {
		packRange(dst[a*grain*dt.Size():], dt, w, lo+a*grain, min(hi, lo+b*grain))
	})
}

// packRange writes elements [lo, hi) of w into the start of dst as dt.
func packRange(dst []byte, dt model.DType, w *tensor.Weights, lo, hi int) {
	n := hi - lo
	if w.DType() == dt.Tensor() {
		if dt == model.Float32 {
			copy(dst[:4*n], unsafe.Slice((*byte)(unsafe.Pointer(&w.F32()[lo])), 4*n))
		} else {
			copy(dst[:2*n], unsafe.Slice((*byte)(unsafe.Pointer(&w.Half()[lo])), 2*n))
		}
		return
	}
	_, cols := w.Shape()
	var row []float32
	for i := lo; i < hi; {
		j, c0 := i/cols, i%cols
		c1 := min(cols, c0+hi-i)
		var vals []float32
		if f := w.F32(); f != nil {
			vals = f[i : i+c1-c0]
		} else {
			if cap(row) < c1-c0 {
				row = make([]float32, cols)
			}
			vals = row[:c1-c0]
			w.Segment(j, c0, vals)
		}
		out := dst[(i-lo)*dt.Size():]
		switch dt {
		case model.Float32:
			copy(unsafe.Slice((*float32)(unsafe.Pointer(&out[0])), len(vals)), vals)
		case model.BFloat16:
			tensor.EncodeBF16(unsafe.Slice((*uint16)(unsafe.Pointer(&out[0])), len(vals)), vals)
		default:
			tensor.EncodeF16(unsafe.Slice((*uint16)(unsafe.Pointer(&out[0])), len(vals)), vals)
		}
		i += c1 - c0
	}
}
