package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/cmd/gearbox/internal/calibrate"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/sim"
)

func TestSimulateCLI(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	_, stderr, err := runCLI(t, "simulate", "--model", "Qwen/Qwen3-32B", "--hardware", "8xH200", "--quantization", "fp8",
		"--plan", "sp=4,tp=2", "--policy", "shift", "--dataset", "synthetic:in=1000,out=50,n=60", "--request-rate", "5",
		"--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--result-json", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"completed", "request_throughput", "request_goodput", "mean_ttft_ms", "p99_tpot_ms", "plan_timeline", "peak_total_token_throughput"} {
		if _, ok := r[k]; !ok {
			t.Fatalf("report lacks %q", k)
		}
	}
	if r["completed"].(float64) != 60 || r["policy"] != "shift" {
		t.Fatalf("report %v", r)
	}
	if _, _, err := runCLI(t, "simulate", "--plan", "tp=4", "--hardware", "8xH200"); err == nil || !strings.Contains(err.Error(), "uses 4 GPUs but the node has 8") {
		t.Fatalf("wrong GPU count: %v", err)
	}
	// DP replicas: plain (independent engines) and SiDP (a lockstep group).
	for _, pol := range []string{"static", "sidp"} {
		stdout, stderr, err := runCLI(t, "simulate", "--model", "Qwen/Qwen3-32B", "--hardware", "8xH200", "--plan", "dp=8",
			"--policy", pol, "--dataset", "synthetic:in=1000,out=50,n=40", "--request-rate", "10")
		if err != nil || !strings.Contains(stdout, "Successful requests:                     40") {
			t.Fatalf("dp=8 under %s: %v\n%s%s", pol, err, stdout, stderr)
		}
	}
	if _, _, err := runCLI(t, "simulate", "--hardware", "8xZ100"); err == nil {
		t.Fatal("unknown GPU accepted")
	}
}

// TestPlanRanksShiftAboveStatic: for an interactive SLO on a bursty-enough
// load, Shift ranks above static TP and DP (checked here on a
// synthetic stand-in for the Azure code trace, whose file lives outside
// the repository).
func TestPlanRanksShiftAboveStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 30 layouts")
	}
	stdout, _, err := runCLI(t, "plan", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--hardware", "8xH200", "--quantization", "fp8",
		"--dataset", "synthetic:in=500-6000,out=10-200,n=400", "--request-rate", "3", "--burstiness", "0.3",
		"--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--capacity-requests", "0")
	if err != nil {
		t.Fatal(err)
	}
	rank := map[string]int{}
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 {
			if _, seen := rank[f[1]+" "+f[2]]; !seen {
				rank[f[1]+" "+f[2]] = len(rank)
			}
		}
	}
	shift, ok := rank["sp=8 shift"]
	if !ok || shift > rank["tp=8 static"] || shift > rank["dp=8 static"] {
		t.Fatalf("ranks: shift %d, tp %d, dp %d\n%s", shift, rank["tp=8 static"], rank["dp=8 static"], stdout)
	}
	if shift == 0 && !strings.Contains(stdout, "serve the best with: gearbox serve --plan sp=8 --policy shift --shift-threshold 256\n") {
		t.Errorf("no serve flags for the best\n%s", stdout)
	}
	for _, c := range []string{"dp=8 sidp", "dp=4,tp=2 sidp", "dp=2,tp=4 sidp"} {
		if _, ok := rank[c]; !ok || strings.Contains(stdout, "  -  "+c) {
			t.Errorf("no ranked %s candidate\n%s", c, stdout)
		}
	}
}

func TestReproduceShift(t *testing.T) {
	if testing.Short() {
		t.Skip("reruns the paper's experiments")
	}
	out := filepath.Join(t.TempDir(), "shift.md")
	stdout, _, err := runCLI(t, "reproduce", "shift", "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout, "**outside tolerance**") || strings.Contains(stdout, "**order differs") {
		t.Fatalf("the simulator misses the paper:\n%s", stdout)
	}
	if data, _ := os.ReadFile(out); string(data) != stdout {
		t.Fatal("--out differs from stdout")
	}
}

// TestSimulateOnCPUProfile: --hardware Nxcpu with a calibration profile
// simulates ranks sharing this machine.
func TestSimulateOnCPUProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.json")
	// A quick calibration on a machine busy with other test packages can
	// measure times too noisy to fit (calibrate.ErrNoisy); measure again
	// then.
	for try := 1; ; try++ {
		_, _, err := runCLI(t, "calibrate", "--quick", "--out", prof)
		if err == nil {
			break
		}
		if try == 3 || !errors.Is(err, calibrate.ErrNoisy) {
			t.Fatal(err)
		}
		t.Logf("calibration %d: %v; measuring again", try, err)
	}
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Hidden: 128, Heads: 8, KVHeads: 4, Layers: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, "simulate", "--model", dir, "--hardware", "2xcpu", "--profile", prof, "--plan", "tp=2",
		"--dataset", "synthetic:in=32,out=8,n=10")
	if err != nil || !strings.Contains(stdout, "Successful requests:                     10") {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	// --kv-cache-dtype on the CPU: bfloat16 halves the KV bytes per token,
	// so the same memory holds twice the tokens; fp8 is refused.
	capacity := func(stderr string) int {
		i := strings.Index(stderr, "KV capacity ")
		if i < 0 {
			t.Fatalf("no KV capacity in %q", stderr)
		}
		n, err := strconv.Atoi(strings.Fields(stderr[i+len("KV capacity "):])[0])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	_, bf16, err := runCLI(t, "simulate", "--model", dir, "--hardware", "2xcpu", "--profile", prof, "--plan", "tp=2",
		"--dataset", "synthetic:in=32,out=8,n=10", "--kv-cache-dtype", "bfloat16")
	if err != nil {
		t.Fatal(err)
	}
	if f, b := capacity(stderr), capacity(bf16); b < 2*f-1 || b > 2*f+1 {
		t.Fatalf("KV capacity %d tokens with bfloat16 KV, %d with float32", b, f)
	}
	if _, _, err := runCLI(t, "simulate", "--model", dir, "--hardware", "2xcpu", "--profile", prof, "--plan", "tp=2",
		"--kv-cache-dtype", "fp8"); err == nil || !strings.Contains(err.Error(), "not fp8") {
		t.Fatalf("fp8 KV on the CPU: %v", err)
	}
	// A BF16 checkpoint runs in its own format under --dtype auto: two-byte
	// matrices leave more memory to the KV cache than --dtype float32.
	bdir, err := fixture.Dir(t.TempDir(), fixture.Spec{Hidden: 128, Heads: 8, KVHeads: 4, Layers: 2, DType: "BF16", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	simulateBF16 := func(profile string, extra ...string) (string, error) {
		args := append([]string{"simulate", "--model", bdir, "--hardware", "cpu", "--profile", profile, "--plan", "single",
			"--dataset", "synthetic:in=32,out=8,n=10"}, extra...)
		stdout, stderr, err := runCLI(t, args...)
		if err == nil && !strings.Contains(stdout, "Successful requests:                     10") {
			t.Fatalf("%q:\n%s\n%s", extra, stdout, stderr)
		}
		return stderr, err
	}
	auto, err := simulateBF16(prof)
	if err != nil {
		t.Fatal(err)
	}
	wide, err := simulateBF16(prof, "--dtype", "float32")
	if err != nil {
		t.Fatal(err)
	}
	if a, w := capacity(auto), capacity(wide); a <= w {
		t.Errorf("KV capacity %d tokens with the checkpoint's bfloat16 matrices, %d with float32", a, w)
	}
	if _, err := simulateBF16(prof, "--quantization", "fp8"); err == nil || !strings.Contains(err.Error(), "supported: int8") {
		t.Errorf("fp8 weights on the CPU: %v", err)
	}
	// --quantization int8: Q8_0 matrices, priced by the profile's Q8_0
	// curve, leave more memory to the KV cache than bfloat16's.
	q8, err := simulateBF16(prof, "--quantization", "int8")
	if err != nil {
		t.Fatal(err)
	}
	if q, a := capacity(q8), capacity(auto); q <= a {
		t.Errorf("KV capacity %d tokens with Q8_0 matrices, %d with bfloat16", q, a)
	}
	// A profile written before the weight formats were measured prices
	// float32 only.
	p, err := sim.LoadProfile(prof)
	if err != nil {
		t.Fatal(err)
	}
	p.GEMMWeights = nil
	old := filepath.Join(t.TempDir(), "old.json")
	if err := p.Save(old); err != nil {
		t.Fatal(err)
	}
	if _, err := simulateBF16(old); err == nil || !strings.Contains(err.Error(), "re-run gearbox calibrate") {
		t.Errorf("bfloat16 on a float32-only profile: %v", err)
	}
	if _, err := simulateBF16(old, "--dtype", "float32"); err != nil {
		t.Errorf("--dtype float32 on a float32-only profile: %v", err)
	}
	if _, _, err := runCLI(t, "simulate", "--hardware", "cpu", "--plan", "single"); err == nil || !strings.Contains(err.Error(), "needs --profile") {
		t.Fatalf("cpu without a profile: %v", err)
	}
	if _, _, err := runCLI(t, "simulate", "--hardware", "8xH200", "--profile", prof, "--plan", "tp=8"); err == nil || !strings.Contains(err.Error(), "describes a CPU") {
		t.Fatalf("profile with a GPU node: %v", err)
	}
}

// TestPlanEnumeratesSeesaw: with a host KV store plan ranks every Seesaw
// pair (prefill layout with more pipeline stages than the decode layout)
// beside the static layouts; without one it leaves them out. SiDP, which
// reads peers' weights over NVLink, is left out on this PCIe node; CSPS
// is ranked.
func TestPlanEnumeratesSeesaw(t *testing.T) {
	args := []string{"plan", "--model", "meta-llama/Llama-2-7b-hf", "--hardware", "4xA10G@pcie4x8", "--pipeline-overlap",
		"--dataset", "synthetic:in=600,out=60,n=40", "--capacity-requests", "0"}
	pairs := func(stdout string) []string {
		var out []string
		for _, line := range strings.Split(stdout, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[2] == "seesaw" {
				if f[0] == "-" {
					t.Errorf("seesaw candidate failed: %s", line)
				}
				out = append(out, f[1])
			}
		}
		slices.Sort(out)
		return out
	}
	stdout, _, err := runCLI(t, append(args, "--swap-space", "8")...)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pp=2,tp=2→tp=4", "pp=4→pp=2,tp=2", "pp=4→tp=4"}
	if got := pairs(stdout); !slices.Equal(got, want) {
		t.Fatalf("seesaw candidates %v, want %v\n%s", got, want, stdout)
	}
	if !regexp.MustCompile(`\nserve the best with: gearbox serve (--plan \S+|--policy seesaw --prefill-plan \S+ --decode-plan \S+ --swap-space 8)( --policy \w+.*)?\n`).MatchString(stdout) {
		t.Errorf("no serve flags for the best\n%s", stdout)
	}
	var sidp []string
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[2] == "sidp" {
			if f[0] == "-" {
				t.Errorf("sidp candidate failed: %s", line)
			}
			sidp = append(sidp, f[1])
		}
	}
	slices.Sort(sidp)
	if len(sidp) != 0 {
		t.Errorf("sidp candidates %v on a PCIe node\n%s", sidp, stdout)
	}
	// CSPS: one candidate, a prefill pool and a quarter of the GPUs decoding.
	if !regexp.MustCompile(`(?m)^ +[0-9]+ +3\+1 GPUs +csps +[0-9]+\.[0-9]+`).MatchString(stdout) {
		t.Errorf("no ranked csps candidate with a throughput\n%s", stdout)
	}
	stdout, _, err = runCLI(t, append(args, "--swap-space", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	if got := pairs(stdout); len(got) != 0 {
		t.Fatalf("--swap-space 0 still ranks seesaw candidates %v", got)
	}
}
