package comm_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/internal/mpitest"
)

// TestMPITransport runs mpiProgram on 2 and 4 MPI processes; each process
// checks its rank's results and byte counters against the same program
// run on the in-process transport (mpiWorker).
func TestMPITransport(t *testing.T) {
	for _, p := range []int{2, 4} {
		out, err := mpitest.Run(t, mpitest.Options{Procs: p, Run: "TestMPIWorker", Mode: "collectives"})
		if err != nil {
			t.Fatalf("P=%d: %v\n%s", p, err, out)
		}
		t.Logf("P=%d:\n%s", p, out)
		for r := range p {
			if want := fmt.Sprintf("rank %d/%d: same results and counters", r, p); !strings.Contains(out, want) {
				t.Errorf("P=%d: no %q in the output:\n%s", p, want, out)
			}
		}
	}
}

// TestMPIFailure: a process that aborts wakes the others at once with its
// cause; a process that exits or hangs fails the others' next operation
// within the timeout (1 s here).
func TestMPIFailure(t *testing.T) {
	for _, mode := range []string{"abort", "exit", "hang"} {
		t.Run(mode, func(t *testing.T) {
			out, _ := mpitest.Run(t, mpitest.Options{Procs: 3, Run: "TestMPIWorker", Mode: mode,
				Env: []string{"GEARBOX_MPI_TIMEOUT=1s"}, Extra: []string{"--mca", "orte_enable_recovery", "1"}})
			for _, r := range []int{0, 2} {
				want := fmt.Sprintf("rank %d: failed as expected", r)
				if !strings.Contains(out, want) {
					t.Errorf("no %q in the output:\n%s", want, out)
				}
			}
		})
	}
}

// TestMPIWorker is the program the launched processes run; it skips in an
// ordinary test run.
func TestMPIWorker(t *testing.T) {
	mode := mpitest.Mode()
	if mode == "" {
		t.Skip("run by TestMPITransport and TestMPIFailure under mpirun")
	}
	timeout := comm.DefaultMPITimeout
	if s := os.Getenv("GEARBOX_MPI_TIMEOUT"); s != "" {
		var err error
		if timeout, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	m, err := comm.OpenMPI(comm.MPIOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if mode == "collectives" {
		mpiCollectives(t, m)
		return
	}
	mpiFailure(t, m, mode)
}

func mpiCollectives(t *testing.T, m *comm.MPI) {
	p, me := m.Size(), m.Rank()
	ref := newWorld(t, p)
	want := make([][][]float32, p)
	runAll(t, p, func(r int) error {
		var err error
		want[r], err = mpiProgram(bg, ref, r)
		return err
	})
	w, err := m.NewWorld(0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mpiProgram(bg, w, me)
	if err != nil {
		t.Fatalf("rank %d: %v", me, err)
	}
	if len(got) != len(want[me]) {
		t.Fatalf("rank %d: %d results, want %d", me, len(got), len(want[me]))
	}
	for i := range got {
		sameBits(t, fmt.Sprintf("rank %d result %d", me, i), got[i], want[me][i])
	}
	wantStats := maps.Clone(ref.Stats())
	maps.DeleteFunc(wantStats, func(k comm.Key, _ comm.Counter) bool { return k.Rank != me })
	if gotStats := w.Stats(); !maps.Equal(gotStats, wantStats) {
		t.Fatalf("rank %d: counters\n%v\nwant\n%v", me, gotStats, wantStats)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("rank %d/%d: same results and counters\n", me, p)
}

// mpiProgram runs every collective on world r's handles and returns what
// it received, in order. Two groups run concurrently at the end.
func mpiProgram(ctx context.Context, w *comm.World, r int) ([][]float32, error) {
	p := w.Size()
	var out [][]float32
	keep := func(v []float32) { out = append(out, append([]float32(nil), v...)) }
	c := w.Comm(r)
	for _, n := range []int{0, 3, 1000, 5000} {
		buf := input(uint64(n), r, n)
		if err := c.AllReduce(ctx, buf); err != nil {
			return nil, err
		}
		keep(buf)
	}
	counts := make([]int, p)
	for j := range counts {
		counts[j] = 3*j + 1
	}
	recv := make([]float32, sum(counts))
	if err := c.AllGatherV(ctx, input(7, r, counts[r]), recv, counts); err != nil {
		return nil, err
	}
	keep(recv)
	rs := make([]float32, 257)
	if err := c.ReduceScatter(ctx, input(8, r, p*257), rs); err != nil {
		return nil, err
	}
	keep(rs)
	sendCounts, recvCounts := make([]int, p), make([]int, p)
	for j := range p {
		sendCounts[j] = (r+1)*(j+2) + j
		recvCounts[j] = (j+1)*(r+2) + r
	}
	a2a := make([]float32, sum(recvCounts))
	if err := c.AllToAllV(ctx, input(9, r, sum(sendCounts)), sendCounts, a2a, recvCounts); err != nil {
		return nil, err
	}
	keep(a2a)
	bc := input(10, r, 333)
	if err := c.Broadcast(ctx, bc, 1); err != nil {
		return nil, err
	}
	keep(bc)
	ring := input(11, r, 64)
	got := make([]float32, 64)
	next, prev := (r+1)%p, (r+p-1)%p
	if r%2 == 0 {
		err := c.Send(ctx, ring, next)
		if err == nil {
			err = c.Recv(ctx, got, prev)
		}
		if err != nil {
			return nil, err
		}
	} else {
		err := c.Recv(ctx, got, prev)
		if err == nil {
			err = c.Send(ctx, ring, next)
		}
		if err != nil {
			return nil, err
		}
	}
	keep(got)
	if err := c.Barrier(ctx); err != nil {
		return nil, err
	}
	// Two groups at once from two goroutines: the reversed world and the
	// pairs (0,1), (2,3).
	rev := make([]int, p)
	for i := range rev {
		rev[i] = p - 1 - i
	}
	g1, err := w.Group("reversed", rev...)
	if err != nil {
		return nil, err
	}
	pairs := make([][]int, 0, p/2)
	for i := 0; i+1 < p; i += 2 {
		pairs = append(pairs, []int{i, i + 1})
	}
	split, err := w.Split("pair", pairs...)
	if err != nil {
		return nil, err
	}
	a, b := input(12, r, 2049), input(13, r, 777)
	pending := g1.Comm(r).Start(ctx, func(ctx context.Context, c *comm.Comm) error { return c.AllReduce(ctx, a) })
	if split[r] != nil {
		if err := split[r].AllReduce(ctx, b); err != nil {
			return nil, err
		}
	}
	if err := pending.Wait(); err != nil {
		return nil, err
	}
	keep(a)
	keep(b)
	return out, nil
}

// mpiFailure: rank 1 fails (mode abort: World.Abort with a cause; exit:
// the process exits; hang: it stops calling); the other ranks' all-reduce
// must fail, promptly for abort and within the timeout otherwise.
func mpiFailure(t *testing.T, m *comm.MPI, mode string) {
	me := m.Rank()
	w, err := m.NewWorld(0)
	if err != nil {
		t.Fatal(err)
	}
	c := w.Comm(me)
	buf := input(1, me, 100)
	if err := c.AllReduce(bg, buf); err != nil { // all healthy
		t.Fatal(err)
	}
	if me == 1 {
		switch mode {
		case "abort":
			w.Abort(errors.New("injected failure"))
			time.Sleep(2 * time.Second) // let the others see it before mpirun ends the job
		case "exit":
			os.Exit(3)
		case "hang":
			time.Sleep(m.Timeout() + 2*time.Second)
		}
		os.Exit(3)
	}
	start := time.Now()
	err = c.AllReduce(bg, buf)
	took := time.Since(start)
	bound := m.Timeout() + time.Second
	if mode == "abort" {
		bound = time.Second
	}
	switch {
	case err == nil:
		t.Errorf("rank %d: all-reduce with a failed peer succeeded", me)
	case !errors.Is(err, comm.ErrAborted):
		t.Errorf("rank %d: %v, want an ErrAborted", me, err)
	case mode == "abort" && !strings.Contains(err.Error(), "injected failure"):
		t.Errorf("rank %d: %v does not carry the cause", me, err)
	case mode != "abort" && !errors.Is(err, comm.ErrTimeout) && !strings.Contains(err.Error(), "timed out"):
		// Its own timeout, or that of the other survivor, which sends
		// its cause on when it fires first.
		t.Errorf("rank %d: %v, want a timeout", me, err)
	case took > bound:
		t.Errorf("rank %d: failed after %v, bound %v", me, took, bound)
	default:
		fmt.Printf("rank %d: failed as expected after %v: %v\n", me, took.Round(time.Millisecond), err)
	}
	os.Exit(0) // MPI cannot finalise with a dead peer
}
