package cudaexec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// queuedOps is the emulated device with copies to it that land only at
// the next sync, as an asynchronous copy from page-locked memory does: an
// uploader that packed a stage before the copy out of it had landed would
// send the new bytes.
type queuedOps struct {
	hostOps
	queue *[]func()
}

func (o queuedOps) toDevice(dst cuda.DevicePtr, src unsafe.Pointer, n int64) error {
	*o.queue = append(*o.queue, func() { copy(o.h.bytes(dst, n), unsafe.Slice((*byte)(src), n)) })
	return nil
}

func (o queuedOps) sync() error {
	for _, f := range *o.queue {
		f()
	}
	*o.queue = (*o.queue)[:0]
	return nil
}

// TestUploaderPacks uploads matrices held in float32, bfloat16 and float16
// (and a vector, and nil parts) into each executor dtype through stages of
// a few bytes, so that chunks cross rows and tensors and the two stages
// alternate many times under copies that land late: the device bytes must
// be tensor.Convert's, part after part.
func TestUploaderPacks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * 3
		}
		return v
	}
	f32 := tensor.NewWeightsF32(vals(3*7), 3, 7)
	parts := []*tensor.Weights{
		f32,
		tensor.Convert(nil, tensor.NewWeightsF32(vals(5*11), 5, 11), tensor.BF16),
		nil,
		tensor.Convert(nil, tensor.NewWeightsF32(vals(2*13), 2, 13), tensor.F16),
		vec(vals(9)),
		f32.Rows(1, 3),
	}
	for _, dt := range []model.DType{model.Float32, model.BFloat16, model.Float16} {
		for _, stage := range []int{4, 12, 36, 1 << 10} {
			t.Run(fmt.Sprintf("%s/stage=%d", dt, stage), func(t *testing.T) {
				h := &hostMemory{}
				var queue []func()
				e := &Executor{dt: dt, ops: queuedOps{hostOps{h, &hostSide{}}, &queue}, allocs: map[cuda.DevicePtr]bool{}, pool: tensor.NewPool(3)}
				defer e.pool.Close()
				u := e.newUploader()
				u.stage = stage
				p := u.put(parts...)
				if err := u.finish(); err != nil {
					t.Fatal(err)
				}
				var want []byte
				for _, w := range parts {
					if w == nil {
						continue
					}
					c := tensor.Convert(nil, w, dt.Tensor())
					if dt == model.Float32 {
						want = append(want, unsafe.Slice((*byte)(unsafe.Pointer(&c.F32()[0])), 4*len(c.F32()))...)
					} else {
						want = append(want, unsafe.Slice((*byte)(unsafe.Pointer(&c.Half()[0])), 2*len(c.Half()))...)
					}
				}
				if u.bytes != int64(len(want)) {
					t.Fatalf("uploader counted %d bytes, want %d", u.bytes, len(want))
				}
				if got := h.bytes(p, int64(len(want))); !bytes.Equal(got, want) {
					t.Fatalf("device bytes differ from tensor.Convert's")
				}
			})
		}
	}
	e := &Executor{dt: model.Float32, ops: hostOps{&hostMemory{}, &hostSide{}}, allocs: map[cuda.DevicePtr]bool{}}
	u := e.newUploader()
	if p := u.put(nil, nil); p != 0 || u.finish() != nil || u.bytes != 0 {
		t.Fatalf("empty put: pointer %#x, %d bytes", p, u.bytes)
	}
}

// BenchmarkUploaderPack is the host half of an upload: packing one 32 MiB
// stage from an 8192×4096 matrix on the uploader's pool, a plain copy when
// the matrix is held in the executor's dtype and a conversion when not.
// It reports the stage bytes written per second (the executor's pool has
// min(GOMAXPROCS, 8) threads).
func BenchmarkUploaderPack(b *testing.B) {
	const n, k = 8192, 4096
	v := make([]float32, n*k)
	for i := range v {
		v[i] = float32(i%1000) / 7
	}
	f32 := tensor.NewWeightsF32(v, n, k)
	bf16 := tensor.Convert(nil, f32, tensor.BF16)
	for _, c := range []struct {
		name string
		w    *tensor.Weights
		dt   model.DType
	}{
		{"bf16-to-bf16", bf16, model.BFloat16},
		{"f32-to-bf16", f32, model.BFloat16},
		{"bf16-to-f16", bf16, model.Float16},
	} {
		b.Run(c.name, func(b *testing.B) {
			pool := tensor.NewPool(min(runtime.GOMAXPROCS(0), 8))
			defer pool.Close()
			elems := uploadStageBytes / c.dt.Size()
			stage := make([]byte, uploadStageBytes)
			b.SetBytes(uploadStageBytes)
			lo := 0
			for b.Loop() {
				packAs(pool, stage, c.dt, c.w, lo, lo+elems)
				lo = (lo + elems) % (n*k - elems)
			}
		})
	}
}
