// Package sched decides what runs: the continuous-batching scheduler that
// plans each engine step, and the dispatchers that pick a data-parallel
// replica for a new request.
//
// The Scheduler follows vLLM v1: there are no prefill and decode modes. A
// request has tokens known (prompt plus sampled outputs) and tokens
// computed (whose keys and values sit in its KV blocks); each step gives
// every running request min(known − computed, budget left) tokens, running
// requests first in priority order, then admits waiting requests in
// priority order while the budget, MaxNumSeqs and the KV pool allow. A
// long prompt is therefore prefilled in chunks across steps, and a
// decoding request takes one token per step. The plan is plain data
// (Step); KV blocks come from one kvcache.BlockManager per replica, which
// answers yes or no; on no the scheduler preempts the lowest-priority
// running request of that replica, which later resumes by recomputing its
// known tokens (prefix-cache hits make that cheap), so its output does not
// change.
//
// The engine drives it from one goroutine (nothing here is safe for
// concurrent use), once per step:
//
//	step := s.Schedule()          // finished requests never appear
//	sampled := execute(step)      // one token per SeqStep, used when Sample
//	s.Update(step, sampled)       // advance computed, append samples
//	s.Finish(id, Stop)            // for each request the engine ends
//	for _, f := range s.Drain() { // every terminal request, exactly once
//		closeStream(f)
//	}
//
// Add and Abort may be called between steps.
//
// Phases and the host tier. SchedulePhase restricts a step to prefill
// chunks or to decodes (a policy's phase, as Seesaw's). With
// Config.HostBlocks, requests can be parked on a host KV tier: SwapOut and
// SwapIn plan the copies, SwapDone commits or undoes them; a request being
// swapped is neither scheduled nor preempted, and a parked one holds host
// blocks only.
//
// Invariants, each held by the tests:
//   - Budgets hold: every Step has NumBatchedTokens ≤ MaxNumBatchedTokens
//     and at most MaxNumSeqs requests, and a request runs at most once per
//     Step.
//   - Nothing is lost: every accepted request ends in exactly one terminal
//     state (Stop, Length, Cancelled, Error), reported once by Drain;
//     preemption only delays it. Within one priority, requests are admitted
//     first come, first served, so none starves under a steady stream.
//   - Blocks are returned: a terminal request holds no KV block; with no
//     live requests every block of every replica is free or evictable.
//   - A SeqStep's block table maps positions [0, Pos) to blocks holding
//     exactly the request's first Pos known tokens, whether computed in an
//     earlier step or reused from the prefix cache.
package sched
