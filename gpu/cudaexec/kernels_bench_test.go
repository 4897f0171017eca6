package cudaexec

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
)

// The kernel benchmarks time b.N launches between two device events on one
// stream, after a warm-up, on random (never zero) data, and report the
// bandwidth or arithmetic rate they reach. They skip without a GPU.

// kbench is one benchmark's device, kernels and buffers.
type kbench struct {
	b   *testing.B
	ctx *cuda.Context
	k   *Kernels
	dt  model.DType
	rng *rand.Rand
}

func newKBench(b *testing.B, dt model.DType) *kbench {
	d, err := kernelDevice()
	if err != nil {
		b.Skip("no CUDA GPU: " + firstLine(err.Error()))
	}
	return &kbench{b: b, ctx: d.ctx, k: d.kernels(b, dt), dt: dt, rng: rand.New(rand.NewPCG(1, 2))}
}

func (e *kbench) do(f func() error) {
	e.b.Helper()
	if err := e.ctx.Do(f); err != nil {
		e.b.Fatal(err)
	}
}

// alloc allocates n bytes, freed when the benchmark ends.
func (e *kbench) alloc(n int64) cuda.DevicePtr {
	e.b.Helper()
	var p cuda.DevicePtr
	e.do(func() error {
		var err error
		p, err = e.ctx.Alloc(max(n, 1))
		return err
	})
	e.b.Cleanup(func() { _ = e.ctx.Do(func() error { return e.ctx.Free(p) }) })
	return p
}

// upload allocates and fills a buffer with b.
func (e *kbench) upload(b []byte) cuda.DevicePtr {
	p := e.alloc(int64(len(b)))
	e.do(func() error {
		if err := e.ctx.CopyHtoD(p, unsafePointer(b), int64(len(b))); err != nil {
			return err
		}
		return e.ctx.Synchronize() // the benchmark's stream does not wait for the default one
	})
	return p
}

// random allocates n elements of dt holding random values in [-1, 1): a
// chunk of at most 16 MiB is uploaded and copied over the rest.
func (e *kbench) random(n int64, dt model.DType) cuda.DevicePtr {
	bytes := n * int64(dt.Size())
	p := e.alloc(bytes)
	chunk := min(n, (16<<20)/int64(dt.Size()))
	v := make([]float64, chunk)
	for i := range v {
		for v[i] == 0 {
			v[i] = e.rng.Float64()*2 - 1
		}
	}
	host := encodeAs(dt, v)
	e.do(func() error {
		if err := e.ctx.CopyHtoD(p, unsafePointer(host), int64(len(host))); err != nil {
			return err
		}
		for done := int64(len(host)); done < bytes; {
			m := min(done, bytes-done)
			if err := e.ctx.CopyDtoDAsync(p+cuda.DevicePtr(done), p, m, 0); err != nil {
				return err
			}
			done += m
		}
		return e.ctx.Synchronize()
	})
	return p
}

// time returns the device time of one launch of f, averaged over b.N
// launches after three warm-up launches.
func (e *kbench) time(f func(s cuda.Stream) error) time.Duration {
	e.b.Helper()
	var s cuda.Stream
	var start, end cuda.Event
	e.do(func() error {
		var err error
		if s, err = e.ctx.NewStream(); err != nil {
			return err
		}
		if start, err = e.ctx.NewEvent(); err != nil {
			return err
		}
		if end, err = e.ctx.NewEvent(); err != nil {
			return err
		}
		for range 3 {
			if err := f(s); err != nil {
				return err
			}
		}
		return e.ctx.SyncStream(s)
	})
	defer e.do(func() error {
		return errors.Join(e.ctx.DestroyEvent(start), e.ctx.DestroyEvent(end), e.ctx.DestroyStream(s))
	})
	var el time.Duration
	e.b.ResetTimer()
	e.do(func() error {
		if err := e.ctx.RecordEvent(start, s); err != nil {
			return err
		}
		for i := 0; i < e.b.N; i++ {
			if err := f(s); err != nil {
				return err
			}
		}
		if err := e.ctx.RecordEvent(end, s); err != nil {
			return err
		}
		if err := e.ctx.SyncEvent(end); err != nil {
			return err
		}
		var err error
		el, err = e.ctx.Elapsed(start, end)
		return err
	})
	e.b.StopTimer()
	return el / time.Duration(e.b.N)
}

// copyBandwidth measures a 1 GiB device-to-device copy, counting the bytes
// read and written, in bytes per second.
func (e *kbench) copyBandwidth() float64 {
	const n = 1 << 30
	src, dst := e.alloc(n), e.alloc(n)
	var el time.Duration
	e.do(func() error {
		start, err := e.ctx.NewEvent()
		if err != nil {
			return err
		}
		end, err := e.ctx.NewEvent()
		if err != nil {
			return err
		}
		defer e.ctx.DestroyEvent(start)
		defer e.ctx.DestroyEvent(end)
		if err := e.ctx.CopyDtoDAsync(dst, src, n, 0); err != nil {
			return err
		}
		if err := e.ctx.RecordEvent(start, 0); err != nil {
			return err
		}
		for range 5 {
			if err := e.ctx.CopyDtoDAsync(dst, src, n, 0); err != nil {
				return err
			}
		}
		if err := e.ctx.RecordEvent(end, 0); err != nil {
			return err
		}
		if err := e.ctx.SyncEvent(end); err != nil {
			return err
		}
		el, err = e.ctx.Elapsed(start, end)
		return err
	})
	return 2 * 5 * n / el.Seconds()
}

// pagedBatch uploads block tables for numSeqs sequences of ctxLen cached
// tokens (the last one the query's own) in randomly placed blocks, and
// returns the arguments of Attention with the caches filled with random
// values.
func (e *kbench) pagedBatch(numSeqs, qlen, ctxLen, heads, kvHeads, d, bs int) AttnArgs {
	per := (ctxLen + bs - 1) / bs
	blocks := numSeqs * per
	perm := e.rng.Perm(blocks)
	qStart, seqPos := make([]int, numSeqs+1), make([]int, numSeqs)
	for s := range numSeqs {
		qStart[s+1] = qStart[s] + qlen
		seqPos[s] = ctxLen - qlen
	}
	cache := int64(blocks) * int64(kvHeads*bs*d)
	tokens := numSeqs * qlen
	return AttnArgs{
		Out: e.alloc(int64(tokens * heads * d * e.dt.Size())), Q: e.random(int64(tokens*heads*d), e.dt),
		KCache: e.random(cache, e.dt), VCache: e.random(cache, e.dt),
		BlockTables: e.upload(i32Bytes(perm)), QStart: e.upload(i32Bytes(qStart)), SeqPos: e.upload(i32Bytes(seqPos)),
		NumSeqs: numSeqs, NumTokens: tokens, MaxQLen: qlen, MaxBlocks: per,
		Heads: heads, KVHeads: kvHeads, HeadDim: d, BlockSize: bs,
		Scale:     float32(1 / math.Sqrt(float64(d))),
		Workspace: e.alloc(AttnWorkspaceBytes(numSeqs, heads, d)),
	}
}

// BenchmarkAttentionDecode: 32 sequences of 4,096 cached tokens, 32 query
// heads on 8 KV heads, bf16; GB/s is K and V bytes read per second, %copy
// that against a device-to-device copy.
func BenchmarkAttentionDecode(b *testing.B) {
	for _, d := range []int{128, 64} {
		b.Run(fmt.Sprintf("d%d", d), func(b *testing.B) {
			e := newKBench(b, model.BFloat16)
			const seqs, ctxLen, heads, kvHeads, bs = 32, 4096, 32, 8, 16
			a := e.pagedBatch(seqs, 1, ctxLen, heads, kvHeads, d, bs)
			per := e.time(func(s cuda.Stream) error { return e.k.Attention(s, a) })
			kv := 2 * float64(seqs*ctxLen*kvHeads*d*e.dt.Size())
			bw := kv / per.Seconds()
			b.ReportMetric(bw/1e9, "GB/s")
			b.ReportMetric(100*bw/e.copyBandwidth(), "%copy")
			b.ReportMetric(float64(per.Microseconds()), "us/launch")
		})
	}
}

// BenchmarkAttentionPrefill: one 4,096-token prompt, 32 query heads on 8
// KV heads, d 128 (Llama-3.1-8B) and 64 (Llama-3.2-1B), bf16, on the
// tensor-core kernel and on the SIMT one; TFLOP/s counts 4·heads·d flops
// per (query, key) pair of the causal triangle.
func BenchmarkAttentionPrefill(b *testing.B) {
	for _, d := range []int{128, 64} {
		for _, simt := range []bool{false, true} {
			kernel := "mma"
			if simt {
				kernel = "simt"
			}
			b.Run(fmt.Sprintf("d%d/%s", d, kernel), func(b *testing.B) {
				e := newKBench(b, model.BFloat16)
				e.k.prefillSIMT = simt
				const n, heads, kvHeads, bs = 4096, 32, 8, 16
				a := e.pagedBatch(1, n, n, heads, kvHeads, d, bs)
				per := e.time(func(s cuda.Stream) error { return e.k.Attention(s, a) })
				flops := 4 * float64(heads*d) * float64(n) * float64(n+1) / 2
				b.ReportMetric(flops/per.Seconds()/1e12, "TFLOP/s")
				b.ReportMetric(float64(per.Microseconds()), "us/launch")
			})
		}
	}
}

// BenchmarkAddRMSNorm: 4,096 rows of 2,048, bf16, residual add with bias;
// GB/s counts the residual read and written, delta read and out written.
func BenchmarkAddRMSNorm(b *testing.B) {
	e := newKBench(b, model.BFloat16)
	const n, hidden = 4096, 2048
	resid := e.random(n*hidden, model.Float32)
	delta, bias, w := e.random(n*hidden, e.dt), e.random(hidden, e.dt), e.random(hidden, e.dt)
	out := e.alloc(n * hidden * int64(e.dt.Size()))
	per := e.time(func(s cuda.Stream) error { return e.k.AddRMSNorm(s, out, resid, delta, bias, w, n, hidden, 1e-5) })
	bytes := float64(n*hidden) * float64(4+4+2*e.dt.Size())
	b.ReportMetric(bytes/per.Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(per.Microseconds()), "us/launch")
}

// BenchmarkQKVRope: 4,096 tokens, 32 query heads and 8 KV heads of 64
// (hidden 2,048), bf16, with bias; GB/s counts q/k/v read once and written
// once.
func BenchmarkQKVRope(b *testing.B) {
	e := newKBench(b, model.BFloat16)
	const n, heads, kvHeads, d, bs = 4096, 32, 8, 64, 16
	w := (heads + 2*kvHeads) * d
	cos, sin := ropeTables(n, d)
	pos, slot := make([]int, n), make([]int, n)
	for i := range pos {
		pos[i], slot[i] = i, i
	}
	cache := int64(n * kvHeads * d)
	a := QKVArgs{
		Q: e.alloc(int64(n * heads * d * e.dt.Size())), KCache: e.alloc(cache * int64(e.dt.Size())), VCache: e.alloc(cache * int64(e.dt.Size())),
		QKV: e.random(int64(n*w), e.dt), Bias: e.random(int64(w), e.dt),
		Cos: e.upload(f32Encode(cos)), Sin: e.upload(f32Encode(sin)), Pos: e.upload(i32Bytes(pos)), Slot: e.upload(i32Bytes(slot)),
		N: n, Heads: heads, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, Eps: 1e-6,
	}
	per := e.time(func(s cuda.Stream) error { return e.k.QKVRope(s, a) })
	bytes := 2 * float64(n*w*e.dt.Size())
	b.ReportMetric(bytes/per.Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(per.Microseconds()), "us/launch")
}
