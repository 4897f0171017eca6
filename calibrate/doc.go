// Package calibrate measures the machine the CPU engine runs on and checks
// the simulator against it: Measure fills a sim.Profile (GEMM throughput
// by shape, memory bandwidth, kernel latency, the in-process transport's
// collectives, paged attention and the engine loop's host time) with the
// kernels and code paths the engine itself runs, and ValidateSteps and
// ValidateServe compare the cost model built from that profile with real
// engine steps and a real serving run (docs/simulator.md).
//
// Read these first: measure.go (what is measured and how, and the grid),
// node.go (how a profile becomes a node of CPU ranks sharing one
// machine), steps.go and serve.go (the two validations).
//
// Invariant: the cost model under validation comes from the profile
// alone, through sim.Profile.GPU, Node and sim.NewCostModel with
// sim.CPUPrecision; nothing in this package adjusts a prediction after
// the fact or knows the validation's results. Measurements are medians of
// interleaved rounds over a fixed grid in a fixed order.
package calibrate
