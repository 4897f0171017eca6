package comm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// Each kind counts, per rank, the bytes of its standard algorithm: the
// closed forms of the package documentation, for buffers that divide
// evenly.
func TestByteCounts(t *testing.T) {
	const e = 4 // float32
	tests := []struct {
		kind comm.Kind
		call func(c *comm.Comm) error
		// sent, recv per rank in bytes for a group of p
		want func(p, rank int) (sent, recv int64)
	}{
		{comm.KindAllReduce, func(c *comm.Comm) error { return c.AllReduce(bg, make([]float32, 840)) },
			func(p, _ int) (int64, int64) { v := int64(2*(p-1)*840/p) * e; return v, v }},
		{comm.KindAllReduce, func(c *comm.Comm) error { return c.AllReduce(bg, make([]float32, 8400)) }, // chunked path
			func(p, _ int) (int64, int64) { v := int64(2*(p-1)*8400/p) * e; return v, v }},
		{comm.KindAllGather, func(c *comm.Comm) error {
			return c.AllGather(bg, make([]float32, 10), make([]float32, 10*c.Size()))
		}, func(p, _ int) (int64, int64) { v := int64((p-1)*10) * e; return v, v }},
		{comm.KindReduceScatter, func(c *comm.Comm) error {
			return c.ReduceScatter(bg, make([]float32, 10*c.Size()), make([]float32, 10))
		}, func(p, _ int) (int64, int64) { v := int64((p-1)*10) * e; return v, v }},
		{comm.KindAllToAll, func(c *comm.Comm) error {
			return c.AllToAll(bg, make([]float32, 10*c.Size()), make([]float32, 10*c.Size()))
		}, func(p, _ int) (int64, int64) { v := int64((p-1)*10) * e; return v, v }},
		{comm.KindBroadcast, func(c *comm.Comm) error { return c.Broadcast(bg, make([]float32, 10), 1%c.Size()) },
			func(p, rank int) (int64, int64) {
				root := 1 % p
				last := (root + p - 1) % p
				var s, r int64
				if rank != last {
					s = 10 * e
				}
				if rank != root {
					r = 10 * e
				}
				return s, r
			}},
		{comm.KindBarrier, func(c *comm.Comm) error { return c.Barrier(bg) },
			func(int, int) (int64, int64) { return 0, 0 }},
	}
	for _, tt := range tests {
		for _, p := range sizes {
			t.Run(fmt.Sprintf("%s/P=%d", tt.kind, p), func(t *testing.T) {
				w := newWorld(t, p)
				runRanks(t, world(w), tt.call)
				st := w.Stats()
				for r := range p {
					s, rc := tt.want(p, r)
					want := comm.Counter{Calls: 1, SentBytes: s, RecvBytes: rc}
					if got := st[comm.Key{Group: "world", Rank: r, Kind: tt.kind}]; got != want {
						t.Errorf("rank %d: %+v, want %+v", r, got, want)
					}
				}
				if len(st) != p {
					t.Errorf("%d rows, want one per rank:\n%v", len(st), st)
				}
			})
		}
	}
}

// The ring all-reduce of a length that P does not divide, chunk by chunk:
// n = 5 over P = 4 has chunks of 1, 1, 1 and 2 elements.
func TestAllReduceBytesUneven(t *testing.T) {
	want := [][2]int64{{8, 8}, {7, 8}, {7, 7}, {8, 7}} // elements sent, received
	var sumSent, sumRecv int64
	for r, w := range want {
		s, rc := comm.AllReduceBytes(5, 4, r, 1)
		if s != w[0] || rc != w[1] {
			t.Errorf("member %d: sent %d received %d, want %v", r, s, rc, w)
		}
		sumSent += s
		sumRecv += rc
	}
	if sumSent != 2*3*5 || sumRecv != 2*3*5 {
		t.Errorf("group total %d sent, %d received, want 2(P−1)n = 30", sumSent, sumRecv)
	}
}

// Whatever the counts, every byte sent is received: over the group, sent
// and received totals agree for every kind, point-to-point included.
func TestBytesConserved(t *testing.T) {
	const p = 5
	w := newWorld(t, p)
	runRanks(t, world(w), func(c *comm.Comm) error {
		r := c.Rank()
		if err := c.AllReduce(bg, make([]float32, 1003)); err != nil {
			return err
		}
		counts := []int{3, 0, 7, 1, 12}
		if err := c.AllGatherV(bg, make([]float32, counts[r]), make([]float32, 23), counts); err != nil {
			return err
		}
		sendCounts, recvCounts := make([]int, p), make([]int, p)
		for j := range p {
			sendCounts[j] = (r*3 + j) % 4 // member r sends (r·3+j) mod 4 to j
			recvCounts[j] = (j*3 + r) % 4
		}
		if err := c.AllToAllV(bg, make([]float32, sum(sendCounts)), sendCounts, make([]float32, sum(recvCounts)), recvCounts); err != nil {
			return err
		}
		if err := c.Broadcast(bg, make([]float32, 9), 3); err != nil {
			return err
		}
		if r == 0 {
			return c.Send(bg, make([]float32, 6), 4)
		}
		if r == 4 {
			return c.Recv(bg, make([]float32, 6), 0)
		}
		return nil
	})
	st := w.Stats()
	for _, k := range []comm.Kind{comm.KindAllReduce, comm.KindAllGather, comm.KindAllToAll, comm.KindBroadcast} {
		if c := st.Kind(k); c.SentBytes != c.RecvBytes || c.SentBytes == 0 {
			t.Errorf("%s: %d bytes sent, %d received", k, c.SentBytes, c.RecvBytes)
		}
	}
	if s, r := st.Kind(comm.KindSend), st.Kind(comm.KindRecv); s.SentBytes != 24 || r.RecvBytes != 24 || s.RecvBytes != 0 || r.SentBytes != 0 {
		t.Errorf("send %+v, recv %+v, want 24 bytes each way", s, r)
	}
	if tot := st.Total(); tot.SentBytes != tot.RecvBytes {
		t.Errorf("total %+v", tot)
	}
}

// Accounting uses the World's element size: a BF16 wire counts 2 bytes.
func TestElemBytes(t *testing.T) {
	w, err := comm.New(comm.Options{Size: 4, ElemBytes: 2})
	if err != nil {
		t.Fatal(err)
	}
	runRanks(t, world(w), func(c *comm.Comm) error { return c.AllReduce(bg, make([]float32, 1000)) })
	if got, want := w.Stats().Rank(0).SentBytes, int64(2*3*1000/4*2); got != want {
		t.Errorf("BF16 all-reduce sent %d bytes, want %d", got, want)
	}
}

func TestStatsSnapshots(t *testing.T) {
	w := newWorld(t, 2)
	g := world(w)
	step := func() {
		runRanks(t, g, func(c *comm.Comm) error { return c.AllReduce(bg, make([]float32, 100)) })
	}
	step()
	before := w.Stats()
	step()
	step()
	d := w.Stats().Sub(before)
	if got, want := d[comm.Key{Group: "world", Rank: 1, Kind: comm.KindAllReduce}], (comm.Counter{Calls: 2, SentBytes: 800, RecvBytes: 800}); got != want {
		t.Errorf("delta %+v, want %+v", got, want)
	}
	if s := d.String(); !strings.Contains(s, "group=world rank=0 kind=all_reduce calls=2 sent=800 recv=800\n") {
		t.Errorf("String:\n%s", s)
	}
	w.ResetStats()
	if st := w.Stats(); len(st) != 0 {
		t.Errorf("after ResetStats: %v", st)
	}
}

// Table 2 of the Shift Parallelism paper (paper 000), per transformer layer
// and per GPU: TP moves c(n,w) and SP moves c(n,w)/SP. With n tokens,
// hidden size d and P ranks (Algorithm 1):
//
//	TP: 2 all-reduces of [n, d]             → c = 2·2(P−1)/P·n·d·e
//	SP: all-to-all of the QKV [n/P, 3d] and
//	    of the attention output [n, d/P]    → (P−1)/P·(3nd/P + nd/P)·e = c/P
//
// The layer's collectives are run for real and the counted bytes of every
// rank are held to both formulas. The combined base config (SP=s, TP=t)
// and the shift config (full TP over s·t ranks ordered tp-major) run on
// their subgroups of one World, and each group label is held to its own
// formula.
func TestShiftTable2Volumes(t *testing.T) {
	const e = 4
	const d = 48 // hidden size: divisible by every P below
	for _, p := range []int{2, 3, 4, 6, 8} {
		n := 8 * p // batched tokens, padded to a multiple of SP
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			c := int64(2*2*(p-1)*n*d/p) * e // the paper's c(n,w), per rank
			tp := newWorld(t, p)
			runRanks(t, world(tp), func(cm *comm.Comm) error { return tpLayer(cm, n, d) })
			sp := newWorld(t, p)
			runRanks(t, world(sp), func(cm *comm.Comm) error { return spLayer(cm, n, d) })
			for r := range p {
				tpBytes, spBytes := tp.Stats().Rank(r), sp.Stats().Rank(r)
				if tpBytes.SentBytes != c || tpBytes.RecvBytes != c {
					t.Errorf("rank %d: TP layer moved %+v, want c(n,w) = %d each way", r, tpBytes, c)
				}
				if spBytes.SentBytes*int64(p) != c || spBytes.RecvBytes*int64(p) != c {
					t.Errorf("rank %d: SP layer moved %+v, want c(n,w)/SP = %d/%d each way", r, spBytes, c, p)
				}
			}
		})
	}

	// Base (SP=3, TP=2) and shift (TP=6) configs on one World of 6 ranks.
	const s, tpDeg = 3, 2
	p := s * tpDeg
	n := 4 * s
	w := newWorld(t, p)
	tpc, spc, full := shiftGroups(t, w, s, tpDeg)
	runAll(t, p, func(r int) error {
		// Base config: SP all-to-alls over head chunks of width d/t, then the
		// TP all-reduces over this rank's n/s tokens.
		if err := spLayer(spc[r], n, d/tpDeg); err != nil {
			return err
		}
		if err := tpLayer(tpc[r], n/s, d); err != nil {
			return err
		}
		return tpLayer(full.Comm(r), n, d) // shift config
	})
	st := w.Stats()
	wantSP := int64(4*(s-1)*n*d/(s*s*tpDeg)) * e // 4(s−1)/s²·n·d/t
	wantTP := int64(4*(tpDeg-1)*(n/s)*d/tpDeg) * e
	wantShift := int64(4*(p-1)*n*d/p) * e
	for r := range p {
		for _, c := range []struct {
			label string
			want  int64
		}{{"sp", wantSP}, {"tp", wantTP}, {"shift", wantShift}} {
			got := st.Sum(func(k comm.Key) bool { return k.Group == c.label && k.Rank == r })
			if got.SentBytes != c.want || got.RecvBytes != c.want {
				t.Errorf("rank %d group %s: %+v, want %d bytes each way", r, c.label, got, c.want)
			}
		}
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
}

// tpLayer runs one layer's TP communication: the all-reduces after the
// attention output projection and after the MLP down projection, each of
// n tokens × d.
func tpLayer(c *comm.Comm, n, d int) error {
	embed := make([]float32, n*d)
	if err := c.AllReduce(bg, embed); err != nil {
		return err
	}
	return c.AllReduce(bg, embed)
}

// spLayer runs one layer's Ulysses SP communication on an SP group of P
// members for n tokens, when each rank holds attention heads of total
// width dh (d/TP under TP): the fused QKV [n/P, 3·dh] goes to head chunks
// [n, 3·dh/P], and the attention output [n, dh/P] comes back as
// [n/P, dh].
func spLayer(c *comm.Comm, n, dh int) error {
	p := c.Size()
	qkv := make([]float32, n/p*3*dh)
	if err := c.AllToAll(bg, qkv, make([]float32, len(qkv))); err != nil {
		return err
	}
	attn := make([]float32, n*dh/p)
	return c.AllToAll(bg, attn, make([]float32, len(attn)))
}
