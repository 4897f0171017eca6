package engine

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/sample"
)

// parallelSampleElems is the number of logits (rows × vocabulary) from
// which a step's rows are sampled on several goroutines. Sampling a row is
// one or two passes over the vocabulary (0.6 ms for Llama 3's 128,256
// under temperature alone, BenchmarkSample), so 64 sequences of such a
// model cost about 40 ms a step on one core, ten times the GPU's decode
// step. Below this, starting goroutines costs more than it saves. The
// n-gram drafts' search over the sequences (about 1 ns a token,
// BenchmarkNGramPropose) uses the same bound in tokens: at 256 sequences
// of 32K tokens it is about 9 ms a step on one core.
var parallelSampleElems = 1 << 18

// sampleJob is one sequence's logits rows to sample with its request's
// sampler: the row after its last known token, then one after each of its
// drafts.
type sampleJob struct {
	sampler *sample.Sampler
	logits  []float32 // [1+len(drafts), vocab]; nil when argmax is set
	argmax  []int     // the runner's greedy choice for each row (GreedyRunner)
	drafts  []int
	stops   []int           // tokens after which nothing is verified
	out     []sample.Result // one per row; the first n are the tokens taken
	n       int
	seq     int // the sequence's index in the step

	// Drafting for the next step (Engine.propose): at most k drafts
	// from the known tokens.
	known, proposed []int
	k               int
}

// run samples the job's rows in order while the tokens agree with the
// drafts: the token sampled from row i is taken, and if it equals draft i
// the next row is sampled too. Each row is sampled exactly as plain
// decoding would sample that position (the sampler's state has followed
// the tokens before it), and a draft is kept only when it is the token
// drawn, so the tokens and their distribution are plain decoding's. A
// stop token ends the verification: nothing after it is generated.
func (j *sampleJob) run() {
	vocab := len(j.logits) / len(j.out)
	for i := range j.out {
		var r sample.Result
		if j.argmax != nil {
			r = sample.Result{Token: j.argmax[i]}
			j.sampler.Accept(r.Token)
		} else {
			r = j.sampler.Sample(j.logits[i*vocab : (i+1)*vocab])
		}
		j.out[i], j.n = r, i+1
		if i == len(j.drafts) || r.Token != j.drafts[i] || slices.Contains(j.stops, r.Token) {
			return
		}
	}
}

// sampleRows runs every job. Each request has its own sampler (random
// stream, penalties), so the jobs are independent and the results are the
// same whichever goroutine runs them.
func sampleRows(jobs []sampleJob) {
	elems := 0
	for _, j := range jobs {
		elems += len(j.logits)
	}
	forEach(len(jobs), elems, func(i int) { jobs[i].run() })
}

// forEach calls fn(i) for every i < n: on up to GOMAXPROCS goroutines when
// there are at least two and the work (in logits, or tokens searched) is
// at least parallelSampleElems, inline otherwise.
func forEach(n, work int, fn func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers < 2 || work < parallelSampleElems {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}
