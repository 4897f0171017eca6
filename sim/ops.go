package sim

import (
	"context"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
)

// costOps prices the rank program (forward.Run) for one rank and one
// micro-batch: every op adds its kernels' roofline cost, every collective
// its alpha-beta time and the bytes package comm would count, to a
// Breakdown. It implements forward.Uniform: the program runs one layer
// standing for the stage's layers, which cost the same.
type costOps struct {
	lc      *LayoutCost
	rs      *rankShape
	ms      *microShape
	b       Breakdown
	kernels int // kernels launched for the micro-batch
	times   int // layers one call stands for
	n, real int // rows of the SP group's all-to-all buffers; this rank's real rows
}

// launchBound is the host time of launching kernels one by one beyond
// gpu, the device's time for them: zero for a decode-only micro-batch
// (the GPU executor replays it as a CUDA graph) or a device without a
// measured LaunchLatency. Launches are asynchronous, so the host only
// adds time when it issues kernels slower than the device runs them.
func (m *CostModel) launchBound(ms *microShape, kernels int, gpu float64) float64 {
	if ms.prefill.Queries == 0 || m.eff.LaunchLatency == 0 {
		return 0
	}
	return max(0, float64(kernels)*m.eff.LaunchLatency-gpu)
}

var _ forward.Uniform = (*costOps)(nil)

func (o *costOps) Repeat(n int) { o.times = n }

func (o *costOps) add(c Component, k kernel) {
	o.b.add(c, k, o.lc.m.eff.KernelLatency, o.times)
	o.kernels += o.times
}

// stream prices a memory-bound kernel over n activation elements read and
// written.
func (o *costOps) stream(c Component, elems int) {
	o.add(c, o.lc.m.streaming(int64(elems)*o.lc.m.actBytes))
}

// quant prices FP8 activation quantization of n elements before a W8A8
// GEMM.
func (o *costOps) quant(elems int) {
	if m := o.lc.m; m.w8a8 {
		o.add(CompQuant, m.streaming(int64(elems)*(m.actBytes+1)))
	}
}

func (o *costOps) gemm(c Component, rows, n, k int) {
	m := o.lc.m
	o.add(c, m.gemm(rows, n, k, m.wgtDType))
}

func (o *costOps) Embed() {
	h := o.lc.cfg.Hidden
	o.b.add(CompEmbed, o.lc.m.streaming(int64(o.real+o.ms.nl)*int64(h)*o.lc.m.actBytes), o.lc.m.eff.KernelLatency, 1)
	o.kernels++
}

func (o *costOps) BeginLayer(context.Context, int) error { return nil }

func (o *costOps) AttnNorm(int) { o.stream(CompNorm, 2*o.ms.nl*o.lc.cfg.Hidden) }

func (o *costOps) QKV(int) {
	h := o.lc.cfg.Hidden
	o.quant(o.ms.nl * h)
	o.gemm(CompQKV, o.ms.nl, o.rs.qs+2*o.rs.ks, h)
}

// Position prices the (q/k norms and) RoPE of the rank's real rows.
func (o *costOps) Position(int) { o.stream(CompNorm, 2*o.real*(o.rs.qs+o.rs.ks)) }

func (o *costOps) PackHeads() { o.stream(CompNorm, 2*o.n*(o.rs.qc+2*o.rs.kc)) }

func (o *costOps) UnpackHeads() { o.stream(CompNorm, 2*o.n*o.rs.qc) }

// CacheWrite prices the keys and values of every token of the micro-batch
// written in the cache's dtype.
func (o *costOps) CacheWrite(int) {
	m := o.lc.m
	o.add(CompCache, m.streaming(int64(o.ms.tokens*2*o.rs.kc)*(m.actBytes+m.kvBytes)))
}

func (o *costOps) Attention(int) {
	m, d := o.lc.m, o.lc.cfg.HeadDim
	if o.ms.prefill.Queries > 0 {
		o.add(CompAttnPrefill, m.attention(o.ms.prefill, o.rs.hq, o.rs.hkv, d, false))
	}
	if o.ms.decode.Queries > 0 {
		o.add(CompAttnDecode, m.attention(o.ms.decode, o.rs.hq, o.rs.hkv, d, true))
	}
}

func (o *costOps) OutProj(int) {
	o.quant(o.ms.nl * o.rs.qs)
	o.gemm(CompOut, o.ms.nl, o.lc.cfg.Hidden, o.rs.qs)
}

func (o *costOps) MLPNorm(int) {
	h := o.lc.cfg.Hidden
	o.stream(CompNorm, 2*o.ms.nl*h)
	o.quant(o.ms.nl * h)
}

// MLPUp prices the fused gate/up GEMM and the SiLU·mul.
func (o *costOps) MLPUp(int) {
	o.gemm(CompMLPUp, o.ms.nl, 2*o.rs.inter, o.lc.cfg.Hidden)
	o.stream(CompNorm, 3*o.ms.nl*o.rs.inter)
}

func (o *costOps) MLPDown(int) {
	o.quant(o.ms.nl * o.rs.inter)
	o.gemm(CompMLPDown, o.ms.nl, o.lc.cfg.Hidden, o.rs.inter)
}

// Residual prices the residual add of the reduced partial sums under TP
// (without TP the GEMM accumulates into the residual).
func (o *costOps) Residual(int, forward.Branch) {
	if o.lc.layout.Plan.TP > 1 {
		o.stream(CompNorm, 3*o.ms.nl*o.lc.cfg.Hidden)
	}
}

// Logits prices the final norm, the LM head's vocabulary slice and, for
// an engine that samples on the host, bringing the logits there.
func (o *costOps) Logits() {
	rows := o.ms.logits[o.rs.coord.SP]
	if rows == 0 {
		return
	}
	m, h, lat := o.lc.m, o.lc.cfg.Hidden, o.lc.m.eff.KernelLatency
	o.b.add(CompLMHead, m.streaming(2*int64(rows*h)*m.actBytes), lat, 1)
	o.b.add(CompLMHead, m.gemm(rows, o.rs.vocab, h, m.Precision.head()), lat, 1)
	o.kernels += 2
	if r := m.eff.LogitsBytesPerS; r > 0 {
		o.b.add(CompLMHead, kernel{memory: float64(rows) * float64(o.rs.vocab) * 4 / r}, 0, 1)
	}
}

// ReduceTP prices a ring all-reduce of the rows' hidden vectors.
func (o *costOps) ReduceTP(context.Context, forward.Branch) error {
	tp := o.lc.layout.Plan.TP
	sent, recv := comm.AllReduceBytes(o.ms.nl*o.lc.cfg.Hidden, tp, o.rs.coord.TP, o.lc.elem)
	o.b.addComm(CompAllReduce, comm.KindAllReduce, sent, recv, o.lc.m.Collective(comm.KindAllReduce, max(sent, recv), tp, o.lc.m.Node.Link), o.times)
	return nil
}

// ExchangeHeads prices Ulysses' all-to-all of q|k|v rows before attention
// or of the chunk's attention output after it.
func (o *costOps) ExchangeHeads(_ context.Context, back bool) error {
	width := o.rs.qc + 2*o.rs.kc
	if back {
		width = o.rs.qc
	}
	for i := range o.lc.eq {
		o.lc.eq[i] = o.ms.nl * width
	}
	sp := o.lc.layout.Plan.SP
	sent, recv := comm.AllToAllBytes(o.lc.eq, o.lc.eq, o.rs.coord.SP, o.lc.elem)
	o.b.addComm(CompAllToAll, comm.KindAllToAll, sent, recv, o.lc.m.Collective(comm.KindAllToAll, max(sent, recv), sp, o.lc.m.Node.Link), o.times)
	return nil
}

// RecvResidual counts the bytes received; waiting on the sender is the
// pipeline's time, not this rank's.
func (o *costOps) RecvResidual(context.Context) error {
	v := int64(o.ms.nl*o.lc.cfg.Hidden) * int64(o.lc.elem)
	o.b.addComm(CompSendRecv, comm.KindRecv, 0, v, 0, 1)
	return nil
}

func (o *costOps) SendResidual(context.Context) error {
	v := int64(o.ms.nl*o.lc.cfg.Hidden) * int64(o.lc.elem)
	o.b.addComm(CompSendRecv, comm.KindSend, v, 0, o.lc.m.Collective(comm.KindSend, v, 2, o.lc.m.Node.Link), 1)
	return nil
}

// GatherLogits prices the TP all-gather of the logits rows' vocabulary
// slices.
func (o *costOps) GatherLogits(context.Context) error {
	rows := o.ms.logits[o.rs.coord.SP]
	if rows == 0 {
		return nil
	}
	for t, v := range o.lc.vocabs {
		o.lc.counts[t] = rows * v
	}
	tp := o.lc.layout.Plan.TP
	sent, recv := comm.AllGatherBytes(o.lc.counts, o.rs.coord.TP, o.lc.elem)
	o.b.addComm(CompAllGather, comm.KindAllGather, sent, recv, o.lc.m.Collective(comm.KindAllGather, max(sent, recv), tp, o.lc.m.Node.Link), 1)
	return nil
}
