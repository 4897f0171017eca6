// Package migrate moves requests' KV caches between tensor-parallel
// groupings of the same ranks: Nitsum's fast KV migration (papers/003
// §3.2.2; specs/nitsum.md §1.3, K1–K8), on CPU ranks' kvcache.Cache
// pools, with every byte crossing ranks through package comm and counted
// there.
//
// A Grouping splits the ranks into aligned power-of-two TP groups; rank
// r at position p of a group of degree t caches KV heads
// [p·H/t, (p+1)·H/t) of every running request of its group (K3). A
// migration takes every listed request from its group under one grouping
// to its group under another (merging groups, splitting them, or any mix,
// e.g. TP 1→2→4→2→1 on 4 ranks), after which each rank of the new group
// holds exactly its new head range of the request, through a block table
// the caller allocated in the destination cache. Waiting requests move as
// metadata only (K2).
//
// Three steps, in plan.go, handshake.go and run.go:
//
//   - NewPlan works out, from a Spec, who sends which heads of which
//     request to whom (K4) and which waiting requests' metadata goes
//     where; Plan.Rank cuts one rank's part.
//   - Run, on every rank at once, first exchanges the migration metadata
//     (request, KV heads, context length) and verifies that every sender
//     and receiver agree (K5); on any disagreement every rank returns the
//     same error and nothing has changed.
//   - Then it moves the KV: per peer, the scattered pages are packed into
//     a small staging buffer and sent, two buffers alternating so that one
//     is filled while the other is in flight, never refilled before its
//     send completes (K7, K8); the receiver unpacks into its destination
//     blocks. Heads a rank keeps are copied within it.
//
// Caches must hold float32 keys and values (kvcache.Layout.DType F32):
// a BF16 or F16 cache fails the handshake with an error naming it.
//
// Stop-and-migrate (K6): callers guarantee that no forward step touches
// the caches while a migration runs. Invariant, held by the tests: after
// a migration every request's keys and values are bit-identical to
// before, on exactly the ranks of one group, each holding exactly its
// head range; the bytes comm counts under DataGroup are
// Σ requests × moved heads × layers × context × head_dim × 2 × 4.
package migrate
