package main

import (
	"math"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/bench"
)

// TestDecodePerGPU reads steps off token stamps: two requests decoding
// together for two 10 ms steps, then one alone for a third, on a 2-GPU
// instance: 5 tokens in 30 ms of steps is 166.7 tok/s, 83.3 per GPU, in
// 3 steps.
func TestDecodePerGPU(t *testing.T) {
	ms := time.Millisecond
	rs := []bench.RequestResult{
		{Start: 0, TTFT: time.Second, OutputTokens: 3, ITL: []time.Duration{10 * ms, 10 * ms}},
		{Start: 500 * ms, TTFT: 500 * ms, OutputTokens: 4, ITL: []time.Duration{10 * ms, 10 * ms, 10 * ms}},
	}
	if got, want := decodePerGPU(rs, 2), 5/0.030/2; math.Abs(got/want-1) > 1e-9 {
		t.Errorf("decode throughput %g tok/s per GPU, want %g", got, want)
	}
	if steps, tokens := decodeSteps(rs); steps != 3 || tokens != 5 {
		t.Errorf("%d steps, %d tokens; want 3, 5", steps, tokens)
	}
	if got := decodePerGPU(rs[:0], 2); got != 0 {
		t.Errorf("no decodes: %g", got)
	}
}

// TestChange writes cuts as signed changes with a true minus sign.
func TestChange(t *testing.T) {
	if got := change(10.74); got != "−10.7%" {
		t.Errorf("change(10.74) = %q", got)
	}
	if got := change(-0.4); got != "+0.4%" {
		t.Errorf("change(-0.4) = %q", got)
	}
}
