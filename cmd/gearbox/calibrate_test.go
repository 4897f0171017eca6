package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/sim"
)

func runCalibrateCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runCalibrate(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestCalibrateDevices(t *testing.T) {
	if _, _, err := gpu.Search(gpu.Driver, gpu.OSEnv()); err != nil {
		// No GPU here: --device cuda says which library is missing, in one line.
		_, _, err := runCalibrateCLI(t, "--device", "cuda", "--out", filepath.Join(t.TempDir(), "gpu.json"))
		if !errors.Is(err, gpu.ErrNotFound) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--device cuda without a driver: %v", err)
		}
	} else {
		t.Log("a CUDA driver is present: not checking the error without one")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "tpu"}, "unknown --device"},
		{[]string{"--device", "auto"}, "unknown --device"},
		{[]string{"--profile", "x.json"}, "--validate"},
		{[]string{"--shapes", "llama-3.2-1b"}, "--validate"},
		{[]string{"--validate", "--shapes", "llama-9"}, "unknown model shape"},
		{[]string{"--device", "cuda", "--threads", "4"}, "a GPU has none"},
		{[]string{"--dtype", "bfloat16"}, "add --validate"},
		{[]string{"--validate", "--dtype", "int8"}, "want float32, bfloat16 or float16"},
		{[]string{"--validate", "--dtype", "auto"}, "want float32, bfloat16 or float16"},
		{[]string{"--device", "cuda", "--validate", "--dtype", "float16"}, "its profile's bfloat16"},
		{[]string{"--quantization", "int8"}, "add --validate, on --device cpu"},
		{[]string{"--validate", "--quantization", "int8", "--dtype", "bfloat16"}, "quantizes float32 values"},
		{[]string{"--validate", "--quantization", "int4"}, "want int8"},
	} {
		if _, _, err := runCalibrateCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.args, err, c.want)
		}
	}
	if _, _, err := runCalibrateCLI(t, "--validate", "--profile", filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing profile was accepted")
	}
}

// TestCalibrateProfileDevice refuses to validate a profile on the other
// kind of device, before running anything.
func TestCalibrateProfileDevice(t *testing.T) {
	p := &sim.Profile{
		Version: sim.ProfileVersion, Name: "NVIDIA H100 80GB HBM3", DType: sim.ProfileBFloat16, MemoryBytes: 80 << 30,
		MemBytesPerS: 3e12, AttentionGFLOPS: 4e5, GEMM: []sim.GEMMPoint{{M: 1, N: 4096, K: 4096, GFLOPS: 3000}},
	}
	path := filepath.Join(t.TempDir(), "gpu.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCalibrateCLI(t, "--validate", "--profile", path); err == nil || !strings.Contains(err.Error(), "--device cuda") {
		t.Errorf("GPU profile on the CPU: %v", err)
	}
}

// TestCalibrateQuick measures the quick grid and checks the file and the
// table.
func TestCalibrateQuick(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cpu.json")
	stdout, stderr, err := runCalibrateCLI(t, "--quick", "--threads", "2", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	p, err := sim.LoadProfile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Threads != 2 {
		t.Errorf("profile threads %d, want 2", p.Threads)
	}
	for _, want := range []string{"STREAM copy", "GEMM curve (fitted)", "attention", "GEMM GFLOP/s by weight"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "wrote "+out) {
		t.Errorf("stderr = %q", stderr)
	}
}
