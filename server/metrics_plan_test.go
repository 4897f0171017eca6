package server

import (
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
)

// planSeries gathers gearbox:parallel_plan_info and
// gearbox:plan_switches_total as "name{label=value,...}" → value.
func planSeries(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "gearbox:parallel_plan_info" && f.GetName() != "gearbox:plan_switches_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := s.GetGauge().GetValue() + s.GetCounter().GetValue()
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// TestSetPlan checks that SetPlan replaces NewMetrics's plan label without
// counting a switch, and that a later step under another plan does count
// one.
func TestSetPlan(t *testing.T) {
	m := NewMetrics("tp=2", "nitsum")
	m.SetPlan("tp[1 1]")
	m.Step(engine.StepStats{Plan: "tp[1 1]"})
	got := planSeries(t, m)
	if len(got) != 1 || got["gearbox:parallel_plan_info{plan=tp[1 1],policy=nitsum}"] != 1 {
		t.Fatalf("after SetPlan and a step under it: %v", got)
	}
	m.Step(engine.StepStats{Plan: "tp[2]"})
	got = planSeries(t, m)
	want := map[string]float64{
		"gearbox:parallel_plan_info{plan=tp[1 1],policy=nitsum}": 0,
		"gearbox:parallel_plan_info{plan=tp[2],policy=nitsum}":   1,
		"gearbox:plan_switches_total{from=tp[1 1],to=tp[2]}":     1,
	}
	if len(got) != len(want) {
		t.Fatalf("after a step under a new plan: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("after a step under a new plan: %v, want %v", got, want)
		}
	}
}
