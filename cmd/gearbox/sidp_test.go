package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// TestGenerateSiDP: the built-in model under --policy sidp with one
// request (the other replicas idle: dummies under WaS, serving owners
// under CaS) gives the single rank's text; with a 4-token threshold and a
// 3-step window the prompt step and two decodes run under WaS and the
// rest under CaS, and both modes move bytes.
func TestGenerateSiDP(t *testing.T) {
	const text = ", there was a little girl named Lily. She loved to play"
	for _, plan := range []string{"dp=2", "dp=4", "dp=2,tp=2"} {
		out, _, err := runCLI(t, "generate", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json", "--device", "cpu",
			"--plan", plan, "--policy", "sidp", "--sidp-threshold", "4", "--sidp-window", "3")
		if err != nil {
			t.Fatal(err)
		}
		var res generateResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bad JSON %q: %v", out, err)
		}
		if res.Text != text || res.Policy != "sidp" || res.PlanSteps[plan+" sidp-was"] != 3 || res.PlanSteps[plan+" sidp-cas"] != 13 ||
			res.CommBytes.ByKind["read"] == 0 || res.CommBytes.ByKind["send"] == 0 {
			t.Fatalf("%s: result = %+v", plan, res)
		}
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "sidp"}, "needs dp ≥ 2"},
		{[]string{"--policy", "sidp", "--plan", "dp=2,pp=2"}, "pp=1, sp=1"},
		{[]string{"--policy", "sidp", "--plan", "dp=2,sp=2"}, "pp=1, sp=1"},
		{[]string{"--policy", "sidp", "--plan", "dp=4", "--sidp-slots", "2"}, "at least that"},
		{[]string{"--policy", "sidp", "--plan", "dp=2", "--sidp-window", "0"}, "window"},
		{[]string{"--plan", "dp=2", "--sidp-threshold", "8"}, "need --policy sidp"},
	} {
		_, _, err := runCLI(t, append([]string{"generate", "--prompt", "x"}, bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %q", bad.args, err, bad.want)
		}
	}
}

// TestInspectSiDP is C9 through inspect: per rank, the pooled weights and
// the gain against plain DP at the same plan, to the byte (stories260K:
// 5 layers, hidden 64, intermediate 172, fp32), and the KV tokens the gain
// adds to the default pool.
func TestInspectSiDP(t *testing.T) {
	info, _, err := runCLI(t, "inspect", "--plan", "dp=2", "--policy", "sidp", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ir inspectResult
	if err := json.Unmarshal([]byte(info), &ir); err != nil {
		t.Fatal(err)
	}
	const layer = 4 * 3 * 172 * 64 // one layer's gate, up and down in fp32 bytes
	for _, rb := range ir.Ranks {
		m := rb.SiDP
		if m == nil {
			t.Fatalf("rank %d: no sidp memory", rb.Rank)
		}
		owned := map[int]int64{0: 3, 1: 2}[rb.Rank] // layers 0, 2, 4 and 1, 3
		if m.Slots != 1 || m.SlotBytes != layer || m.DPWeightBytes-m.WeightBytes != (5-owned)*layer ||
			m.GainBytes != (5-owned)*layer-layer || rb.WeightBytes != m.WeightBytes || rb.ResidentBytes != m.WeightBytes ||
			m.KVTokens != m.DPKVTokens+m.GainBytes/rb.KVBytesPerToken {
			t.Errorf("rank %d: %+v (weights %d, resident %d)", rb.Rank, *m, rb.WeightBytes, rb.ResidentBytes)
		}
	}
	text, _, err := runCLI(t, "inspect", "--plan", "dp=2", "--policy", "sidp")
	if err != nil || !strings.Contains(text, "sidp: each layer's MLP on replica l mod 2") {
		t.Fatalf("inspect text: %v\n%s", err, text)
	}
}

// TestServeSiDP: serve under --policy sidp answers with the single rank's
// greedy text, and /metrics shows the mode (gearbox:sidp_mode, and the
// placement's name in gearbox:parallel_plan_info and
// gearbox:plan_switches_total), the bytes fetched and the fused rows.
func TestServeSiDP(t *testing.T) {
	url := startInProcess(t, "--plan", "dp=2", "--policy", "sidp")
	if got := greedyText(t, url); got != storiesText {
		t.Fatalf("%q", got)
	}
	// One 5-token prefill and 15 decodes, all below the default threshold
	// of 64: the 16th step (the window) is the first under CaS.
	if scrape(t, url, `gearbox:parallel_plan_info{plan="dp=2 sidp-cas",policy="sidp"}`) != 1 ||
		scrape(t, url, `gearbox:plan_switches_total{from="dp=2 sidp-was",to="dp=2 sidp-cas"}`) != 1 {
		t.Error("the metrics do not show one WaS→CaS switch at the last step")
	}
	// 15 steps under WaS fetched layers 1 and 3 (rank 0's non-owned; rank 1
	// had no tokens), and in the last step owner 1 fused rank 0's row for
	// each of them.
	layer := 4.0 * 3 * 172 * 64
	if f, rows, mode := scrape(t, url, "gearbox:sidp_fetched_bytes_total"), scrape(t, url, "gearbox:sidp_fused_rows_total"), scrape(t, url, "gearbox:sidp_mode"); f != 15*2*layer || rows != 2 || mode != 1 {
		t.Errorf("sidp metrics: fetched %v bytes, fused %v rows, mode %v; want %v, 2, 1", f, rows, mode, 15*2*layer)
	}
}

// TestSiDPRefusedOnGPU: the CUDA executor refuses a pooled placement
// before it touches a device.
func TestSiDPRefusedOnGPU(t *testing.T) {
	m, err := loadModel("", model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := parallel.SiDPPlacement(parallel.Plan{DP: 2, PP: 1, SP: 1, TP: 1}, parallel.FFNWaS)
	if err != nil {
		t.Fatal(err)
	}
	d := &deviceFlags{}
	_, err = d.newCUDARunner(m, model.DTypeAuto, model.DTypeAuto, Choice{Device: Device{Kind: CUDA}},
		runnerSpec{placements: []parallel.Placement{p}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "does not run SiDP") {
		t.Fatalf("%v, want the SiDP refusal", err)
	}
}
