package sim

import (
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/policy"
)

// TestChooseArch evaluates App A's inequality (R13, spec T10): at N = 3
// and d = 4096 SP-NTP wins above 2dN/(N−2) = 24,576 tokens; at N = 2 SP-TP
// always wins (the paper's sentence says the opposite, G10); N = 1 needs
// no SP; and the choice always picks the smaller of App A's volumes.
func TestChooseArch(t *testing.T) {
	cases := []struct {
		d, l, n int
		want    CSPSArch
	}{
		{4096, 24577, 3, ArchNTP},
		{4096, 24576, 3, ArchTP},
		{4096, 1 << 20, 2, ArchTP},
		{4096, 16385, 4, ArchNTP}, // threshold 16,384
		{4096, 16384, 4, ArchTP},
		{16384, 96 << 10, 3, ArchTP}, // App A's 96K at d = 16K: 98,304 is the tie
		{16384, 96<<10 + 1, 3, ArchNTP},
		{4096, 1 << 20, 1, ArchNone},
	}
	for _, c := range cases {
		if got := ChooseArch(c.d, c.l, c.n); got != c.want {
			t.Errorf("ChooseArch(d=%d, L=%d, N=%d) = %s, want %s", c.d, c.l, c.n, got, c.want)
		}
	}
	for _, n := range []int{2, 3, 4, 8, 16} {
		for _, l := range []int{1000, 10000, 30000, 100000, 1 << 20} {
			ntp, tp := policy.ArchElems(l, 4096, n, true)
			if got, want := ChooseArch(4096, l, n), map[bool]CSPSArch{true: ArchNTP, false: ArchTP}[ntp < tp]; got != want {
				t.Errorf("N=%d L=%d: chose %s with volumes NTP %g, TP %g", n, l, got, ntp, tp)
			}
		}
	}
	if CSPSDegree(64<<10) != 1 || CSPSDegree(64<<10+1) != 2 || CSPSDegree(1<<20) != 16 {
		t.Errorf("degrees %d %d %d", CSPSDegree(64<<10), CSPSDegree(64<<10+1), CSPSDegree(1<<20))
	}
}

func cspsSetup(t testing.TB, id string) (*CostModel, Cluster) {
	t.Helper()
	c, err := ParseCluster("8xp4d.24xlarge")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LookupModel(id)
	if err != nil {
		t.Fatal(err)
	}
	prec, err := VLLMPrecision(cfg, "auto", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewCostModel(c.Node, prec)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// TestCSPSLevels lays out CSA's levels (R16, R19 read as intended): a
// request on two servers has level 1 (its SPT), level 2 (its GPUs in one
// server) and level 3 (all), keeping 1, 1 − p and (1 − p)/2.
func TestCSPSLevels(t *testing.T) {
	_, c := cspsSetup(t, "THUDM/glm-4-9b-chat-1m")
	var gpus []int
	for g := 0; g < 16; g++ {
		gpus = append(gpus, g)
	}
	lv := cspsLevels(c, gpus, 3, 0.2)
	want := []CSPSLevel{{1, 1}, {8, 0.8}, {16, 0.4}}
	if len(lv) != len(want) {
		t.Fatalf("levels %v", lv)
	}
	for i := range want {
		if lv[i].Span != want[i].Span || math.Abs(lv[i].Keep-want[i].Keep) > 1e-12 {
			t.Fatalf("levels %v, want %v", lv, want)
		}
	}
	if f := DropFraction(lv); math.Abs(f-0.8/3) > 1e-12 {
		t.Errorf("drop fraction %g", f)
	}
	if lv := cspsLevels(c, gpus, 1, 0.2); len(lv) != 1 || lv[0] != (CSPSLevel{16, 1}) {
		t.Errorf("N_v = 1: %v (dense over all 16)", lv)
	}
	if lv := cspsLevels(c, gpus[:8], 3, 0.2); len(lv) != 2 || lv[1] != (CSPSLevel{8, 0.8}) {
		t.Errorf("one server: %v", lv)
	}
}

// TestCSPSPrefillNTP holds one SP-NTP layer to its formulas: the first
// all-to-all sends each same-server peer the GPU's SPT for the peer's
// heads (GLM-4: 8 query heads and one replicated KV head of 128 at N = 4),
// the second returns O and the LSE, and attention costs its causal FLOPs
// at the attention efficiency; CSA's drops cut both.
func TestCSPSPrefillNTP(t *testing.T) {
	m, c := cspsSetup(t, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	const L, n = 256 << 10, 4
	p, err := m.CSPSPrefillCost(cfg, c, L, CSPSOptions{N: n, Micro: 4})
	if err != nil {
		t.Fatal(err)
	}
	if p.Arch != ArchNTP || p.SPT != L/n {
		t.Fatalf("arch %s, SPT %d", p.Arch, p.SPT)
	}
	s := float64(L / n)
	if want := s * float64((8+2*1)*128*2) * (n - 1); math.Abs(p.FirstBytes-want) > 1 {
		t.Errorf("first all-to-all %g bytes, want %g", p.FirstBytes, want)
	}
	if want := s * float64(8*128*2+8*4) * (n - 1); math.Abs(p.SecondBytes-want) > 1 {
		t.Errorf("second all-to-all %g bytes, want %g", p.SecondBytes, want)
	}
	// Causal pairs of the whole sequence for 8 heads: 8·L²/2 (up to the micro-partitions' ½ terms).
	if want := 8 * float64(L) * float64(L) / 2; math.Abs(p.Pairs/want-1) > 1e-3 {
		t.Errorf("pairs %g, want %g", p.Pairs, want)
	}
	flops := 4 * 128 * p.Pairs
	ideal := flops / (m.Node.GPU.BF16FLOPS * AttentionEfficiency)
	if p.Attention < ideal || p.Attention > ideal*1.01 {
		t.Errorf("attention %g s, its FLOPs at the roof %g s", p.Attention, ideal)
	}
	if p.Layer < max(p.Attention+p.Other, p.Comm) {
		t.Errorf("layer %g shorter than its compute %g", p.Layer, p.Attention+p.Other)
	}
	q, err := m.CSPSPrefillCost(cfg, c, L, CSPSOptions{N: n, Micro: 4, Levels: 2, Drop: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(q.FirstBytes/p.FirstBytes-0.7) > 1e-6 || math.Abs(q.SecondBytes/p.SecondBytes-0.7) > 1e-6 {
		t.Errorf("CSA at p = 0.3 moves %g and %g of the dense bytes, want 0.7", q.FirstBytes/p.FirstBytes, q.SecondBytes/p.SecondBytes)
	}
}

// TestCSPSDedup holds the first all-to-all of a 3-level request on two
// servers to R22's deduplicated volume: each same-server peer gets the
// GPU's level-2 kept tokens once for its level-2 heads (4 query heads and
// one KV head of GLM-4 over 8 GPUs), which cover its level-3 heads, and
// each peer in the other server the level-3 kept tokens for its level-3
// heads (2 query heads, one KV head over 16).
func TestCSPSDedup(t *testing.T) {
	m, c := cspsSetup(t, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	const L, p = 1 << 20, 0.2
	r, err := m.CSPSPrefillCost(cfg, c, L, CSPSOptions{Levels: 3, Drop: p, Micro: 4})
	if err != nil {
		t.Fatal(err)
	}
	s := float64(L / 16)
	want := s*(1-p)*float64((4+2)*128*2)*7 + s*(1-p)/2*float64((2+2)*128*2)*8
	if math.Abs(r.FirstBytes/want-1) > 1e-9 {
		t.Errorf("first all-to-all %g bytes, want %g", r.FirstBytes, want)
	}
	// The second carries each level's outputs back: level 2 to 7 peers, level 3 to all 15.
	back := s*(1-p)*float64(4*128*2+4*4)*7 + s*(1-p)/2*float64(2*128*2+2*4)*15
	if math.Abs(r.SecondBytes/back-1) > 1e-9 {
		t.Errorf("second all-to-all %g bytes, want %g", r.SecondBytes, back)
	}
}

// TestCSPSTable3 is Table 3's comparison for one layer of a 1M-token
// GLM-4 request across 8 GPUs: sending Q takes at most 2 ms, gathering the
// layer's KV more than 500 times as long.
func TestCSPSTable3(t *testing.T) {
	m, c := cspsSetup(t, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	q, kv := m.QKVMoveTimes(cfg, c, 1<<20, 8)
	if q > 2e-3 || kv/q < 500 {
		t.Errorf("Q %g s, KV %g s (%.0f×)", q, kv, kv/q)
	}
}

// TestRunCSPSSmall serves a few requests: FIFO prefill starts, each
// request's first token after its prefill, its KV in the decode pool
// after that, and its last token after its output.
func TestRunCSPSSmall(t *testing.T) {
	m, c := cspsSetup(t, "internlm/internlm2_5-7b-chat-1m")
	cfg, _ := LookupModel("internlm/internlm2_5-7b-chat-1m")
	reqs := CSPSWorkload(BookCorpusInput, BookCorpusOutput, 12, 1, 3)
	r, err := RunCSPS(CSPSRunOptions{Model: cfg, Cost: m, Cluster: c, Prefill: CSPSOptions{Levels: 3, Drop: 0.1}, Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Completed != len(reqs) || r.PrefillGPUs != 48 || r.DecodeGPUs != 16 {
		t.Fatalf("%d of %d completed, %d prefill and %d decode GPUs", r.Report.Completed, len(reqs), r.PrefillGPUs, r.DecodeGPUs)
	}
	// Every output token after the first comes from one decode step.
	var decoded int64
	for _, q := range r.Requests {
		decoded += int64(q.Output - 1)
	}
	if r.DecodeTokens != decoded || r.DecodeSteps > int(decoded) || math.Abs(r.DecodeBusy-r.DecodeParts.Seconds()) > 1e-12 || !(r.DecodeParts.Linear > 0) ||
		r.DecodeGPUBusy < r.DecodeBusy || r.DecodeGPUBusy > 16*r.DecodeBusy {
		t.Errorf("%d decode tokens in %d steps (want %d tokens), busy %g s (%g GPU-s), parts %+v", r.DecodeTokens, r.DecodeSteps, decoded, r.DecodeBusy, r.DecodeGPUBusy, r.DecodeParts)
	}
	// One 200K-token request alone: its KV is 4 shards on 4 GPUs, which
	// step 9 times over NVLink (one server); the other 12 do not step.
	one, err := RunCSPS(CSPSRunOptions{Model: cfg, Cost: m, Cluster: c, Requests: []bench.Request{{InputTokens: 200000, OutputTokens: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	step := m.DecodeStep(cfg, c, 4, 1, 4, 200000+5)
	if one.DecodeSteps != 9 || math.Abs(one.DecodeGPUBusy-4*one.DecodeBusy) > 1e-9 || math.Abs(one.DecodeBusy/9/step-1) > 0.01 {
		t.Errorf("%d steps, %g s, %g GPU-s; a step on 4 GPUs is %g s", one.DecodeSteps, one.DecodeBusy, one.DecodeGPUBusy, step)
	}
	for i, q := range r.Requests {
		if i > 0 && q.Start < r.Requests[i-1].Start {
			t.Errorf("request %d started before %d", i, i-1)
		}
		if q.Start < q.Arrival || math.Abs(q.First-q.Start-q.Prefill.Seconds) > 1e-9 || q.DecodeStart < q.First ||
			q.Last <= q.DecodeStart || len(q.GPUs) != CSPSDegree(q.Input) {
			t.Errorf("request %d: %+v", i, q)
		}
	}
}

// TestCSPSWorkload checks the fitted log-normal against Table 2's median
// and P99 on a large sample.
func TestCSPSWorkload(t *testing.T) {
	reqs := CSPSWorkload(BookCorpusInput, BookCorpusOutput, 20000, 1, 1)
	in := make([]int, len(reqs))
	for i, r := range reqs {
		in[i] = r.InputTokens
	}
	med, p99, _ := LengthStats(in)
	if math.Abs(med/97e3-1) > 0.03 || math.Abs(p99/406e3-1) > 0.05 {
		t.Errorf("median %g, P99 %g; Table 2: 97K, 406K", med, p99)
	}
	last := reqs[len(reqs)-1].Arrival.Seconds()
	if math.Abs(last/20000-1) > 0.03 {
		t.Errorf("20,000 arrivals at 1/s end at %g s", last)
	}
}

// BenchmarkCSPSPrefillCost prices one 1M-token prefill over 16 GPUs with
// three CSA levels (the list-scheduled Eq. 7 pipeline).
func BenchmarkCSPSPrefillCost(b *testing.B) {
	m, c := cspsSetup(b, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	for b.Loop() {
		if _, err := m.CSPSPrefillCost(cfg, c, 1<<20, CSPSOptions{Levels: 3, Drop: 0.1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunCSPS serves 200 NeedleBench-shaped requests on the 64-GPU
// cluster (prefill pricing, placement and the decode pool's steps).
func BenchmarkRunCSPS(b *testing.B) {
	m, c := cspsSetup(b, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	reqs := CSPSWorkload(NeedleBenchInput, NeedleBenchOutput, 200, 1, 1)
	for b.Loop() {
		if _, err := RunCSPS(CSPSRunOptions{Model: cfg, Cost: m, Cluster: c, Prefill: CSPSOptions{Levels: 3, Drop: 0.1}, Requests: reqs}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCSPSPrefillTP holds SP-TP's hierarchical all-gather to R26: a GPU of
// a 16-GPU, two-server request gets its 7 server peers' SPTs over NVLink
// and the other server's 8 SPTs once through the NIC, twice a layer
// (around attention and around the MLP); N = 2 in one server moves one
// SPT each way.
func TestCSPSPrefillTP(t *testing.T) {
	m, c := cspsSetup(t, "internlm/internlm2_5-7b-chat-1m")
	cfg, _ := LookupModel("internlm/internlm2_5-7b-chat-1m")
	p, err := m.CSPSPrefillCost(cfg, c, 1<<20, CSPSOptions{N: 16, Arch: ArchTP})
	if err != nil {
		t.Fatal(err)
	}
	seg := float64(1<<20/16) * 4096 * 2
	if want := 2 * seg * (7 + 8); p.Arch != ArchTP || math.Abs(p.FirstBytes-want) > 1 {
		t.Errorf("%s: all-gather %g bytes, want %g", p.Arch, p.FirstBytes, want)
	}
	q, err := m.CSPSPrefillCost(cfg, c, 100<<10, CSPSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q.Arch != ArchTP || q.N != 2 || math.Abs(q.FirstBytes-2*float64(50<<10)*4096*2) > 1 {
		t.Errorf("100K prompt: %s on %d GPUs, %g bytes", q.Arch, q.N, q.FirstBytes)
	}
	// Each GPU projects QKV, o and the MLP for the whole sequence on its
	// N-th of the weights: at least those FLOPs at the dense peak.
	flops := 2 * float64(1<<20) * float64(4096*(4+2*1)*128/4+4096*4096/16+3*4096*14336/16)
	if p.Other < flops/m.Node.GPU.BF16FLOPS {
		t.Errorf("linear work %g s, below its FLOPs at peak %g s", p.Other, flops/m.Node.GPU.BF16FLOPS)
	}
}

// TestDecodeStep bounds one SP decode step of GLM-4 on the 16-GPU pool:
// every GPU streams the full weights, so a step takes at least their
// bytes at the HBM bandwidth; a 1M-token request spread over the pool adds
// its KV share and the per-layer Q / (O, LSE) exchange over the network.
func TestDecodeStep(t *testing.T) {
	m, c := cspsSetup(t, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	floor := float64(cfg.NumParams()*2) / m.Node.GPU.HBMBytesPerS
	short := m.DecodeStep(cfg, c, 16, 1, 1, 1000)
	if short < floor || short > 2*floor/MemoryEfficiency {
		t.Errorf("one short request: %g s, weights floor %g s", short, floor)
	}
	long := m.DecodeStepParts(cfg, c, 16, 1, 16, 1<<20)
	kv := float64(int64(1<<20)/16*int64(cfg.KVBytesPerToken(2))) / m.Node.GPU.HBMBytesPerS
	// Its exchange is hierarchical: over NVLink inside each of its two
	// servers (7 steps each way), and one network step each way between
	// them, not 15 network steps.
	exch := float64(cfg.Layers) * 2 * (2*KernelLatency + NetHopLatency + 7*NVLinkHopLatency)
	if long.Seconds() < short+kv+exch || long.Exchange < exch || long.Exchange > 1.2*exch {
		t.Errorf("1M request over 16 GPUs: %g s (exchange %g s), want at least %g + KV %g + exchange %g", long.Seconds(), long.Exchange, short, kv, exch)
	}
	// A request on 4 GPUs sits in one server (R15) even in the 16-GPU
	// pool: its exchange is a broadcast and an all-gather over NVLink per
	// layer, 3 algorithm steps each, not over the network.
	parts := m.DecodeStepParts(cfg, c, 16, 1, 4, 256<<10)
	nv := c.Node.Link
	qb, ob := int64(32*128*2), int64(32*128*2+32*4)
	want := float64(cfg.Layers) * (m.Collective(comm.KindBroadcast, qb, 4, nv) + m.Collective(comm.KindAllGather, ob, 4, nv))
	if math.Abs(parts.Exchange/want-1) > 1e-12 || parts.Exchange > float64(cfg.Layers)*2*NetHopLatency {
		t.Errorf("4-GPU request's exchange %g s, want %g s over NVLink", parts.Exchange, want)
	}
	if s := m.DecodeStep(cfg, c, 16, 1, 4, 256<<10); math.Abs(parts.Seconds()-s) > 1e-15 {
		t.Errorf("parts add up to %g s, the step is %g s", parts.Seconds(), s)
	}
}

// TestCSPSConfigure holds the configuring step to Eq. 8's objective: a
// 128K prompt on two GPUs of one server (SP-TP) with two CSA levels at
// p = 0.1067 computes level 1's pairs (1/N of the dense ones) on top of
// level 2's (1 − p)² = 0.798 of them, 1.298× the dense attention, so the
// configurator runs it without CSA; a 1M prompt on two servers keeps
// three levels, whose attention is 0.66 of the dense one.
func TestCSPSConfigure(t *testing.T) {
	m, c := cspsSetup(t, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	const p = 0.32 / 3
	mid := 128 << 10
	dense, err := m.CSPSPrefillCost(cfg, c, mid, CSPSOptions{Levels: 1})
	if err != nil {
		t.Fatal(err)
	}
	csa, err := m.CSPSPrefillCost(cfg, c, mid, CSPSOptions{Levels: 3, Drop: p})
	if err != nil {
		t.Fatal(err)
	}
	if dense.Arch != ArchTP || dense.N != 2 || len(csa.Levels) != 2 {
		t.Fatalf("128K: %s on %d GPUs, %d CSA levels", dense.Arch, dense.N, len(csa.Levels))
	}
	if got, want := csa.Pairs/dense.Pairs, 0.5+(1-p)*(1-p); math.Abs(got/want-1) > 1e-3 {
		t.Errorf("128K: CSA computes %.4f of the dense pairs, want %.4f", got, want)
	}
	got, err := m.CSPSConfigure(cfg, c, mid, CSPSOptions{Levels: 3, Drop: p})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Levels) != 1 || got.Seconds != dense.Seconds || !(csa.Seconds > dense.Seconds) {
		t.Errorf("128K: configured %d levels in %g s; dense %g s, CSA %g s", len(got.Levels), got.Seconds, dense.Seconds, csa.Seconds)
	}
	long, err := m.CSPSConfigure(cfg, c, 1<<20, CSPSOptions{Levels: 3, Drop: p})
	if err != nil {
		t.Fatal(err)
	}
	flat, err := m.CSPSPrefillCost(cfg, c, 1<<20, CSPSOptions{Levels: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Levels 1–3 over 16 SPTs in two servers: 1/16 + ½·(1 − p)² + ((1 − p)/2)² of the dense pairs.
	want := 1.0/16 + 0.5*(1-p)*(1-p) + (1-p)*(1-p)/4
	if len(long.Levels) != 3 || !(long.Seconds < flat.Seconds) || math.Abs(long.Pairs/flat.Pairs/want-1) > 1e-3 {
		t.Errorf("1M: %d levels, %g s against dense %g s, pairs %.4f of dense, want %.4f", len(long.Levels), long.Seconds, flat.Seconds, long.Pairs/flat.Pairs, want)
	}
}

// BenchmarkCSPSConfigure configures one 1M-token prefill over 16 GPUs:
// three pricings of the Eq. 7 pipeline (N_v = 1, 2, 3), RunCSPS's cost per
// request.
func BenchmarkCSPSConfigure(b *testing.B) {
	m, c := cspsSetup(b, "THUDM/glm-4-9b-chat-1m")
	cfg, _ := LookupModel("THUDM/glm-4-9b-chat-1m")
	for b.Loop() {
		if _, err := m.CSPSConfigure(cfg, c, 1<<20, CSPSOptions{Levels: 3, Drop: 0.1}); err != nil {
			b.Fatal(err)
		}
	}
}
