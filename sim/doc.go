// Package sim predicts how long a step of the engine takes, and how much
// KV cache fits, on hardware the program is not running on: a catalog of
// GPUs and nodes (8xH200, 4xA10-pcie, g5.48xlarge, …, and calibrated cpu and GPU profiles),
// presets of real models' configs, and one cost model of GEMMs,
// attention, memory-bound kernels, collectives and host copies. The
// discrete-event simulator (Run) runs the real serving loop,
// engine.Engine with its scheduler and policy, on a virtual clock over a
// CostRunner: an engine.Runner that computes no model but advances the
// clock by the cost model's duration of each step.
//
// Read these first: step.go (StepShape, LayoutCost.StepTime and Step: one
// rank's step walked exactly as cpuexec/rank.go runs it, with collective
// bytes from package comm's volume functions and shard shapes from package
// parallel), cost.go (the kernel and collective formulas), hardware.go
// (the catalog and every global constant with its source), runner.go (the
// cost-model runner) and run.go (the event driver: arrivals, dispatch,
// Engine.Iterate, the streams' events stamped in virtual time).
//
// Data parallelism: a plan with DP = d is simulated as d independent
// engines, each over its own DP=1 cost runner, virtual clock and KV pool,
// behind a least-outstanding-tokens dispatcher. That is vLLM's data
// parallelism of a dense model, the baseline the papers compare against.
// Gearbox's own --plan dp=N instead runs its replicas in one engine,
// stepping them in lockstep; the simulator does not model that mode.
//
// Clusters of servers (network.go: 8xp4d.24xlarge, per-pair links, GPU IDs)
// and the CSPS paper's sequence-parallel serving (csps.go: one request's
// SP-NTP or SP-TP prefill with CSA levels and the Eq. 7 pipeline;
// csps_run.go: the prefill and decode pools; csps_workload.go: Table 2's
// lengths) are priced with the same kernels and collectives; the choices
// the paper leaves open are listed in csps.go and docs/simulator.md.
//
// SiDP (sidp.go first, then sidp_step.go, sidp_was.go, sidp_run.go):
// data-parallel replicas that share their FFN weights run in lockstep
// under RunSiDP, each iteration priced by SiDPCost in WaS, CaS or FSDP
// mode.
//
// Nitsum (nitsum_run.go first, then nitsum_profile.go, nitsum_switch.go,
// nitsum_workload.go): RunNitsum serves tiered SLOs on a pool of TP
// instances re-planned every control window by package nitsum's own
// Planner, Dispatcher, Local and Meter, with stop-and-migrate
// reconfiguration priced from Figure 7 and the paper's baselines.
//
// Invariant: one cost model with global
// constants. The efficiency numbers are per GPU type, each documented with
// the measurement or datasheet it comes from, and the same for every
// experiment; nothing is tuned per experiment. The communication a step is
// charged for is, byte for byte and call for call, what the CPU executor's
// comm counters record for the same batch and layout (tested), so the
// simulator and the engine cannot drift apart.
package sim
