package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestKVCacheDTypeFlag: --kv-cache-dtype bfloat16 and float16 (in vLLM's
// and the short spellings) generate the float32 greedy text of the
// built-in model on the CPU and name the cache on the device line; fp8
// and unknown names are refused by generate, serve's loader and inspect,
// with the reason.
func TestKVCacheDTypeFlag(t *testing.T) {
	const want = "Once upon a time, there was a little girl named Lily. She loved to play\n"
	for _, c := range []struct{ flag, line string }{
		{"auto", "float32 KV cache (1280 bytes per token)"},
		{"float32", "float32 KV cache (1280 bytes per token)"},
		{"bfloat16", "bfloat16 KV cache (640 bytes per token)"},
		{"bf16", "bfloat16 KV cache (640 bytes per token)"},
		{"float16", "float16 KV cache (640 bytes per token)"},
		{"half", "float16 KV cache (640 bytes per token)"},
	} {
		out, stderr, err := runCLI(t, "generate", "--device", "cpu", "--prompt", "Once upon a time", "--max-tokens", "16", "--kv-cache-dtype", c.flag)
		if err != nil {
			t.Fatalf("--kv-cache-dtype %s: %v", c.flag, err)
		}
		if out != want || !strings.Contains(stderr, c.line) {
			t.Errorf("--kv-cache-dtype %s: stdout %q, stderr %q (want %q)", c.flag, out, stderr, c.line)
		}
	}
	for _, bad := range []struct{ flag, want string }{
		{"fp8", "neither in fp8 (gearbox simulate and plan model fp8 KV caches on GPUs)"},
		{"fp8_e4m3", "neither in fp8"},
		{"int8", `--kv-cache-dtype "int8": want auto, float32, bfloat16 or float16`},
	} {
		for _, cmd := range [][]string{{"generate", "--prompt", "x"}, {"inspect"}} {
			args := append(cmd, "--kv-cache-dtype", bad.flag)
			if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%v: %v, want an error naming %q", args, err, bad.want)
			}
		}
	}
}

// TestKVCacheDTypeOnGPU: the CUDA executor keeps its KV cache in the
// dtype the model runs in, so another --kv-cache-dtype is refused before
// any GPU work, naming that dtype (the built-in model's float32
// checkpoint runs in float16 on a GPU under --dtype auto).
func TestKVCacheDTypeOnGPU(t *testing.T) {
	m, err := loadModel("", model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	d := &deviceFlags{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		dt, kv model.DType
		want   string
	}{
		{model.DTypeAuto, model.Float32, "--kv-cache-dtype float32 on the GPU: the CUDA executor keeps the KV cache in the dtype the model runs in, float16 here; use --kv-cache-dtype auto, or --dtype float32"},
		{model.DTypeAuto, model.BFloat16, "float16 here"},
		{model.BFloat16, model.Float16, "bfloat16 here"},
	} {
		if _, err := d.newCUDARunner(m, c.dt, c.kv, Choice{Device: Device{Kind: CUDA}}, runnerSpec{}, logger); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--dtype %s --kv-cache-dtype %s: %v, want %q", c.dt, c.kv, err, c.want)
		}
	}
}

// TestCPUKVPoolInBytes: the CPU's default KV pool and the Seesaw host
// store are budgets in bytes, so with BF16 or F16 keys and values they
// hold twice float32's tokens in the same bytes; one full context is the
// floor. Inspect reports the dtype, bytes per token and the pool.
func TestCPUKVPoolInBytes(t *testing.T) {
	cfg, err := model.ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":2048,
"intermediate_size":8192,"num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":64,
"vocab_size":128256,"max_position_embeddings":131072,"rms_norm_eps":1e-5,"tie_word_embeddings":true}`))
	if err != nil {
		t.Fatal(err)
	}
	// Llama-3.2-1B: 64 KiB of float32 KV per token, 32 KiB in BF16.
	if got := kvBlockBytes(cfg, tensor.BF16, 16); got != 16*32<<10 {
		t.Fatalf("a BF16 block of 16 tokens takes %d bytes", got)
	}
	for _, c := range []struct {
		ctx, seqs      int
		f32, bf16, f16 int // blocks
	}{
		{8192, 256, 4096, 8192, 8192},     // the 4 GiB budget: 65536 tokens of float32, 131072 of BF16/F16
		{131072, 256, 8192, 8192, 8192},   // one full context is the floor (8 GiB of float32)
		{1024, 2, 128, 128, 128},          // two contexts fit either way
		{1024, 1 << 20, 4096, 8192, 8192}, // the budget again
	} {
		got := []int{cpuKVBlocks(cfg, tensor.F32, 16, c.ctx, c.seqs), cpuKVBlocks(cfg, tensor.BF16, 16, c.ctx, c.seqs), cpuKVBlocks(cfg, tensor.F16, 16, c.ctx, c.seqs)}
		if got[0] != c.f32 || got[1] != c.bf16 || got[2] != c.f16 {
			t.Errorf("%d contexts of %d tokens: %v blocks, want [%d %d %d]", c.seqs, c.ctx, got, c.f32, c.bf16, c.f16)
		}
	}
	if f, b := hostBlocks(cfg, tensor.F32, 16, 4<<30), hostBlocks(cfg, tensor.BF16, 16, 4<<30); f != 4096 || b != 8192 || hostBlocks(cfg, tensor.BF16, 16, 0) != 0 {
		t.Fatalf("4 GiB host store: %d float32 blocks, %d BF16 blocks", f, b)
	}

	inspect := func(args ...string) inspectResult {
		out, _, err := runCLI(t, append([]string{"inspect", "--output", "json", "--plan", "tp=2", "--max-num-seqs", "1000000"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var ir inspectResult
		if err := json.Unmarshal([]byte(out), &ir); err != nil {
			t.Fatal(err)
		}
		return ir
	}
	f32, bf16 := inspect(), inspect("--kv-cache-dtype", "bfloat16")
	// stories260K: 1280 bytes per token in float32; 4 GiB holds 209715
	// blocks of 16 tokens, 419430 in BF16.
	if f32.CPUKV != (cpuKV{DType: "float32", BytesPerToken: 1280, Blocks: 209715, Tokens: 209715 * 16, Bytes: 209715 * 16 * 1280}) {
		t.Errorf("float32 KV: %+v", f32.CPUKV)
	}
	if bf16.CPUKV != (cpuKV{DType: "bfloat16", BytesPerToken: 640, Blocks: 419430, Tokens: 419430 * 16, Bytes: 419430 * 16 * 640}) {
		t.Errorf("bfloat16 KV: %+v", bf16.CPUKV)
	}
	for r := range f32.Ranks {
		if f32.Ranks[r].KVBytesPerToken != 2*bf16.Ranks[r].KVBytesPerToken || bf16.Ranks[r].KVBytesPerToken != 5*2*2*8*2 {
			t.Errorf("rank %d KV per token: float32 %d, bfloat16 %d", r, f32.Ranks[r].KVBytesPerToken, bf16.Ranks[r].KVBytesPerToken)
		}
	}
}

// TestServeHalfKVSeesaw serves the built-in model under Seesaw (prefill
// pp=2, decode tp=2, KV parked on the host store between them) with float32
// and BF16 KV caches: a greedy completion is the float32 text either way,
// and the one block of its prompt swaps out and back in at 16 tokens ×
// 1280 bytes in float32, half that in BF16.
func TestServeHalfKVSeesaw(t *testing.T) {
	for _, c := range []struct {
		kv    string
		bytes float64
	}{{"float32", 16 * 1280}, {"bfloat16", 16 * 640}} {
		url := startInProcess(t, "--kv-cache-dtype", c.kv, "--policy", "seesaw", "--prefill-plan", "pp=2", "--decode-plan", "tp=2")
		if got := greedyText(t, url); got != storiesText {
			t.Errorf("%s KV: %q", c.kv, got)
		}
		if o, i := scrape(t, url, "gearbox:kv_swap_out_bytes_total"), scrape(t, url, "gearbox:kv_swap_in_bytes_total"); o != c.bytes || i != c.bytes {
			t.Errorf("%s KV: swapped %v bytes out and %v in, want %v", c.kv, o, i, c.bytes)
		}
	}
}
