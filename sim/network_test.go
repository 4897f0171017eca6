package sim

import (
	"math"
	"testing"
)

// TestClusterP4d checks the CSPS testbed: 8 p4d.24xlarge, 64 A100-40GB,
// NVLink inside a server, the server's 400 Gbps shared across servers.
func TestClusterP4d(t *testing.T) {
	c, err := ParseCluster("8xp4d.24xlarge")
	if err != nil {
		t.Fatal(err)
	}
	if c.GPUs() != 64 || c.Node.GPU.Name != "A100-40GB" || c.Node.Count != 8 || c.String() != "8xp4d.24xlarge" {
		t.Fatalf("cluster %s: %d GPUs of %s", c, c.GPUs(), c.Node.GPU.Name)
	}
	// Same server: NVLink at 300 GB/s one way (600 GB/s bidirectional), 0.8 of it.
	if got := c.PairBytesPerS(0, 7, 8); math.Abs(got-240e9) > 1 {
		t.Errorf("intra-server pair: %g B/s, want 240e9", got)
	}
	// Across servers, 8 GPUs of the server sending: 50 GB/s / 8 · 0.8 = 5 GB/s.
	if got := c.PairBytesPerS(0, 8, 8); math.Abs(got-5e9) > 1 {
		t.Errorf("inter-server pair, 8 sharers: %g B/s, want 5e9", got)
	}
	if got := c.PairBytesPerS(3, 63, 1); math.Abs(got-40e9) > 1 {
		t.Errorf("inter-server pair alone: %g B/s, want 40e9", got)
	}
	if l := c.PairLink(9, 17, 2); l.Kind != Network || l.HopLatency != NetHopLatency {
		t.Errorf("inter-server link %+v", l)
	}
	if n, err := ParseNode("p4d.24xlarge"); err != nil || n.Count != 8 || n.GPU.Name != "A100-40GB" || n.Link.Kind != NVLink {
		t.Errorf("p4d.24xlarge node: %v %v", n, err)
	}
	if _, err := ParseCluster("8xp5.48xlarge"); err == nil {
		t.Error("unknown server accepted")
	}
}

// TestGPUID reproduces the paper's example (§3.2.4): with racks of 4
// servers of 8 GPUs, rack 0, server 3, GPU 2 is 0-11-010; sorting by ID
// keeps a server's GPUs together.
func TestGPUID(t *testing.T) {
	c, err := ParseCluster("8xp4d.24xlarge")
	if err != nil {
		t.Fatal(err)
	}
	c.ServersPerRack = 4
	g := 3*8 + 2
	if id := c.ID(g); id != (GPUID{Rack: 0, Server: 3, GPU: 2}) {
		t.Errorf("ID(%d) = %+v", g, id)
	}
	if s := c.IDString(g); s != "0-11-010" {
		t.Errorf("IDString(%d) = %q, want 0-11-010", g, s)
	}
	if s := c.IDString(63); s != "1-11-111" {
		t.Errorf("IDString(63) = %q, want 1-11-111", s)
	}
	got := c.SortByID([]int{40, 3, 17, 2, 9})
	want := []int{2, 3, 9, 17, 40}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("SortByID = %v, want %v", got, want)
		}
	}
}
