package server

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/slo"
)

// Metrics are the server's Prometheus metrics, named as vLLM names them
// but under "gearbox:", so dashboards built for vLLM port over. It
// implements engine.Observer.
type Metrics struct {
	reg *prometheus.Registry

	ttft, itl, e2e, queue, tpot      prometheus.Histogram
	iterationTokens                  prometheus.Histogram
	promptTokens, generationTokens   prometheus.Counter
	preemptions                      prometheus.Counter
	drafts, draftTokens, accepted    prometheus.Counter
	acceptedPerPos                   *prometheus.CounterVec
	prefixQueries, prefixHits        prometheus.Counter
	success                          *prometheus.CounterVec
	planInfo                         *prometheus.GaugeVec
	planSwitches                     *prometheus.CounterVec
	tierRequests, tierAttained       *prometheus.CounterVec
	tiers                            *slo.Set
	policy                           string
	mu                               sync.Mutex
	lastPlan                         string
	lastPrefixQueries, lastPrefixHit int64
}

var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}

// NewMetrics registers the metrics in a new registry. plan and policy
// label gearbox:parallel_plan_info until the first step reports its plan.
func NewMetrics(plan, policy string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), policy: policy}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gearbox:" + name, Help: help, Buckets: buckets})
		m.reg.MustRegister(h)
		return h
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gearbox:" + name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	m.ttft = hist("time_to_first_token_seconds", "Time to first token in seconds.", latencyBuckets)
	m.itl = hist("inter_token_latency_seconds", "Time between consecutive output tokens in seconds.", latencyBuckets)
	m.e2e = hist("e2e_request_latency_seconds", "End-to-end request latency in seconds.", latencyBuckets)
	m.queue = hist("request_queue_time_seconds", "Time requests spent waiting before their first step, in seconds.", latencyBuckets)
	m.tpot = hist("request_time_per_output_token_seconds", "Mean time per output token after the first, per request, in seconds.", latencyBuckets)
	m.iterationTokens = hist("iteration_tokens_total", "Tokens batched per engine step.", []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384})
	m.promptTokens = counter("prompt_tokens_total", "Prompt tokens of requests that produced their first token, whole prompts (prefix-cache hits included).")
	m.generationTokens = counter("generation_tokens_total", "Tokens generated.")
	m.preemptions = counter("num_preemptions_total", "Requests preempted (their KV freed, to be recomputed).")
	m.drafts = counter("spec_decode_num_drafts_total", "Speculative decoding: sequence steps that carried draft tokens.")
	m.draftTokens = counter("spec_decode_num_draft_tokens_total", "Speculative decoding: draft tokens verified.")
	m.accepted = counter("spec_decode_num_accepted_tokens_total", "Speculative decoding: draft tokens accepted (the acceptance rate is this over draft tokens).")
	m.acceptedPerPos = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gearbox:spec_decode_num_accepted_tokens_per_pos",
		Help: "Speculative decoding: draft tokens accepted, by their position among a step's drafts (0 first)."}, []string{"position"})
	m.reg.MustRegister(m.acceptedPerPos)
	m.prefixQueries = counter("prefix_cache_queries_total", "Tokens looked up in the prefix cache when requests were admitted (a resumed request's tokens count again).")
	m.prefixHits = counter("prefix_cache_hits_total", "Tokens looked up in the prefix cache that were found there.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gearbox:request_success_total", Help: "Requests that ended, by finish reason."}, []string{"finished_reason"})
	m.planInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gearbox:parallel_plan_info", Help: "1 for the parallel plan the last step ran under."}, []string{"plan", "policy"})
	m.planSwitches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gearbox:plan_switches_total", Help: "Steps whose plan differs from the previous step's."}, []string{"from", "to"})
	m.reg.MustRegister(m.success, m.planInfo, m.planSwitches)
	if plan != "" {
		m.planInfo.WithLabelValues(plan, policy).Set(1)
		m.lastPlan = plan
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// SetPlan labels gearbox:parallel_plan_info with plan in place of the
// label NewMetrics was given, without counting a plan switch: for a
// runtime that learns its first plan only after its metrics exist (a
// Nitsum pool's first layout).
func (m *Metrics) SetPlan(plan string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if plan == m.lastPlan {
		return
	}
	if m.lastPlan != "" {
		m.planInfo.DeleteLabelValues(m.lastPlan, m.policy)
	}
	m.planInfo.WithLabelValues(plan, m.policy).Set(1)
	m.lastPlan = plan
}

// Registry exposes the registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Step implements engine.Observer.
func (m *Metrics) Step(s engine.StepStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.iterationTokens.Observe(float64(s.Tokens))
	m.promptTokens.Add(float64(s.PromptTokens))
	m.generationTokens.Add(float64(s.GeneratedToken))
	m.preemptions.Add(float64(s.Preemptions))
	m.drafts.Add(float64(s.Drafts))
	m.draftTokens.Add(float64(s.DraftTokens))
	m.accepted.Add(float64(s.AcceptedTokens))
	for p, n := range s.AcceptedPerPos {
		m.acceptedPerPos.WithLabelValues(strconv.Itoa(p)).Add(float64(n))
	}
	m.prefixQueries.Add(float64(s.PrefixQueries - m.lastPrefixQueries))
	m.prefixHits.Add(float64(s.PrefixHits - m.lastPrefixHit))
	m.lastPrefixQueries, m.lastPrefixHit = s.PrefixQueries, s.PrefixHits
	if s.Plan != m.lastPlan {
		if m.lastPlan != "" {
			m.planSwitches.WithLabelValues(m.lastPlan, s.Plan).Inc()
			m.planInfo.WithLabelValues(m.lastPlan, m.policy).Set(0)
		}
		m.planInfo.WithLabelValues(s.Plan, m.policy).Set(1)
		m.lastPlan = s.Plan
	}
}

// gatewayAliases are the vLLM names under which the Kubernetes Gateway API
// Inference Extension's endpoint picker scrapes a model server by default
// (its model-server protocol: queued and running requests, KV-cache
// utilisation from 0 to 1, the KV cache's block geometry), each the
// gearbox: metric of the same semantics under another name, so an
// InferencePool of Gearbox pods needs no metric flags on the picker.
// vllm:gpu_cache_usage_perc is the name older pickers scrape. With LoRA
// adapters, vllm:lora_requests_info too (WatchLoRA); without, the picker
// runs with --lora-info-metric "".
var gatewayAliases = map[string][]string{
	"num_requests_waiting": {"vllm:num_requests_waiting"},
	"num_requests_running": {"vllm:num_requests_running"},
	"kv_cache_usage_perc":  {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
	"cache_config_info":    {"vllm:cache_config_info"},
}

// Watch registers the queue gauges, read from stats at scrape time so they
// are current between steps too, and the KV cache's geometry (kv, one
// replica's pool). Call it once, after the engine exists. One scrape reads
// stats once, so the gauges and their aliases agree with each other.
func (m *Metrics) Watch(stats func() engine.Stats, kv kvcache.Layout) {
	c := &statsCollector{stats: stats}
	gauge := func(name, help string, f func(engine.Stats) float64) {
		for _, full := range append([]string{"gearbox:" + name}, gatewayAliases[name]...) {
			c.add(prometheus.NewDesc(full, help, nil, nil), prometheus.GaugeValue, f)
		}
	}
	gauge("num_requests_running", "Requests in the running batch.", func(s engine.Stats) float64 { return float64(s.Running) })
	gauge("num_requests_waiting", "Requests waiting to be scheduled.", func(s engine.Stats) float64 { return float64(s.Waiting) })
	gauge("kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = 100%).", func(s engine.Stats) float64 { return s.KVUsage })
	for _, full := range append([]string{"gearbox:cache_config_info"}, gatewayAliases["cache_config_info"]...) {
		info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: full, Help: "1, labelled with the KV cache's block size in tokens and its blocks per replica."},
			[]string{"block_size", "num_gpu_blocks"})
		info.WithLabelValues(strconv.Itoa(kv.BlockSize), strconv.Itoa(kv.NumBlocks)).Set(1)
		m.reg.MustRegister(info)
	}
	gauge("num_requests_parked", "Requests whose KV is parked on the host KV tier (seesaw).", func(s engine.Stats) float64 { return float64(s.Parked) })
	gauge("host_kv_cache_usage_perc", "Fraction of host-tier KV blocks in use (1 = 100%); 0 without a host tier.", func(s engine.Stats) float64 { return s.HostKVUsage })
	gauge("engine_phase", "Phase of the latest step decision: 0 mixed (continuous batching), 1 prefill only, 2 decode only.", func(s engine.Stats) float64 { return float64(s.Phase) })
	counter := func(name, help string, f func(engine.Stats) float64) {
		c.add(prometheus.NewDesc("gearbox:"+name, help, nil, nil), prometheus.CounterValue, f)
	}
	counter("placement_transitions_total", "Transitions of the KV cache to another placement (KV moved, weights re-sharded).", func(s engine.Stats) float64 { return float64(s.Transitions) })
	counter("kv_swap_out_bytes_total", "KV bytes parked on the host tier.", func(s engine.Stats) float64 { return float64(s.SwapOutBytes) })
	counter("kv_swap_in_bytes_total", "KV bytes brought back from the host tier.", func(s engine.Stats) float64 { return float64(s.SwapInBytes) })
	m.reg.MustRegister(c)
}

// WatchLoRA registers gearbox:lora_requests_info and its vLLM name, which
// the gateway's endpoint picker reads for LoRA affinity: one sample whose
// labels name the adapters of the running requests and of the waiting
// ones (comma-separated, as vLLM writes them) and max_lora, the adapters
// one step may mix (every loaded one here: the CPU executor has no
// adapter slots), and whose value is the scrape's time in Unix seconds,
// as vLLM sets it. reg names the adapters.
func (m *Metrics) WatchLoRA(stats func() engine.Stats, reg *lora.Registry, now func() time.Time) {
	labels := []string{"running_lora_adapters", "waiting_lora_adapters", "max_lora"}
	var descs []*prometheus.Desc
	for _, full := range []string{"gearbox:lora_requests_info", "vllm:lora_requests_info"} {
		descs = append(descs, prometheus.NewDesc(full, "The scrape's Unix time, labelled with the LoRA adapters of the running and the waiting requests and how many one step may mix.", labels, nil))
	}
	m.reg.MustRegister(&loraCollector{descs: descs, stats: stats, reg: reg, now: now})
}

// loraCollector is WatchLoRA's collector.
type loraCollector struct {
	descs []*prometheus.Desc
	stats func() engine.Stats
	reg   *lora.Registry
	now   func() time.Time
}

// Describe implements prometheus.Collector.
func (c *loraCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *loraCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	join := func(ids []int) string {
		var parts []string
		for _, id := range ids {
			if n := c.reg.Name(id); n != "" {
				parts = append(parts, n)
			}
		}
		return strings.Join(parts, ",")
	}
	running, waiting, max := join(s.RunningAdapters), join(s.WaitingAdapters), strconv.Itoa(len(c.reg.List()))
	t := float64(c.now().UnixNano()) / 1e9
	for _, d := range c.descs {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, t, running, waiting, max)
	}
}

// statsCollector gives the gauges and counters read from an engine's
// Stats, all from one snapshot per scrape.
type statsCollector struct {
	stats   func() engine.Stats
	metrics []statsMetric
}

type statsMetric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	f    func(engine.Stats) float64
}

func (c *statsCollector) add(d *prometheus.Desc, kind prometheus.ValueType, f func(engine.Stats) float64) {
	c.metrics = append(c.metrics, statsMetric{d, kind, f})
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector: one Stats snapshot for all.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range c.metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.f(s))
	}
}

// FirstToken implements engine.Observer.
func (m *Metrics) FirstToken(queue, ttft time.Duration) {
	m.queue.Observe(queue.Seconds())
	m.ttft.Observe(ttft.Seconds())
}

// Token implements engine.Observer.
func (m *Metrics) Token(itl time.Duration) { m.itl.Observe(itl.Seconds()) }

// Finish implements engine.Observer.
func (m *Metrics) Finish(f engine.FinishStats) {
	m.success.WithLabelValues(f.Reason).Inc()
	m.e2e.Observe(f.E2E.Seconds())
	if f.CompletionTokens > 1 {
		m.tpot.Observe(f.TPOT.Seconds())
	}
	m.mu.Lock()
	tiers := m.tiers
	m.mu.Unlock()
	if tiers == nil || f.Tier == "" {
		return
	}
	i, err := tiers.Resolve(f.Tier)
	if err != nil || i < 0 {
		return
	}
	m.tierRequests.WithLabelValues(f.Tier).Inc()
	if t := tiers.At(i); attained(t, f) {
		m.tierAttained.WithLabelValues(f.Tier).Inc()
	}
}

// attained reports whether a finished request met its tier: it completed
// (stop or length) with its first token within the TTFT target and its
// mean time per output token within the TPOT target (vacuous with fewer
// than two tokens). A background tier has no targets: completing is
// enough.
func attained(t slo.Tier, f engine.FinishStats) bool {
	if f.Reason != engine.FinishStop && f.Reason != engine.FinishLength {
		return false
	}
	if t.Background {
		return true
	}
	return f.CompletionTokens > 0 && f.TTFT <= t.TTFT && (f.CompletionTokens < 2 || f.TPOT <= t.TPOT)
}

// Tiers registers the per-tier service-level counters, one series per
// tier from the start: gearbox:slo_requests_total{tier} counts the
// tier's requests that ended (any way), gearbox:slo_attained_total{tier}
// those that met both of its targets (attained). Goodput is the rate of
// the second, attainment their ratio. Call it once, before serving.
func (m *Metrics) Tiers(set *slo.Set) {
	m.tierRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gearbox:slo_requests_total", Help: "Requests of each SLO tier that ended, whatever the reason."}, []string{"tier"})
	m.tierAttained = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gearbox:slo_attained_total", Help: "Requests of each SLO tier that completed within both its TTFT and TPOT targets (its goodput is this counter's rate)."}, []string{"tier"})
	m.reg.MustRegister(m.tierRequests, m.tierAttained)
	for _, name := range set.Names() {
		m.tierRequests.WithLabelValues(name)
		m.tierAttained.WithLabelValues(name)
	}
	m.mu.Lock()
	m.tiers = set
	m.mu.Unlock()
}
