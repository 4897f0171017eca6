package comm

import (
	"context"
	"sync"
	"testing"
)

// plainTransport is the in-process transport with only the Endpoint
// methods, as a transport without ReduceScatterV looks.
type plainTransport struct{ Transport }

func (t plainTransport) NewGroup(ranks []int) ([]Endpoint, error) {
	eps, err := t.Transport.NewGroup(ranks)
	for i, e := range eps {
		if e != nil {
			eps[i] = struct{ Endpoint }{e}
		}
	}
	return eps, err
}

// TestReduceScatterVFallback: on a transport without ReduceScatterV,
// Comm.ReduceScatterV goes through AllToAllV and gives the in-process
// transport's member-order sums bit for bit, with the same byte count.
func TestReduceScatterVFallback(t *testing.T) {
	const p = 3
	counts := []int{5, 0, 1100}
	total := 1105
	in := make([][]float32, p)
	for r := range in {
		in[r] = make([]float32, total)
		for i := range in[r] {
			in[r][i] = float32((i*31+r*17)%97)/7 - 6.5
		}
	}
	run := func(tr Transport) ([][]float32, Counter) {
		w, err := New(Options{Size: p, Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		g, err := w.Group("rsv", 0, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		out := make([][]float32, p)
		var wg sync.WaitGroup
		errs := make([]error, p)
		for r := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[r] = make([]float32, counts[r])
				errs[r] = g.Comm(r).ReduceScatterV(context.Background(), in[r], out[r], counts)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return out, w.Stats().Kind(KindReduceScatter)
	}
	want, wantBytes := run(nil)
	got, gotBytes := run(plainTransport{newLocal()})
	for r := range got {
		for i := range got[r] {
			if got[r][i] != want[r][i] {
				t.Fatalf("rank %d element %d: %v through AllToAllV, %v in process", r, i, got[r][i], want[r][i])
			}
		}
	}
	if gotBytes.SentBytes != wantBytes.SentBytes || wantBytes.SentBytes != int64(p-1)*int64(total)*4 {
		t.Fatalf("bytes %d through AllToAllV, %d in process, want %d", gotBytes.SentBytes, wantBytes.SentBytes, (p-1)*total*4)
	}
}
