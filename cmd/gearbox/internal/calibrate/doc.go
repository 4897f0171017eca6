// Package calibrate measures the machine an engine runs on and checks the
// simulator against it. Measure fills a sim.Profile of the CPU engine's
// host (float32 GEMM throughput by shape, memory bandwidth, kernel
// latency, the in-process transport's collectives, paged attention and
// the engine loop's host time) with the kernels and code paths the CPU
// engine itself runs; MeasureGPU fills a bfloat16 profile of one CUDA GPU
// (cuBLAS GEMMs, device copies, kernel latency in CUDA graphs, the logits
// readback, and the CUDA executor's attention and engine loop) the same
// way. ValidateSteps and ValidateServe compare the cost model built from
// a profile with real engine steps and a real serving run, on the CPU
// engine or on any engine.Runner that Runners builds (docs/simulator.md).
//
// Read these first: measure.go (what is measured on the CPU and how, and
// the grid), gpu.go (the same for a GPU), engine.go (the measurements
// that run whole engine steps, shared by both), node.go (how a profile
// becomes a node of ranks), steps.go and serve.go (the two validations).
//
// Invariant: the cost model under validation comes from the profile
// alone, through sim.Profile.GPU, Node and sim.NewCostModel in the
// profile's precision (sim.Profile.Precision); nothing in this package
// adjusts a prediction after the fact or knows the validation's results.
// The catalog's entry for a GPU, when a validation compares it too, is
// used exactly as the catalog has it. Measurements are medians of
// interleaved rounds over a fixed grid in a fixed order.
package calibrate
