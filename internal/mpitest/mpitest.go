// Package mpitest launches a test binary under mpirun, for the tests of
// the MPI transport and of the ranks that run over it. A test calls Run
// from its parent process; the launched copies run one named test with
// $GEARBOX_MPI_TEST set, which that test reads with Mode.
package mpitest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
)

// Env names the environment variable that tells a launched test binary
// which scenario to run.
const Env = "GEARBOX_MPI_TEST"

// Mode returns the scenario this process was launched for, "" in the
// parent test process.
func Mode() string { return os.Getenv(Env) }

// Options configure one launch.
type Options struct {
	Procs   int           // mpirun -n
	Run     string        // the -test.run pattern the copies run
	Mode    string        // $GEARBOX_MPI_TEST in the copies
	Env     []string      // more KEY=VALUE for the copies
	Extra   []string      // more mpirun arguments, e.g. "--mca", "orte_enable_recovery", "1"
	Timeout time.Duration // default 60 s
}

// Run launches o.Procs copies of the running test binary under mpirun and
// returns their combined output and mpirun's error. It skips the test
// when mpirun is not on PATH or Open MPI does not load, and in -short
// mode.
func Run(t testing.TB, o Options) (string, error) {
	t.Helper()
	j := Start(t, o)
	err := j.Wait()
	return j.Output(), err
}

// Job is a running mpirun.
type Job struct {
	t      testing.TB
	cmd    *exec.Cmd
	cancel context.CancelFunc
	out    syncBuffer
	done   chan struct{}
	err    error
}

// Start launches the copies as Run does and returns at once.
func Start(t testing.TB, o Options) *Job {
	t.Helper()
	if testing.Short() {
		t.Skip("launches mpirun: skipped in -short mode")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not on PATH (install openmpi-bin libopenmpi-dev): ", err)
	}
	if err := comm.CheckMPILibrary(); err != nil {
		t.Skip(err)
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	args := append(Args(o.Procs), o.Extra...)
	args = append(args, "-x", Env)
	for _, kv := range o.Env {
		args = append(args, "-x", kv[:strings.IndexByte(kv, '=')])
	}
	args = append(args, os.Args[0], "-test.run", "^"+o.Run+"$", "-test.count", "1", "-test.v")
	j := &Job{t: t, cmd: exec.CommandContext(ctx, mpirun, args...), cancel: cancel, done: make(chan struct{})}
	j.cmd.Env = append(append(os.Environ(), Env+"="+o.Mode), o.Env...)
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
	if err := j.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		j.err = j.cmd.Wait()
		if ctx.Err() != nil {
			j.err = fmt.Errorf("mpirun still running after %v: %w", o.Timeout, ctx.Err())
		}
		cancel()
		close(j.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-j.done
	})
	return j
}

// Wait waits for mpirun to exit and returns its error.
func (j *Job) Wait() error {
	<-j.done
	return j.err
}

// Done is closed when mpirun has exited.
func (j *Job) Done() <-chan struct{} { return j.done }

// Output is what the copies and mpirun printed so far.
func (j *Job) Output() string { return j.out.String() }

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Args are the mpirun arguments that start n processes on this machine,
// as root too and on fewer cores than processes.
func Args(n int) []string {
	return []string{"--allow-run-as-root", "--oversubscribe", "-n", strconv.Itoa(n)}
}
