// Package cluster runs Nitsum for real on CPU ranks (papers/003 §3;
// specs/nitsum.md §1): P ranks split into instances on disjoint, aligned
// power-of-two rank blocks, each instance an engine.Engine with its own
// scheduler and KV pool over a cpuexec executor at TP = its size, the
// global Dispatcher in front, and the Planner re-laying the instances out
// every control window, moving running requests' KV to their new
// instance with package migrate.
//
// Read cluster.go first (Cluster, Submit, the instances' loops), then
// reconfig.go (stop-and-migrate), pd.go (prefill → decode hand-off),
// control.go (the control window), profile.go (the capacity profile
// measured at start-up) and memory.go (the weight memory rule).
//
// Choices where the spec is open, each held by a test:
//
//   - Weights (W1–W4). The process holds the model once (the host copy
//     every executor cuts its shards from), and at start-up it builds a
//     warm executor for every TP degree of the profile on every aligned
//     block of that degree. Row splits (q, k, v, gate, up, vocabulary) are
//     views of the host copy; column splits (attention output, MLP down)
//     are not contiguous, so each rank of a TP t > 1 executor holds a
//     copy of 1/t of them, made once at start-up. A reconfiguration only
//     switches executors: it copies 0 weight bytes. The memory rule, per
//     rank: full copy + Σ_{t∈T, t>1} (|W_o| + |W_down|)/t; a model over
//     Options.WeightBudget is refused at New with the numbers.
//   - Local scheduling (L1–L4). An instance's engine scheduler orders by
//     priority then arrival, so the Dispatcher's class is the request's
//     priority (feasible 0, best-effort 1, background 2): feasible
//     requests are admitted and keep running before best-effort ones,
//     and a preemption takes best-effort work first. The batch cap B^P
//     (Instance.Batch) is the engine's MaxNumSeqs; an instance that keeps
//     its rank block across a reconfiguration keeps its engine and so
//     its first cap. A client's own priority is not kept (the class
//     replaces it). nitsum.Local itself is not used: its queues are the
//     engine scheduler's, whose order is the same (class, then
//     arrival); what the mapping cannot do is hold a running best-effort
//     request back from a step that has room (the engine batches every
//     running request).
//   - P/D disaggregation (D1–D3): prefill instances hand each request
//     after its first token to the decode instance of their tier with
//     the fewest live requests, KV moved with package migrate (pd.go
//     says what the paper leaves open). A full decode instance defers
//     the hand-off; the request decodes where it is meanwhile. With
//     Options.Colocated every instance serves whole requests instead.
//   - The plan is nitsum.Planner.PlanFilled's, as in the simulator: ranks
//     no tier's measured rate needs go to the tiers as headroom. Before
//     any traffic the pool is laid out for equal demand from every SLO
//     tier, so the first requests meet instances of their own tier; a
//     window without arrivals keeps the layout. Ranks the plan still
//     leaves spare serve spilled requests as best effort besides
//     background work.
//   - The profile (Options.Measure) is measured on this machine's warm
//     executors at start-up; X^P and X^D are requests per second at the
//     largest measured batch within each target (profile.go).
//   - Destinations. A running request whose instance changes goes to the
//     new instance that holds its old instance's first rank when the
//     block merges, or to the least-filled new instance inside the block
//     when it splits; a waiting one is dispatched again by the new plan's
//     Dispatcher (K2: metadata only).
//
// Invariants, each held by the tests: every submitted request ends in
// exactly one terminal state; a request moved by a reconfiguration emits
// the same greedy tokens as without the move, none twice and none lost;
// a migration that fails its handshake leaves every instance as it was.
package cluster
