// Package nitsum is the control plane of Nitsum (papers/003, §3.3;
// specs/nitsum.md §1.4–1.6): pure logic, no I/O, that decides how the GPU
// pool serves tiered TTFT/TPOT service levels.
//
// The Planner (plan.go) runs once per control window: from each tier's
// arrival rate over the last window (Meter, rate.go) and an offline
// capacity Profile it computes a Plan that gives every tier prefill and
// decode instances of chosen TP degrees in aligned power-of-two GPU
// blocks, by goodput efficiency weighted by unmet demand.
//
// Invariants, each held by the tests: a plan never uses more GPUs than
// the pool, every instance starts at a multiple of its TP degree and no
// block spans a node; the same inputs give the same plan (no map order
// leaks).
package nitsum
