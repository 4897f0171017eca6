// Package engine is the serving loop: it admits requests into the
// scheduler, asks the policy where each step runs (and runs the
// transition it asks for), has a Runner execute the step, samples,
// detokenizes, applies stop conditions and streams events. It knows no
// device: the CPU executor (package cpuexec), the CUDA executor
// (gpu/cudaexec) and the simulator's cost-model runner implement Runner.
// Run drives the loop on its own goroutine; a caller can drive it one
// iteration at a time instead (Iterate, with Options.OnEvent and
// Stream.TryRecv to read what each produced), as the simulator does on a
// virtual clock.
//
// Read these first: loop.go (Runner, Engine.Iterate: decide → schedule →
// step → sample), stream.go (a request's events), stop.go (stop strings).
//
// Invariant: every accepted request ends in exactly one final event —
// finished, cancelled or failed — through preemption, transitions, step
// errors (logged, never dropped) and shutdown.
package engine
