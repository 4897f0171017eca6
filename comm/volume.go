package comm

// Byte accounting. Every function here returns the bytes one member of a
// P-member group sends and receives when the operation runs with the
// standard bandwidth-optimal algorithm of its kind (the ring algorithms of
// NCCL and MPICH), whatever the transport actually does: the in-process
// transport moves nothing over a wire, yet reports what a real one would,
// so tests and the simulator can hold plans to the papers' formulas. n and
// counts are in elements, elemBytes is the wire size of one element (4 for
// float32, 2 for BF16). A member's own data never leaves it.
//
// Per transformer layer, with n batched tokens, hidden size d, P ranks and
// e bytes per element (paper 000, Shift Parallelism, Table 2 and
// Algorithm 1), these give:
//
//	TP over P ranks: two all-reduces of n·d elements, after the attention
//	output projection and after the MLP down projection:
//	    c(n,w) = 2 · 2(P−1)/P · n·d·e  bytes sent (and received) per rank.
//	SP (Ulysses) over P ranks: two all-to-alls, of the fused QKV activations
//	[n/P, 3d] before attention and of the attention output [n, d/P] after it:
//	    (P−1)/P · (3·n·d/P + n·d/P) · e = 4(P−1)/P² · n·d·e = c(n,w)/P,
//
// so SP moves 1/SP of TP's volume per rank (Table 2's "Comm. Volume"
// column: c(n,w) vs c(n,w)/SP). With GQA the QKV width 3d becomes
// d + 2·d_kv (after any KV-head replication), which only lowers SP's share.

// chunk returns the length of chunk j of a ring collective over n elements
// split among p members: elements [j·n/p, (j+1)·n/p), j taken mod p.
func chunk(n, p, j int) int64 {
	j %= p
	return int64((j+1)*n/p - j*n/p)
}

// AllReduceBytes is the ring all-reduce (reduce-scatter then all-gather)
// of n elements: member r sends chunks r, r−1, …, r−P+2 and ends the
// reduce-scatter owning chunk r+1, then sends chunks r+1, r, …, r−P+3
// (chunks as in [j·n/P, (j+1)·n/P), indices mod P). When P divides n both
// directions are 2(P−1)/P · n · elemBytes.
func AllReduceBytes(n, p, member, elemBytes int) (sent, recv int64) {
	if p <= 1 {
		return 0, 0
	}
	e := int64(elemBytes)
	sent = (2*int64(n) - chunk(n, p, member+1) - chunk(n, p, member+2)) * e
	recv = (2*int64(n) - chunk(n, p, member) - chunk(n, p, member+1)) * e
	return sent, recv
}

// AllGatherBytes is the ring all-gather in which member j contributes
// counts[j] elements: member r forwards every block except block r+1 and
// receives every block except its own. With equal counts both directions
// are (P−1)/P of the gathered buffer.
func AllGatherBytes(counts []int, member, elemBytes int) (sent, recv int64) {
	p := len(counts)
	if p <= 1 {
		return 0, 0
	}
	return ringBytes(counts, (member+1)%p, member, elemBytes)
}

// ringBytes is a ring over len(counts) ≥ 2 members in which a member
// sends every block but block notSent and receives every block but block
// notRecv.
func ringBytes(counts []int, notSent, notRecv, elemBytes int) (sent, recv int64) {
	var total int64
	for _, c := range counts {
		total += int64(c)
	}
	e := int64(elemBytes)
	return (total - int64(counts[notSent])) * e, (total - int64(counts[notRecv])) * e
}

// ReduceScatterBytes is the ring reduce-scatter in which every member
// receives m reduced elements: each member sends and receives P−1 partial
// chunks of m, (P−1)/P of its send buffer of P·m elements.
func ReduceScatterBytes(m, p, elemBytes int) (sent, recv int64) {
	v := int64(p-1) * int64(m) * int64(elemBytes)
	return v, v
}

// AllToAllBytes is the pairwise all-to-all: member r sends sendCounts[j]
// elements to every other member j and receives recvCounts[i] from every
// other member i; its own chunk stays local. With equal splits both
// directions are (P−1)/P of the send buffer.
func AllToAllBytes(sendCounts, recvCounts []int, member, elemBytes int) (sent, recv int64) {
	for j, c := range sendCounts {
		if j != member {
			sent += int64(c)
		}
	}
	for i, c := range recvCounts {
		if i != member {
			recv += int64(c)
		}
	}
	e := int64(elemBytes)
	return sent * e, recv * e
}

// BroadcastBytes is the pipelined ring (chain) broadcast of NCCL: members
// form the chain root, root+1, …, root+P−1 (mod P); every member but the
// last in the chain sends the n elements once, every member but the root
// receives them once. Over the group that is (P−1)·n elements each way.
func BroadcastBytes(n, p, member, root, elemBytes int) (sent, recv int64) {
	pos := (member - root + p) % p
	v := int64(n) * int64(elemBytes)
	if pos < p-1 {
		sent = v
	}
	if pos > 0 {
		recv = v
	}
	return sent, recv
}
