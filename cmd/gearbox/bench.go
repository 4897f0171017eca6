package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/bench"
)

// runBench dispatches "gearbox bench SUBCOMMAND"; serve is the one there is.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "Usage: gearbox bench serve [flags]\n\n" +
		"  serve   replay a workload against an OpenAI-compatible server and report\n" +
		"          what vllm bench serve reports\n\nRun 'gearbox bench serve --help' for its flags.\n"
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return errors.New("bench: no subcommand given")
		}
		return nil
	}
	if args[0] != "serve" {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("bench: unknown subcommand %q", args[0])
	}
	return runBenchServe(ctx, args[1:], stdout, stderr)
}

func runBenchServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench serve", "bench serve --base-url URL [--model NAME] --dataset SPEC [flags]", stderr)
	baseURL := fs.String("base-url", "", "server root URL, e.g. http://127.0.0.1:8000 (default: http://HOST:PORT)")
	host := fs.String("host", "127.0.0.1", "server host when --base-url is not given")
	port := fs.Int("port", 8000, "server port when --base-url is not given")
	endpoint := fs.String("endpoint", bench.EndpointCompletions, "API endpoint: "+bench.EndpointCompletions+" or "+bench.EndpointChatCompletions+" (the server's chat template adds tokens to each prompt)")
	model := fs.String("model", "", "model name sent in requests (default: the server's first model in /v1/models)")
	apiKey := fs.String("api-key", "", "API key sent as a Bearer token (default: $OPENAI_API_KEY)")
	var loras stringList
	fs.Var(&loras, "lora-modules", "LoRA adapter names the server serves (repeatable, or several separated by spaces): each request names one at random instead of --model, as vLLM's bench serve does")
	dataset := fs.String("dataset", "synthetic", "workload: azure:FILE (Azure LLM trace CSV), mooncake:FILE (Mooncake trace JSONL) or synthetic[:in=N,out=N,n=N] (lengths may be ranges LO-HI; defaults in=1024,out=128,n=1000)")
	tokDir := fs.String("tokenizer", "", "directory with the model's tokenizer.json, to build prompts of exact token lengths (default: the model directory /v1/models reports as root, or the built-in one for stories260K)")
	var maxRequests int
	fs.IntVar(&maxRequests, "max-requests", 0, "send the first N requests of the dataset (default: all; synthetic: its n)")
	fs.IntVar(&maxRequests, "num-prompts", 0, "same as --max-requests (vLLM's name)")
	rate := fs.String("request-rate", "inf", "requests per second; inf or 0 sends them all at once")
	burstiness := fs.Float64("burstiness", 1, "gamma shape of the inter-arrival times (mean 1/rate): 1 is Poisson, below 1 burstier, above 1 more even, inf evenly spaced")
	replay := fs.Bool("replay-timestamps", false, "send requests at the trace's own times instead of --request-rate")
	timeScale := fs.Float64("time-scale", 1, "with --replay-timestamps, divide the trace's times by this (2 replays twice as fast)")
	maxConcurrency := fs.Int("max-concurrency", 0, "requests in flight at most; arrivals beyond it wait in order (default: unlimited)")
	sloTTFT := fs.Float64("slo-ttft-ms", 0, "goodput objective: time to first token at most this many ms")
	sloTPOT := fs.Float64("slo-tpot-ms", 0, "goodput objective: time per output token after the first at most this many ms")
	sloE2EL := fs.Float64("slo-e2el-ms", 0, "goodput objective: end-to-end latency at most this many ms")
	var goodput stringList
	fs.Var(&goodput, "goodput", "goodput objectives as vLLM takes them: ttft:MS tpot:MS e2el:MS (repeatable)")
	percentileMetrics := fs.String("percentile-metrics", "ttft,tpot,itl,e2el", "metrics to report statistics for (of ttft, tpot, itl, e2el)")
	metricPercentiles := fs.String("metric-percentiles", "99", "percentiles to report for each metric, e.g. 50,90,99")
	ignoreEOS := fs.Bool("ignore-eos", false, "send ignore_eos (a vLLM/SGLang extension) so every request generates its full output length")
	temperature := fs.Float64("temperature", 0, "sampling temperature sent with every request")
	seed := fs.Int64("seed", 0, "seed of the arrival process, synthetic lengths and prompt text")
	requestTimeout := fs.Duration("request-timeout", 6*time.Hour, "per-request limit, to the end of its stream (vLLM's is 6h)")
	resultJSON := fs.String("result-json", "", "write the result JSON (vLLM's --save-result keys, with per-request arrays) to this file")
	saveResult := fs.Bool("save-result", false, "write the result JSON to vLLM's default file name in the current directory")
	label := fs.String("label", "", "prefix of the --save-result file name (default: the backend, openai or openai-chat)")
	noProgress := fs.Bool("disable-tqdm", false, "no progress reporting on stderr")
	if err := fs.Parse(joinGoodputArgs(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench serve: unexpected argument %q", fs.Arg(0))
	}

	requestRate, err := strconv.ParseFloat(*rate, 64)
	if err != nil || requestRate < 0 || math.IsNaN(requestRate) {
		return fmt.Errorf("bench serve: --request-rate %q: want a non-negative number or inf", *rate)
	}
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "request-rate" })
	if *replay && rateSet {
		return errors.New("bench serve: give --request-rate or --replay-timestamps, not both")
	}
	slo, err := bench.ParseSLO(goodput)
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	for _, s := range []struct {
		ms   float64
		into *time.Duration
		name string
	}{{*sloTTFT, &slo.TTFT, "ttft"}, {*sloTPOT, &slo.TPOT, "tpot"}, {*sloE2EL, &slo.E2EL, "e2el"}} {
		if s.ms < 0 {
			return fmt.Errorf("bench serve: --slo-%s-ms %v: want a positive number", s.name, s.ms)
		}
		if s.ms > 0 {
			*s.into = time.Duration(s.ms * float64(time.Millisecond))
		}
	}
	metrics, err := bench.ParseMetrics(*percentileMetrics)
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	percentiles, err := bench.ParsePercentiles(*metricPercentiles)
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	if *baseURL == "" {
		*baseURL = fmt.Sprintf("http://%s:%d", *host, *port)
	}
	if *apiKey == "" {
		*apiKey = os.Getenv("OPENAI_API_KEY")
	}
	var progress io.Writer
	if !*noProgress {
		progress = stderr
	}

	_, err = bench.Serve(ctx, bench.ServeConfig{
		Options: bench.Options{
			BaseURL: *baseURL, Endpoint: *endpoint, Model: *model, APIKey: *apiKey, LoRAModules: splitFields(loras),
			RequestRate: requestRate, Burstiness: *burstiness, Replay: *replay, TimeScale: *timeScale, Seed: *seed,
			MaxConcurrency: *maxConcurrency, IgnoreEOS: *ignoreEOS, Temperature: *temperature, RequestTimeout: *requestTimeout,
			Report: bench.ReportOptions{Percentiles: percentiles, Metrics: metrics, SLO: slo},
			Label:  *label, Progress: progress, ProgressBar: isTerminal(stderr),
		},
		Dataset: *dataset, MaxRequests: maxRequests, TokenizerDir: *tokDir,
		ResultJSON: *resultJSON, SaveResult: *saveResult,
	}, stdout, stderr)
	return err
}

// joinGoodputArgs lets --goodput take several values the way vllm bench
// serve does ("--goodput ttft:500 tpot:50"): the flag package takes one
// value per flag, so the KEY:VALUE arguments that follow are joined into
// it with commas.
func joinGoodputArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, inline, hasInline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "goodput" {
			out = append(out, a)
			continue
		}
		var vals []string
		if hasInline {
			vals = append(vals, inline)
		} else if i+1 < len(args) {
			i++
			vals = append(vals, args[i])
		}
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && strings.Contains(args[i+1], ":") {
			i++
			vals = append(vals, args[i])
		}
		out = append(out, "--goodput="+strings.Join(vals, ","))
	}
	return out
}

// isTerminal reports whether w is a terminal, where a progress bar redrawn
// with \r belongs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// splitFields is the values of a repeatable flag, each split at spaces.
func splitFields(values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, strings.Fields(v)...)
	}
	return out
}
