package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Network is the fabric between servers: the per-pair paths that leave a
// server cross its NICs, which all of the server's GPUs share.
const Network LinkKind = "network"

// Constants of the inter-server network. Each is global and sourced.
const (
	// P4dNetworkBytesPerS is the network bandwidth of one AWS
	// p4d.24xlarge, one direction: "400 Gbps instance networking" with
	// EFA, four 100 Gbps adapters (Amazon EC2 P4 instance page,
	// aws.amazon.com/ec2/instance-types/p4: 8 NVIDIA A100 Tensor Core GPUs
	// of 40 GB, 600 GB/s NVSwitch, 400 Gbps ENA and EFA networking, 96
	// vCPUs, 1,152 GiB): 400e9/8 bytes per second. The CSPS paper (papers/002
	// §5.2) gives the same 400 Gbps per server.
	P4dNetworkBytesPerS = 400e9 / 8

	// NetHopLatency is one algorithm step over the network, seconds:
	// AWS quotes EFA's (SRD's) MPI point-to-point latency at about 15 µs
	// (re:Invent 2019 EFA launch material; Shalev et al., "A Cloud-Optimized
	// Transport Protocol for Elastic and Scalable HPC", IEEE Micro 2020).
	// Not measured here; it matters only for small messages (the SP
	// decode's Q and (O, LSE) exchange).
	NetHopLatency = 15e-6
)

// NIC is one server's network: every GPU's traffic to another server
// crosses it, so the GPUs of a server that send at once share it.
type NIC struct {
	Name       string
	BytesPerS  float64 // the server's total, one direction
	HopLatency float64 // seconds per algorithm step
	Efficiency float64 // fraction large messages reach
	Source     string
}

// p4dNIC is AWS p4d.24xlarge's 4×100 Gbps EFA.
var p4dNIC = NIC{Name: "4x100Gbps-EFA", BytesPerS: P4dNetworkBytesPerS, HopLatency: NetHopLatency, Efficiency: LinkEfficiency,
	Source: "Amazon EC2 P4 instance page: p4d.24xlarge, 400 Gbps ENA and EFA networking (4×100 Gbps EFA adapters)"}

// clusterServers are the servers a cluster spec may name.
var clusterServers = map[string]struct {
	node string
	nic  NIC
}{
	"p4d.24xlarge": {"8xA100-40GB", p4dNIC},
}

// Cluster is Servers identical servers, each a Node, joined by a network
// through each server's NIC. GPUs are numbered globally, server-major:
// GPU g is GPU g mod Node.Count of server g / Node.Count, and racks hold
// ServersPerRack consecutive servers. It is a value; its methods are pure.
type Cluster struct {
	Node           Node
	Servers        int
	ServersPerRack int
	NIC            NIC
	name           string
}

// ParseCluster reads a cluster written SERVERSxINSTANCE, e.g.
// "8xp4d.24xlarge": 8 AWS p4d.24xlarge (8×A100-40GB on NVSwitch, 400 Gbps
// EFA each), the CSPS paper's 64-GPU testbed. The paper does not give the
// rack layout; the servers form one rack (spec csps.md S1, inferred).
func ParseCluster(s string) (Cluster, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	count, name := 1, t
	if i := strings.IndexByte(t, 'x'); i > 0 {
		if n, err := strconv.Atoi(t[:i]); err == nil {
			count, name = n, t[i+1:]
		}
	}
	srv, ok := clusterServers[name]
	if !ok {
		return Cluster{}, fmt.Errorf("sim: cluster %q: unknown server %q (known: p4d.24xlarge)", s, name)
	}
	if count < 1 || count > 1024 {
		return Cluster{}, fmt.Errorf("sim: cluster %q: server count must be in [1, 1024]", s)
	}
	node, err := ParseNode(srv.node)
	if err != nil {
		return Cluster{}, err
	}
	return Cluster{Node: node, Servers: count, ServersPerRack: count, NIC: srv.nic, name: fmt.Sprintf("%dx%s", count, name)}, nil
}

// String is the cluster as ParseCluster reads it.
func (c Cluster) String() string {
	if c.name != "" {
		return c.name
	}
	return fmt.Sprintf("%dx(%s)", c.Servers, c.Node)
}

// GPUs is the number of GPUs in the cluster.
func (c Cluster) GPUs() int { return c.Servers * c.Node.Count }

// Server is the server GPU g sits in.
func (c Cluster) Server(g int) int { return g / c.Node.Count }

// GPUID is a GPU's place: rack, server within the rack, GPU within the
// server (CSPS §3.2.4, spec R15).
type GPUID struct{ Rack, Server, GPU int }

// ID is GPU g's RackID-ServerID-GPUID.
func (c Cluster) ID(g int) GPUID {
	s := c.Server(g)
	per := max(c.ServersPerRack, 1)
	return GPUID{Rack: s / per, Server: s % per, GPU: g % c.Node.Count}
}

// bits is the width of a binary field holding 0 … n−1 (at least 1).
func bits(n int) int {
	b := 1
	for 1<<b < n {
		b++
	}
	return b
}

// IDString writes GPU g's ID as the paper does, binary fields joined by
// dashes, each as wide as its largest value needs: with 4 servers a rack
// and 8 GPUs a server, rack 0, server 3, GPU 2 is "0-11-010".
func (c Cluster) IDString(g int) string {
	id := c.ID(g)
	racks := (c.Servers + max(c.ServersPerRack, 1) - 1) / max(c.ServersPerRack, 1)
	f := func(v, n int) string {
		s := strconv.FormatInt(int64(v), 2)
		return strings.Repeat("0", max(0, bits(n)-len(s))) + s
	}
	return f(id.Rack, racks) + "-" + f(id.Server, c.ServersPerRack) + "-" + f(id.GPU, c.Node.Count)
}

// SortByID returns gpus in ascending ID order (R15: adjacent SPTs go to
// adjacent IDs, so nearby sequence partitions share a server).
func (c Cluster) SortByID(gpus []int) []int {
	out := slices.Clone(gpus)
	slices.SortFunc(out, func(a, b int) int {
		ia, ib := c.ID(a), c.ID(b)
		if ia.Rack != ib.Rack {
			return ia.Rack - ib.Rack
		}
		if ia.Server != ib.Server {
			return ia.Server - ib.Server
		}
		return ia.GPU - ib.GPU
	})
	return out
}

// PairLink is the path from GPU a to GPU b while sharers GPUs of a's
// server send to other servers at once (at least 1): the server's NVLink
// (each GPU's own NVLink bandwidth) when both sit in one server, else
// a's share of its server's NIC, NIC.BytesPerS/sharers, at the network's
// hop latency. The same GPU is a memory copy.
func (c Cluster) PairLink(a, b, sharers int) Link {
	if a == b {
		g := c.Node.GPU
		return Link{Kind: InProcess, BytesPerS: g.HBMBytesPerS, Efficiency: g.Eff.Memory}
	}
	if c.Server(a) == c.Server(b) {
		return c.Node.Link
	}
	return Link{Kind: Network, BytesPerS: c.NIC.BytesPerS / float64(max(sharers, 1)), HopLatency: c.NIC.HopLatency, Efficiency: c.NIC.Efficiency}
}

// PairBytesPerS is PairLink's effective bandwidth (efficiency applied),
// bytes per second: the entry (a, b) of the paper's matrix B.
func (c Cluster) PairBytesPerS(a, b, sharers int) float64 {
	l := c.PairLink(a, b, sharers)
	return l.BytesPerS * l.Efficiency
}
