package comm

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
)

// TestDriveCountsAsMembersDo: a driven collective counts, per member and
// kind, exactly what the members count calling it on their Comms.
func TestDriveCountsAsMembersDo(t *testing.T) {
	members := []int{3, 0, 2}
	ops := []struct {
		op   Op
		call func(ctx context.Context, c *Comm) error
	}{
		{Op{Kind: KindAllReduce, Elems: 10}, func(ctx context.Context, c *Comm) error { return c.AllReduce(ctx, make([]float32, 10)) }},
		{Op{Kind: KindAllToAll, Elems: 4}, func(ctx context.Context, c *Comm) error {
			return c.AllToAll(ctx, make([]float32, 12), make([]float32, 12))
		}},
		{Op{Kind: KindAllGather, Counts: []int{2, 5, 1}}, func(ctx context.Context, c *Comm) error {
			return c.AllGatherV(ctx, make([]float32, []int{2, 5, 1}[c.Rank()]), make([]float32, 8), []int{2, 5, 1})
		}},
		{Op{Kind: KindSend, Elems: 7, From: 2, To: 0}, func(ctx context.Context, c *Comm) error {
			switch c.Rank() {
			case 2:
				return c.Send(ctx, make([]float32, 7), 0)
			case 0:
				return c.Recv(ctx, make([]float32, 7), 2)
			}
			return nil
		}},
	}
	called, _ := NewWorld(4)
	driven, _ := NewWorld(4)
	gc, err := called.Group("g", members...)
	if err != nil {
		t.Fatal(err)
	}
	gd, err := driven.Group("g", members...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		var wg sync.WaitGroup
		for _, r := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := o.call(context.Background(), gc.Comm(r)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		moved := false
		if err := gd.Drive(o.op, func() error { moved = true; return nil }); err != nil || !moved {
			t.Fatalf("%s: %v (moved %v)", o.op.Kind, err, moved)
		}
	}
	if got, want := driven.Stats(), called.Stats(); !reflect.DeepEqual(got, want) {
		t.Fatalf("driven:\n%s\ncalled:\n%s", got, want)
	}
	// A wire element size of its own: the float32 residual of a bf16 executor.
	if err := gd.Drive(Op{Kind: KindAllReduce, Elems: 10, ElemBytes: 2}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	var want int64
	for m := range members {
		sent, _ := AllReduceBytes(10, len(members), m, 2)
		want += sent
	}
	if d := driven.Stats().Sub(called.Stats()).Kind(KindAllReduce); d.SentBytes != want || d.Calls != 3 {
		t.Fatalf("2-byte all-reduce counted %+v, want %d bytes in 3 calls", d, want)
	}
}

// TestDriveFailures: a bad op or a failed move aborts the World and
// counts nothing; later drives fail.
func TestDriveFailures(t *testing.T) {
	w, _ := NewWorld(2)
	g, _ := w.Group("g", 0, 1)
	if err := g.Drive(Op{Kind: KindSend, From: 1, To: 1, Elems: 1}, func() error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("send to itself: %v", err)
	}
	w, _ = NewWorld(2)
	g, _ = w.Group("g", 0, 1)
	boom := errors.New("copy failed")
	if err := g.Drive(Op{Kind: KindAllReduce, Elems: 3}, func() error { return boom }); !errors.Is(err, boom) || !errors.Is(err, ErrAborted) {
		t.Fatalf("failed move: %v", err)
	}
	if err := g.Drive(Op{Kind: KindAllReduce, Elems: 3}, func() error { return nil }); !errors.Is(err, ErrAborted) {
		t.Fatalf("drive after an abort: %v", err)
	}
	if s := w.Stats(); len(s) != 0 {
		t.Fatalf("failed drives counted %v", s)
	}
}
