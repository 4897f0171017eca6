package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// Runner runs the forward pass of a Llama-family model on the CPU, one
// flattened varlen batch per call, against a paged KV cache it owns. It is
// not safe for concurrent use.
type Runner struct {
	cfg     *model.Config
	w       *model.Weights
	cache   *kvcache.Cache
	pool    *tensor.Pool
	invFreq []float64
	st      runState
}

// RunnerOptions size the runner's KV cache and pick its thread pool.
type RunnerOptions struct {
	BlockSize int          // KV block size in tokens; default 16
	NumBlocks int          // KV blocks; default enough for one full context
	Pool      *tensor.Pool // nil runs kernels on the calling goroutine
}

// runState holds the per-step scratch buffers, grown to the largest batch
// seen so the forward pass allocates nothing in steady state.
type runState struct {
	x, xn    []float32 // [T, hidden] residual stream and its normalized copy
	q, attn  []float32 // [T, heads·head_dim]
	k, v     []float32 // [T, kv_heads·head_dim]
	gate, up []float32 // [T, intermediate]
	cos, sin []float32 // [T, head_dim/2]
	tokSeq   []int     // [T] sequence index of each token
	tokPos   []int     // [T] position of each token
	rows     []int     // [L] token index of each logits row
	hl       []float32 // [L, hidden]
	logits   []float32 // [L, vocab]
}

// NewRunner builds a runner for a loaded model.
func NewRunner(cfg *model.Config, w *model.Weights, opts RunnerOptions) (*Runner, error) {
	if opts.BlockSize == 0 {
		opts.BlockSize = 16
	}
	if opts.NumBlocks == 0 {
		opts.NumBlocks = (cfg.MaxPositions + opts.BlockSize - 1) / opts.BlockSize
	}
	cache, err := kvcache.New(kvcache.Layout{
		Layers: cfg.Layers, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim,
		BlockSize: opts.BlockSize, NumBlocks: opts.NumBlocks,
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return &Runner{cfg: cfg, w: w, cache: cache, pool: opts.Pool, invFreq: cfg.InvFreq()}, nil
}

// Layout is the runner's KV cache layout.
func (r *Runner) Layout() kvcache.Layout { return r.cache.Layout }

// Forward runs one step and returns the requested logits, [NumLogits, vocab]
// in batch order. The returned slice is owned by the runner and valid until
// the next call. The KV of every token in the batch is written to the cache.
func (r *Runner) Forward(ctx context.Context, b *Batch) ([]float32, error) {
	c := r.cfg
	if err := b.validate(c.Vocab, c.MaxPositions, r.cache.BlockSize, r.cache.NumBlocks); err != nil {
		return nil, err
	}
	r.prepare(b)
	st := &r.st
	h := c.Hidden
	t := 0
	for _, s := range b.Seqs {
		for _, id := range s.Tokens {
			copy(st.x[t*h:(t+1)*h], r.w.Embed[id*h:(id+1)*h])
			t++
		}
	}
	for l := range r.w.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.layer(l, b)
	}
	return r.logits(), nil
}

// prepare sizes the scratch buffers and fills the per-token tables.
func (r *Runner) prepare(b *Batch) {
	c, st := r.cfg, &r.st
	T, L := b.NumTokens(), b.NumLogits()
	grow(&st.x, T*c.Hidden)
	grow(&st.xn, T*c.Hidden)
	grow(&st.q, T*c.QDim())
	grow(&st.attn, T*c.QDim())
	grow(&st.k, T*c.KVDim())
	grow(&st.v, T*c.KVDim())
	grow(&st.gate, T*c.Intermediate)
	grow(&st.up, T*c.Intermediate)
	grow(&st.cos, T*c.HeadDim/2)
	grow(&st.sin, T*c.HeadDim/2)
	grow(&st.hl, L*c.Hidden)
	grow(&st.logits, L*c.Vocab)
	st.tokSeq, st.tokPos, st.rows = st.tokSeq[:0], st.tokPos[:0], st.rows[:0]
	for i, s := range b.Seqs {
		for j := range s.Tokens {
			if j >= len(s.Tokens)-s.NumLogits {
				st.rows = append(st.rows, len(st.tokSeq))
			}
			st.tokSeq = append(st.tokSeq, i)
			st.tokPos = append(st.tokPos, s.Pos+j)
		}
	}
	half := c.HeadDim / 2
	for t, p := range st.tokPos {
		for i, f := range r.invFreq {
			s, co := math.Sincos(float64(p) * f)
			st.cos[t*half+i], st.sin[t*half+i] = float32(co), float32(s)
		}
	}
}

func grow(buf *[]float32, n int) {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	*buf = (*buf)[:n]
}

// layer runs decoder layer l on the residual stream st.x in place.
func (r *Runner) layer(l int, b *Batch) {
	c, st, w := r.cfg, &r.st, &r.w.Layers[l]
	T := len(st.tokPos)
	h, qd, kvd, inter := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	eps := float32(c.RMSNormEps)

	r.rmsNormRows(st.xn, st.x, w.AttnNorm, T, eps)
	tensor.MatMul(r.pool, st.q, st.xn, w.WQ, T, h, qd)
	tensor.MatMul(r.pool, st.k, st.xn, w.WK, T, h, kvd)
	tensor.MatMul(r.pool, st.v, st.xn, w.WV, T, h, kvd)
	r.pool.Run(T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			q, k, v := st.q[t*qd:(t+1)*qd], st.k[t*kvd:(t+1)*kvd], st.v[t*kvd:(t+1)*kvd]
			if w.BQ != nil {
				tensor.Add(q, w.BQ)
				tensor.Add(k, w.BK)
				tensor.Add(v, w.BV)
			}
			r.positionHeads(q, w.QNorm, t, eps)
			r.positionHeads(k, w.KNorm, t, eps)
			seq := &b.Seqs[st.tokSeq[t]]
			r.cache.Put(l, seq.Blocks, st.tokPos[t], k, v)
		}
	})
	r.attention(l, b)
	tensor.MatMulAcc(r.pool, st.x, st.attn, w.WO, T, qd, h)
	if w.BO != nil {
		addRows(st.x, w.BO, T)
	}

	r.rmsNormRows(st.xn, st.x, w.MLPNorm, T, eps)
	tensor.MatMul(r.pool, st.gate, st.xn, w.WGate, T, h, inter)
	tensor.MatMul(r.pool, st.up, st.xn, w.WUp, T, h, inter)
	if w.BGate != nil {
		addRows(st.gate, w.BGate, T)
		addRows(st.up, w.BUp, T)
	}
	r.pool.Run(T, func(lo, hi int) {
		tensor.SiLUMul(st.gate[lo*inter:hi*inter], st.gate[lo*inter:hi*inter], st.up[lo*inter:hi*inter])
	})
	tensor.MatMulAcc(r.pool, st.x, st.gate, w.WDown, T, inter, h)
	if w.BDown != nil {
		addRows(st.x, w.BDown, T)
	}
}

// positionHeads applies the optional per-head RMSNorm (qwen3) and RoPE in
// the Hugging Face rotate_half layout to every head of one token's q or k.
func (r *Runner) positionHeads(x, norm []float32, t int, eps float32) {
	d := r.cfg.HeadDim
	half := d / 2
	cos, sin := r.st.cos[t*half:(t+1)*half], r.st.sin[t*half:(t+1)*half]
	for off := 0; off < len(x); off += d {
		head := x[off : off+d]
		if norm != nil {
			tensor.RMSNorm(head, head, norm, eps)
		}
		x1, x2 := head[:half], head[half:]
		for i := range x1 {
			a, b := x1[i], x2[i]
			x1[i] = a*cos[i] - b*sin[i]
			x2[i] = b*cos[i] + a*sin[i]
		}
	}
}

func (r *Runner) rmsNormRows(out, x, w []float32, rows int, eps float32) {
	h := len(w)
	r.pool.Run(rows, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			tensor.RMSNorm(out[t*h:(t+1)*h], x[t*h:(t+1)*h], w, eps)
		}
	})
}

func addRows(x, bias []float32, rows int) {
	n := len(bias)
	for t := 0; t < rows; t++ {
		tensor.Add(x[t*n:(t+1)*n], bias)
	}
}

// logits applies the final norm to the rows that want logits and the LM head.
func (r *Runner) logits() []float32 {
	c, st := r.cfg, &r.st
	h, L := c.Hidden, len(st.rows)
	if L == 0 {
		return st.logits[:0]
	}
	for i, t := range st.rows {
		tensor.RMSNorm(st.hl[i*h:(i+1)*h], st.x[t*h:(t+1)*h], r.w.Norm, float32(c.RMSNormEps))
	}
	tensor.MatMul(r.pool, st.logits, st.hl, r.w.LMHead, L, h, c.Vocab)
	return st.logits
}
