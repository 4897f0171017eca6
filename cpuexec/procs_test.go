package cpuexec

import (
	"context"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// elsewhere is a transport hosting no rank in this process, as the MPI
// transport does for every rank but its own.
type elsewhere struct{}

func (elsewhere) NewGroup(ranks []int) ([]comm.Endpoint, error) {
	return make([]comm.Endpoint, len(ranks)), nil
}

func (elsewhere) Abort() {}

// TestRemoteRanksRefuse: with ranks in other processes the executor
// refuses what needs them all here (a host KV tier, SiDP's pooled
// weights, a transition) and runs none of them.
func TestRemoteRanksRefuse(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Layers: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	md, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	world := func(n int) (*comm.World, error) { return comm.New(comm.Options{Size: n, Transport: elsewhere{}}) }
	dp2 := parallel.Plan{DP: 2, PP: 1, SP: 1, TP: 1}
	pooled, err := parallel.SiDPPlacement(dp2, parallel.FFNWaS)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]Options{
		"host KV tier": {Plan: parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}, HostBlocks: 4, WeightsFromHost: true, World: world},
		"pooled FFN":   {Placements: []parallel.Placement{pooled}, World: world},
	} {
		if _, err := NewExecutor(md.Config, md.Weights, opts); err == nil || !strings.Contains(err.Error(), "needs every rank in one process") {
			t.Errorf("%s: NewExecutor = %v, want a refusal", name, err)
		}
	}
	tp2 := parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}
	x, err := NewExecutor(md.Config, md.Weights, Options{Plan: tp2, World: world})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Transition(context.Background(), parallel.Standard(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1})); err == nil {
		t.Error("a transition with ranks elsewhere succeeded")
	}
	if rows := x.HostedRows(); len(rows) != 0 {
		t.Errorf("HostedRows = %v with no rank here", rows)
	}
}
