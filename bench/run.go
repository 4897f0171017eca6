package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// Endpoints Run can drive.
const (
	EndpointCompletions     = "/v1/completions"
	EndpointChatCompletions = "/v1/chat/completions"
)

// Prompts are built ahead of their arrival: before the clock starts, as
// many as fit in lookaheadTokens (about 200 MB of request bodies, which
// covers most workloads whole, as vLLM builds them all up front), and at
// least minLookahead, so a long trace's prompts are never all in memory.
const (
	lookaheadTokens = 32 << 20
	minLookahead    = 64
)

// lookahead returns how many of reqs to build ahead.
func lookahead(reqs []Request) int {
	tokens := 0
	for i, r := range reqs {
		if tokens += r.InputTokens; tokens > lookaheadTokens {
			return min(max(i, minLookahead), len(reqs))
		}
	}
	return len(reqs)
}

// Options configures a run. BaseURL, Model, Requests and Prompts are
// required; zero values elsewhere take the defaults named.
type Options struct {
	BaseURL  string // server root, e.g. "http://127.0.0.1:8000"
	Endpoint string // EndpointCompletions (default) or EndpointChatCompletions
	Model    string // the model name sent in requests
	APIKey   string // sent as "Authorization: Bearer KEY" when set
	// LoRAModules, when set, are the names requests send instead of
	// Model: each request one of them at random (vLLM's --lora-modules),
	// reproducibly by Seed.
	LoRAModules []string

	Requests []Request      // the workload, in arrival order
	Prompts  *PromptBuilder // prompt text of each request's exact length

	// Arrivals come from RequestRate and Burstiness (see Arrivals), or with
	// Replay from the requests' own Arrival divided by TimeScale (default 1).
	RequestRate float64 // req/s; 0 or +Inf sends everything at once
	Burstiness  float64 // default 1 (Poisson)
	Replay      bool
	TimeScale   float64
	Seed        int64 // seeds the arrival process

	MaxConcurrency int // requests in flight at most; arrivals beyond it queue in order. 0: unlimited

	IgnoreEOS      bool          // send "ignore_eos": true (a vLLM/SGLang extension; not sent otherwise)
	Temperature    float64       // sampling temperature sent with every request
	RequestTimeout time.Duration // per request, to the end of its stream; 0: none

	Report ReportOptions // percentiles, metrics and SLOs; Duration is the run's

	// Descriptions written into the report.
	Label       string
	DatasetSpec string
	TokenizerID string

	// Progress, when set, receives a one-line bar redrawn with \r
	// (ProgressBar, for terminals) or a log line every ProgressInterval
	// (default 10 s; bar redraws every 200 ms).
	Progress         io.Writer
	ProgressBar      bool
	ProgressInterval time.Duration

	HTTPClient *http.Client                                     // default: a client pooling MaxConcurrency connections
	Clock      clock.Clock                                      // default clock.Real
	Sleep      func(ctx context.Context, d time.Duration) error // default: a timer; returns ctx's error when ctx ends first
}

func (o *Options) validate() error {
	switch {
	case o.BaseURL == "":
		return errors.New("bench: no base URL")
	case o.Model == "":
		return errors.New("bench: no model name")
	case len(o.Requests) == 0:
		return errors.New("bench: no requests")
	case o.Prompts == nil:
		return errors.New("bench: no prompt builder")
	case o.MaxConcurrency < 0:
		return fmt.Errorf("bench: max concurrency %d: want 0 (unlimited) or more", o.MaxConcurrency)
	case o.Endpoint != "" && o.Endpoint != EndpointCompletions && o.Endpoint != EndpointChatCompletions:
		return fmt.Errorf("bench: endpoint %q: want %s or %s", o.Endpoint, EndpointCompletions, EndpointChatCompletions)
	}
	return nil
}

func (o *Options) setDefaults() {
	if o.Endpoint == "" {
		o.Endpoint = EndpointCompletions
	}
	if o.Burstiness == 0 {
		o.Burstiness = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// offsets returns when each request is sent, from the start of the run.
func (o *Options) offsets() ([]time.Duration, error) {
	if o.Replay {
		return ReplayArrivals(o.Requests, o.TimeScale)
	}
	return Arrivals(len(o.Requests), o.RequestRate, o.Burstiness, o.Seed)
}

func (o *Options) info(start time.Time) RunInfo {
	backend := "openai"
	if o.Endpoint == EndpointChatCompletions {
		backend = "openai-chat"
	}
	rate := o.RequestRate
	if rate == 0 || o.Replay {
		rate = math.Inf(1)
	}
	return RunInfo{
		Date: start.Format("20060102-150405"), Backend: backend, Label: o.Label, ModelID: o.Model,
		TokenizerID: o.TokenizerID, NumPrompts: len(o.Requests), RequestRate: rate, Burstiness: o.Burstiness,
		MaxConcurrency: o.MaxConcurrency, Dataset: o.DatasetSpec, Endpoint: o.Endpoint,
		BaseURL: o.BaseURL, Replay: o.Replay, TimeScale: o.TimeScale, Seed: o.Seed, IgnoreEOS: o.IgnoreEOS,
	}
}

// prepared is a request's body, built ahead of its arrival.
type prepared struct {
	body []byte
	err  error
}

// Run sends the workload to the server and reports what vllm bench serve
// would: each request is sent at its arrival offset (waiting for a slot
// when MaxConcurrency requests are in flight), streamed to its end and
// measured on the client; the report covers them all once the last one
// ends. Prompts are built ahead of their arrival: before the clock starts,
// all of them up to a budget of 32M tokens, and the rest as the run goes.
//
// When ctx ends, Run stops sending, aborts the requests in flight, waits
// for its goroutines, and returns a report of the requests that had ended
// by then together with ctx's error. A prompt that cannot be built is an
// error with no report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.setDefaults()
	offsets, err := o.offsets()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	httpClient := o.HTTPClient
	if httpClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = 1024
		if o.MaxConcurrency > 0 {
			tr.MaxIdleConnsPerHost = o.MaxConcurrency
		}
		tr.DisableCompression = true // keep streamed chunks unbuffered
		defer tr.CloseIdleConnections()
		httpClient = &http.Client{Transport: tr}
	}
	c := &client{
		http: httpClient, url: strings.TrimSuffix(o.BaseURL, "/") + o.Endpoint,
		chat: o.Endpoint == EndpointChatCompletions, model: o.Model, loras: o.LoRAModules, seed: uint64(o.Seed), apiKey: o.APIKey,
		ignoreEOS: o.IgnoreEOS, temperature: o.Temperature, timeout: o.RequestTimeout, clock: o.Clock,
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ahead := lookahead(o.Requests)
	prompts := make(chan prepared, ahead)
	primed := make(chan struct{})
	var producer sync.WaitGroup
	producer.Go(func() { produce(runCtx, c, o.Prompts, o.Requests, prompts, ahead, primed) })
	select {
	case <-primed:
	case <-runCtx.Done():
	}

	start := o.Clock.Now()
	n := len(o.Requests)
	results := make([]RequestResult, n)
	ended := make([]bool, n)
	prog := startProgress(&o, n, start)
	var sem chan struct{}
	if o.MaxConcurrency > 0 {
		sem = make(chan struct{}, o.MaxConcurrency)
	}
	var inflight sync.WaitGroup
	var buildErr error
dispatch:
	for i, req := range o.Requests {
		var p prepared
		select {
		case p = <-prompts:
		case <-runCtx.Done():
			break dispatch
		}
		if p.err != nil {
			buildErr = p.err
			cancel(p.err)
			break
		}
		if wait := start.Add(offsets[i]).Sub(o.Clock.Now()); wait > 0 {
			if o.Sleep(runCtx, wait) != nil || runCtx.Err() != nil {
				break
			}
		}
		arrived := o.Clock.Now().Sub(start)
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-runCtx.Done():
				break dispatch
			}
		}
		prog.sent()
		sendAt := o.Clock.Now()
		inflight.Go(func() {
			res, cancelled := c.send(runCtx, p.body, req, start, sendAt)
			if sem != nil {
				<-sem
			}
			if cancelled {
				prog.abandoned()
				return
			}
			res.Queue = max(0, res.Start-arrived)
			results[i], ended[i] = res, true
			prog.ended(res.OK())
		})
	}
	inflight.Wait()
	duration := o.Clock.Now().Sub(start)
	cancel(nil)
	producer.Wait()
	prog.stop()
	if buildErr != nil {
		return nil, fmt.Errorf("bench: %w", buildErr)
	}

	var done []RequestResult
	for i, ok := range ended {
		if ok {
			done = append(done, results[i])
		}
	}
	ropts := o.Report
	ropts.Duration = duration
	rep := ComputeReport(done, ropts)
	rep.RunInfo = o.info(start)
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	return rep, nil
}

// produce builds the request bodies in order into out until they are all
// built, one fails, or ctx ends. It closes primed once the first ahead are
// in out (or it stops before).
func produce(ctx context.Context, c *client, b *PromptBuilder, reqs []Request, out chan<- prepared, ahead int, primed chan<- struct{}) {
	var once sync.Once
	defer once.Do(func() { close(primed) })
	for i, r := range reqs {
		text, err := b.Prompt(r)
		var body []byte
		if err == nil {
			body, err = c.body(text, r.OutputTokens, i)
		}
		select {
		case out <- prepared{body, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
		if i+1 == ahead {
			once.Do(func() { close(primed) })
		}
	}
}
