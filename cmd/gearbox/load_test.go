package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/bench"
)

// startInProcess builds the serve stack for the built-in model and serves
// it on a loopback port until the test ends.
func startInProcess(t *testing.T, args ...string) string {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := serveConfig{host: "127.0.0.1", blockSize: 16, maxBatched: 2048, maxSeqs: 256, maxWaiting: 1024, prefixCaching: true, maxBodyBytes: 8 << 20}
	fs.IntVar(&c.maxWaiting, "max-waiting", c.maxWaiting, "")
	fs.IntVar(&c.maxSeqs, "max-num-seqs", c.maxSeqs, "")
	fs.StringVar(&c.sloTiers, "slo-tiers", "", "")
	fs.StringVar(&c.modelDir, "model", "", "")
	fs.StringVar(&c.servedName, "served-model-name", "", "")
	addSpecFlag(fs, &c.spec)
	c.lora = addLoRAFlags(fs)
	c.gen = addGenConfigFlags(fs)
	c.par = addParallelFlags(fs)
	c.dev = addDeviceFlags(fs, "auto")
	if err := fs.Parse(append([]string{"--device", "cpu"}, args...)); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, eng, cleanup, err := buildServer(c, logger, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = serveUntilDone(ctx, ln, srv.api, eng, 10*time.Second, logger)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cleanup()
	})
	return "http://" + ln.Addr().String()
}

// storiesText is the built-in model's greedy continuation of "Once upon a
// time" in 16 tokens.
const storiesText = ", there was a little girl named Lily. She loved to play"

// greedyText is the text of a 16-token greedy completion of "Once upon a
// time" from the server at url (storiesText from a server that serves the
// built-in model right).
func greedyText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":16,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Choices []struct{ Text string } }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("completion: status %d, %v, %+v", resp.StatusCode, err, out)
	}
	return out.Choices[0].Text
}

// scrape returns the sum of every sample of a metric family.
func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestLoad500 sends 500 requests at concurrency 64 with bench serve and
// holds the server's counters to the client's.
func TestLoad500(t *testing.T) {
	if testing.Short() {
		t.Skip("500-request load test")
	}
	url := startInProcess(t, "--plan", "sp=2", "--policy", "shift", "--shift-threshold", "64")
	rep, err := bench.Serve(context.Background(), bench.ServeConfig{
		Options:     bench.Options{BaseURL: url, Model: "stories260K", MaxConcurrency: 64, IgnoreEOS: true, Seed: 1},
		Dataset:     "synthetic:in=48,out=24",
		MaxRequests: 500,
	}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 500 || rep.Failed != 0 {
		t.Fatalf("completed %d, failed %d", rep.Completed, rep.Failed)
	}
	if got := scrape(t, url, "gearbox:request_success_total"); got != 500 {
		t.Fatalf("server counted %v finished requests, client 500", got)
	}
	if got := scrape(t, url, "gearbox:generation_tokens_total"); int(got) != rep.TotalOutputTokens {
		t.Fatalf("server counted %v generated tokens, client %d", got, rep.TotalOutputTokens)
	}
	if got := scrape(t, url, "gearbox:prompt_tokens_total"); int(got) != rep.TotalInputTokens {
		t.Fatalf("server counted %v prompt tokens, client %d", got, rep.TotalInputTokens)
	}
	if got := scrape(t, url, "gearbox:time_to_first_token_seconds_count"); got != 500 {
		t.Fatalf("TTFT histogram count %v", got)
	}
	if scrape(t, url, "gearbox:num_requests_running") != 0 || scrape(t, url, "gearbox:kv_cache_usage_perc") != 0 {
		t.Fatal("server not idle after the run")
	}
	if scrape(t, url, "gearbox:plan_switches_total") == 0 {
		t.Fatal("the shift policy never switched plans")
	}
	t.Logf("500 requests: %.1f req/s, %.0f output tok/s, TTFT p50 %.1f ms, TPOT p50 %.2f ms",
		rep.RequestThroughput, rep.OutputThroughput, rep.TTFT.Median, rep.TPOT.Median)
}
