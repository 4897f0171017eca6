package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/model"
)

// CSPSDecodeGPUs is the decode pool on the paper's 64 GPUs (R33: prefill
// and decode run apart): two servers, 16 of the 64. The paper gives no
// split; two servers hold the KV of about forty 100K-token GLM-4 requests
// (spec csps.md S8, inferred), and the prefill pool keeps 48 GPUs, enough
// for the longest (1M-token, N = 16) prompt three times over. Other
// clusters keep the same quarter (CSPSDecodeShare).
const CSPSDecodeGPUs = 16

// CSPSDecodeShare is the decode pool's default share of a cluster's GPUs:
// CSPSDecodeGPUs of the paper's 64, at least one GPU.
func CSPSDecodeShare(gpus int) int { return max(1, gpus*CSPSDecodeGPUs/64) }

// CSPSActivationReserve is the memory a decode GPU keeps for activations
// besides the full weights and the KV shards: 1 GiB, a decode step's
// scratch at the batch sizes here (inferred, small beside the KV).
const CSPSActivationReserve = 1 << 30

// CSPSRunOptions describe a simulated CSPS deployment and its traffic.
type CSPSRunOptions struct {
	Model      *model.Config
	Cost       *CostModel // bound to the cluster's server node
	Cluster    Cluster
	Prefill    CSPSOptions // per-request knobs (Levels, Drop, Micro; Arch to force one)
	DecodeGPUs int         // the decode pool, the cluster's last GPUs; 0 means CSPSDecodeShare
	Requests   []bench.Request
	Report     bench.ReportOptions
}

// CSPSRequest is one request's simulated life, seconds from the start.
type CSPSRequest struct {
	Index, Input, Output int
	Arch                 CSPSArch
	N                    int
	GPUs                 []int
	Arrival, Start       float64 // arrival, prefill start
	First                float64 // prefill done: the first token
	DecodeStart, Last    float64 // KV in the decode pool; last token
	Prefill              CSPSPrefill
}

// CSPSRunResult is a CSPS run.
type CSPSRunResult struct {
	Requests     []CSPSRequest
	Report       *bench.Report
	DecodeSteps  int
	PrefillBusy  float64 // GPU-seconds the prefill pool computed
	PrefillGPUs  int
	DecodeKVToks int64 // KV capacity of the decode pool, tokens
	DecodeGPUs   int
	// DecodeTokens is the tokens the decode pool's steps produced (the
	// sum of their batch sizes) and DecodeBusy the seconds those steps
	// took: DecodeTokens / DecodeBusy is the pool's decode throughput
	// while it decodes.
	DecodeTokens int64
	DecodeBusy   float64
	DecodeParts  DecodeParts // DecodeBusy by kind
	// DecodeGPUBusy is the GPU-seconds of the decode steps: each step's
	// seconds times the GPUs its batch occupies (one per KV shard, at most
	// the pool). DecodeTokens / DecodeGPUBusy is the decode throughput
	// per GPU while decoding.
	DecodeGPUBusy float64
}

// DecodeStep prices one SP decode step (R33–R36, S8) on a pool of gpus
// GPUs of cluster c holding kvTokens tokens of KV in total (spread evenly)
// for batch requests, each of whose KV spans up to span GPUs: per layer,
// each GPU runs the projections and MLP of its batch/gpus tokens against
// the full weights, attention over its KV share, and for the requests
// split across GPUs a broadcast of Q to the other shards and a gather of
// the partial (O, LSE) (latency-bound: Table 3's ~1 ms per layer across
// 8 GPUs is the paper's measure of it); then the LM head and the engine's
// step overhead. DecodeStepParts splits it.
func (m *CostModel) DecodeStep(cfg *model.Config, c Cluster, gpus, batch, span int, kvTokens int64) float64 {
	return m.DecodeStepParts(cfg, c, gpus, batch, span, kvTokens).Seconds()
}

// DecodeParts are one SP decode step's seconds by kind, all layers.
type DecodeParts struct {
	Linear    float64 // projections and MLP against the full weights
	Attention float64 // attention over the GPU's KV share
	Exchange  float64 // Q broadcast and (O, LSE) gather of split requests
	Fixed     float64 // LM head and the engine's step overhead
}

// Seconds is the step's duration.
func (p DecodeParts) Seconds() float64 { return p.Linear + p.Attention + p.Exchange + p.Fixed }

// Add returns p + o.
func (p DecodeParts) Add(o DecodeParts) DecodeParts {
	return DecodeParts{p.Linear + o.Linear, p.Attention + o.Attention, p.Exchange + o.Exchange, p.Fixed + o.Fixed}
}

// DecodeStepParts is DecodeStep by kind.
func (m *CostModel) DecodeStepParts(cfg *model.Config, c Cluster, gpus, batch, span int, kvTokens int64) DecodeParts {
	if batch <= 0 {
		return DecodeParts{}
	}
	d, dh, H, Hkv := cfg.Hidden, cfg.HeadDim, cfg.Heads, cfg.KVHeads
	tok := (batch + gpus - 1) / gpus
	lin := m.GEMM(tok, (H+2*Hkv)*dh, d, m.wgtDType) + m.GEMM(tok, d, H*dh, m.wgtDType) +
		m.GEMM(tok, 2*cfg.Intermediate, d, m.wgtDType) + m.GEMM(tok, d, cfg.Intermediate, m.wgtDType) +
		m.Elementwise(int64(tok)*int64(6*d)*m.actBytes)
	kv := kvTokens / int64(gpus)
	// A GPU attends the queries of every request with a shard on it: with
	// requests split across the pool, up to the whole batch.
	attn := m.Attention(AttentionWork{Queries: int64(batch), Pairs: kv, KVReads: kv}, H, Hkv, dh, true)
	exch := 0.0
	if span > 1 {
		// A request's shards sit on span GPUs in ID order (R15), so up to a
		// server's worth of them share its NVLink, whatever the pool's
		// size. A wider request exchanges hierarchically, as SP-TP's
		// all-gather does here (R26) and NCCL's topology-ordered rings do:
		// Q crosses the network once per other server and fans out over
		// NVLink; the partial (O, LSE) are gathered inside each server,
		// then between servers (one sender per server on its NIC). A ring
		// over all span GPUs at the network's hop latency would charge
		// every one of its span − 1 steps a network hop.
		qb := int64(batch) * int64(H*dh) * m.actBytes
		ob := int64(batch) * (int64(H*dh)*m.actBytes + int64(H)*4)
		local := min(span, c.Node.Count)
		exch = m.Collective(comm.KindBroadcast, qb, local, c.Node.Link) + m.Collective(comm.KindAllGather, ob, local, c.Node.Link)
		if servers := (span + c.Node.Count - 1) / c.Node.Count; servers > 1 {
			net := c.PairLink(0, c.Node.Count, 1)
			exch += m.Collective(comm.KindBroadcast, qb, servers, net) + m.Collective(comm.KindAllGather, ob*int64(local), servers, net)
		}
	}
	head := m.GEMM(tok, cfg.Vocab, d, m.wgtDType)
	l := float64(cfg.Layers)
	return DecodeParts{Linear: l * lin, Attention: l * attn, Exchange: l * exch, Fixed: head + m.eff.StepOverhead}
}

// QKVMoveTimes are Table 3's two ways to serve one layer of a request of
// tokens tokens across gpus GPUs of a server: broadcast its new token's Q
// (what CSPS does) or gather its whole layer of KV to one GPU.
func (m *CostModel) QKVMoveTimes(cfg *model.Config, c Cluster, tokens, gpus int) (q, kv float64) {
	qb := int64(cfg.Heads*cfg.HeadDim) * m.actBytes
	kvb := int64(tokens) * int64(2*cfg.KVHeads*cfg.HeadDim) * m.kvBytes
	q = m.Collective(comm.KindBroadcast, qb, gpus, c.Node.Link)
	kv = m.Collective(comm.KindAllGather, kvb*int64(gpus-1)/int64(gpus), gpus, c.Node.Link)
	return q, kv
}

// decodeKVCapacity is the KV tokens the decode pool holds.
func (m *CostModel) decodeKVCapacity(cfg *model.Config, gpus int) int64 {
	weights := cfg.NumParams() * m.wgtBytes
	free := int64(GPUMemoryUtilization*float64(m.Node.GPU.MemoryBytes)) - weights - CSPSActivationReserve
	per := int64(cfg.KVBytesPerToken(int(m.kvBytes)))
	if free <= 0 || per <= 0 {
		return 0
	}
	return int64(gpus) * (free / per)
}

// RunCSPS simulates a CSPS deployment serving opts.Requests: a prefill pool
// (the cluster's first GPUs) where each request in arrival order waits for
// its N GPUs (R12), placed on the servers with the most free GPUs and
// sorted by ID (R15), and runs its SP prefill at the fastest level count
// opts.Prefill allows (CSPSConfigure); its first token comes out of the
// prefill. Its KV then moves to the decode pool over the network (KV bytes
// ÷ the senders' and receivers' NICs), waiting for room there, and the
// pool decodes every admitted request in lockstep steps (DecodeStep) on
// the GPUs their KV shards occupy until each has its output tokens.
func RunCSPS(opts CSPSRunOptions) (*CSPSRunResult, error) {
	if opts.Model == nil || opts.Cost == nil {
		return nil, errors.New("sim: a model and a cost model are required")
	}
	c, m, cfg := opts.Cluster, opts.Cost, opts.Model
	dec := cmp.Or(opts.DecodeGPUs, CSPSDecodeShare(c.GPUs()))
	pre := c.GPUs() - dec
	if dec < 1 || pre < 1 {
		return nil, fmt.Errorf("sim: %d decode GPUs of %d", dec, c.GPUs())
	}
	capTok := m.decodeKVCapacity(cfg, dec)
	perTok := int64(cfg.KVBytesPerToken(int(m.kvBytes)))
	reqs := slices.Clone(opts.Requests)
	slices.SortStableFunc(reqs, func(a, b bench.Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
	res := &CSPSRunResult{PrefillGPUs: pre, DecodeKVToks: capTok}
	free := make([]float64, pre) // when each prefill GPU is next free
	out := make([]CSPSRequest, len(reqs))
	for i, r := range reqs {
		if int64(r.InputTokens+r.OutputTokens) > capTok {
			return nil, fmt.Errorf("sim: request %d's %d tokens exceed the decode pool's KV (%d tokens)", r.Index, r.InputTokens+r.OutputTokens, capTok)
		}
		n := min(CSPSDegree(r.InputTokens), pre)
		arr := r.Arrival.Seconds()
		// The earliest time n GPUs are free, FIFO (no request overtakes an earlier one).
		start := arr
		if i > 0 {
			start = max(start, out[i-1].Start)
		}
		times := slices.Clone(free)
		slices.Sort(times)
		start = max(start, times[n-1])
		gpus := placeGPUs(c, free, start, n)
		po := opts.Prefill
		po.GPUs, po.N = gpus, n
		p, err := m.CSPSConfigure(cfg, c, r.InputTokens, po)
		if err != nil {
			return nil, err
		}
		for _, g := range gpus {
			free[g] = start + p.Seconds
		}
		res.PrefillBusy += float64(n) * p.Seconds
		out[i] = CSPSRequest{Index: r.Index, Input: r.InputTokens, Output: r.OutputTokens, Arch: p.Arch, N: n, GPUs: gpus,
			Arrival: arr, Start: start, First: start + p.Seconds, Prefill: p}
	}
	res.DecodeGPUs = dec
	res.DecodeSteps, res.DecodeTokens, res.DecodeParts, res.DecodeGPUBusy = decodePool(m, cfg, c, pre, dec, capTok, perTok, out)
	res.DecodeBusy = res.DecodeParts.Seconds()
	res.Requests = out
	results := make([]bench.RequestResult, len(out))
	var first, last float64
	for i, q := range out {
		rr := bench.RequestResult{Index: q.Index, RequestedInputTokens: q.Input, InputTokens: q.Input, OutputTokens: q.Output,
			Start: secs(q.Arrival), TTFT: secs(q.First - q.Arrival), Latency: secs(q.Last - q.Arrival)}
		if q.Output > 1 {
			gap := secs((q.Last - q.First) / float64(q.Output-1))
			rr.ITL = make([]time.Duration, q.Output-1)
			for j := range rr.ITL {
				rr.ITL[j] = gap
			}
		}
		results[i] = rr
		if i == 0 || q.Arrival < first {
			first = q.Arrival
		}
		last = max(last, q.Last)
	}
	opts.Report.Duration = secs(last - first)
	res.Report = bench.ComputeReport(results, opts.Report)
	return res, nil
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// placeGPUs picks n GPUs free at t (R15): servers with the most free GPUs
// first, each server's GPUs in ID order, the result sorted by ID.
func placeGPUs(c Cluster, free []float64, t float64, n int) []int {
	byServer := map[int][]int{}
	var servers []int
	for g, f := range free {
		if f <= t {
			s := c.Server(g)
			if byServer[s] == nil {
				servers = append(servers, s)
			}
			byServer[s] = append(byServer[s], g)
		}
	}
	slices.SortStableFunc(servers, func(a, b int) int {
		if d := len(byServer[b]) - len(byServer[a]); d != 0 {
			return d
		}
		return a - b
	})
	var gpus []int
	for _, s := range servers {
		for _, g := range byServer[s] {
			if len(gpus) < n {
				gpus = append(gpus, g)
			}
		}
	}
	return c.SortByID(gpus)
}

// decodePool runs the decode pool over the requests' prefill results:
// each request's KV migrates after its prefill (to the pool, in order of
// readiness, when it has room), then decodes one token per pool step. It
// fills DecodeStart and Last and returns the number of steps, the tokens
// they produced and the seconds they took.
func decodePool(m *CostModel, cfg *model.Config, c Cluster, pre, dec int, capTok, perTok int64, reqs []CSPSRequest) (steps int, tokens int64, busy DecodeParts, gpuSecs float64) {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].First, reqs[b].First) })
	decServers := (dec + c.Node.Count - 1) / c.Node.Count
	migrate := func(q *CSPSRequest) float64 {
		src := len(serverGroups(c, q.GPUs))
		l := c.PairLink(q.GPUs[0], pre, 1) // to the pool's first GPU: NVLink when both pools share the server
		bytes := int64(q.Input) * perTok
		return m.Collective(comm.KindSend, bytes/int64(min(src, decServers)), 2, l)
	}
	type active struct {
		i    int
		left int // tokens still to generate
	}
	var run []active
	var used int64
	t, next := 0.0, 0
	pending := []int{} // migrated or migrating, waiting for room, in readiness order
	for next < len(order) || len(pending) > 0 || len(run) > 0 {
		// Admit what has arrived by t and fits.
		for next < len(order) && reqs[order[next]].First <= t {
			pending = append(pending, order[next])
			next++
		}
		for len(pending) > 0 {
			idx := pending[0]
			q := &reqs[idx]
			need := int64(q.Input + q.Output)
			if used+need > capTok {
				break
			}
			used += need
			q.DecodeStart = max(t, q.First) + migrate(q)
			pending = pending[1:]
			if q.Output <= 1 {
				q.Last = q.First
				used -= need
				continue
			}
			run = append(run, active{i: idx, left: q.Output - 1})
		}
		// Requests whose KV has landed step together.
		var batch []int
		var kv int64
		span, shards := 1, 0
		for j, a := range run {
			if reqs[a.i].DecodeStart <= t {
				batch = append(batch, j)
				kv += int64(reqs[a.i].Input + reqs[a.i].Output - a.left)
				sp := min(dec, (reqs[a.i].Input+CSPSSPTMaxNTP-1)/CSPSSPTMaxNTP)
				span = max(span, sp)
				shards += sp
			}
		}
		// The batch occupies one GPU per KV shard while the pool has free
		// ones (a long request's shards apart, R34–R35); a GPU holding no
		// shard has no token and no Q to attend, so it does not step.
		occ := min(dec, shards)
		if len(batch) == 0 {
			// Idle until the next landing or prefill finish.
			nt := math.Inf(1)
			for _, a := range run {
				nt = min(nt, reqs[a.i].DecodeStart)
			}
			if next < len(order) {
				nt = min(nt, reqs[order[next]].First)
			}
			if math.IsInf(nt, 1) {
				break // nothing can ever fit (guarded by RunCSPS's check)
			}
			t = max(t, nt)
			continue
		}
		d := m.DecodeStepParts(cfg, c, occ, len(batch), span, kv)
		t += d.Seconds()
		steps++
		tokens += int64(len(batch))
		busy = busy.Add(d)
		gpuSecs += float64(occ) * d.Seconds()
		keep := run[:0]
		for j, a := range run {
			if slices.Contains(batch, j) {
				a.left--
				if a.left == 0 {
					reqs[a.i].Last = t
					used -= int64(reqs[a.i].Input + reqs[a.i].Output)
					continue
				}
			}
			keep = append(keep, a)
		}
		run = keep
	}
	return steps, tokens, busy, gpuSecs
}
