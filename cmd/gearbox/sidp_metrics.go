package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/server"
)

// watchSiDP adds SiDP's series to serve's /metrics when pol is the sidp
// policy on CPU ranks, read at scrape time: the group's mode (0 WaS, 1
// CaS), the MLP bytes the ranks fetched under WaS, and the rows the
// owners' fused MLP chains ran under CaS. The mode is also in the plan
// label of gearbox:parallel_plan_info.
func watchSiDP(m *server.Metrics, pol policy.Policy, r engine.Runner) {
	s, ok := pol.(*policy.SiDP)
	x, cpu := r.(*cpuexec.Executor)
	if !ok || !cpu {
		return
	}
	sum := func(f func(cpuexec.SiDPStats) int64) func() float64 {
		return func() float64 {
			var n int64
			for _, st := range x.SiDPStats() {
				n += f(st)
			}
			return float64(n)
		}
	}
	m.Registry().MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gearbox:sidp_mode", Help: "SiDP's mode for the group: 0 Weight-as-a-Service, 1 Compute-as-a-Service."},
			func() float64 {
				if s.Mode() == parallel.FFNCaS {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:sidp_fetched_bytes_total", Help: "MLP weight bytes the ranks fetched from the layers' owners (WaS)."},
			sum(func(st cpuexec.SiDPStats) int64 { return st.FetchedBytes })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gearbox:sidp_fused_rows_total", Help: "Rows of the owners' fused MLP chains (CaS)."},
			sum(func(st cpuexec.SiDPStats) int64 { return st.FusedRows })),
	)
}
