package engine

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/sample"
)

// parallelSampleElems is the number of logits (rows × vocabulary) from
// which a step's rows are sampled on several goroutines. Sampling a row is
// one or two passes over the vocabulary (0.6 ms for Llama 3's 128,256
// under temperature alone, BenchmarkSample), so 64 sequences of such a
// model cost about 40 ms a step on one core, ten times the GPU's decode
// step. Below this, starting goroutines costs more than it saves.
var parallelSampleElems = 1 << 18

// sampleJob is one logits row to sample with its request's sampler, and
// where the result goes.
type sampleJob struct {
	sampler *sample.Sampler
	logits  []float32
	out     *sample.Result
}

// sampleRows samples every job's row. Each request has its own sampler
// (random stream, penalties), so the rows are independent and the results
// are the same whichever goroutine samples them; with more than one row
// and at least parallelSampleElems logits they are spread over up to
// GOMAXPROCS goroutines.
func sampleRows(jobs []sampleJob) {
	workers := min(len(jobs), runtime.GOMAXPROCS(0))
	if workers < 2 || len(jobs)*len(jobs[0].logits) < parallelSampleElems {
		for _, j := range jobs {
			*j.out = j.sampler.Sample(j.logits)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				*j.out = j.sampler.Sample(j.logits)
			}
		})
	}
	wg.Wait()
}
