package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sim"
)

// TestGenerateCSPS: the built-in model under --policy csps over 3 ranks
// with 4-token sequence partitions (the prompt spans 3 ranks) gives the
// single rank's text and moves bytes only through all-to-alls; bad csps
// flags are refused with the reason.
func TestGenerateCSPS(t *testing.T) {
	prompt := "Once upon a time, there was a little"
	gen := func(args ...string) generateResult {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"generate", "--prompt", prompt, "--max-tokens", "24", "--output", "json", "--device", "cpu"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var res generateResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bad JSON %q: %v", out, err)
		}
		return res
	}
	want := gen()
	got := gen("--policy", "csps", "--plan", "sp=3", "--csps-spt-max", "4", "--block-size", "4")
	if got.Text != want.Text || got.Policy != "csps" || got.PlanSteps["csps(ranks=3)"] != 24 {
		t.Fatalf("csps result %+v, single rank's text %q", got, want.Text)
	}
	if a2a := got.CommBytes.ByKind["all_to_all"]; a2a == 0 || got.CommBytes.Total != a2a {
		t.Fatalf("csps moved %+v: want all-to-alls only", got.CommBytes)
	}
	if piped := gen("--policy", "csps", "--plan", "sp=3", "--csps-spt-max", "4", "--block-size", "4", "--csps-micro-partitions", "4"); piped.Text != want.Text {
		t.Fatalf("csps with 4 micro-partitions: %q, single rank %q", piped.Text, want.Text)
	}
	// SP-TP prefill: the same text; the prompt's layers move all-gathers
	// and reduce-scatters, its decode steps queries (all-to-alls).
	sptp := gen("--policy", "csps", "--plan", "sp=3", "--csps-spt-max", "4", "--block-size", "4", "--csps-arch", "sp-tp")
	if by := sptp.CommBytes.ByKind; sptp.Text != want.Text || by["all_gather"] == 0 || by["reduce_scatter"] != by["all_gather"] {
		t.Fatalf("csps with --csps-arch sp-tp: %+v, single rank's text %q; want equal all-gather and reduce-scatter bytes", sptp, want.Text)
	}
	sparse := gen("--policy", "csps", "--plan", "sp=3", "--csps-spt-max", "4", "--block-size", "4", "--sparse-attention", "on", "--csa-levels", "2", "--csa-drop", "0.5")
	if sparse.CompletionTokens != 24 || sparse.CommBytes.ByKind["all_gather"] == 0 {
		t.Fatalf("csps with sparse attention: %+v (want 24 tokens and CSA's all-gather of kept levels)", sparse)
	}
	info, _, err := runCLI(t, "inspect", "--policy", "csps", "--plan", "sp=3", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ins inspectResult
	if err := json.Unmarshal([]byte(info), &ins); err != nil {
		t.Fatal(err)
	}
	for _, r := range ins.Ranks { // full weights and every KV head of its tokens on each rank
		if len(ins.Ranks) != 3 || r.KVBytesPerToken != int64(ins.KVBytesPerTokenF) || r.WeightBytes != ins.Ranks[0].WeightBytes {
			t.Fatalf("inspect csps: %s", info)
		}
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "csps", "--plan", "tp=2"}, "--csps-arch sp-tp"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--csps-arch", "tp"}, "auto, sp-ntp or sp-tp"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--csps-arch", "sp-tp", "--sparse-attention", "on"}, "R25"},
		{[]string{"--policy", "csps", "--plan", "sp=2,pp=2"}, "pp and dp"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--csps-spt-max", "-1"}, "--csps-spt-max"},
		{[]string{"--plan", "sp=2", "--csps-spt-max", "8"}, "needs --policy csps"},
		{[]string{"--plan", "sp=2", "--sparse-attention", "on"}, "needs --policy csps"},
		{[]string{"--plan", "sp=2", "--csps-arch", "sp-tp"}, "needs --policy csps"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--csa-drop", "0.2"}, "--sparse-attention on"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--sparse-attention", "on", "--csa-levels", "1"}, "--csa-levels"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--sparse-attention", "on", "--csa-drop", "1"}, "--csa-drop"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--sparse-attention", "maybe"}, "on or off"},
		{[]string{"--policy", "csps", "--plan", "sp=2", "--device", "cuda"}, ""},
	} {
		_, _, err := runCLI(t, append([]string{"generate", "--prompt", "x"}, bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %q", bad.args, err, bad.want)
		}
	}
}

// TestServeCSPS serves the built-in model under --policy csps over 4
// ranks and checks a completion equals generate's single-rank text.
func TestServeCSPS(t *testing.T) {
	want, _, err := runCLI(t, "generate", "--prompt", "Once upon a time, there was a little", "--max-tokens", "20", "--device", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--port", "0", "--device", "cpu", "--policy", "csps", "--plan", "sp=4", "--csps-spt-max", "4", "--block-size", "4"}, w, io.Discard)
		w.Close()
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}()
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		re := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				url <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-url:
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	body := `{"model": "stories260K", "prompt": "Once upon a time, there was a little", "max_tokens": 20, "temperature": 0}`
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Choices) != 1 || !strings.Contains(want, out.Choices[0].Text) || out.Choices[0].Text == "" {
		t.Fatalf("served %+v, generate printed %q", out, want)
	}
}

// TestCSPSTTFTObjective: --csps-ttft-ms picks each long prompt's drop
// ratio with the simulator's prefill model on a calibration profile: a
// loose TTFT keeps dense attention, a tighter one the smallest drop on
// the grid that meets it (more drop for a tighter target), one no drop
// meets the grid's top; short prompts (one rank) never drop; the flag's
// prerequisites are checked.
func TestCSPSTTFTObjective(t *testing.T) {
	prof := &sim.Profile{
		Version: sim.ProfileVersion, Name: "test CPU", Threads: 2, MemoryBytes: 8 << 30,
		MemBytesPerS: 20e9, L2Bytes: 1 << 20, AttentionGFLOPS: 5, AttentionDecodeGFLOPS: 5,
		Link: sim.AlphaBeta{HopS: 5e-6, BytesPerS: 5e9}, KernelLatencyS: 2e-6, StepOverheadS: 1e-4,
		LogitsBytesPerS: 10e9,
	}
	for _, s := range [][3]int{{1, 1024, 1024}, {16, 1024, 1024}, {256, 1024, 1024}, {1024, 1024, 1024}, {64, 4096, 1024}} {
		prof.GEMM = append(prof.GEMM, sim.GEMMPoint{M: s[0], N: s[1], K: s[2], GFLOPS: 50 * float64(s[0]) / float64(s[0]+32)})
	}
	path := filepath.Join(t.TempDir(), "cpu.json")
	if err := prof.Save(path); err != nil {
		t.Fatal(err)
	}
	cfg := &model.Config{Hidden: 512, Intermediate: 1536, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64, Vocab: 1000, MaxPositions: 65536, RMSNormEps: 1e-5, RopeTheta: 1e4, ModelType: "llama"}
	dtype, quant := "auto", "" // the device's flags
	resolve := func(args ...string) (*policy.CSPS, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		par := addParallelFlags(fs)
		if err := fs.Parse(append([]string{"--policy", "csps", "--plan", "sp=4", "--csps-spt-max", "4096"}, args...)); err != nil {
			return nil, err
		}
		par.dtype, par.quant = dtype, quant
		_, pol, err := par.resolve(cfg)
		if err != nil {
			return nil, err
		}
		return cspsPolicy(pol), nil
	}
	drop := func(ttft string, promptLen int) policy.CSPSConfig {
		t.Helper()
		pol, err := resolve("--sparse-attention", "on", "--csa-levels", "2", "--csps-ttft-ms", ttft, "--csps-profile", path)
		if err != nil {
			t.Fatal(err)
		}
		return pol.Configure(promptLen)
	}
	dense := drop("1e9", 16384)
	if dense.Degree != 4 || dense.CSALevels != 1 {
		t.Fatalf("loose TTFT: %+v, want 4 ranks, dense", dense)
	}
	pol, _ := resolve("--sparse-attention", "on", "--csa-levels", "2", "--csps-ttft-ms", "1", "--csps-profile", path)
	pred := pol.Objective.Prefill
	full := pred(16384, dense)
	half := pred(16384, policy.CSPSConfig{Degree: 4, Arch: policy.SPNTP, CSALevels: 2, CSADrop: 0.5})
	if !(half < full) {
		t.Fatalf("predicted prefill: dense %v, drop 0.5 %v: dropping must be faster", full, half)
	}
	t.Logf("predicted 16K-token prefill over 4 ranks: dense %v, drop 0.5 %v", full, half)
	mid := drop(fmt.Sprint(float64(half+full)/2/1e6), 16384)
	tight := drop(fmt.Sprint(float64(half)/1e6), 16384)
	if !(mid.CSALevels == 2 && mid.CSADrop > 0 && mid.CSADrop < tight.CSADrop && tight.CSADrop <= 0.5) {
		t.Fatalf("drops: between dense and 0.5 → %+v, at 0.5's time → %+v", mid, tight)
	}
	t.Logf("drop between them: %g, at drop 0.5's time: %g", mid.CSADrop, tight.CSADrop)
	if none := drop("0.001", 16384); none.CSADrop != 0.9 {
		t.Fatalf("unreachable TTFT: %+v, want the grid's top 0.9", none)
	}
	if short := drop("0.001", 1000); short.Degree != 1 || short.CSALevels != 1 {
		t.Fatalf("a one-rank prompt: %+v", short)
	}
	// The predictor prices the matrices as the engine holds them: this
	// profile measured float32 GEMMs only, so bfloat16 and quantized
	// matrices are refused rather than priced as float32.
	objective := []string{"--sparse-attention", "on", "--csa-levels", "2", "--csps-ttft-ms", "100", "--csps-profile", path}
	dtype = "bfloat16"
	if _, err := resolve(objective...); err == nil || !strings.Contains(err.Error(), "re-run gearbox calibrate") {
		t.Errorf("bfloat16 matrices on a float32-only profile: %v", err)
	}
	dtype, quant = "auto", "int8"
	if _, err := resolve(objective...); err == nil || !strings.Contains(err.Error(), "not --quantization int8") {
		t.Errorf("int8 matrices: %v", err)
	}
	quant = ""
	for _, args := range [][]string{
		{"--csps-ttft-ms", "100", "--csps-profile", path},                                       // sparse attention off
		{"--sparse-attention", "on", "--csps-ttft-ms", "100"},                                   // no profile
		{"--sparse-attention", "on", "--csps-ttft-ms", "100", "--csps-profile", "/nonexistent"}, // bad profile
	} {
		if _, err := resolve(args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
