package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/rankproc"
)

// transportFlags choose how a multi-rank plan's ranks talk: goroutines of
// this process (inproc, the default) or the processes of an MPI job, one
// rank each (mpi: launch with mpirun -n RANKS gearbox serve --transport
// mpi …; process 0 serves HTTP, the others run their rank).
type transportFlags struct {
	name    string
	timeout time.Duration

	m      *comm.MPI        // the job, with --transport mpi
	driver *rankproc.Driver // process 0's, once built
}

func addTransportFlags(fs *flag.FlagSet) *transportFlags {
	t := &transportFlags{}
	fs.StringVar(&t.name, "transport", "inproc", "how ranks talk: inproc (goroutines of this process) or mpi (one rank per process of an mpirun job; CPU ranks)")
	fs.DurationVar(&t.timeout, "comm-timeout", comm.DefaultMPITimeout, "with --transport mpi: a rank process silent this long is taken as dead, and the job fails")
	return t
}

// open joins the MPI job with --transport mpi (nil otherwise), logs the
// choice, and makes --device auto mean cpu (the MPI transport runs CPU
// ranks).
func (t *transportFlags) open(dev *deviceFlags, logger *slog.Logger) error {
	switch t.name {
	case "inproc":
		logger.Info("transport", "choice", "inproc", "reason", "ranks are goroutines of this process (the default)")
		return nil
	case "mpi":
	default:
		return fmt.Errorf("--transport %q: want inproc or mpi", t.name)
	}
	switch dev.device {
	case "auto":
		dev.device = "cpu"
	case "cpu":
	default:
		return fmt.Errorf("--transport mpi runs CPU ranks; --device %s is not supported", dev.device)
	}
	m, err := comm.OpenMPI(comm.MPIOptions{Timeout: t.timeout})
	if err != nil {
		return fmt.Errorf("--transport mpi: %w", err)
	}
	t.m = m
	logger.Info("transport", "choice", "mpi", "rank", m.Rank(), "processes", m.Size(), "library", m.Library(), "comm_timeout", m.Timeout())
	return nil
}

// follower reports whether this process runs a rank for process 0.
func (t *transportFlags) follower() bool { return t != nil && t.m != nil && t.m.Rank() != 0 }

// world is the executor's World factory: the MPI job's, or nil for the
// in-process default.
func (t *transportFlags) world() func(int) (*comm.World, error) {
	if t == nil || t.m == nil {
		return nil
	}
	return func(ranks int) (*comm.World, error) {
		if ranks != t.m.Size() {
			return nil, fmt.Errorf("the plan has %d ranks and the MPI job %d processes (mpirun -n %d)", ranks, t.m.Size(), ranks)
		}
		return t.m.NewWorld(0)
	}
}

// drive makes process 0's runner a Driver of the executor b built.
func (t *transportFlags) drive(b *built, logger *slog.Logger) error {
	if t == nil || t.m == nil {
		return nil
	}
	x, ok := b.runner.(*cpuexec.Executor)
	if !ok {
		return fmt.Errorf("--transport mpi runs CPU ranks, not %T", b.runner)
	}
	d, err := rankproc.NewDriver(x, t.m, logger)
	if err != nil {
		return err
	}
	t.driver = d
	b.runner = d
	closeExec := b.close
	b.close = func() {
		if err := d.Close(); err != nil {
			logger.Warn("stopping the rank processes", "err", err)
		}
		closeExec()
	}
	return nil
}

// health is /health's check: the rank processes' failure, if any.
func (t *transportFlags) health() func() error {
	if t == nil || t.m == nil {
		return nil
	}
	return func() error {
		if t.driver == nil {
			return nil
		}
		return t.driver.Err()
	}
}

// failed is closed when the rank processes fail (never without MPI).
func (t *transportFlags) failed() <-chan struct{} {
	if t == nil || t.driver == nil {
		return nil
	}
	return t.driver.Done()
}

// end leaves the MPI job after serve returned err: a clean exit
// finalises MPI; after a failure (err, or the transport's abort) it tells
// the other processes, logs, and returns the failure, so that the process
// exits non-zero and mpirun, seeing it, ends the job non-zero too.
// (MPI_Abort is not used: Open MPI 4's waits for mpirun to kill the
// caller.)
func (t *transportFlags) end(err error, logger *slog.Logger) error {
	if t == nil || t.m == nil {
		return err
	}
	if err != nil {
		t.m.Abort(err)
	}
	if cause := t.m.Err(); cause != nil {
		logger.Error("the MPI job failed; exiting", "rank", t.m.Rank(), "err", cause)
		return fmt.Errorf("rank processes failed: %w", cause)
	}
	return t.m.Close()
}

// runFollower is serve on processes 1…P−1 of an MPI job: the same model,
// plan and executor as process 0, stepping as its Driver says until it
// shuts down.
func runFollower(ctx context.Context, c serveConfig, logger *slog.Logger, progress io.Writer) error {
	m, err := c.dev.loadModel(c.modelDir, progress)
	if err != nil {
		return err
	}
	c.par.dtype, c.par.quant = c.dev.dtype, c.dev.quant
	_, pol, err := c.par.resolve(m.Config)
	if err != nil {
		return err
	}
	spec, err := c.runnerSpec(m, pol)
	if err != nil {
		return err
	}
	run, err := c.dev.newRunner(m, spec, logger)
	if err != nil {
		return err
	}
	defer run.close()
	x, ok := run.runner.(*cpuexec.Executor)
	if !ok {
		return fmt.Errorf("--transport mpi runs CPU ranks, not %T", run.runner)
	}
	logger.Info("following process 0", "rank", c.tr.m.Rank(), "device", run.device)
	err = rankproc.Follow(ctx, x, c.tr.m, logger)
	if errors.Is(err, rankproc.ErrShutdown) {
		logger.Info("process 0 shut down")
		return nil
	}
	return err
}

// check refuses, over MPI, a policy mpiPolicy refuses.
func (t *transportFlags) check(cfg *model.Config, pol policy.Policy) error {
	if t == nil || t.m == nil {
		return nil
	}
	if err := mpiPolicy(cfg, pol); err != nil {
		return fmt.Errorf("--transport mpi: policy %s: %w", pol, err)
	}
	return nil
}

// mpiPolicy reports why a policy cannot run over MPI: CSPS runs an
// executor of its own, and a placement that does not share the first
// one's KV cache is reached by a transition, which needs every rank in one
// process.
func mpiPolicy(cfg *model.Config, pol policy.Policy) error {
	if cspsPolicy(pol) != nil {
		return errors.New("it runs its own sequence-sharded executor, not the ranks of one placement")
	}
	ps := pol.Placements()
	for _, p := range ps[1:] {
		if !p.SharesKV(cfg, ps[0]) {
			return fmt.Errorf("placements %s and %s do not share the KV cache: moving between them is a transition, which needs every rank in one process (static and shift policies run)", ps[0], p)
		}
	}
	return nil
}

// failureLinger is how long a failed MPI job's process 0 keeps answering
// /health with the failure once its engine is idle, so that a probe sees
// why before the process exits (chosen: two probes at a 1 s period).
const failureLinger = 2 * time.Second

// lingerOnFailure waits, after the rank processes failed, until the
// engine has ended every accepted request (each step fails at once), and
// then failureLinger more.
func lingerOnFailure(ctx context.Context, eng drainer) {
	select {
	case <-eng.Drain():
	case <-ctx.Done():
		return
	}
	select {
	case <-time.After(failureLinger):
	case <-ctx.Done():
	}
}
