package engine

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/sample"
)

// sampleJobs builds rows samplers of p, seeded 1, 2, ..., over the rows of
// logits (vocab tokens each), with their results in out.
func sampleJobs(t testing.TB, p sample.Params, rows, vocab int, logits []float32, out []sample.Result) []sampleJob {
	t.Helper()
	jobs := make([]sampleJob, rows)
	for i := range jobs {
		p.Seed, p.HasSeed = int64(i+1), true
		s, err := sample.New(p, nil, vocab)
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = sampleJob{sampler: s, logits: logits[i*vocab : (i+1)*vocab], out: out[i : i+1]}
	}
	return jobs
}

// normalLogits returns n logits drawn from N(0, 3²) with a fixed seed.
func normalLogits(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, n)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	return logits
}

// TestSampleRowsParallel: rows sampled on several goroutines give what
// one goroutine gives, token and log-probabilities, over several steps
// (each request's random stream advances the same way).
func TestSampleRowsParallel(t *testing.T) {
	const rows, vocab = 37, 3000
	logits := normalLogits(rows * vocab)
	seq, par := make([]sample.Result, rows), make([]sample.Result, rows)
	p := sample.Params{Temperature: 1, TopP: 0.95, Logprobs: 5}
	seqJobs, parJobs := sampleJobs(t, p, rows, vocab, logits, seq), sampleJobs(t, p, rows, vocab, logits, par)
	defer func(n int) { parallelSampleElems = n }(parallelSampleElems)
	for step := range 4 {
		parallelSampleElems = 1 << 62
		sampleRows(seqJobs)
		parallelSampleElems = 1
		sampleRows(parJobs)
		distinct := map[int]bool{}
		for i := range rows {
			if seq[i].Token != par[i].Token || !slices.Equal(seq[i].Top, par[i].Top) || seq[i].Logprob != par[i].Logprob {
				t.Fatalf("step %d row %d: parallel %+v, one goroutine %+v", step, i, par[i], seq[i])
			}
			distinct[seq[i].Token] = true
		}
		if len(distinct) < rows/2 {
			t.Fatalf("step %d: %d distinct tokens over %d rows: the seeds do not differ", step, len(distinct), rows)
		}
		for i := range rows {
			seqJobs[i].sampler.Accept(seq[i].Token)
			parJobs[i].sampler.Accept(par[i].Token)
		}
	}
}

// BenchmarkSampleRows: one decode step's sampling, 64 rows of Llama 3's
// 128,256-token vocabulary at temperature 1 (what bench serve
// --temperature 1 sends), on one goroutine and on GOMAXPROCS.
func BenchmarkSampleRows(b *testing.B) {
	const rows, vocab = 64, 128256
	logits := normalLogits(rows * vocab)
	defer func(n int) { parallelSampleElems = n }(parallelSampleElems)
	for _, c := range []struct {
		name string
		min  int
	}{{"one", 1 << 62}, {"parallel", 1}} {
		b.Run(c.name, func(b *testing.B) {
			parallelSampleElems = c.min
			out := make([]sample.Result, rows)
			jobs := sampleJobs(b, sample.Params{Temperature: 1, Logprobs: -1}, rows, vocab, logits, out)
			for b.Loop() {
				sampleRows(jobs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/step")
			b.ReportMetric(float64(rows*vocab)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Glogits/s")
		})
	}
}
