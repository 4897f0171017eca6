package server

import (
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/lora"
)

// TestLoRAMetrics checks gearbox:lora_requests_info and its vLLM name:
// one sample each, labelled with the running and the waiting requests'
// adapters by name and the adapters a step may mix, valued at the
// scrape's Unix time.
func TestLoRAMetrics(t *testing.T) {
	m := NewMetrics("tp=1", "static")
	stats := engine.Stats{RunningAdapters: []int{1, 3}, WaitingAdapters: []int{2}}
	reg := lora.NewRegistry(nil, 0, nil, nil, nil, []*lora.Adapter{{Name: "sql"}, {Name: "chat"}, {Name: "code"}})
	m.WatchLoRA(func() engine.Stats { return stats }, reg, func() time.Time { return time.Unix(1700000000, 500000000) })
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range fams {
		if f.GetName() != "gearbox:lora_requests_info" && f.GetName() != "vllm:lora_requests_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("%s: %d samples", f.GetName(), len(f.GetMetric()))
		}
		s := f.GetMetric()[0]
		var labels []string
		for _, l := range s.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		if got := strings.Join(labels, " "); got != "max_lora=3 running_lora_adapters=sql,code waiting_lora_adapters=chat" || s.GetGauge().GetValue() != 1700000000.5 {
			t.Fatalf("%s{%s} %v", f.GetName(), got, s.GetGauge().GetValue())
		}
		seen++
	}
	if seen != 2 {
		t.Fatalf("%d of the two families", seen)
	}
}
