package calibrate

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gearboxlm/gearbox/sim"
)

// WriteProfile prints a profile as a short table: the scalar
// measurements, the GEMM curve sim.Profile.GPU fits to the points, and
// the points by weight shape (rows) and tokens M (columns), GFLOP/s.
func WriteProfile(w io.Writer, p *sim.Profile) error {
	g, err := p.GPU()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	row := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-28s %s\n", label, fmt.Sprintf(format, args...))
	}
	row("processor", "%s, %d kernel threads", p.Name, p.Threads)
	row("memory", "%.1f GiB", float64(p.MemoryBytes)/(1<<30))
	row("last-level cache", "%.0f MiB", p.L2Bytes/(1<<20))
	row("STREAM copy", "%.1f GB/s", p.MemBytesPerS/1e9)
	row("GEMM curve (fitted)", "%.1f GFLOP/s · s(m)·s(n)·s(k), s(x) = x/(x+%.1f)", g.BF16FLOPS/2/1e9, g.Eff.GEMMHalf)
	row("attention", "%.1f GFLOP/s", p.AttentionGFLOPS)
	row("collectives (2 ranks)", "%.2f µs per step + bytes at %.1f GB/s", p.Link.HopS*1e6, p.Link.BytesPerS/1e9)
	row("kernel latency", "%.2f µs", p.KernelLatencyS*1e6)
	row("engine step overhead", "%.1f µs", p.StepOverheadS*1e6)

	var ms []int
	var nks [][2]int
	rate := map[[3]int]float64{}
	for _, pt := range p.GEMM {
		if !slices.Contains(ms, pt.M) {
			ms = append(ms, pt.M)
		}
		if nk := [2]int{pt.N, pt.K}; !slices.Contains(nks, nk) {
			nks = append(nks, nk)
		}
		rate[[3]int{pt.M, pt.N, pt.K}] = pt.GFLOPS
	}
	slices.Sort(ms)
	fmt.Fprintf(&b, "\nGEMM GFLOP/s by weight N×K (rows) and tokens M (columns):\n%-11s", "N×K")
	for _, m := range ms {
		fmt.Fprintf(&b, " %6d", m)
	}
	b.WriteByte('\n')
	for _, nk := range nks {
		fmt.Fprintf(&b, "%-11s", fmt.Sprintf("%d×%d", nk[0], nk[1]))
		for _, m := range ms {
			if v, ok := rate[[3]int{m, nk[0], nk[1]}]; ok {
				fmt.Fprintf(&b, " %6.1f", v)
			} else {
				fmt.Fprintf(&b, " %6s", "")
			}
		}
		b.WriteByte('\n')
	}
	_, err = w.Write(b.Bytes())
	return err
}

// WriteStepTable prints the step-time sweep as a Markdown table, then
// the median absolute error of each plan and of all cases.
func WriteStepTable(w io.Writer, results []StepResult) error {
	var b bytes.Buffer
	b.WriteString("| plan | step | measured ms | predicted ms | error |\n|---|---|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %+.1f%% |\n", r.Plan, r.StepCase, r.Measured*1e3, r.Predicted*1e3, 100*r.Error())
	}
	b.WriteString("\n| plan | cases | median absolute error | largest |\n|---|---:|---:|---:|\n")
	for _, g := range ByPlan(results) {
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %.1f%% |\n", g[0].Plan, len(g), 100*MedianAbsError(g), 100*maxAbsError(g))
	}
	fmt.Fprintf(&b, "| all | %d | %.1f%% | %.1f%% |\n", len(results), 100*MedianAbsError(results), 100*maxAbsError(results))
	_, err := w.Write(b.Bytes())
	return err
}

func maxAbsError(results []StepResult) float64 {
	m := 0.0
	for _, r := range results {
		m = max(m, math.Abs(r.Error()))
	}
	return m
}

// WriteServeTable prints the end-to-end comparison as a Markdown table:
// median TTFT and output throughput (the validated pair), then median
// TPOT and the run's duration for context.
func WriteServeTable(w io.Writer, r *ServeResult) error {
	var b bytes.Buffer
	m, p := r.Measured, r.Predicted
	rel := func(pred, meas float64) string { return fmt.Sprintf("%+.1f%%", 100*(pred-meas)/meas) }
	b.WriteString("| metric | bench serve against gearbox serve | sim.Run | error |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| TTFT p50 (ms) | %.1f | %.1f | %s |\n", m.TTFT.Median, p.TTFT.Median, rel(p.TTFT.Median, m.TTFT.Median))
	fmt.Fprintf(&b, "| output throughput (tok/s) | %.1f | %.1f | %s |\n", m.OutputThroughput, p.OutputThroughput, rel(p.OutputThroughput, m.OutputThroughput))
	fmt.Fprintf(&b, "| TPOT p50 (ms) | %.1f | %.1f | %s |\n", m.TPOT.Median, p.TPOT.Median, rel(p.TPOT.Median, m.TPOT.Median))
	fmt.Fprintf(&b, "| duration (s) | %.2f | %.2f | %s |\n", m.Duration.Seconds(), p.Duration.Seconds(), rel(p.Duration.Seconds(), m.Duration.Seconds()))
	_, err := w.Write(b.Bytes())
	return err
}
