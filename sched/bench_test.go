package sched

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSchedule times one Schedule+Update with 256 running decodes and
// 1,024 waiting requests in a pool large enough that nothing is preempted.
// Each request ends after 32 to 95 outputs and a new one is queued, so the
// mix stays steady: mostly decodes, a few 128-token prefills per step.
func BenchmarkSchedule(b *testing.B) {
	for _, caching := range []bool{false, true} {
		b.Run(fmt.Sprint("caching=", caching), func(b *testing.B) {
			benchmarkSchedule(b, caching)
		})
	}
}

func benchmarkSchedule(b *testing.B, caching bool) {
	const running, waiting, prompt = 256, 1024, 128
	s, err := New(Config{
		MaxNumBatchedTokens: 2048,
		MaxNumSeqs:          running,
		MaxModelLen:         4096,
		BlockSize:           16,
		NumBlocks:           running * (prompt + 128) / 16 * 2,
		EnablePrefixCaching: caching,
	})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	next := 0
	stopAfter := map[string]int{}
	add := func() {
		id := fmt.Sprint("r", next)
		if err := s.Add(&Request{ID: id, Prompt: tokens(next, prompt), MaxTokens: 128, Arrival: start.Add(time.Duration(next))}); err != nil {
			b.Fatal(err)
		}
		stopAfter[id] = 32 + next%64
		next++
	}
	outputs := map[string]int{}
	sampled := make([]int, 0, running)
	var st *Step
	step := func() {
		st = s.Schedule()
		sampled = sampled[:len(st.Seqs)]
		for i := range sampled {
			sampled[i] = i % 1000
		}
		if err := s.Update(st, sampled); err != nil {
			b.Fatal(err)
		}
		for _, q := range st.Seqs {
			if !q.Sample {
				continue
			}
			outputs[q.ID]++
			if outputs[q.ID] >= stopAfter[q.ID] {
				if err := s.Finish(q.ID, Stop); err != nil {
					b.Fatal(err)
				}
				delete(outputs, q.ID)
				delete(stopAfter, q.ID)
				add()
			}
		}
		s.Drain()
	}
	for range running + waiting {
		add()
	}
	for s.NumRunning() < running || s.Loads()[0].QueuedPrefill > running {
		step()
	}
	if s.NumWaiting() != waiting || s.Preemptions() != 0 {
		b.Fatalf("%d waiting, %d preemptions", s.NumWaiting(), s.Preemptions())
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	b.StopTimer()
	if len(st.Seqs) != running || s.NumRunning()+s.NumWaiting() != running+waiting || s.Preemptions() != 0 {
		b.Fatalf("last step ran %d requests; %d running, %d waiting, %d preemptions", len(st.Seqs), s.NumRunning(), s.NumWaiting(), s.Preemptions())
	}
}
