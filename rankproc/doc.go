// Package rankproc runs the ranks of one CPU executor as the processes of
// an MPI job (mpirun -n P gearbox serve --transport mpi …): process r
// hosts rank r only. Process 0 drives: it runs the engine, the scheduler
// and the HTTP server, and its Driver is the engine's Runner. For every
// step the Driver sends the batch and the placement's name to every other
// process, runs rank 0, and collects the rows of logits the other
// processes computed. The others Follow: receive a step, run their rank
// of it (their collectives meet rank 0's through comm's MPI transport),
// send back their logits rows, and wait for the next step.
//
// The step messages travel on control tags of comm.MPI, outside every
// comm.World, so the executor's byte counters are those of the in-process
// transport. Encoding (codec.go): a 9-byte header (kind, payload length)
// and the payload: the placement name, then per sequence its position,
// logits wanted, replica, tokens and block table, all as uvarints.
//
// Failure (chosen here; the issue asks for a bounded time): every message
// wait is bounded by the transport's timeout (comm.MPI.Timeout, serve's
// --comm-timeout), and a long step is not a silent process: the Driver
// pings the followers whenever it has sent nothing for half of a quarter
// timeout (while the engine is idle, or while process 0 computes a long
// step a follower has finished, as under DP), and a follower computing
// its step replies "alive" to process 0 every quarter timeout. So a
// process silent for a whole timeout is taken as dead, however long the
// steps; inside a step, each collective is bounded by the same timeout,
// which must therefore exceed the longest compute between two
// collectives (a pipeline stage's share of a step). Any failure — a
// follower's step error,
// a missing message, a timeout — aborts the MPI transport, which tells
// every process; the Driver then fails this and every later step with the
// cause and closes Done, and the processes are expected to exit
// (non-zero). Steps only: transitions, a host KV tier and SiDP's pooled
// weights are refused by cpuexec over several processes.
package rankproc
