package calibrate

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/gearboxlm/gearbox/sim"
)

// WriteProfile prints a profile as a short table: the scalar
// measurements, the GEMM curves sim.Profile.GPU fits to the points, and
// the points by weight shape (rows) and tokens M (columns), GFLOP/s for
// a CPU and TFLOP/s for a GPU, one table per weight format.
func WriteProfile(w io.Writer, p *sim.Profile) error {
	g, err := p.GPU()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	row := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-28s %s\n", label, fmt.Sprintf(format, args...))
	}
	unit, scale := "GFLOP/s", 1.0
	if p.IsGPU() {
		unit, scale = "TFLOP/s", 1e-3
		row("device", "%s, bfloat16", p.Name)
		row("memory", "%.1f GiB", float64(p.MemoryBytes)/(1<<30))
		row("device copy", "%.1f GB/s", p.MemBytesPerS/1e9)
		row("GEMM curve (fitted)", "%.1f TFLOP/s · s(m)·s(n)·s(k), s(x) = x/(x+%.1f)", g.BF16FLOPS/1e12, g.Eff.GEMMHalf)
		if p.AttentionDecodeGFLOPS > 0 {
			row("attention", "%.1f TFLOP/s, decode %.1f TFLOP/s", p.AttentionGFLOPS/1e3, p.AttentionDecodeGFLOPS/1e3)
		} else {
			row("attention", "%.1f TFLOP/s", p.AttentionGFLOPS/1e3)
		}
		row("logits to host", "%.1f GB/s", p.LogitsBytesPerS/1e9)
		if c, ok := sim.MatchGPU(p.Name); ok {
			row("catalog entry", "%s (links and FP8 ratio taken from it)", c.Name)
		} else {
			row("catalog entry", "none matches %q", p.Name)
		}
	} else {
		row("processor", "%s, %d kernel threads", p.Name, p.Threads)
		row("memory", "%.1f GiB", float64(p.MemoryBytes)/(1<<30))
		row("last-level cache", "%.0f MiB", p.L2Bytes/(1<<20))
		row("STREAM copy", "%.1f GB/s", p.MemBytesPerS/1e9)
		row("GEMM curve (fitted)", "%.1f GFLOP/s · s(m)·s(n)·s(k), s(x) = x/(x+%.1f)", g.BF16FLOPS/2/1e9, g.Eff.GEMMHalf)
		for _, d := range slices.Sorted(maps.Keys(g.WeightGEMM)) {
			c := g.WeightGEMM[d]
			row("  with "+d.Name()+" weights", "%.1f GFLOP/s · s(m)·s(n)·s(k), s(x) = x/(x+%.1f)", c.Peak/1e9, c.Half)
		}
		row("attention", "%.1f GFLOP/s", p.AttentionGFLOPS)
		row("collectives (2 ranks)", "%.2f µs per step + bytes at %.1f GB/s", p.Link.HopS*1e6, p.Link.BytesPerS/1e9)
	}
	if p.LaunchLatencyS > 0 {
		row("kernel latency", "%.2f µs in a CUDA graph, %.2f µs launched one by one", p.KernelLatencyS*1e6, p.LaunchLatencyS*1e6)
	} else {
		row("kernel latency", "%.2f µs", p.KernelLatencyS*1e6)
	}
	row("engine step overhead", "%.1f µs", p.StepOverheadS*1e6)

	writeGEMMGrid(&b, fmt.Sprintf("GEMM %s", unit), p.GEMM, scale)
	for _, name := range slices.Sorted(maps.Keys(p.GEMMWeights)) {
		writeGEMMGrid(&b, fmt.Sprintf("GEMM with %s weights, %s", name, unit), p.GEMMWeights[name], scale)
	}
	_, err = w.Write(b.Bytes())
	return err
}

// writeGEMMGrid prints points as a table of rates (times scale) by weight
// N×K (rows) and tokens M (columns) under a title.
func writeGEMMGrid(b *bytes.Buffer, title string, points []sim.GEMMPoint, scale float64) {
	var ms []int
	var nks [][2]int
	rate := map[[3]int]float64{}
	for _, pt := range points {
		if !slices.Contains(ms, pt.M) {
			ms = append(ms, pt.M)
		}
		if nk := [2]int{pt.N, pt.K}; !slices.Contains(nks, nk) {
			nks = append(nks, nk)
		}
		rate[[3]int{pt.M, pt.N, pt.K}] = pt.GFLOPS
	}
	slices.Sort(ms)
	fmt.Fprintf(b, "\n%s by weight N×K (rows) and tokens M (columns):\n%-11s", title, "N×K")
	for _, m := range ms {
		fmt.Fprintf(b, " %6d", m)
	}
	b.WriteByte('\n')
	for _, nk := range nks {
		fmt.Fprintf(b, "%-11s", fmt.Sprintf("%d×%d", nk[0], nk[1]))
		for _, m := range ms {
			if v, ok := rate[[3]int{m, nk[0], nk[1]}]; ok {
				fmt.Fprintf(b, " %6.1f", v*scale)
			} else {
				fmt.Fprintf(b, " %6s", "")
			}
		}
		b.WriteByte('\n')
	}
}

// WriteStepTable prints the step-time sweep as a Markdown table, then
// the median absolute error of each plan and of all cases. Results with
// catalog predictions (StepOptions.Catalog) get a second prediction and
// error column, headed catalog.
func WriteStepTable(w io.Writer, results []StepResult) error {
	cat := slices.ContainsFunc(results, func(r StepResult) bool { return r.Catalog > 0 })
	var b bytes.Buffer
	if cat {
		b.WriteString("| plan | step | measured ms | predicted ms | error | catalog ms | catalog error |\n|---|---|---:|---:|---:|---:|---:|\n")
	} else {
		b.WriteString("| plan | step | measured ms | predicted ms | error |\n|---|---|---:|---:|---:|\n")
	}
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %+.1f%% |", r.Plan, r.StepCase, r.Measured*1e3, r.Predicted*1e3, 100*r.Error())
		if cat {
			fmt.Fprintf(&b, " %.2f | %+.1f%% |", r.Catalog*1e3, 100*r.CatalogError())
		}
		b.WriteByte('\n')
	}
	if cat {
		b.WriteString("\n| plan | cases | median absolute error | largest | catalog median | catalog largest |\n|---|---:|---:|---:|---:|---:|\n")
	} else {
		b.WriteString("\n| plan | cases | median absolute error | largest |\n|---|---:|---:|---:|\n")
	}
	summary := func(label string, g []StepResult) {
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %.1f%% |", label, len(g), 100*MedianAbsError(g), 100*maxAbs(g, StepResult.Error))
		if cat {
			fmt.Fprintf(&b, " %.1f%% | %.1f%% |", 100*MedianAbsCatalogError(g), 100*maxAbs(g, StepResult.CatalogError))
		}
		b.WriteByte('\n')
	}
	for _, g := range ByPlan(results) {
		summary(g[0].Plan.String(), g)
	}
	summary("all", results)
	_, err := w.Write(b.Bytes())
	return err
}

// ShapeSteps is one model's step-time sweep, for WriteStepSummary.
type ShapeSteps struct {
	Name    string // the model, e.g. "llama-3.2-1b"
	Results []StepResult
}

// WriteStepSummary prints, as a Markdown table, the median absolute error
// of each model's sweep and of all of them together, for the profile and,
// where the sweeps have them, for the catalog entry.
func WriteStepSummary(w io.Writer, sweeps []ShapeSteps) error {
	var all []StepResult
	for _, s := range sweeps {
		all = append(all, s.Results...)
	}
	cat := slices.ContainsFunc(all, func(r StepResult) bool { return r.Catalog > 0 })
	var b bytes.Buffer
	b.WriteString("| model | cases | profile: median absolute error | catalog: median absolute error |\n|---|---:|---:|---:|\n")
	row := func(name string, rs []StepResult) {
		c := "n/a"
		if cat {
			c = fmt.Sprintf("%.1f%%", 100*MedianAbsCatalogError(rs))
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %s |\n", name, len(rs), 100*MedianAbsError(rs), c)
	}
	for _, s := range sweeps {
		row(s.Name, s.Results)
	}
	row("all", all)
	_, err := w.Write(b.Bytes())
	return err
}

// maxAbs is the largest |rel(r)| over results.
func maxAbs(results []StepResult, rel func(StepResult) float64) float64 {
	m := 0.0
	for _, r := range results {
		m = max(m, math.Abs(rel(r)))
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
