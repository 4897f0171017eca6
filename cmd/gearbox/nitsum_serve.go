package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/nitsum/cluster"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/server"
	"github.com/gearboxlm/gearbox/slo"
	"github.com/gearboxlm/gearbox/tensor"
)

// buildNitsum is serve --policy nitsum: the --plan tp=N ranks on the CPU
// as a Nitsum pool (package nitsum/cluster), tiers from --slo-tiers, the
// capacity profile measured on the warm executors at start-up, and the
// planner re-laying the instances out every --nitsum-window.
func buildNitsum(c serveConfig, logger *slog.Logger, progress io.Writer) (*builtServer, drainer, func(), error) {
	if c.sloTiers == "" {
		return nil, nil, nil, errors.New("--policy nitsum needs --slo-tiers FILE: the tiers it plans for (examples/slo-tiers)")
	}
	tiers, err := slo.Load(c.sloTiers)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--slo-tiers: %w", err)
	}
	want, err := ParseDevice(c.dev.device)
	if err != nil {
		return nil, nil, nil, err
	}
	if want.Kind == CUDA {
		return nil, nil, nil, errors.New("--policy nitsum runs on CPU ranks: use --device cpu (or auto)")
	}
	if kv, err := c.dev.kvCacheDType(); err != nil || (kv != model.DTypeAuto && kv != model.Float32) {
		return nil, nil, nil, fmt.Errorf("--policy nitsum migrates a float32 KV cache: drop --kv-cache-dtype %s", c.dev.kvDType)
	}
	m, err := c.dev.loadModel(c.modelDir, progress)
	if err != nil {
		return nil, nil, nil, err
	}
	plan, err := parallel.Parse(c.par.plan)
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	if plan.DP != 1 || plan.PP != 1 || plan.SP != 1 {
		m.Close()
		return nil, nil, nil, fmt.Errorf("--policy nitsum takes its pool as --plan tp=N (N CPU ranks, split into instances of TP 1, 2, 4, …), not %s", plan)
	}
	maxLen := m.Config.MaxPositions
	if c.maxModelLen > 0 {
		maxLen = min(maxLen, c.maxModelLen)
	}
	// KV: every rank belongs to one warm executor per degree, so each
	// executor gets the usual CPU pool (cpuKVBlocks) over Σ_t 1/t.
	blocks := c.kvBlocks
	if blocks == 0 {
		share := 0.0
		for _, t := range cluster.DefaultDegrees(plan.TP, m.Config) {
			share += 1 / float64(t)
		}
		perSeq := (maxLen + c.blockSize - 1) / c.blockSize
		blocks = max(perSeq, int(float64(cpuKVBlocks(m.Config, tensor.F32, c.blockSize, maxLen, c.maxSeqs))/max(share, 1)))
	}
	pool := tensor.NewPool(c.dev.threads)
	metrics := server.NewMetrics(plan.String(), "nitsum")
	metrics.Tiers(tiers)
	cl, err := cluster.New(cluster.Options{
		Config: m.Config, Weights: m.Weights, Ranks: plan.TP, Tiers: tiers,
		Measure: &cluster.Measure{PromptLen: min(64, maxLen/2), OutputLen: min(64, maxLen/2)},
		Window:  c.par.nitsumWin, WeightBudget: int64(c.par.nitsumBudget * (1 << 30)), Colocated: c.par.nitsumColocate,
		BlockSize: c.blockSize, NumBlocks: blocks,
		Sched: sched.Config{
			MaxNumBatchedTokens: c.maxBatched, MaxNumSeqs: c.maxSeqs, MaxModelLen: maxLen,
			EnablePrefixCaching: c.prefixCaching && !c.noPrefixCache, MaxWaiting: c.maxWaiting,
		},
		Pool: pool, Tokenizer: m.Tokenizer, EOS: m.EOS(), Clock: clock.Real{}, Observer: metrics, Logger: logger, Speculative: c.spec.Config,
	})
	if err != nil {
		pool.Close()
		m.Close()
		return nil, nil, nil, err
	}
	logger.Info("nitsum", "ranks", plan.TP, "degrees", cl.Profile().TP, "weights", cl.WeightRule().String(),
		"kv_bytes_per_rank", cl.KVBytesPerRank()[0], "kv_blocks_per_instance", blocks, "window", c.par.nitsumWin)
	for _, tm := range cl.Timings() {
		logger.Info("nitsum profile", "tp", tm.TP, "batch", tm.Batch, "prefill", tm.Prefill, "decode", tm.Decode)
	}
	metrics.SetPlan(cl.Stats().Layout.String()) // the pool's steps report its layout
	watchNitsum(metrics, cl)
	opts, err := c.apiOptions(m, logger)
	if err != nil {
		cl.Close()
		pool.Close()
		m.Close()
		return nil, nil, nil, err
	}
	opts.Engine, opts.Metrics, opts.Logger, opts.Tiers = cl, metrics, logger, tiers
	api := server.New(opts)
	cleanup := func() {
		cl.Close()
		pool.Close()
		_ = m.Close()
	}
	return &builtServer{api: api, name: opts.ModelName}, cl, cleanup, nil
}

// watchNitsum adds the runtime's series to /metrics, read at scrape
// time: instances by TP degree, reconfigurations, KV bytes migrated,
// the time instances stood paused, requests moved, and dispatches by
// class.
func watchNitsum(m *server.Metrics, cl *cluster.Cluster) {
	stat := func(f func(cluster.Stats) float64) func() float64 { return func() float64 { return f(cl.Stats()) } }
	var cs []prometheus.Collector
	for _, t := range cl.Profile().TP {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gearbox:nitsum_instances", Help: "Nitsum instances now, by TP degree.",
			ConstLabels: prometheus.Labels{"tp": strconv.Itoa(t)}}, stat(func(s cluster.Stats) float64 { return float64(s.Instances[t]) })))
	}
	for cl := range 3 {
		class := nitsum.Class(cl)
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_dispatched_total", Help: "Requests the global scheduler dispatched, by class (feasible, best-effort, background).",
			ConstLabels: prometheus.Labels{"class": class.String()}}, stat(func(s cluster.Stats) float64 { return float64(s.Dispatched[class]) })))
	}
	cs = append(cs,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_reconfigurations_total", Help: "Layout changes (instances re-laid out, KV migrated)."},
			stat(func(s cluster.Stats) float64 { return float64(s.Reconfigurations) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_reconfigurations_failed_total", Help: "Reconfigurations refused or aborted (nothing changed)."},
			stat(func(s cluster.Stats) float64 { return float64(s.Failed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_migration_bytes_total", Help: "KV bytes migrated across ranks by reconfigurations."},
			stat(func(s cluster.Stats) float64 { return float64(s.MigratedBytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_migration_pause_seconds_total", Help: "Time the instances stood paused for reconfigurations (stop-and-migrate), seconds."},
			stat(func(s cluster.Stats) float64 { return s.Pause.Seconds() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_requests_moved_total", Help: "Running requests whose KV migrated to a new instance."},
			stat(func(s cluster.Stats) float64 { return float64(s.MovedRequests) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_handoffs_total", Help: "Requests handed from a prefill to a decode instance after their first token."},
			stat(func(s cluster.Stats) float64 { return float64(s.HandedOff) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:nitsum_handoff_bytes_total", Help: "KV bytes the prefill-to-decode hand-offs moved across ranks."},
			stat(func(s cluster.Stats) float64 { return float64(s.HandoffBytes) })),
	)
	m.Registry().MustRegister(cs...)
}
