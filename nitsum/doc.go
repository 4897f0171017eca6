// Package nitsum is the control plane of Nitsum (papers/003, §3.3;
// specs/nitsum.md §1.4–1.6): pure logic, no I/O, that decides how the GPU
// pool serves tiered TTFT/TPOT service levels and routes requests under
// that decision.
//
//   - Planner (plan.go), once per control window: from each tier's
//     arrival rate over the last window (Meter, rate.go) and an offline
//     capacity Profile, a Plan that gives every tier prefill and decode
//     instances of chosen TP degrees in aligned power-of-two GPU blocks,
//     by goodput efficiency weighted by unmet demand. Plan.KeepPlaces
//     (keep.go) then keeps the instances that carry on from the last
//     window's plan in their GPUs.
//   - Dispatcher (dispatch.go), per request: the global scheduler. It
//     keeps each prefill instance's SLO-compliant bandwidth (profiled
//     capacity minus assigned, unfinished requests), sends a feasible
//     request to the least-loaded prefill instance of its tier, spills an
//     infeasible one round-robin over every prefill instance, and sends
//     background work round-robin to the instances that accept it.
//   - Local (local.go), per instance and iteration: the three queues
//     (feasible, best-effort, background) and the batch taken from them
//     in that order, never above the profiled batch cap.
//
// Read plan.go first. Invariants, each held by the tests: a plan never
// uses more GPUs than the pool, every instance starts at a multiple of its
// TP degree and no block spans a node; the same inputs give the same plan
// (no map order leaks); a prefill instance never holds more feasible
// requests than its capacity; every dispatched request is done exactly
// once, and then its bandwidth is back.
package nitsum
