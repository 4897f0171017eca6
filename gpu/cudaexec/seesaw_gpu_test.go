package cudaexec

import (
	"context"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// TestSeesawSwapGPU runs seesawSwap on the device — pp=2 ↔ tp=2 and pp=4
// ↔ tp=4, float32 (foundation tolerance and the oracle's greedy tokens)
// and bfloat16 (relative L2 ≤ 8u, teacher-forced) — with CUDA graphs on:
// captured at start under the prefill placement, dropped by every
// transition and captured again by the first decode under the new one.
// The KV must come through swaps and transitions byte for byte in both
// dtypes.
func TestSeesawSwapGPU(t *testing.T) {
	requireGPU(t)
	m, ref := loadFixture(t, seesawSpec(160))
	for _, dt := range []model.DType{model.Float32, model.BFloat16} {
		for _, pair := range seesawPairs {
			t.Run(dt.String()+"/"+pair[0]+"→"+pair[1], func(t *testing.T) {
				pol := seesawPlacements(t, pair)
				x := newExec(t, m.Config, m.Weights, Options{Placements: pol.Placements(), DType: dt, BlockSize: 4,
					NumBlocks: seesawDevBlocks, HostBlocks: seesawHostBlocks, MaxNumSeqs: 4})
				if err := x.CaptureGraphs(); err != nil {
					t.Fatal(err)
				}
				c := &checker{t: t, dt: dt}
				seesawSwap(t, x, ref, pol.Prefill, pol.Decode, c)
				// The last decode (3 sequences, bucket 4) ran under the prefill
				// placement after the transition back: its graph was captured
				// then, and the decode placement's graphs are gone.
				_, back := x.graphs[graphKey{placement: pol.Prefill.Name, bucket: 4}]
				_, stale := x.graphs[graphKey{placement: pol.Decode.Name, bucket: 4}]
				if !back || stale {
					t.Fatalf("graphs after the transitions: %d (prefill placement's bucket 4 %v, decode placement's %v)", len(x.graphs), back, stale)
				}
				t.Logf("%d logits rows checked, worst relative L2 error %.3g", c.checks, c.worst)
			})
		}
	}
}

// TestSeesawEngineGPU serves through the engine under the Seesaw policy on
// the device in float32 with CUDA graphs, pp=2 → tp=2 and pp=4 → tp=4
// (seesawEngine: one rank's and the oracle's greedy tokens, several phase
// cycles, every swapped byte back).
func TestSeesawEngineGPU(t *testing.T) {
	requireGPU(t)
	m, ref := loadFixture(t, seesawSpec(170))
	single := newExec(t, m.Config, m.Weights, Options{DType: model.Float32, BlockSize: 4, NumBlocks: 64, MaxNumSeqs: 16, MaxNumTokens: 512})
	for _, pair := range seesawPairs {
		t.Run(pair[0]+"→"+pair[1], func(t *testing.T) {
			pol := seesawPlacements(t, pair)
			x := newExec(t, m.Config, m.Weights, Options{Placements: pol.Placements(), DType: model.Float32, BlockSize: 4,
				NumBlocks: 16, HostBlocks: 8, MaxNumSeqs: 16, MaxNumTokens: 512})
			if err := x.CaptureGraphs(); err != nil {
				t.Fatal(err)
			}
			seesawEngine(t, x, single, m, ref, pol)
		})
	}
}

// seesawBench is the 1B model (GEARBOX_BENCH_MODEL_1B) in bfloat16 under
// pp=2 and tp=2, with a KV pool and host store of 1024 blocks of 16
// tokens, its decode steps launched one kernel at a time when eager, else
// replayed from CUDA graphs.
func seesawBench(b *testing.B, eager bool) (*Executor, []parallel.Placement) {
	m := benchModel(b, "GEARBOX_BENCH_MODEL_1B")
	pl := []parallel.Placement{parallel.Standard(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}), parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})}
	return newExec(b, m.Config, m.Weights, Options{Placements: pl, DType: model.BFloat16, NumBlocks: 1024, HostBlocks: 1024,
		MaxNumSeqs: 8, EnforceEager: eager}), pl
}

// BenchmarkSeesawSwap swaps 512 blocks (8192 tokens) out under pp=2 and
// back in under tp=2 per op; it reports host↔device GB/s (bytes both ways
// over the time).
func BenchmarkSeesawSwap(b *testing.B) {
	x, pl := seesawBench(b, true)
	ctx := context.Background()
	dev, host := make([]int, 512), make([]int, 512)
	for i := range dev {
		dev[i], host[i] = i, 1023-i
	}
	swaps := []forward.Swap{{Device: dev, Host: host}}
	var n int64
	for b.Loop() {
		b.StopTimer() // only the swaps are timed
		if _, err := x.Transition(ctx, pl[0]); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		out, err := x.SwapOut(ctx, swaps)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := x.Transition(ctx, pl[1]); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		in, err := x.SwapIn(ctx, swaps)
		if err != nil {
			b.Fatal(err)
		}
		n += out + in
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkSeesawTransition is one transition per op, alternating pp=2
// and tp=2: the weights re-sharded from the host copy and the 1024-block
// KV pool re-laid out. It reports the weight bytes uploaded per second.
func BenchmarkSeesawTransition(b *testing.B) {
	x, pl := seesawBench(b, true)
	ctx := context.Background()
	var w int64
	i := 0
	for b.Loop() {
		i++
		st, err := x.Transition(ctx, pl[i%2])
		if err != nil {
			b.Fatal(err)
		}
		w += st.WeightBytes
	}
	b.ReportMetric(float64(w)/b.Elapsed().Seconds()/1e9, "weightGB/s")
}

// BenchmarkSeesawSwapInBesideDecode measures Seesaw's prefetch overlap on
// the device: decode steps of 8 sequences with 512 tokens of context
// under tp=2 (prefilled under pp=2, then a transition), launched one
// kernel at a time (eager) and replayed from CUDA graphs (graphs), alone,
// while swap-ins of 256 other blocks (4096 tokens) run back to back
// beside them on the side stream, and while only the swaps' host-to-
// device copies do. It reports ms/step and, beside, the host-to-device
// GB/s reached meanwhile.
func BenchmarkSeesawSwapInBesideDecode(b *testing.B) {
	for _, eager := range []bool{true, false} {
		b.Run(map[bool]string{true: "eager", false: "graphs"}[eager], func(b *testing.B) {
			x, pl := seesawBench(b, eager)
			besideDecode(b, x, pl)
		})
	}
}

// besideDecode is BenchmarkSeesawSwapInBesideDecode on one executor.
func besideDecode(b *testing.B, x *Executor, pl []parallel.Placement) {
	ctx := context.Background()
	dec := prefillContext(b, x, 8, 512)
	if _, err := x.Transition(ctx, pl[1]); err != nil {
		b.Fatal(err)
	}
	dev, host := make([]int, 256), make([]int, 256)
	for i := range dev {
		dev[i], host[i] = 768+i, i
	}
	swaps := []forward.Swap{{Device: dev, Host: host}}
	step := func(b *testing.B) {
		if _, err := x.StepGreedy(ctx, dec, pl[1]); err != nil {
			b.Fatal(err)
		}
	}
	for range 3 {
		step(b)
	}
	// Beside the steps: nothing, whole swap-ins, or only their host-to-
	// device copies (the stage's 4 MiB pieces on the side stream, no
	// packing, no device copies): where the copies alone slow the steps
	// as much, the copy engine or the link is what they share.
	h2d := func() (int64, error) {
		if err := x.do(func() error {
			if err := x.allocSwapStage(); err != nil {
				return err
			}
			if err := x.copyStage(x.stageBytes, true); err != nil {
				return err
			}
			return x.ops.sideMark()
		}); err != nil {
			return 0, err
		}
		return x.stageBytes, x.sideWait()
	}
	for _, mode := range []string{"alone", "beside-swap-in", "beside-copies"} {
		b.Run(mode, func(b *testing.B) {
			stop, done := make(chan struct{}), make(chan int64, 1)
			if mode != "alone" {
				go func() {
					var n int64
					defer func() { done <- n }()
					for {
						select {
						case <-stop:
							return
						default:
						}
						var m int64
						var err error
						if mode == "beside-swap-in" {
							m, err = x.SwapIn(ctx, swaps)
						} else {
							m, err = h2d()
						}
						if err != nil {
							b.Error(err)
							return
						}
						n += m
					}
				}()
			}
			start := time.Now()
			for b.Loop() {
				step(b)
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Microseconds())/1e3/float64(b.N), "ms/step")
			if mode != "alone" {
				close(stop)
				n := <-done // the copies in flight end first
				b.ReportMetric(float64(n)/time.Since(start).Seconds()/1e9, "host-to-device-GB/s")
			}
		})
	}
}
