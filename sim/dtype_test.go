package sim

import (
	"strings"
	"testing"
)

func TestDType(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  DType
		bytes int
	}{
		{"bf16", BF16, 2}, {"bfloat16", BF16, 2}, {"float16", FP16, 2}, {"half", FP16, 2},
		{"fp8", FP8, 1}, {"fp8_e5m2", FP8, 1}, {"FP32", FP32, 4}, {"float32", FP32, 4},
	} {
		d, err := ParseDType(c.in)
		if err != nil || d != c.want || d.Bytes() != c.bytes {
			t.Errorf("ParseDType(%q) = %v (%d bytes), %v", c.in, d, d.Bytes(), err)
		}
		if back, err := ParseDType(d.String()); err != nil || back != d {
			t.Errorf("%v does not round-trip", d)
		}
	}
	if _, err := ParseDType("int4"); err == nil || !strings.Contains(err.Error(), "known: bf16") {
		t.Errorf("int4: %v", err)
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
		{"llama3", "auto", "", "auto", Precision{BF16, BF16, BF16}},
		{"llama3", "", "fp8", "", Precision{FP8, BF16, BF16}},
		{"llama3", "auto", "fp8", "fp8", Precision{FP8, BF16, FP8}},
		{"llama3", "auto", "none", "fp8_e4m3", Precision{BF16, BF16, FP8}},
		{"llama2", "auto", "", "auto", Precision{FP16, FP16, FP16}},
		{"llama2", "bfloat16", "fp8", "auto", Precision{FP8, BF16, BF16}},
		{"llama3", "float32", "", "", Precision{FP32, FP32, FP32}},
		{"llama3", "auto", "", "bfloat16", Precision{BF16, BF16, BF16}},
		{"llama2", "auto", "", "float32", Precision{FP16, FP16, FP32}},
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

// TestCPUKVPrecision: on the CPU auto keeps float32 KV, bfloat16 and
// float16 halve its bytes, and fp8 is refused by name.
func TestCPUKVPrecision(t *testing.T) {
	for in, want := range map[string]DType{"auto": FP32, "": FP32, "float32": FP32, "bfloat16": BF16, "bf16": BF16, "float16": FP16} {
		p, err := CPUKVPrecision(in)
		if err != nil || p != (Precision{Weights: FP32, Activations: FP32, KV: want}) {
			t.Errorf("CPUKVPrecision(%q) = %v, %v; want kv=%s", in, p, err, want)
		}
	}
	for _, bad := range []string{"fp8", "fp8_e5m2"} {
		if _, err := CPUKVPrecision(bad); err == nil || !strings.Contains(err.Error(), "not fp8") {
			t.Errorf("CPUKVPrecision(%q): %v", bad, err)
		}
	}
	if _, err := CPUKVPrecision("int8"); err == nil || !strings.Contains(err.Error(), "supported: auto, float32, bfloat16, float16") {
		t.Errorf("CPUKVPrecision(int8): %v", err)
	}
}
