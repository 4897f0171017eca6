package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
)

// ops are single calls of every kind, each on a world-group Comm of
// members, for the failure tests. Member 0 of a Send/Recv pair sends to
// member 1.
var ops = []struct {
	name string
	call func(ctx context.Context, c *comm.Comm) error
}{
	{"AllReduce", func(ctx context.Context, c *comm.Comm) error { return c.AllReduce(ctx, make([]float32, 16)) }},
	{"AllReduceLarge", func(ctx context.Context, c *comm.Comm) error { return c.AllReduce(ctx, make([]float32, 1<<14)) }},
	{"AllGather", func(ctx context.Context, c *comm.Comm) error {
		return c.AllGather(ctx, make([]float32, 2), make([]float32, 2*c.Size()))
	}},
	{"ReduceScatter", func(ctx context.Context, c *comm.Comm) error {
		return c.ReduceScatter(ctx, make([]float32, 2*c.Size()), make([]float32, 2))
	}},
	{"AllToAll", func(ctx context.Context, c *comm.Comm) error {
		return c.AllToAll(ctx, make([]float32, 2*c.Size()), make([]float32, 2*c.Size()))
	}},
	{"Broadcast", func(ctx context.Context, c *comm.Comm) error { return c.Broadcast(ctx, make([]float32, 4), 0) }},
	{"Barrier", func(ctx context.Context, c *comm.Comm) error { return c.Barrier(ctx) }},
	{"SendRecv", func(ctx context.Context, c *comm.Comm) error {
		switch c.Rank() {
		case 0:
			return c.Send(ctx, make([]float32, 4), 1)
		case 1:
			return c.Recv(ctx, make([]float32, 4), 0)
		}
		return c.Barrier(ctx)
	}},
}

// failTimeout bounds how long a blocked rank may take to notice a failure.
const failTimeout = time.Second

// failureCase runs op on members 1..P-1, which block waiting for member 0
// (for Send/Recv, member 1 waits for member 0's send), triggers the failure
// and checks that every blocked call returns an error wrapping want within
// failTimeout; then member 0's late call must fail at once.
func failureCase(t *testing.T, p int, op func(context.Context, *comm.Comm) error, ctx context.Context, trigger func(w *comm.World), want error) {
	t.Helper()
	w := newWorld(t, p)
	const first = 1
	blocked := p - first
	type result struct {
		err error
		at  time.Time
	}
	results := make(chan result, blocked)
	for r := first; r < p; r++ {
		go func() {
			err := op(ctx, w.Comm(r))
			results <- result{err, time.Now()}
		}()
	}
	time.Sleep(20 * time.Millisecond) // let them block
	triggered := time.Now()
	trigger(w)
	deadline := time.After(failTimeout)
	var slowest time.Duration
	for range blocked {
		select {
		case res := <-results:
			if res.err == nil {
				t.Fatal("blocked call returned nil after the failure")
			}
			if !errors.Is(res.err, comm.ErrAborted) || !errors.Is(res.err, want) {
				t.Fatalf("error %q does not wrap ErrAborted and %v", res.err, want)
			}
			var ce *comm.Error
			if !errors.As(res.err, &ce) {
				t.Fatalf("error %T is not a *comm.Error", res.err)
			}
			slowest = max(slowest, res.at.Sub(triggered))
		case <-deadline:
			t.Fatalf("blocked calls still running %v after the failure", failTimeout)
		}
	}
	t.Logf("%d blocked members woken within %v", blocked, slowest)
	start := time.Now()
	err := op(bg, w.Comm(0))
	if !errors.Is(err, want) || time.Since(start) > failTimeout {
		t.Fatalf("late call on an aborted world: %v after %v", err, time.Since(start))
	}
}

var errBoom = errors.New("rank 0: boom")

func TestAbortWakesGroup(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, op := range ops {
		for _, p := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/P=%d", op.name, p), func(t *testing.T) {
				failureCase(t, p, op.call, bg, func(w *comm.World) { w.Comm(0).Abort(errBoom) }, errBoom)
			})
		}
	}
	if after := settleGoroutines(before); after > before {
		t.Errorf("goroutines: %d before, %d after", before, after)
	}
}

func TestCancelWakesGroup(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, op := range ops {
		for _, p := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/P=%d", op.name, p), func(t *testing.T) {
				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				failureCase(t, p, op.call, ctx, func(*comm.World) { cancel() }, context.Canceled)
			})
		}
	}
	if after := settleGoroutines(before); after > before {
		t.Errorf("goroutines: %d before, %d after", before, after)
	}
}

// One member's own deadline expires while its peers wait with no deadline:
// the peers are woken too, with an error wrapping the deadline.
func TestOneRankDeadline(t *testing.T) {
	w := newWorld(t, 4)
	g := world(w)
	start := time.Now()
	errs := runAll(t, 3, func(r int) error {
		ctx := bg
		if r == 2 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(bg, 20*time.Millisecond)
			defer cancel()
		}
		return g.Comm(r).AllReduce(ctx, make([]float32, 8)) // member 3 never comes
	})
	if d := time.Since(start); d > failTimeout {
		t.Errorf("took %v", d)
	}
	for r, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v, want a deadline error", r, err)
		}
	}
}

// Arguments that are wrong for one member, or that members disagree on,
// fail every member instead of deadlocking or corrupting memory.
func TestInvalidArguments(t *testing.T) {
	const p = 3
	tests := []struct {
		name string
		call func(c *comm.Comm) error
	}{
		{"different lengths", func(c *comm.Comm) error { return c.AllReduce(bg, make([]float32, 4+c.Rank())) }},
		{"different operations", func(c *comm.Comm) error {
			if c.Rank() == 1 {
				return c.Barrier(bg)
			}
			return c.AllReduce(bg, make([]float32, 4))
		}},
		{"different roots", func(c *comm.Comm) error { return c.Broadcast(bg, make([]float32, 4), c.Rank()) }},
		{"different gather counts", func(c *comm.Comm) error {
			counts := []int{1, 1, 1}
			counts[c.Rank()] = 2
			return c.AllGatherV(bg, make([]float32, 2), make([]float32, 4), counts)
		}},
		{"unmatched all-to-all counts", func(c *comm.Comm) error {
			return c.AllToAllV(bg, make([]float32, 3), []int{1, 1, 1}, make([]float32, 4), []int{2, 1, 1})
		}},
		{"bad recv length at one member", func(c *comm.Comm) error {
			n := 2 * p
			if c.Rank() == 2 {
				n++
			}
			return c.AllGather(bg, make([]float32, 2), make([]float32, n))
		}},
		{"bad root", func(c *comm.Comm) error { return c.Broadcast(bg, make([]float32, 4), p) }},
		{"send to self", func(c *comm.Comm) error { return c.Send(bg, make([]float32, 1), c.Rank()) }},
		{"send and recv lengths", func(c *comm.Comm) error {
			switch c.Rank() {
			case 0:
				return c.Send(bg, make([]float32, 3), 1)
			case 1:
				return c.Recv(bg, make([]float32, 4), 0)
			}
			return c.Barrier(bg)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, p)
			for r, err := range runAll(t, p, func(r int) error { return tt.call(w.Comm(r)) }) {
				if !errors.Is(err, comm.ErrInvalid) {
					t.Errorf("rank %d: %v, want an error wrapping ErrInvalid", r, err)
				}
			}
		})
	}
}

// Two goroutines on one Comm at once is a bug; it aborts the World rather
// than corrupting the rendezvous.
func TestConcurrentUseOfOneComm(t *testing.T) {
	w := newWorld(t, 2)
	c := w.Comm(0)
	done := make(chan error)
	go func() { done <- c.AllReduce(bg, make([]float32, 4)) }() // member 1 never comes
	time.Sleep(20 * time.Millisecond)
	if err := c.Barrier(bg); err == nil {
		t.Fatal("second concurrent call: want an error")
	}
	select {
	case err := <-done:
		if !errors.Is(err, comm.ErrAborted) {
			t.Fatalf("first call: %v", err)
		}
	case <-time.After(failTimeout):
		t.Fatal("first call still blocked")
	}
}

// A failure in one group wakes ranks blocked in other groups of the World.
func TestAbortCrossesGroups(t *testing.T) {
	w := newWorld(t, 6)
	tpc, spc, _ := shiftGroups(t, w, 3, 2)
	errs := runAll(t, 6, func(r int) error {
		switch {
		case r == 0:
			w.Abort(errBoom) // rank 0 fails before its collectives
			return errBoom
		case r%2 == 0:
			return spc[r].AllReduce(bg, make([]float32, 4)) // waits for rank 0
		default:
			if err := tpc[r].AllReduce(bg, make([]float32, 4)); err != nil { // rank 1 waits for rank 0
				return err
			}
			return spc[r].AllReduce(bg, make([]float32, 4))
		}
	})
	for r, err := range errs {
		if !errors.Is(err, errBoom) {
			t.Errorf("rank %d: %v, want boom", r, err)
		}
	}
}
