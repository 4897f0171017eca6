// Package comm moves tensors between the ranks of a Gearbox world —
// groups, collectives and point-to-point transfers — and counts every byte
// it moves.
//
// A World is a set of ranks (goroutines of this process with the default
// transport); World.Group and World.Split create groups over any ordered
// subset of its ranks, and each rank talks through its *Comm handle on a
// group: AllReduce, AllGather(V), ReduceScatter, AllToAll(V), Broadcast,
// Send/Recv and Barrier on float32 buffers. Groups are cached by (label,
// member list), so a plan may build its TP, SP and "full TP" groups every
// step for the cost of a map lookup. Data moves through a small Transport
// interface, which Comm calls and its callers never see: the in-process
// shared-memory transport, the default, or the MPI transport (mpi.go),
// whose ranks are the processes of an mpirun job, one rank per process,
// with Open MPI loaded at run time (OpenMPI, MPI.NewWorld). Over MPI the
// same operations give bit-identical results and count the same bytes;
// every operation is bounded by a timeout, so a dead or hung process
// fails its peers' operations instead of blocking them.
//
// Invariants:
//
//   - Every collective counts bytes. A completed operation adds one call
//     and the bytes the standard algorithm of its kind sends and receives
//     at that rank (ring all-reduce: 2(P−1)/P·n per rank; all-gather and
//     reduce-scatter: (P−1)/P of the full buffer; all-to-all: (P−1)/P of the
//     send buffer; broadcast: a pipelined ring; send/recv: exactly n; a
//     one-sided read driven by Group.Drive: exactly n at the reader and
//     at the owner, which takes no part), at
//     Options.ElemBytes per element, under its group's label, world rank
//     and kind; World.Stats reads them. The formulas, and how they yield
//     Table 2 of the Shift Parallelism paper, are in volume.go.
//   - One failed rank wakes the group. Any failure — World.Abort from a rank
//     that hit an error, a cancelled context, invalid or mismatched
//     arguments — aborts the whole World: every operation blocked in any of
//     its groups returns promptly (well under a millisecond), and every
//     later one returns at once, with an *Error wrapping ErrAborted and the
//     first cause. No goroutine is left behind (the package starts none).
//     An aborted World stays aborted; build a new one for the next step.
//   - Reductions add in member order, so every member gets bit-identical
//     results, run after run.
package comm
