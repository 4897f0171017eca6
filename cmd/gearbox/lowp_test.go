package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/internal/fixture"
)

// TestLowPrecisionFlags: --dtype and --quantization on the CPU generate
// the float32 greedy text of the built-in model (its margins allow it),
// name the weights' format on the device line, and inspect reports the
// resident bytes; unsupported combinations are refused with the flag to
// change.
func TestLowPrecisionFlags(t *testing.T) {
	const want = ", there was a little girl named Lily. She loved to play"
	for _, c := range []struct {
		args   []string
		format string
	}{
		{nil, "f32 weights in place"},
		{[]string{"--dtype", "float32"}, "f32 weights in place"}, // a float32 checkpoint: nothing to convert
		{[]string{"--dtype", "bfloat16"}, "bf16 weights ("},
		{[]string{"--dtype", "float16"}, "f16 weights ("},
		{[]string{"--quantization", "int8"}, "q8_0 weights ("},
		{[]string{"--quantization", "q8_0", "--dtype", "float32"}, "q8_0 weights ("},
	} {
		args := append([]string{"generate", "--device", "cpu", "--prompt", "Once upon a time", "--max-tokens", "16"}, c.args...)
		out, stderr, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if out != "Once upon a time"+want+"\n" || !strings.Contains(stderr, c.format) {
			t.Errorf("%v: stdout %q, stderr %q (want the format %q)", c.args, out, stderr, c.format)
		}
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--quantization", "int8", "--dtype", "bfloat16"}, "use --dtype auto or float32"},
		{[]string{"--quantization", "int8", "--dtype", "float16"}, "use --dtype auto or float32"},
		{[]string{"--quantization", "int8", "--device", "cuda"}, "runs on the CPU only"},
		{[]string{"--quantization", "fp8"}, "want int8 (alias q8_0) or none"},
		{[]string{"--dtype", "fp8"}, "want auto, bfloat16, float16 or float32"},
	} {
		args := append([]string{"generate", "--prompt", "x"}, bad.args...)
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %q", bad.args, err, bad.want)
		}
		args = append([]string{"inspect"}, bad.args...)
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("inspect %v: %v, want an error naming %q", bad.args, err, bad.want)
		}
	}

	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Hidden: 128, Heads: 8, KVHeads: 4, DType: "BF16", Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	inspect := func(args ...string) inspectResult {
		out, _, err := runCLI(t, append([]string{"inspect", "--model", dir, "--output", "json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var ir inspectResult
		if err := json.Unmarshal([]byte(out), &ir); err != nil {
			t.Fatal(err)
		}
		return ir
	}
	auto, f32, q8 := inspect(), inspect("--dtype", "float32", "--plan", "tp=2"), inspect("--quantization", "int8")
	if auto.WeightFormat != "bf16" || !auto.WeightInPlace || auto.ResidentBytes != auto.Ranks[0].ResidentBytes {
		t.Fatalf("auto: %s, in place %v, %d bytes (rank 0 %d)", auto.WeightFormat, auto.WeightInPlace, auto.ResidentBytes, auto.Ranks[0].ResidentBytes)
	}
	if f32.WeightFormat != "f32" || f32.WeightInPlace {
		t.Fatalf("float32: %s, in place %v", f32.WeightFormat, f32.WeightInPlace)
	}
	for _, rb := range f32.Ranks {
		if rb.ResidentBytes != rb.WeightBytes {
			t.Fatalf("float32 tp=2: rank %d resident %d, fp32 bytes %d", rb.Rank, rb.ResidentBytes, rb.WeightBytes)
		}
	}
	if q8.WeightFormat != "q8_0" || q8.WeightInPlace || q8.ResidentBytes >= auto.ResidentBytes {
		t.Fatalf("int8: %s, in place %v, %d bytes (bf16 %d)", q8.WeightFormat, q8.WeightInPlace, q8.ResidentBytes, auto.ResidentBytes)
	}
}
