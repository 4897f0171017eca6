package sim

import (
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/model"
)

func TestDType(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  DType
		bytes int
	}{
		{"bf16", BF16, 2}, {"bfloat16", BF16, 2}, {"float16", FP16, 2}, {"half", FP16, 2},
		{"fp8", FP8, 1}, {"fp8_e5m2", FP8, 1}, {"FP32", FP32, 4}, {"float32", FP32, 4}, {"q8_0", Q8, 1},
	} {
		d, err := ParseDType(c.in)
		if err != nil || d != c.want || d.Bytes() != c.bytes {
			t.Errorf("ParseDType(%q) = %v (%d bytes), %v", c.in, d, d.Bytes(), err)
		}
		if size := d.Size(); d != Q8 && size != float64(c.bytes) || d == Q8 && size != 34.0/32 {
			t.Errorf("%v: Size %g", d, size)
		}
		if back, err := ParseDType(d.String()); err != nil || back != d {
			t.Errorf("%v does not round-trip", d)
		}
		if back, err := ParseDType(d.Name()); err != nil || back != d {
			t.Errorf("%v's name %q does not round-trip", d, d.Name())
		}
	}
	if _, err := ParseDType("int4"); err == nil || !strings.Contains(err.Error(), "known: bf16") {
		t.Errorf("int4: %v", err)
	}
	// Q8 is the CPU engine's weights only: no activations or KV of it.
	llama3, err := LookupModel("meta-llama/Llama-3.3-70B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VLLMPrecision(llama3, "q8_0", "", "auto"); err == nil {
		t.Error("q8_0 activations accepted")
	}
	if _, err := VLLMPrecision(llama3, "auto", "", "q8_0"); err == nil {
		t.Error("a q8_0 KV cache accepted")
	}
	node, err := ParseNode("1xH100")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Precision{{Weights: Q8, Activations: Q8, KV: FP32}, {Weights: Q8, Activations: FP32, KV: Q8}} {
		if _, err := NewCostModel(node, p); err == nil {
			t.Errorf("NewCostModel(%v) accepted", p)
		}
	}
}

func TestVLLMPrecision(t *testing.T) {
	llama3, err := LookupModel("meta-llama/Llama-3.3-70B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	llama2, err := LookupModel("meta-llama/Llama-2-7b-hf")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg                   string
		dtype, quant, kvDtype string
		want                  Precision
	}{
		{"llama3", "auto", "", "auto", Precision{Weights: BF16, Activations: BF16, KV: BF16}},
		{"llama3", "", "fp8", "", Precision{Weights: FP8, Activations: BF16, KV: BF16}},
		{"llama3", "auto", "fp8", "fp8", Precision{Weights: FP8, Activations: BF16, KV: FP8}},
		{"llama3", "auto", "none", "fp8_e4m3", Precision{Weights: BF16, Activations: BF16, KV: FP8}},
		{"llama2", "auto", "", "auto", Precision{Weights: FP16, Activations: FP16, KV: FP16}},
		{"llama2", "bfloat16", "fp8", "auto", Precision{Weights: FP8, Activations: BF16, KV: BF16}},
		{"llama3", "float32", "", "", Precision{Weights: FP32, Activations: FP32, KV: FP32}},
		{"llama3", "auto", "", "bfloat16", Precision{Weights: BF16, Activations: BF16, KV: BF16}},
		{"llama2", "auto", "", "float32", Precision{Weights: FP16, Activations: FP16, KV: FP32}},
	}
	for _, c := range cases {
		cfg := llama3
		if c.cfg == "llama2" {
			cfg = llama2
		}
		got, err := VLLMPrecision(cfg, c.dtype, c.quant, c.kvDtype)
		if err != nil || got != c.want {
			t.Errorf("%s %q %q %q: %v, %v; want %v", c.cfg, c.dtype, c.quant, c.kvDtype, got, err, c.want)
		}
	}
	for _, bad := range [][3]string{{"fp8", "", ""}, {"auto", "awq", ""}, {"auto", "", "int8"}, {"int4", "", ""}} {
		if _, err := VLLMPrecision(llama3, bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestCPUEnginePrecision: on the CPU the matrices keep the checkpoint's
// format under auto (float32 when it names none) or take --dtype's, the
// embedding and LM head with them; activations stay float32; auto keeps
// float32 KV, bfloat16 and float16 halve its bytes, and fp8 is refused by
// name.
func TestCPUEnginePrecision(t *testing.T) {
	llama3, err := LookupModel("meta-llama/Llama-3.3-70B-Instruct") // torch_dtype bfloat16
	if err != nil {
		t.Fatal(err)
	}
	llama2, err := LookupModel("meta-llama/Llama-2-7b-hf") // float16
	if err != nil {
		t.Fatal(err)
	}
	untyped := *llama3
	untyped.TorchDtype = ""
	cpu := func(w, kv DType) Precision {
		return Precision{Weights: w, Activations: FP32, KV: kv, HeadInWeights: true}
	}
	for _, c := range []struct {
		name             string
		cfg              *model.Config
		dtype, quant, kv string
		want             Precision
	}{
		{"bf16 checkpoint", llama3, "auto", "", "auto", cpu(BF16, FP32)},
		{"fp16 checkpoint", llama2, "", "none", "", cpu(FP16, FP32)},
		{"no torch_dtype", &untyped, "auto", "", "auto", cpu(FP32, FP32)},
		{"--dtype float32", llama3, "float32", "", "auto", CPUPrecision},
		{"--dtype bfloat16", llama2, "bfloat16", "", "bf16", cpu(BF16, BF16)},
		{"float16 KV", llama3, "auto", "", "float16", cpu(BF16, FP16)},
		{"float32 KV", llama3, "auto", "", "float32", cpu(BF16, FP32)},
		{"--quantization int8", llama3, "auto", "int8", "auto", cpu(Q8, FP32)},
		{"int8 from float32, bfloat16 KV", llama2, "float32", "int8", "bfloat16", cpu(Q8, BF16)},
	} {
		p, err := CPUEnginePrecision(c.cfg, c.dtype, c.quant, c.kv)
		if err != nil || p != c.want {
			t.Errorf("%s: CPUEnginePrecision(%q, %q, %q) = %v, %v; want %v", c.name, c.dtype, c.quant, c.kv, p, err, c.want)
		}
	}
	for _, bad := range []string{"fp8", "fp8_e5m2", "q8_0"} {
		if _, err := CPUEnginePrecision(llama3, "auto", "", bad); err == nil || !strings.Contains(err.Error(), "float32, bfloat16 or float16, not") {
			t.Errorf("--kv-cache-dtype %q: %v", bad, err)
		}
	}
	if _, err := CPUEnginePrecision(llama3, "auto", "", "int8"); err == nil || !strings.Contains(err.Error(), "supported: auto, float32, bfloat16, float16") {
		t.Errorf("--kv-cache-dtype int8: %v", err)
	}
	for _, bad := range []string{"fp8", "int8", "q8_0"} {
		if _, err := CPUEnginePrecision(llama3, bad, "", "auto"); err == nil || !strings.Contains(err.Error(), "float32, bfloat16 or float16") {
			t.Errorf("--dtype %q: %v", bad, err)
		}
	}
	if _, err := CPUEnginePrecision(llama3, "bfloat16", "int8", "auto"); err == nil || !strings.Contains(err.Error(), "use --dtype auto or float32") {
		t.Errorf("int8 from bfloat16: %v", err)
	}
	if _, err := CPUEnginePrecision(llama3, "auto", "fp8", "auto"); err == nil || !strings.Contains(err.Error(), "supported: int8") {
		t.Errorf("--quantization fp8 on the CPU: %v", err)
	}
	f64 := *llama3
	f64.TorchDtype = "float64"
	if _, err := CPUEnginePrecision(&f64, "auto", "", "auto"); err == nil || !strings.Contains(err.Error(), `torch_dtype "float64"`) {
		t.Errorf("torch_dtype float64: %v", err)
	}
}
