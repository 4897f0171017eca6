package sim

import (
	"fmt"
	"math"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/policy"
)

// CSPS (papers/002, spec shared/specs/csps.md): sequence-parallel prefill
// of one long prompt over N GPUs of a Cluster, SP-NTP (Ulysses all-to-alls)
// or SP-TP (all-gather / reduce-scatter), with CSA's multi-level sparse
// attention and the communication–computation–communication pipeline of
// Eq. 7, priced with the cost model's kernels and collectives.
//
// Choices where the paper is open (each stated in docs/simulator.md):
//   - Degree: N = ⌈L_in / CSPSSPTMaxNTP⌉ (the smaller SPT limit, so either
//     architecture fits), then App A's inequality picks the architecture at
//     that N; N = 1 is a plain one-GPU prefill.
//   - Levels (R16): level 1 is each GPU's SPT, level 2 the request's GPUs
//     in one server, the top level all N; N_v = 1 is one level over all N
//     (dense, no CSA). Drops (R19 as intended): level 1 keeps all, level 2
//     keeps 1 − p, level 2+n keeps (1 − p)/2ⁿ, tokens kept uniformly.
//   - Causal micro-partitions (R32): a level's query micro-partition is
//     attended once all of that level's keys have arrived, so the second
//     all-to-all sends only finished rows; the QKV projection overlaps the
//     first all-to-all, attention the second, and the nearer (NVLink)
//     levels overlap the farther (network) ones.
//   - Head ownership across levels is nested (a GPU's heads at a higher
//     level are a subset of its heads at a lower one), so a same-server
//     peer gets each (token, head) once at the lower level's kept set (R22).
//   - Layers do not overlap each other; the layer is simulated for one GPU
//     of each server the request spans and the slowest sets its time.

// SPT limits (R12): the longest sequence partition one GPU holds, the
// paper's testbed values (§3.2.2, §5.2).
const (
	CSPSSPTMaxNTP = 64 << 10  // SP-NTP: full weights on every GPU
	CSPSSPTMaxTP  = 128 << 10 // SP-TP with TP = 8
	// CSPSMicro is the default micro-partitions per level: the middle of
	// App B's search range for M_{l,1} (4 … 16).
	CSPSMicro = 8
)

// CSPSArch is how a request's SP group runs attention.
type CSPSArch uint8

const (
	ArchNone CSPSArch = iota // N = 1: no sequence parallelism
	ArchNTP                  // SP-NTP: two all-to-alls, full weights per GPU
	ArchTP                   // SP-TP: all-gather and reduce-scatter, TP = N
)

// String is the paper's name for the architecture.
func (a CSPSArch) String() string {
	switch a {
	case ArchNTP:
		return "SP-NTP"
	case ArchTP:
		return "SP-TP"
	}
	return "none"
}

// ChooseArch is App A's rule (R13, policy.NTPCheaper, the one the CPU
// executor's policy applies): SP-NTP iff d/L < ½(1 − 2/N), evaluated
// exactly in integers as 2·d·N < L·(N − 2). N = 2 always gives SP-TP (the
// paper's sentence says the opposite; its inequality says this, G10) and
// N = 1 needs no SP.
func ChooseArch(d, lInput, n int) CSPSArch {
	switch {
	case n <= 1:
		return ArchNone
	case policy.NTPCheaper(lInput, d, n):
		return ArchNTP
	}
	return ArchTP
}

// CSPSDegree is R12's N for a prompt of lInput tokens: ⌈L / CSPSSPTMaxNTP⌉.
func CSPSDegree(lInput int) int { return max(1, (lInput+CSPSSPTMaxNTP-1)/CSPSSPTMaxNTP) }

// CSPSOptions configure one request's prefill.
type CSPSOptions struct {
	Levels int      // N_v: 1 = without CSA (dense); 0 means 1
	Drop   float64  // level-2 drop ratio p in [0, 1)
	Micro  int      // micro-partitions per level; 0 means CSPSMicro
	Arch   CSPSArch // 0: ChooseArch at the degree
	GPUs   []int    // the request's GPUs in SPT order (R15); nil: 0 … N−1
	N      int      // SP degree; 0: CSPSDegree
}

// CSPSLevel is one CSA level of a request.
type CSPSLevel struct {
	Span int     // GPUs per segment (1 = the SPT itself)
	Keep float64 // kept fraction of the segment's tokens
}

// CSPSPrefill is the predicted prefill of one request.
type CSPSPrefill struct {
	Arch    CSPSArch
	N       int
	SPT     int // tokens per GPU (the longest)
	Levels  []CSPSLevel
	Seconds float64 // the whole prefill: N_l layers, embedding, LM head, engine overhead
	Layer   float64 // one layer, pipelined

	// Busy times of one layer on the slowest GPU, seconds: what Fig. 5
	// splits TTFT into (they overlap, so they need not add up to Layer).
	Attention float64 // attention kernels
	Other     float64 // QKV, projections, MLP, merge, norms (T'_a)
	Comm      float64 // the busiest link (NVLink or the NIC share)

	// Bytes one GPU sends per layer, first and second all-to-all (SP-NTP)
	// or all-gathers and reduce-scatters (SP-TP).
	FirstBytes, SecondBytes float64
	// Pairs is the (query, key, query head) triples one GPU's attention
	// computes per layer, summed over levels.
	Pairs float64
}

// Shares are the fractions of the layer time its communication and its
// attention compute take (Fig. 5).
func (p CSPSPrefill) Shares() (comm, attention float64) {
	if p.Layer <= 0 {
		return 0, 0
	}
	return p.Comm / p.Layer, p.Attention / p.Layer
}

// cspsLevels lays out the levels of a request over gpus (R16).
func cspsLevels(c Cluster, gpus []int, levels int, drop float64) []CSPSLevel {
	n := len(gpus)
	perServer := 0 // the largest number of the request's GPUs in one server
	count := map[int]int{}
	for _, g := range gpus {
		count[c.Server(g)]++
		perServer = max(perServer, count[c.Server(g)])
	}
	if levels <= 1 || n == 1 {
		return []CSPSLevel{{Span: n, Keep: 1}}
	}
	spans := []int{1}
	if perServer > 1 && perServer < n {
		spans = append(spans, perServer)
	}
	spans = append(spans, n)
	if len(spans) > levels { // keep the lowest levels and the top
		spans = append(spans[:levels-1], n)
	}
	out := make([]CSPSLevel, len(spans))
	keep := 1 - drop
	for i, s := range spans {
		out[i] = CSPSLevel{Span: s, Keep: 1}
		if i >= 1 {
			out[i].Keep = keep / math.Pow(2, float64(i-1))
		}
	}
	return out
}

// DropFraction is the fraction of (token, level) pairs CSA drops: the mean
// of the levels' drop ratios (the paper's "22% of tokens dropped").
func DropFraction(levels []CSPSLevel) float64 {
	s := 0.0
	for _, l := range levels {
		s += 1 - l.Keep
	}
	return s / float64(len(levels))
}

// CSPSPrefillCost prices the prefill of lInput tokens of cfg on cluster c
// under opts.
func (m *CostModel) CSPSPrefillCost(cfg *model.Config, c Cluster, lInput int, opts CSPSOptions) (CSPSPrefill, error) {
	if lInput < 1 {
		return CSPSPrefill{}, fmt.Errorf("sim: CSPS prefill of %d tokens", lInput)
	}
	n := opts.N
	if n == 0 {
		n = CSPSDegree(lInput)
	}
	gpus := opts.GPUs
	if gpus == nil {
		for g := 0; g < n; g++ {
			gpus = append(gpus, g)
		}
	}
	if len(gpus) != n || n > c.GPUs() || n > lInput {
		return CSPSPrefill{}, fmt.Errorf("sim: CSPS prefill of %d tokens on %d GPUs (%d given, cluster %s)", lInput, n, len(gpus), c)
	}
	arch := opts.Arch
	if arch == ArchNone || n == 1 {
		arch = ChooseArch(cfg.Hidden, lInput, n)
	}
	micro := opts.Micro
	if micro <= 0 {
		micro = CSPSMicro
	}
	if opts.Drop < 0 || opts.Drop >= 1 {
		return CSPSPrefill{}, fmt.Errorf("sim: CSA drop ratio %g outside [0, 1)", opts.Drop)
	}
	out := CSPSPrefill{Arch: arch, N: n, SPT: (lInput + n - 1) / n, Levels: cspsLevels(c, gpus, opts.Levels, opts.Drop)}
	switch arch {
	case ArchNone:
		out.Levels = []CSPSLevel{{Span: 1, Keep: 1}}
		m.ntpLayer(cfg, c, gpus, &out, 1)
	case ArchNTP:
		m.ntpLayer(cfg, c, gpus, &out, micro)
	case ArchTP:
		m.tpLayer(cfg, c, gpus, &out, micro)
	}
	ends := m.GEMM(1, cfg.Vocab, cfg.Hidden, m.wgtDType) + m.Elementwise(int64(out.SPT)*int64(cfg.Hidden)*m.actBytes)
	out.Seconds = float64(cfg.Layers)*out.Layer + ends + m.eff.StepOverhead
	return out, nil
}

// CSPSConfigure is the configuring step (§3.2.6, R39) reduced to what the
// simulator can judge. Eq. 8 minimizes TTFT subject to F_Ad ≤ C_Ad; the
// simulator has no F_Ad, so it takes the drop ratio opts.Drop as given
// (the paper's operating point at C_Ad = 0, §5.3) and searches only the
// level count, N_v = 1 … opts.Levels (App B enumerates N_v too, R43):
// N_v = 1 is attention without CSA, which meets any accuracy constraint,
// so CSPS never runs a CSA layout slower than dense attention. That
// matters: with overlapping levels a CSA layer computes each level's
// pairs again (G1), and for a request inside one server at N = 2 … 4 the
// levels at p = 0.107 cost 5–30% more attention than N_v = 1 (level 1
// adds 1/N of the dense pairs, level 2 keeps (1 − p)² = 0.80 of them).
// Ties go to fewer levels. Degree, architecture and M are as in opts.
func (m *CostModel) CSPSConfigure(cfg *model.Config, c Cluster, lInput int, opts CSPSOptions) (CSPSPrefill, error) {
	var best CSPSPrefill
	for nv := 1; nv <= max(1, opts.Levels); nv++ {
		o := opts
		o.Levels = nv
		p, err := m.CSPSPrefillCost(cfg, c, lInput, o)
		if err != nil {
			return CSPSPrefill{}, err
		}
		if nv == 1 || p.Seconds < best.Seconds {
			best = p
		}
	}
	return best, nil
}

// task is one node of a layer's pipeline DAG.
type task struct {
	res   int // resource: resCompute, resNVLink, resNIC
	dur   float64
	deps  []int
	end   float64
	done  bool
	order int
}

const (
	resCompute = iota
	resNVLink
	resNIC
	numRes
)

// schedule list-schedules tasks (given in an order that respects their
// dependencies) on one compute stream and one stream per link: each step
// starts the task that can start first (ties: creation order). It returns
// the makespan and each resource's busy time.
func schedule(ts []task) (float64, [numRes]float64) {
	var free, busy [numRes]float64
	end := 0.0
	for left := len(ts); left > 0; left-- {
		best, bestStart := -1, math.Inf(1)
		for i := range ts {
			t := &ts[i]
			if t.done {
				continue
			}
			ready, ok := 0.0, true
			for _, d := range t.deps {
				if !ts[d].done {
					ok = false
					break
				}
				ready = max(ready, ts[d].end)
			}
			if !ok {
				continue
			}
			if s := max(ready, free[t.res]); s < bestStart {
				best, bestStart = i, s
			}
		}
		t := &ts[best]
		t.end, t.done = bestStart+t.dur, true
		free[t.res] = t.end
		busy[t.res] += t.dur
		end = max(end, t.end)
	}
	return end, busy
}

// serverGroups is the number of the request's GPUs in each server it
// spans, by server, and a GPU of each.
func serverGroups(c Cluster, gpus []int) map[int][2]int {
	out := map[int][2]int{}
	for _, g := range gpus {
		s := c.Server(g)
		e := out[s]
		if e[0] == 0 {
			e[1] = g
		}
		e[0]++
		out[s] = e
	}
	return out
}

// causalPairs is the (query, key) pairs of query micro-partition j (1 … M)
// of a segment of span SPTs of s tokens each, all kept at fraction keep:
// piece j of every SPT attends every earlier SPT and its own SPT's keys up
// to itself.
func causalPairs(span int, s float64, j, micro int, keep float64) float64 {
	q := s / float64(micro)
	within := (float64(j) - 0.5) * q
	sum := 0.0
	for i := 0; i < span; i++ {
		sum += q * (float64(i)*s + within)
	}
	return sum * keep * keep
}

// ntpLayer prices one SP-NTP layer (R1–R5, R16–R24, R29–R30): per
// micro-partition, QKV once; per level ≥ 2 the first all-to-all of its kept
// tokens (same-server peers over NVLink, deduplicated across levels; other
// servers' over the server's NIC shared by the request's GPUs in it),
// attention once the level's keys are in, the second all-to-all of (O,
// LSE) FIFO per link; level 1's attention is local; the merge and the
// layer's linear work once every level of the micro-partition is back.
func (m *CostModel) ntpLayer(cfg *model.Config, c Cluster, gpus []int, out *CSPSPrefill, micro int) {
	n := len(gpus)
	s := float64(out.SPT)
	d, dh := cfg.Hidden, cfg.HeadDim
	H, Hkv := cfg.Heads, cfg.KVHeads
	act := float64(m.actBytes)
	ms := max(1, int(math.Ceil(s/float64(micro))))
	qkvT := m.GEMM(ms, (H+2*Hkv)*dh, d, m.wgtDType) + m.Elementwise(int64(ms)*int64(2*d+(H+2*Hkv)*dh)*m.actBytes)
	linT := m.GEMM(ms, d, H*dh, m.wgtDType) + m.GEMM(ms, 2*cfg.Intermediate, d, m.wgtDType) + m.GEMM(ms, d, cfg.Intermediate, m.wgtDType) +
		m.Elementwise(int64(ms)*int64(len(out.Levels)*H*dh*2+4*d+3*cfg.Intermediate)*m.actBytes)
	heads := func(span int) (int, int) {
		return (H + span - 1) / span, max(1, (Hkv+span-1)/span)
	}
	worst := CSPSPrefill{}
	for _, grp := range serverGroups(c, gpus) {
		local, g := grp[0], grp[1]
		nv := c.Node.Link
		var net Link
		for _, o := range gpus {
			if c.Server(o) != c.Server(g) {
				net = c.PairLink(g, o, local)
				break
			}
		}
		var ts []task
		add := func(t task) int { t.order = len(ts); ts = append(ts, t); return len(ts) - 1 }
		var first, second, pairs, attn float64
		// Per level: bytes a GPU sends to its same-server and remote peers per micro-partition.
		type lv struct{ sendNV, sendNet, backNV, backNet float64 }
		lvs := make([]lv, len(out.Levels))
		lowestShared := -1 // the lowest level ≥ 2 (or the dense level) holding same-server peers
		for i, l := range out.Levels {
			if l.Span == 1 {
				continue
			}
			h, kv := heads(l.Span)
			tok := s / float64(micro) * l.Keep
			peersNV := min(l.Span, local) - 1
			peersNet := l.Span - min(l.Span, local)
			qkvW := float64((h+2*kv)*dh) * act
			if lowestShared < 0 && peersNV > 0 {
				lowestShared = i
				lvs[i].sendNV = tok * qkvW * float64(peersNV)
			}
			lvs[i].sendNet = tok * qkvW * float64(peersNet)
			back := float64(h*dh)*act + float64(h)*4 // O and its LSE (float32)
			lvs[i].backNV = tok * back * float64(peersNV)
			lvs[i].backNet = tok * back * float64(peersNet)
		}
		xfer := func(bytes float64, l Link, ranks int) float64 {
			if bytes <= 0 {
				return 0
			}
			return m.Collective(comm.KindAllToAll, int64(bytes), ranks, l)
		}
		qkv := make([]int, micro)
		for j := 0; j < micro; j++ {
			qkv[j] = add(task{res: resCompute, dur: qkvT})
		}
		// First all-to-alls, per level and micro-partition, FIFO per link.
		firstDone := make([][]int, len(out.Levels))
		for i, l := range out.Levels {
			if l.Span == 1 {
				continue
			}
			for j := 0; j < micro; j++ {
				if b := lvs[i].sendNV; b > 0 {
					firstDone[i] = append(firstDone[i], add(task{res: resNVLink, dur: xfer(b, nv, local), deps: []int{qkv[j]}}))
					first += b
				}
				if b := lvs[i].sendNet; b > 0 {
					firstDone[i] = append(firstDone[i], add(task{res: resNIC, dur: xfer(b, net, n-local+1), deps: []int{qkv[j]}}))
					first += b
				}
			}
		}
		merge := make([][]int, micro)
		for i, l := range out.Levels {
			h, kv := heads(l.Span)
			var wait []int
			for k := 1; k <= i; k++ { // a level's keys: its own transfers and the lower levels' (deduplicated) ones
				wait = append(wait, firstDone[k]...)
			}
			wait = append(wait, firstDone[0]...)
			for j := 0; j < micro; j++ {
				p := causalPairs(l.Span, s, j+1, micro, l.Keep)
				qn := int64(math.Ceil(s / float64(micro) * float64(l.Span) * l.Keep))
				w := AttentionWork{Queries: qn, Pairs: int64(p), KVReads: int64(p / FlashQueryTile)}
				t := m.Attention(w, h, kv, dh, false)
				pairs += p * float64(h)
				attn += t
				deps := []int{qkv[j]}
				if l.Span > 1 {
					deps = append(deps, wait...)
				}
				a := add(task{res: resCompute, dur: t, deps: deps})
				merge[j] = append(merge[j], a)
				if b := lvs[i].backNV; b > 0 {
					merge[j] = append(merge[j], add(task{res: resNVLink, dur: xfer(b, nv, local), deps: []int{a}}))
					second += b
				}
				if b := lvs[i].backNet; b > 0 {
					merge[j] = append(merge[j], add(task{res: resNIC, dur: xfer(b, net, n-local+1), deps: []int{a}}))
					second += b
				}
			}
		}
		for j := 0; j < micro; j++ {
			add(task{res: resCompute, dur: linT, deps: merge[j]})
		}
		end, busy := schedule(ts)
		if end > worst.Layer {
			worst = CSPSPrefill{Layer: end, Attention: attn, Other: busy[resCompute] - attn, Comm: max(busy[resNVLink], busy[resNIC]),
				FirstBytes: first, SecondBytes: second, Pairs: pairs}
		}
	}
	out.Layer, out.Attention, out.Other, out.Comm = worst.Layer, worst.Attention, worst.Other, worst.Comm
	out.FirstBytes, out.SecondBytes, out.Pairs = worst.FirstBytes, worst.SecondBytes, worst.Pairs
}

// tpLayer prices one SP-TP layer (R7–R10, R25–R26, R31): every GPU
// all-gathers the sequence (hierarchically: inside the server over NVLink,
// between servers once per server over its NIC, then a broadcast inside),
// projects QKV for its N-th of the heads over the whole sequence, runs
// their attention (CSA cuts only its pairs), projects O and reduce-scatters
// the partial sums; the TP-sharded MLP needs a second all-gather /
// reduce-scatter pair (inferred, R10). Communication C_comm and compute
// C_comp overlap over the micro-SPTs: max(C_comp, C_comm) + min(…)/M.
func (m *CostModel) tpLayer(cfg *model.Config, c Cluster, gpus []int, out *CSPSPrefill, micro int) {
	n := len(gpus)
	s := out.SPT
	L := s * n
	d, dh := cfg.Hidden, cfg.HeadDim
	H, Hkv := cfg.Heads, cfg.KVHeads
	h, kv := (H+n-1)/n, max(1, (Hkv+n-1)/n)
	act := float64(m.actBytes)
	compute := m.GEMM(L, (h+2*kv)*dh, d, m.wgtDType) + m.GEMM(L, d, h*dh, m.wgtDType) +
		m.GEMM(L, 2*((cfg.Intermediate+n-1)/n), d, m.wgtDType) + m.GEMM(L, d, (cfg.Intermediate+n-1)/n, m.wgtDType) +
		m.Elementwise(int64(L)*int64(4*d+(h+2*kv)*dh)*m.actBytes)
	pairs := 0.0
	for _, l := range out.Levels {
		for j := 1; j <= micro; j++ {
			pairs += causalPairs(l.Span, float64(s), j, micro, l.Keep) * float64(n/l.Span)
		}
	}
	attn := m.Attention(AttentionWork{Queries: int64(L), Pairs: int64(pairs), KVReads: int64(pairs / FlashQueryTile)}, h, kv, dh, false)
	worst := 0.0
	var wb float64
	for _, grp := range serverGroups(c, gpus) {
		local, g := grp[0], grp[1]
		remote := n - local
		seg := float64(s*d) * act // one SPT's hidden states
		// All-gather: the server's other SPTs over NVLink, then the other
		// servers' aggregate over the NIC (whole, one sender per server)
		// and its broadcast inside the server; the reduce-scatter mirrors it.
		intra := seg * float64(local-1)
		t := m.Collective(comm.KindAllGather, int64(intra), local, c.Node.Link)
		bytes := intra
		if remote > 0 {
			var net Link
			for _, o := range gpus {
				if c.Server(o) != c.Server(g) {
					net = c.PairLink(g, o, 1)
					break
				}
			}
			t += m.Collective(comm.KindAllGather, int64(seg*float64(remote)), len(serverGroups(c, gpus)), net) +
				m.Collective(comm.KindBroadcast, int64(seg*float64(remote)), local, c.Node.Link)
			bytes += seg * float64(remote)
		}
		commT := 4 * t // AG and RS around attention, and again around the MLP
		comp := compute + attn
		if layer := max(comp, commT) + min(comp, commT)/float64(micro); layer > worst {
			worst, wb = layer, bytes
			out.Comm = commT
		}
	}
	out.Layer, out.Attention, out.Other = worst, attn, compute
	out.FirstBytes, out.SecondBytes = 2*wb, 2*wb
	out.Pairs = pairs * float64(h)
}
