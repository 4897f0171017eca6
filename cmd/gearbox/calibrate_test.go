package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/sim"
)

func runCalibrateCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runCalibrate(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestCalibrateDevices(t *testing.T) {
	if _, _, err := runCalibrateCLI(t, "--device", "cuda"); !errors.Is(err, errNoGPUBackend) || !strings.Contains(err.Error(), "GPU backend is not built yet") {
		t.Errorf("--device cuda: %v", err)
	}
	if _, _, err := runCalibrateCLI(t, "--device", "tpu"); err == nil || !strings.Contains(err.Error(), "unknown --device") {
		t.Errorf("--device tpu: %v", err)
	}
	if _, _, err := runCalibrateCLI(t, "--profile", "x.json"); err == nil || !strings.Contains(err.Error(), "--validate") {
		t.Errorf("--profile without --validate: %v", err)
	}
	if _, _, err := runCalibrateCLI(t, "--validate", "--profile", filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing profile was accepted")
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
