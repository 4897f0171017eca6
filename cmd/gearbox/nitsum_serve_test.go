package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/nitsum/cluster"
	"github.com/gearboxlm/gearbox/server"
	"github.com/gearboxlm/gearbox/slo"
)

// TestServeNitsum serves stories260K with --policy nitsum on 4 CPU ranks
// (profile measured at start-up, a 20 ms control window) to requests of
// every tier named by the slo_tier field and by the X-SLO-Tier header:
// every completion is the model's greedy text whatever instance and TP
// degree served it, and /metrics counts each tier's requests, every
// dispatch, and the instances' degrees covering the 4 ranks.
func TestServeNitsum(t *testing.T) {
	tiers := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(tiers, []byte(`[
		{"name": "strict", "ttft_ms": 2000, "tpot_ms": 500, "default": true},
		{"name": "loose", "ttft_ms": 5000, "tpot_ms": 1000},
		{"name": "batch", "background": true}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := startInProcess(t, "--plan", "tp=4", "--policy", "nitsum", "--slo-tiers", tiers, "--nitsum-window", "20ms", "--max-num-seqs", "8")
	names := []string{"", "strict", "loose", "batch"}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Go(func() {
			tier := names[i%len(names)]
			body := `{"model":"stories260K","prompt":"Once upon a time","max_tokens":16,"temperature":0`
			if i%2 == 0 && tier != "" {
				body += fmt.Sprintf(`,"slo_tier":%q`, tier)
			}
			req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(body+"}"))
			req.Header.Set("Content-Type", "application/json")
			if i%2 == 1 && tier != "" {
				req.Header.Set("X-SLO-Tier", tier)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			var out struct{ Choices []struct{ Text string } }
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
				errs[i] = fmt.Errorf("status %d, %v, %+v", resp.StatusCode, err, out)
				return
			}
			if got := out.Choices[0].Text; got != ", there was a little girl named Lily. She loved to play" {
				errs[i] = fmt.Errorf("text %q", got)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d (tier %q): %v", i, names[i%len(names)], err)
		}
	}
	if s, l, b := scrape(t, url, `gearbox:slo_requests_total{tier="strict"}`), scrape(t, url, `gearbox:slo_requests_total{tier="loose"}`),
		scrape(t, url, `gearbox:slo_requests_total{tier="batch"}`); s != 6 || l != 3 || b != 3 {
		t.Errorf("tier requests strict %v, loose %v, batch %v; want 6, 3, 3", s, l, b)
	}
	if n := scrape(t, url, "gearbox:nitsum_dispatched_total"); n != 12 {
		t.Errorf("%v dispatched, want 12", n)
	}
	ranks := 0.0
	for _, tp := range []int{1, 2, 4} {
		ranks += float64(tp) * scrape(t, url, fmt.Sprintf(`gearbox:nitsum_instances{tp="%d"}`, tp))
	}
	if ranks != 4 {
		t.Errorf("instances cover %v ranks, want 4", ranks)
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"gearbox:nitsum_reconfigurations_total", "gearbox:nitsum_migration_bytes_total",
		"gearbox:nitsum_migration_pause_seconds_total", "gearbox:nitsum_requests_moved_total", "gearbox:slo_attained_total"} {
		if !strings.Contains(string(text), "\n"+name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	// The pool's plan is its layout: one current plan_info series named
	// like tp[1 1 2], and a plan switch only where a reconfiguration
	// changed the layout (the first step after it), never between the
	// instances of one layout.
	var current []string
	switches, reconfigs := 0.0, 0.0
	for _, line := range strings.Split(string(text), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:i]
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		switch {
		case strings.HasPrefix(name, "gearbox:parallel_plan_info{") && v == 1:
			current = append(current, name)
		case strings.HasPrefix(name, "gearbox:plan_switches_total{"):
			switches += v
		case name == "gearbox:nitsum_reconfigurations_total":
			reconfigs = v
		}
	}
	if len(current) != 1 || !strings.Contains(current[0], `plan="tp[`) {
		t.Errorf("current plan series %q, want one named by the layout", current)
	}
	if switches > reconfigs {
		t.Errorf("%v plan switches for %v reconfigurations", switches, reconfigs)
	}
	t.Logf("reconfigurations %v, migrated %v bytes, paused %v s, hand-offs %v",
		scrape(t, url, "gearbox:nitsum_reconfigurations_total"), scrape(t, url, "gearbox:nitsum_migration_bytes_total"),
		scrape(t, url, "gearbox:nitsum_migration_pause_seconds_total"), scrape(t, url, "gearbox:nitsum_handoffs_total"))
}

// TestNitsumMetrics drives a reconfiguration by hand on the runtime serve
// builds (stories260K on 4 CPU ranks, TP1×4 → TP4 with requests
// mid-generation) and reads the series watchNitsum adds: they count
// what the runtime did.
func TestNitsumMetrics(t *testing.T) {
	m, err := loadModel("", model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	set, err := slo.New([]slo.Tier{{Name: "strict", TTFT: time.Second, TPOT: time.Second, Default: true}})
	if err != nil {
		t.Fatal(err)
	}
	one := func(tp, first int) nitsum.Instance {
		return nitsum.Instance{Tier: 0, Role: nitsum.Prefill, TP: tp, FirstGPU: first, Capacity: 8, Background: true}
	}
	cl, err := cluster.New(cluster.Options{Config: m.Config, Weights: m.Weights, Ranks: 4, Tiers: set, Manual: true, Window: -1,
		Profile: nitsum.Profile{TP: []int{1, 4}, Cap: [][]nitsum.Capacity{{{Prefill: 1, Decode: 1, PrefillBatch: 1, DecodeBatch: 1}, {Prefill: 1, Decode: 1, PrefillBatch: 1, DecodeBatch: 1}}}},
		Layout:  []nitsum.Instance{one(1, 0), one(1, 1), one(1, 2), one(1, 3)}, BlockSize: 16, NumBlocks: 32,
		Tokenizer: m.Tokenizer, EOS: m.EOS(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	metrics := server.NewMetrics("tp=4", "nitsum")
	watchNitsum(metrics, cl)
	for i := range 4 {
		if _, err := cl.Submit(engine.Request{Prompt: m.Tokenizer.Encode("Once upon a time", true), MaxTokens: 8 + i}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := cl.Iterate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := cl.Reconfigure(context.Background(), []nitsum.Instance{one(4, 0)})
	if err != nil || rep.Moved != 4 || rep.Bytes == 0 {
		t.Fatalf("reconfiguration %+v, %v: want 4 requests moved", rep, err)
	}
	got := map[string]float64{}
	mfs, err := metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mm.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = mm.GetCounter().GetValue() + mm.GetGauge().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"gearbox:nitsum_instances,tp=1": 0, "gearbox:nitsum_instances,tp=4": 1,
		"gearbox:nitsum_reconfigurations_total": 1, "gearbox:nitsum_migration_bytes_total": float64(rep.Bytes),
		"gearbox:nitsum_requests_moved_total": 4, "gearbox:nitsum_dispatched_total,class=feasible": 4,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if p := got["gearbox:nitsum_migration_pause_seconds_total"]; p <= 0 || p != cl.Stats().Pause.Seconds() {
		t.Errorf("pause %v s, the runtime's %v", p, cl.Stats().Pause)
	}
}

// TestServeNitsumEmbeddings: under --policy nitsum, with prefill
// instances handing requests to decode instances and colocated, an
// embedding request ends on the
// instance that computed its prompt (nothing to hand to a decode
// instance) with the vector one engine gives, and generations around it
// still get the model's text.
func TestServeNitsumEmbeddings(t *testing.T) {
	embed := func(url string) []float64 {
		t.Helper()
		resp, err := http.Post(url+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"stories260K","input":["Once upon a time","The cat sat"]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Data []struct{ Embedding []float64 }
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Data) != 2 {
			t.Fatalf("embeddings: status %d, %v, %+v", resp.StatusCode, err, out)
		}
		return append(out.Data[0].Embedding, out.Data[1].Embedding...)
	}
	want := embed(startInProcess(t))
	tiers := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(tiers, []byte(`[{"name": "strict", "ttft_ms": 2000, "tpot_ms": 500, "default": true}, {"name": "loose", "ttft_ms": 5000, "tpot_ms": 1000}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, colocate := range []bool{false, true} {
		t.Run(fmt.Sprintf("colocate=%v", colocate), func(t *testing.T) {
			url := startInProcess(t, "--plan", "tp=4", "--policy", "nitsum", "--slo-tiers", tiers, fmt.Sprintf("--nitsum-colocate=%v", colocate), "--nitsum-window", "20ms")
			for round := range 3 {
				got := embed(url)
				for i := range want {
					if math.Abs(got[i]-want[i]) > 1e-5 {
						t.Fatalf("round %d: value %d is %g, one engine %g", round, i, got[i], want[i])
					}
				}
				if got := greedyText(t, url); got != storiesText {
					t.Fatalf("round %d: completion %q", round, got)
				}
			}
		})
	}
}
