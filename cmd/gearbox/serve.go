package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/chat"
	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/reasoning"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/server"
	"github.com/gearboxlm/gearbox/slo"
	"github.com/gearboxlm/gearbox/toolcall"
)

// serveConfig is what serve needs beyond the model; tests build it directly.
type serveConfig struct {
	modelDir      string
	servedName    string
	host          string
	port          int
	apiKey        string
	chatTemplate  string
	toolParser    string
	reasoning     string
	compactJSON   bool
	respStore     int
	freeToolCalls bool
	maxBatched    int
	maxSeqs       int
	maxWaiting    int
	maxModelLen   int
	blockSize     int
	kvBlocks      int
	prefixCaching bool
	noPrefixCache bool
	maxBodyBytes  int64
	drainTimeout  time.Duration
	sloTiers      string
	spec          specFlag
	lora          *loraFlags
	gen           *genConfigFlags
	par           *parallelFlags
	dev           *deviceFlags
	tr            *transportFlags // nil: in-process ranks
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [--model DIR] [--host H] [--port P] [flags]", stderr)
	c := serveConfig{}
	fs.StringVar(&c.modelDir, "model", "", "Hugging Face model directory (default: the built-in stories260K model)")
	fs.StringVar(&c.servedName, "served-model-name", "", "model name clients send (default: the directory's base name); several separated by spaces are all accepted and listed, the first reported")
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.port, "port", 8000, "port to listen on (0 picks a free one)")
	fs.StringVar(&c.apiKey, "api-key", "", "require 'Authorization: Bearer KEY' on API requests")
	fs.StringVar(&c.chatTemplate, "chat-template", "", "Jinja chat template file, replacing the model's")
	fs.BoolVar(&c.freeToolCalls, "no-tool-call-constraint", false, `read tool_choice "auto" calls as the model writes them; by default, with the hermes syntax, each call is held to the offered tools' schemas while the text around it stays free`)
	fs.IntVar(&c.respStore, "responses-store", 256, "responses of /v1/responses kept in memory for previous_response_id and GET /v1/responses/{id}, the oldest forgotten first (0: none)")
	fs.BoolVar(&c.compactJSON, "structured-outputs-disable-any-whitespace", false, "hold every JSON output format (response_format, guided_json, forced tool calls) to no whitespace between tokens")
	fs.StringVar(&c.reasoning, "reasoning-parser", "", "split a reasoning model's <think> text off into message.reasoning: qwen3, deepseek_r1 (default: none, it stays in content)")
	fs.StringVar(&c.toolParser, "tool-call-parser", "auto", `how the model writes tool calls, which tool_choice "auto" reads: hermes, llama3_json, mistral, pythonic, none (auto: from the chat template)`)
	fs.IntVar(&c.maxBatched, "max-num-batched-tokens", 2048, "token budget of one engine step")
	fs.IntVar(&c.maxSeqs, "max-num-seqs", 256, "requests running at once at most")
	fs.IntVar(&c.maxWaiting, "max-waiting", 1024, "waiting requests at most; more get 429")
	fs.IntVar(&c.maxModelLen, "max-model-len", 0, "context length (default: the model's)")
	fs.IntVar(&c.blockSize, "block-size", 16, "KV cache block size in tokens")
	fs.IntVar(&c.kvBlocks, "num-kv-blocks", 0, "KV cache blocks per replica (default: on the CPU max-num-seqs full contexts, at most 4 GiB; on a GPU what --gpu-memory-utilization leaves)")
	fs.BoolVar(&c.prefixCaching, "enable-prefix-caching", true, "reuse the KV of shared prompt prefixes")
	fs.BoolVar(&c.noPrefixCache, "no-enable-prefix-caching", false, "vLLM's spelling of --enable-prefix-caching=false")
	fs.StringVar(&c.sloTiers, "slo-tiers", "", "JSON file of SLO tiers (name, ttft_ms, tpot_ms) requests name in slo_tier or the X-SLO-Tier header; per-tier goodput on /metrics (examples/slo-tiers)")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", 8<<20, "largest request body accepted")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 60*time.Second, "on SIGTERM, how long to let running requests finish")
	addSpecFlag(fs, &c.spec)
	c.lora = addLoRAFlags(fs)
	c.gen = addGenConfigFlags(fs)
	c.par = addParallelFlags(fs)
	c.dev = addDeviceFlags(fs, "auto")
	c.tr = addTransportFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := c.tr.open(c.dev, logger); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if c.tr.m != nil && c.par.policy == "nitsum" {
		return c.tr.end(errors.New("serve: --transport mpi does not run --policy nitsum (its instances are engines of their own in one process)"), logger)
	}
	if c.tr.follower() {
		// A follower ends when process 0 says so (or goes silent), not on
		// the signal mpirun forwards to every process: process 0 drains
		// first, which needs the followers.
		return c.tr.end(runFollower(context.WithoutCancel(ctx), c, logger, stderr), logger)
	}
	srv, eng, cleanup, err := buildServer(c, logger, stderr)
	if err != nil {
		return c.tr.end(fmt.Errorf("serve: %w", err), logger)
	}
	err = listenAndServe(ctx, c, srv, eng, stdout, logger)
	cleanup()
	return c.tr.end(err, logger)
}

// listenAndServe serves until ctx ends or the rank processes fail, then
// drains.
func listenAndServe(ctx context.Context, c serveConfig, srv *builtServer, eng drainer, stdout io.Writer, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("serving", "address", "http://"+ln.Addr().String(), "model", srv.name)
	fmt.Fprintf(stdout, "Gearbox serving %s on http://%s\n", srv.name, ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.tr.failed():
			logger.Error("rank processes failed: /health reports it, accepted requests end with the error, then the job exits", "err", c.tr.health()())
			srv.api.Drain()
			lingerOnFailure(ctx, eng)
			cancel()
		case <-ctx.Done():
		}
	}()
	return serveUntilDone(ctx, ln, srv.api, eng, c.drainTimeout, logger)
}

// builtServer is a server ready to listen.
type builtServer struct {
	api  *server.Server
	name string
}

// buildServer loads the model and wires executor, engine, metrics and API.
// The engine loop runs until cleanup is called.
func buildServer(c serveConfig, logger *slog.Logger, progress io.Writer) (*builtServer, drainer, func(), error) {
	if err := c.lora.check(c.par.policy, c.tr != nil && c.tr.m != nil); err != nil {
		return nil, nil, nil, err
	}
	if c.par.policy == "nitsum" {
		return buildNitsum(c, logger, progress)
	}
	var tiers *slo.Set
	if c.sloTiers != "" {
		var err error
		if tiers, err = slo.Load(c.sloTiers); err != nil {
			return nil, nil, nil, fmt.Errorf("--slo-tiers: %w", err)
		}
	}
	m, err := c.dev.loadModel(c.modelDir, progress)
	if err != nil {
		return nil, nil, nil, err
	}
	c.par.dtype, c.par.quant = c.dev.dtype, c.dev.quant
	plan, pol, err := c.par.resolve(m.Config)
	if err != nil {
		return nil, nil, nil, err
	}
	spec, err := c.runnerSpec(m, pol)
	if err != nil {
		return nil, nil, nil, err
	}
	served := c.servedNames()
	if len(served) == 0 {
		served = []string{m.Name}
	}
	if spec.adapters, err = c.lora.load(m.Config, served, logger); err != nil {
		return nil, nil, nil, err
	}
	spec.lora = c.lora.enabled()
	maxLen := spec.maxModelLen
	draft, err := c.spec.draftRunner(c.dev, spec, logger) // before the target: on a GPU, the target's KV takes what is left
	if err != nil {
		return nil, nil, nil, err
	}
	run, err := c.dev.newRunner(m, spec, logger)
	if err != nil {
		draft.closeIfAny()
		return nil, nil, nil, err
	}
	if draft != nil {
		run = run.with(draft)
		logger.Info("draft model", "model", c.spec.Model, "device", draft.device)
	}
	if err := c.tr.drive(run, logger); err != nil {
		run.close()
		return nil, nil, nil, err
	}
	logger.Info("device", "choice", run.device)
	if s, ok := pol.(*policy.SiDP); ok {
		s.Log = logger // mode switches
	}
	metrics := server.NewMetrics(plan.String(), pol.String())
	eng, err := engine.NewEngine(engine.Options{
		Exec: run.runner, DraftRunner: run.draftRunner(), Policy: pol, Tokenizer: m.Tokenizer, EOS: m.EOS(), Clock: clock.Real{}, Observer: metrics, Speculative: c.spec.Config,
		Sched: sched.Config{
			MaxNumBatchedTokens: c.maxBatched, MaxNumSeqs: c.maxSeqs, MaxModelLen: maxLen,
			EnablePrefixCaching: c.prefixCaching && !c.noPrefixCache, MaxWaiting: c.maxWaiting,
		},
	})
	if err != nil {
		run.close()
		return nil, nil, nil, err
	}
	metrics.Watch(eng.Stats, run.runner.KVLayout())
	watchSiDP(metrics, pol, run.runner)
	if tiers != nil {
		metrics.Tiers(tiers)
	}

	opts, err := c.apiOptions(m, logger)
	if err != nil {
		run.close()
		return nil, nil, nil, err
	}
	opts.Engine, opts.Metrics, opts.Logger, opts.Tiers, opts.Health = eng, metrics, logger, tiers, c.tr.health()
	if spec.lora {
		if opts.LoRA, err = c.lora.registry(m.Config, served, spec.adapters, run.runner, eng); err != nil {
			run.close()
			return nil, nil, nil, err
		}
		opts.RuntimeLoRA = c.lora.runtime()
		metrics.WatchLoRA(eng.Stats, opts.LoRA, clock.Real{}.Now)
	}
	api := server.New(opts)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := eng.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("engine loop stopped", "error", err)
		}
	}()
	cleanup := func() {
		stop()
		<-done
		run.close()
	}
	return &builtServer{api: api, name: opts.ModelName}, eng, cleanup, nil
}

// runnerSpec is what serve asks of the executor: the same on every
// process of an MPI job.
func (c serveConfig) runnerSpec(m *model.Model, pol policy.Policy) (runnerSpec, error) {
	maxLen := m.Config.MaxPositions
	if c.maxModelLen > 0 {
		if c.maxModelLen > maxLen {
			return runnerSpec{}, fmt.Errorf("--max-model-len %d exceeds the model's context length %d", c.maxModelLen, maxLen)
		}
		maxLen = c.maxModelLen
	}
	if err := c.tr.check(m.Config, pol); err != nil {
		return runnerSpec{}, err
	}
	return runnerSpec{
		placements: pol.Placements(), hostKVBytes: c.par.hostKVBytes(pol), blockSize: c.blockSize, numBlocks: c.kvBlocks,
		maxTokens: c.maxBatched, maxSeqs: c.maxSeqs, maxModelLen: maxLen, sidpSlots: c.par.sidpSlotsFor(pol),
		csps: cspsPolicy(pol), world: c.tr.world(),
	}, nil
}

// servedNames are --served-model-name's names, the first the one the
// server reports; none when the flag is not given.
func (c serveConfig) servedNames() []string { return strings.Fields(c.servedName) }

// apiOptions are the API server's options that come from the model and
// the flags: its names, chat template, tool-call syntax, special tokens
// and default sampling parameters.
func (c serveConfig) apiOptions(m *model.Model, logger *slog.Logger) (server.Options, error) {
	o := server.Options{Tokenizer: m.Tokenizer, ModelName: m.Name, EOSTokens: m.EOS(), APIKey: c.apiKey, MaxBodyBytes: c.maxBodyBytes, CompactJSON: c.compactJSON, ResponsesStore: c.respStore, FreeToolCalls: c.freeToolCalls}
	if names := c.servedNames(); len(names) > 0 {
		o.ModelName, o.ModelAliases = names[0], names[1:]
	}
	if c.gen != nil {
		var err error
		if o.Defaults, err = c.gen.defaults(m, logger); err != nil {
			return o, err
		}
	}
	if c.modelDir != "" {
		o.ModelRoot, _ = filepath.Abs(c.modelDir)
	}
	if id := m.Tokenizer.BOS(); id >= 0 {
		o.BOS = m.Tokenizer.Token(id)
	}
	if ids := m.Tokenizer.EOS(); len(ids) > 0 {
		o.EOS = m.Tokenizer.Token(ids[0])
	}
	source, err := c.chatTemplateSource(m)
	if err != nil {
		return o, err
	}
	if source != "" {
		if o.ChatTemplate, err = chat.Parse(source); err != nil {
			return o, fmt.Errorf("chat template: %w", err)
		}
	}
	if c.reasoning != "" {
		if o.ReasoningParser, err = reasoning.ParseParser(c.reasoning); err != nil {
			return o, fmt.Errorf("--reasoning-parser: %w", err)
		}
	}
	switch c.toolParser {
	case "", "auto":
		o.ToolSyntax = toolcall.Detect(source)
	case "none":
	default:
		if o.ToolSyntax, err = toolcall.ParseSyntax(c.toolParser); err != nil {
			return o, fmt.Errorf("--tool-call-parser: %w", err)
		}
	}
	return o, nil
}

// chatTemplateSource is the chat template serve uses: --chat-template,
// else the tokenizer's, else chat_template.jinja beside it; "" when none.
func (c serveConfig) chatTemplateSource(m *model.Model) (string, error) {
	source := m.Tokenizer.ChatTemplate()
	templateFile := c.chatTemplate
	if templateFile == "" && source == "" && c.modelDir != "" {
		// Newer checkpoints keep the template beside the tokenizer.
		if p := filepath.Join(c.modelDir, "chat_template.jinja"); fileExists(p) {
			templateFile = p
		}
	}
	if templateFile != "" {
		data, err := os.ReadFile(templateFile)
		if err != nil {
			return "", err
		}
		source = string(data)
	}
	return source, nil
}

// drainer is the serving side serve drains on shutdown: the engine, or
// Nitsum's runtime.
type drainer interface{ Drain() <-chan struct{} }

// serveUntilDone serves until ctx ends, then drains: new requests get 503,
// running ones finish (up to timeout), and the listener closes.
func serveUntilDone(ctx context.Context, ln net.Listener, api *server.Server, eng drainer, timeout time.Duration, logger *slog.Logger) error {
	hs := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("draining", "timeout", timeout)
	api.Drain()
	idle := eng.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case <-idle:
	case <-shutdownCtx.Done():
		logger.Warn("drain timeout: cancelling running requests")
	}
	if err := hs.Shutdown(shutdownCtx); err != nil {
		hs.Close()
	}
	logger.Info("stopped")
	return nil
}

// loadModelWithProgress loads like loadModel, drawing a progress bar while
// the weights convert.
func loadModelWithProgress(dir string, w io.Writer, opts model.Options) (*model.Model, error) {
	if dir == "" {
		return loadModel("", opts)
	}
	last := -1
	opts.Progress = func(done, total int64) {
		pct := int(100 * done / max(total, 1))
		if pct/5 != last/5 {
			last = pct
			fmt.Fprintf(w, "\rloading %s [%-20s] %3d%%", filepath.Base(dir), bar(pct), pct)
			if pct == 100 {
				fmt.Fprintln(w)
			}
		}
	}
	m, err := model.Load(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	return m, nil
}

func bar(pct int) string {
	n := pct / 5
	b := make([]byte, 20)
	for i := range b {
		b[i] = ' '
		if i < n {
			b[i] = '='
		}
	}
	return string(b)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
