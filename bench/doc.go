// Package bench load-tests an OpenAI-compatible server (Gearbox, vLLM,
// SGLang) by replaying a workload and reports what `vllm bench serve`
// reports, under the same names: `gearbox bench serve` is a thin CLI over
// Serve.
//
// Read these first: dataset.go (workloads: Azure and Mooncake traces,
// synthetic), prompt.go (prompt text of an exact token length, with
// Mooncake prefix blocks as shared text), run.go (arrivals, the
// concurrency cap, the streaming client in client.go), report.go (the
// metrics and their JSON).
//
// Invariants:
//   - A request's prompt encodes to exactly its requested number of tokens
//     with the server's tokenizer, special tokens not counted
//     (Encode(text, false)); equal Mooncake hash ids are equal 512-token
//     text blocks.
//   - Metrics are vLLM's: TTFT to the first streamed chunk with text, ITL
//     between such chunks, E2EL to the last, TPOT = (E2EL − TTFT)/(output
//     tokens − 1), output tokens from the usage chunk; percentiles
//     interpolate linearly as numpy does. ComputeReport is the one place
//     they are computed, for measured runs and simulated ones alike.
//   - Time and randomness are injected: arrivals are seeded, and Run reads
//     time only through Options.Clock and waits only through
//     Options.Sleep.
package bench
