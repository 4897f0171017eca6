package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
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
