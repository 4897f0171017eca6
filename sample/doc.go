// Package sample turns one sequence's next-token logits into a token, with
// vLLM v1's sampling semantics: repetition, frequency and presence
// penalties, then greedy argmax or temperature, min-p, top-k and top-p
// followed by a draw from the renormalised distribution, and the "raw"
// log-probabilities vLLM reports (log_softmax before any processing).
//
// A Sampler is the per-sequence state: its random stream, the prompt and
// generated tokens the penalties count, and scratch buffers. Its invariant
// is that a sequence's choices are a function of its parameters, seed and
// the logits and accepted tokens it has seen, whatever else runs: two
// samplers with the same parameters, seed and prompt make the same choices
// from the same logits.
//
// Where it differs from vLLM, on purpose: the draw inverts the cumulative
// distribution with one number from a PCG stream, where vLLM races
// exponential noise, so the distribution is the same but seeded outputs
// do not match vLLM's token for token; probabilities are computed with
// float64 sums of float32 exponentials accurate to 3e-7; non-finite logits
// have a defined meaning (NaN is -Inf, +Inf logits share all the mass)
// instead of producing NaN; and Params.Logprobs -1 means none, where
// vLLM's -1 means the whole vocabulary.
//
// Sample is built for vocabularies of 128K–152K tokens: it touches the
// vocabulary in a few linear passes (maximum, exponentials, a heap for
// top-k and Result.Top), sorts only the candidates near the top for top-p,
// applies penalties in time proportional to the tokens they affect, and
// allocates nothing once its buffers have grown, except Result.Top (the
// penalty state also grows by one entry per new distinct token). Read
// sampler.go for the API and the pipeline, choose.go for the random paths.
package sample
