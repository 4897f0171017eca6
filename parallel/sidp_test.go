package parallel

import (
	"fmt"
	"testing"
)

// TestSiDPOwnership is C1: every layer's MLP pieces are held by exactly one
// replica (o(l) = l mod DP) at every TP index, a non-owner holds none of
// them, and everything else is held as under plain DP.
func TestSiDPOwnership(t *testing.T) {
	c := cfg(8, 2, 7)
	for _, p := range []Plan{{DP: 2, PP: 1, SP: 1, TP: 1}, {DP: 3, PP: 1, SP: 1, TP: 2}, {DP: 4, PP: 1, SP: 1, TP: 1}} {
		l, err := SiDPPlacement(p, FFNWaS)
		if err != nil {
			t.Fatal(err)
		}
		plain := Standard(p)
		for r := range l.Coords {
			held := map[[2]int]bool{} // (tensor, layer)
			other := 0
			for _, pc := range l.Pieces(c, r) {
				switch pc.Tensor {
				case TWGate, TWUp, TWDown:
					if pc.Layers.Len() != 1 {
						t.Fatalf("%s rank %d: MLP piece over layers %v", l, r, pc.Layers)
					}
					held[[2]int{int(pc.Tensor), pc.Layers.Lo}] = true
				default:
					other++
				}
			}
			if want := len(plain.Pieces(c, r)) - 3; other != want {
				t.Errorf("%s rank %d: %d other pieces, plain DP %d", l, r, other, want)
			}
			for layer := 0; layer < c.Layers; layer++ {
				own := layer%p.DP == l.Coords[r].DP
				for _, tn := range []Tensor{TWGate, TWUp, TWDown} {
					if held[[2]int{int(tn), layer}] != own {
						t.Errorf("%s rank %d layer %d %s: held %v, owner %v", l, r, layer, tn, !own, own)
					}
				}
				if src := l.FFNSource(r, layer); l.Coords[src].DP != layer%p.DP || l.Coords[src].TP != l.Coords[r].TP {
					t.Errorf("%s rank %d layer %d reads rank %d at %+v", l, r, layer, src, l.Coords[src])
				}
			}
			if n := l.OwnedFFNLayers(c, r); n != (c.Layers-l.Coords[r].DP+p.DP-1)/p.DP {
				t.Errorf("%s rank %d owns %d layers", l, r, n)
			}
		}
	}
	for _, bad := range []Plan{{DP: 1, PP: 1, SP: 1, TP: 2}, {DP: 2, PP: 2, SP: 1, TP: 1}, {DP: 2, PP: 1, SP: 2, TP: 1}} {
		if _, err := SiDPPlacement(bad, FFNWaS); err == nil {
			t.Errorf("SiDPPlacement(%s) accepted", bad)
		}
	}
}

// TestPrefetchOrder is C7: each replica fetches each non-owned layer once
// per step; with peak shifting, at every prefetch index of a full cycle no
// owner has two readers; without it, every reader of an index reads one
// owner.
func TestPrefetchOrder(t *testing.T) {
	for _, n := range []int{2, 3, 4, 8} {
		for _, layers := range []int{n, 2 * n, 3*n + 1, 5} {
			for _, shift := range []bool{true, false} {
				orders := make([][]int, n)
				for r := range n {
					orders[r] = PrefetchOrder(layers, n, r, shift)
					seen := map[int]int{}
					for _, l := range orders[r] {
						seen[l]++
					}
					for l := 0; l < layers; l++ {
						if want := map[bool]int{true: 0, false: 1}[l%n == r]; seen[l] != want {
							t.Fatalf("n=%d layers=%d shift=%v replica %d fetches layer %d %d times", n, layers, shift, r, l, seen[l])
						}
					}
				}
				// Full cycles: N−1 fetches each, index j of cycle c at position c·(N−1)+j.
				for c := 0; c+n <= layers; c += n {
					for j := 0; j < n-1; j++ {
						owners := map[int]int{}
						for r := range n {
							owners[orders[r][c/n*(n-1)+j]%n]++
						}
						if shift && len(owners) != n {
							t.Errorf("n=%d layers=%d cycle %d index %d: readers per owner %v, want one each", n, layers, c, j, owners)
						}
						if !shift && n > 2 && len(owners) == n {
							t.Errorf("n=%d cycle %d index %d: without shifting the owners are spread %v", n, c, j, owners)
						}
					}
				}
				if !shift && layers >= n {
					// Index 0 of the first cycle: every replica but 0 reads layer 0's owner.
					hits := 0
					for r := 1; r < n; r++ {
						if orders[r][0] == 0 {
							hits++
						}
					}
					if hits != n-1 {
						t.Errorf("n=%d: %d of %d readers on owner 0 at index 0 without shifting", n, hits, n-1)
					}
				}
			}
		}
	}
}

// TestSiDPMemory is C9 in bytes: SiDP frees (1−1/N)·F/TP − C_slots per
// rank against plain DP at the same plan, to the byte, where F is every
// layer's gate, up and down; with N ∤ L each rank frees its non-owned
// layers exactly.
func TestSiDPMemory(t *testing.T) {
	for _, tc := range []struct {
		plan   Plan
		layers int
		slots  int
	}{
		{Plan{DP: 2, PP: 1, SP: 1, TP: 1}, 4, 1},
		{Plan{DP: 4, PP: 1, SP: 1, TP: 1}, 8, 3},
		{Plan{DP: 2, PP: 1, SP: 1, TP: 2}, 6, 1},
		{Plan{DP: 3, PP: 1, SP: 1, TP: 1}, 7, 2},
	} {
		t.Run(fmt.Sprint(tc.plan, "/L=", tc.layers), func(t *testing.T) {
			c := cfg(8, 2, tc.layers)
			c.Intermediate = 96 // TP divides it
			l, _ := SiDPPlacement(tc.plan, FFNWaS)
			ffnAll := int64(4 * 3 * c.Intermediate * c.Hidden * c.Layers) // F in fp32 bytes
			perLayer := ffnAll / int64(c.Layers) / int64(tc.plan.TP)
			for r := range l.Coords {
				m := l.SiDPMemory(c, r, tc.slots, 4)
				if m.DPWeights != 4*Standard(tc.plan).WeightElems(c, r) {
					t.Errorf("rank %d: plain-DP weights %d", r, m.DPWeights)
				}
				slots := int64(tc.slots) * perLayer
				if m.Slots != slots {
					t.Errorf("rank %d: slots %d, want %d", r, m.Slots, slots)
				}
				nonOwned := int64(c.Layers - l.OwnedFFNLayers(c, r))
				if want := nonOwned*perLayer - slots; m.Gain != want {
					t.Errorf("rank %d: gain %d, want %d", r, m.Gain, want)
				}
				if c.Layers%tc.plan.DP == 0 {
					n := int64(tc.plan.DP)
					if want := (n-1)*ffnAll/n/int64(tc.plan.TP) - slots; m.Gain != want {
						t.Errorf("rank %d: gain %d, want (1−1/N)·F/TP − C_slots = %d", r, m.Gain, want)
					}
				}
			}
		})
	}
}
