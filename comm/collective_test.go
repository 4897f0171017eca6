package comm_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// Every collective at every group size, against a sequential reference.
// Lengths cover empty buffers, lengths not divisible by the group size,
// both all-reduce paths (whole-buffer and chunked) and chunks longer than
// the transport's reduction block.
func TestCollectives(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, w *comm.World)
	}{
		{"AllReduce", testAllReduce},
		{"AllGather", testAllGather},
		{"AllGatherV", testAllGatherV},
		{"ReduceScatter", testReduceScatter},
		{"AllToAll", testAllToAll},
		{"AllToAllV", testAllToAllV},
		{"Broadcast", testBroadcast},
		{"SendRecv", testSendRecv},
		{"Barrier", testBarrier},
	}
	for _, tt := range tests {
		for _, p := range sizes {
			t.Run(fmt.Sprintf("%s/P=%d", tt.name, p), func(t *testing.T) {
				w := newWorld(t, p)
				tt.run(t, w)
				if err := w.Err(); err != nil {
					t.Fatalf("world aborted: %v", err)
				}
			})
		}
	}
}

func world(w *comm.World) *comm.Group {
	g, err := w.Group("world", allRanks(w.Size())...)
	if err != nil {
		panic(err)
	}
	return g
}

func allRanks(p int) []int {
	r := make([]int, p)
	for i := range r {
		r[i] = i
	}
	return r
}

func testAllReduce(t *testing.T, w *comm.World) {
	p := w.Size()
	for _, n := range []int{0, 1, 7, 36, 37, 100, 256, 257, 2049, 5000, 3*4096*p + 5} {
		in := make([][]float32, p)
		for r := range in {
			in[r] = input(uint64(n), r, n)
		}
		want := sumInOrder(in)
		out := make([][]float32, p)
		runRanks(t, world(w), func(c *comm.Comm) error {
			out[c.Rank()] = slices.Clone(in[c.Rank()])
			return c.AllReduce(bg, out[c.Rank()])
		})
		for r := range out {
			sameBits(t, fmt.Sprintf("n=%d rank %d", n, r), out[r], want)
		}
	}
}

func testAllGather(t *testing.T, w *comm.World) {
	p := w.Size()
	for _, m := range []int{0, 1, 5, 300} {
		var want []float32
		for r := range p {
			want = append(want, input(uint64(m), r, m)...)
		}
		for _, inPlace := range []bool{false, true} {
			out := make([][]float32, p)
			runRanks(t, world(w), func(c *comm.Comm) error {
				r := c.Rank()
				recv := make([]float32, p*m)
				send := input(uint64(m), r, m)
				if inPlace {
					copy(recv[r*m:], send)
					send = recv[r*m : (r+1)*m]
				}
				out[r] = recv
				return c.AllGather(bg, send, recv)
			})
			for r := range out {
				sameBits(t, fmt.Sprintf("m=%d inPlace=%v rank %d", m, inPlace, r), out[r], want)
			}
		}
	}
}

func testAllGatherV(t *testing.T, w *comm.World) {
	p := w.Size()
	for _, scale := range []int{1, 97} {
		counts := make([]int, p)
		total := 0
		for j := range counts {
			counts[j] = (j*3 + 1) % 5 * scale // uneven, with zeros at j = 3, 8, …
			total += counts[j]
		}
		var want []float32
		for r := range p {
			want = append(want, input(7, r, counts[r])...)
		}
		out := make([][]float32, p)
		runRanks(t, world(w), func(c *comm.Comm) error {
			r := c.Rank()
			out[r] = make([]float32, total)
			return c.AllGatherV(bg, input(7, r, counts[r]), out[r], counts)
		})
		for r := range out {
			sameBits(t, fmt.Sprintf("counts=%v rank %d", counts, r), out[r], want)
		}
	}
}

func testReduceScatter(t *testing.T, w *comm.World) {
	p := w.Size()
	for _, m := range []int{0, 1, 5, 1500, 5000} {
		in := make([][]float32, p)
		for r := range in {
			in[r] = input(uint64(m), r, p*m)
		}
		want := sumInOrder(in)
		for _, inPlace := range []bool{false, true} {
			out := make([][]float32, p)
			runRanks(t, world(w), func(c *comm.Comm) error {
				r := c.Rank()
				send := slices.Clone(in[r])
				recv := make([]float32, m)
				if inPlace {
					recv = send[r*m : (r+1)*m]
				}
				out[r] = recv
				return c.ReduceScatter(bg, send, recv)
			})
			for r := range out {
				sameBits(t, fmt.Sprintf("m=%d inPlace=%v rank %d", m, inPlace, r), out[r], want[r*m:(r+1)*m])
			}
		}
	}
}

func testAllToAll(t *testing.T, w *comm.World) {
	p := w.Size()
	for _, chunk := range []int{0, 1, 3, 700} {
		in := make([][]float32, p)
		for r := range in {
			in[r] = input(uint64(chunk), r, p*chunk)
		}
		out := make([][]float32, p)
		runRanks(t, world(w), func(c *comm.Comm) error {
			r := c.Rank()
			out[r] = make([]float32, p*chunk)
			return c.AllToAll(bg, in[r], out[r])
		})
		for r := range p {
			var want []float32
			for i := range p {
				want = append(want, in[i][r*chunk:(r+1)*chunk]...)
			}
			sameBits(t, fmt.Sprintf("chunk=%d rank %d", chunk, r), out[r], want)
		}
	}
}

func testAllToAllV(t *testing.T, w *comm.World) {
	p := w.Size()
	for _, scale := range []int{1, 50} {
		// cnt[i][j]: elements member i sends to member j.
		cnt := make([][]int, p)
		for i := range cnt {
			cnt[i] = make([]int, p)
			for j := range cnt[i] {
				cnt[i][j] = (i*5 + j*3 + scale) % 7 * scale
			}
		}
		sendCounts := func(i int) []int { return cnt[i] }
		recvCounts := func(i int) []int {
			rc := make([]int, p)
			for j := range rc {
				rc[j] = cnt[j][i]
			}
			return rc
		}
		in := make([][]float32, p)
		for i := range in {
			in[i] = input(uint64(scale), i, sum(cnt[i]))
		}
		out := make([][]float32, p)
		runRanks(t, world(w), func(c *comm.Comm) error {
			r := c.Rank()
			out[r] = make([]float32, sum(recvCounts(r)))
			return c.AllToAllV(bg, in[r], sendCounts(r), out[r], recvCounts(r))
		})
		for r := range p {
			var want []float32
			for i := range p {
				off := sum(cnt[i][:r])
				want = append(want, in[i][off:off+cnt[i][r]]...)
			}
			sameBits(t, fmt.Sprintf("scale=%d rank %d", scale, r), out[r], want)
		}
	}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func testBroadcast(t *testing.T, w *comm.World) {
	p := w.Size()
	for root := range p {
		for _, n := range []int{0, 1, 1000} {
			want := input(uint64(n), root, n)
			out := make([][]float32, p)
			runRanks(t, world(w), func(c *comm.Comm) error {
				r := c.Rank()
				out[r] = make([]float32, n)
				if r == root {
					copy(out[r], want)
				}
				return c.Broadcast(bg, out[r], root)
			})
			for r := range out {
				sameBits(t, fmt.Sprintf("root=%d n=%d rank %d", root, n, r), out[r], want)
			}
		}
	}
}

// testSendRecv passes a message around the ring, r → r+1, twice: even
// members send first and odd ones receive first, so the synchronous sends
// cannot all block at once.
func testSendRecv(t *testing.T, w *comm.World) {
	p := w.Size()
	if p == 1 {
		return
	}
	const n = 333
	out := make([][]float32, p)
	runRanks(t, world(w), func(c *comm.Comm) error {
		r := c.Rank()
		next, prev := (r+1)%p, (r+p-1)%p
		out[r] = make([]float32, 2*n)
		for round := range 2 {
			send := input(uint64(round), r, n)
			recv := out[r][round*n : (round+1)*n]
			if r%2 == 0 {
				if err := c.Send(bg, send, next); err != nil {
					return err
				}
				if err := c.Recv(bg, recv, prev); err != nil {
					return err
				}
			} else {
				if err := c.Recv(bg, recv, prev); err != nil {
					return err
				}
				if err := c.Send(bg, send, next); err != nil {
					return err
				}
			}
		}
		return nil
	})
	for r := range p {
		prev := (r + p - 1) % p
		want := append(input(0, prev, n), input(1, prev, n)...)
		sameBits(t, fmt.Sprintf("rank %d", r), out[r], want)
	}
}

func testBarrier(t *testing.T, w *comm.World) {
	p := w.Size()
	// Each member writes its slot of phase k before barrier k and checks
	// every slot of phase k after it.
	const phases = 20
	seen := make([][]int, phases)
	for k := range seen {
		seen[k] = make([]int, p)
	}
	runRanks(t, world(w), func(c *comm.Comm) error {
		for k := range phases {
			seen[k][c.Rank()] = k + 1
			if err := c.Barrier(bg); err != nil {
				return err
			}
			for j, v := range seen[k] {
				if v != k+1 {
					return fmt.Errorf("phase %d: member %d not arrived", k, j)
				}
			}
		}
		return nil
	})
}

// Back-to-back operations of every kind on one group reuse the rendezvous
// many times; each result is checked, so a generation mix-up (a member
// reading a peer's buffer from the previous or next operation) shows as a
// wrong value, and under -race as a data race.
func TestBackToBack(t *testing.T) {
	iters := 300
	if testing.Short() {
		iters = 50
	}
	for _, p := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			w := newWorld(t, p)
			bad := make([]string, p)
			runRanks(t, world(w), func(c *comm.Comm) error {
				r := c.Rank()
				ar := make([]float32, 64)
				ag := make([]float32, p*3)
				a2a := make([]float32, p*2)
				recv := make([]float32, p*2)
				for it := range iters {
					n := 1 + it%64
					for i := range ar[:n] {
						ar[i] = float32(it + r)
					}
					if err := c.AllReduce(bg, ar[:n]); err != nil {
						return err
					}
					want := float32(p*it + p*(p-1)/2)
					for i, v := range ar[:n] {
						if v != want && bad[r] == "" {
							bad[r] = fmt.Sprintf("iter %d: all-reduce[%d] = %v, want %v", it, i, v, want)
						}
					}
					if err := c.AllGather(bg, []float32{float32(it), float32(r), float32(-it)}, ag); err != nil {
						return err
					}
					for j := range p {
						if (ag[3*j] != float32(it) || ag[3*j+1] != float32(j)) && bad[r] == "" {
							bad[r] = fmt.Sprintf("iter %d: all-gather block %d = %v", it, j, ag[3*j:3*j+3])
						}
					}
					for j := range p {
						a2a[2*j], a2a[2*j+1] = float32(it), float32(r*100+j)
					}
					if err := c.AllToAll(bg, a2a, recv); err != nil {
						return err
					}
					for i := range p {
						if (recv[2*i] != float32(it) || recv[2*i+1] != float32(i*100+r)) && bad[r] == "" {
							bad[r] = fmt.Sprintf("iter %d: all-to-all chunk %d = %v", it, i, recv[2*i:2*i+2])
						}
					}
					if err := c.Broadcast(bg, ar[:1], it%p); err != nil {
						return err
					}
					if it%10 == 0 {
						if err := c.Barrier(bg); err != nil {
							return err
						}
					}
				}
				return nil
			})
			for r, b := range bad {
				if b != "" {
					t.Errorf("rank %d: %s", r, b)
				}
			}
		})
	}
}
